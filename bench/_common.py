"""What the overhead benchmarks share: the no-op tool, its raw asyncio floor, timed runs, rounds."""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pev
from pev.model import TaskId
from pev.testing import ScriptedPlanner

Samples = TypeVar("Samples")


@pev.tool(effect="query")
async def noop() -> None:
    return None


async def raw_levels(widths: Iterable[int]) -> None:
    """No-op nodes level by level, a task each as pev runs them: one awaited, several gathered."""
    for width in widths:
        if width == 1:
            await asyncio.create_task(noop.fn())
        else:
            await asyncio.gather(*[asyncio.create_task(noop.fn()) for _ in range(width)])


async def raw_per_node(widths: Sequence[int], runs: int) -> float:
    """Seconds per node of `raw_levels(widths)`, averaged over `runs` runs."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        await raw_levels(widths)
    return (time.perf_counter() - start) / (runs * sum(widths))


async def timed_run(
    plan: pev.Plan, policy: pev.RecoveryPolicy, store: pev.Store
) -> tuple[float, TaskId]:
    """Seconds one `pev.run` of the plan takes, and its task; asserts that every node succeeded."""
    start = time.perf_counter()
    result = await pev.run(
        "benchmark", planner=ScriptedPlanner(plan), tools=[noop], policy=policy, store=store
    )
    elapsed = time.perf_counter() - start
    assert result.ok, result
    assert len(result.outputs) == len(plan.nodes), result
    return elapsed, result.task_id


def run_rounds(
    round_: Callable[[Path, int, Samples], Coroutine[object, object, None]],
    fresh: Callable[[], Samples],
    rounds: int,
) -> Samples:
    """The samples of `rounds` rounds, after a warm-up round whose samples are dropped.

    Each round runs in its own event loop, with a fresh temporary folder for its files.
    """
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(round_(Path(tmp), 1, fresh()))
    samples = fresh()
    for number in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(round_(Path(tmp), number, samples))
    return samples
