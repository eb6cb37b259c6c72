"""A drive ends even when the cancel that stops its helpers is lost on the way.

On Python 3.11, ``asyncio.wait_for`` drops a cancel that lands as the awaited thing completes
(CPython gh-86296, fixed in 3.12), and psycopg_pool waits for a pooled connection that way. The
heartbeat of a drive or its store's task watch on PostgreSQL could so miss the cancel that ends it,
and the drive waited for them forever: ``pev.run`` never returned, and a worker told to stop
never finished draining (found by the fleet test, tests/engine/test_fleet.py). The store here
loses that cancel on purpose, the first time each helper calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime

import pev
from pev.ledger import Lease, TaskMark
from pev.model import Plan, PlanNode
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner

HELPERS = ("pev-lease-", "pev-task-w")


class LosingStore(MemoryStore):
    """A memory store that holds each helper's first call until a cancel comes, then drops it.

    Watched by looks, as the PostgreSQL store is (a ``MemoryStore`` tells its watch instead).
    """

    hears_every_write = False

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()

    async def _hold_once(self) -> None:
        task = asyncio.current_task()
        name = task.get_name() if task is not None else ""
        if name.startswith(HELPERS) and name not in self.held:
            self.held.add(name)
            with contextlib.suppress(asyncio.CancelledError):  # lost, as wait_for loses it
                await asyncio.Event().wait()

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Renew, after holding the heartbeat's first call until its cancel is lost."""
        await self._hold_once()
        return await super().renew_lease(lease, now=now, lease_s=lease_s)

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """Look, after holding the task watch's first call until its cancel is lost."""
        await self._hold_once()
        return await super().marks(task_ids)


async def slow() -> str:
    """Take long enough for both helpers to call the store once."""
    await asyncio.sleep(0.4)
    return "done"


async def test_a_drive_ends_when_its_helpers_lose_their_cancel() -> None:
    """Both helpers miss their cancel: the run still returns, and the lease is released."""
    store = LosingStore()
    plan = Plan("p", (PlanNode("slow", "be slow", tool="slow"),))
    running = asyncio.create_task(
        pev.run(
            "be slow",
            planner=ScriptedPlanner(plan),
            tools=[pev.tool(slow, effect="query")],
            store=store,
            policy=RecoveryPolicy(lease_s=0.6),
        )
    )
    try:
        done, _ = await asyncio.wait({running}, timeout=5)
        assert running in done, "the drive never ended: a helper that lost its cancel ran on"
    finally:
        running.cancel()  # a second cancel is not lost: nothing is left running
        with contextlib.suppress(asyncio.CancelledError):
            await running
    result = running.result()
    assert result.ok
    assert {name[:10] for name in store.held} == set(HELPERS)  # both helpers lost a cancel
    lease = await store.lease(result.task_id)
    assert lease is not None
    assert not lease.live(pev.ledger.utc_now())
    await store.close()
