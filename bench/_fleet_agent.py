"""The agents `bench_workers.py` submits: importable by name in the bench and in its workers.

Workers rebuild a submitted task's agent from the import path it recorded (`_fleet_agent:fleet`),
so the agents live in a module of their own, which the workers import from the bench folder on
their `PYTHONPATH`.

* `fleet`: two quick nodes, a read (a query) and then an action that does nothing slow;
  verification `off`. The throughput workload.
* `held`: the same two nodes, but the read first touches the file `PEV_BENCH_STARTED` names and
  then waits for as long as the file `PEV_BENCH_HOLD` names exists: a driver killed there is
  killed mid-task. The takeover workload.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pev

PLAN = pev.Plan(
    "fleet",
    (
        pev.PlanNode("read", tool="read", effect=pev.Effect.QUERY),
        pev.PlanNode("act", tool="act", effect=pev.Effect.ACTION, after=("read",)),
    ),
)
HOLD_POLL_S = 0.01


@pev.tool(effect="query")
async def read() -> int:
    """Read a value (a query that returns at once)."""
    return 1


@pev.tool(effect="action")
async def act() -> None:
    """Do nothing, as an action."""


@pev.tool(name="read", effect="query")
async def held_read() -> int:
    """Say that the read started, then wait while the hold file exists (a query)."""
    Path(os.environ["PEV_BENCH_STARTED"]).touch()
    hold = Path(os.environ["PEV_BENCH_HOLD"])
    while hold.exists():
        await asyncio.sleep(HOLD_POLL_S)
    return 1


async def planner(request: pev.engine.PlanRequest) -> pev.Plan:
    """The same two-node plan for every task (and for every replan)."""
    return PLAN


fleet = pev.Agent(planner, tools=[read, act])
held = pev.Agent(planner, tools=[held_read, act])
