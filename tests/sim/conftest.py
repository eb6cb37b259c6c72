"""The simulator tests: skipped without the ``sim`` extra; every fault is run once per session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

pytest.importorskip(
    "pev.sim", reason="the simulator tests need the sim extra", exc_type=ImportError
)

from pev.engine import RunResult
from pev.ledger import Ledger, LedgerEntry, TaskState
from pev.sim import Fault, run_demo
from pev.stores import MemoryStore
from pev.testing import FakeClock


@dataclass(frozen=True, slots=True)
class DemoRun:
    """One demo task: what it returned, its folded ledger, and its entries."""

    result: RunResult
    state: TaskState
    entries: tuple[LedgerEntry, ...]


async def demo_run(fault: Fault, *, seed: int = 0) -> DemoRun:
    """Run one demo task on its own in-memory ledger, with a clock that ticks per read."""
    store = MemoryStore()
    result = await run_demo(
        fault, seed=seed, store=store, clock=FakeClock(step=timedelta(milliseconds=10))
    )
    ledger = Ledger(store)
    return DemoRun(result, await ledger.state(result.task_id), await ledger.entries(result.task_id))


@pytest.fixture
def run_fault() -> Callable[..., Awaitable[DemoRun]]:
    """``await run_fault(fault, seed=...)``: one demo task on its own in-memory ledger."""
    return demo_run


@pytest.fixture(scope="session")
def fault_runs() -> dict[Fault, DemoRun]:
    """Every fault, run once with seed 0 (the runs are shared: they are the slow part)."""

    async def run_all() -> dict[Fault, DemoRun]:
        return {fault: await demo_run(fault) for fault in Fault}

    return asyncio.run(run_all())
