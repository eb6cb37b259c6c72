"""A call whose driver stalled after dispatching it never starts past the record's deadline.

A driver that takes a task over settles an unfinished action once the record's own deadline
(its dispatch plus the tool's ``timeout_s``) has passed, and trusts a ``reconcile`` that then
says "it did not happen" (docs/tools.md). That holds only if the original call can no longer
start or run after that deadline, however long the first driver stalled between committing the
pending record and calling the tool. Before this rule, the call's timeout counted from the call
itself: the payment below landed after the ledger said it never happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import pytest

import pev
from pev.engine import current_node_context
from pev.ledger import Lease, Ledger, LedgerEntry, TaskSummary, utc_now
from pev.model import DeviceFailure, ExecutionRecord, Plan, PlanNode, RecordStatus
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner

PLAN = Plan("pay", (PlanNode("pay", "pay the bill", tool="pay"),))


class StallingStore(MemoryStore):
    """Stalls the first driver right after its first pending record commits, renewals too."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = asyncio.Event()
        self.wake = asyncio.Event()
        self.owner: str | None = None

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append; the first dispatch then stalls its driver until ``wake``."""
        await super().append(entries, summary, fence=fence)
        if self.owner is None and any(e.event.kind == "node_dispatched" for e in entries):
            self.owner = fence.owner if fence else ""
            self.stalled.set()
            await self.wake.wait()

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Renew; the stalled driver's renewals wait for it to wake."""
        if lease.owner == self.owner and not self.wake.is_set():
            await self.wake.wait()
        return await super().renew_lease(lease, now=now, lease_s=lease_s)


async def test_a_call_stalled_past_its_records_deadline_is_never_made() -> None:
    """Stall after the pending write; another driver settles it "not done"; the call never lands."""
    paid: list[str] = []

    async def pay() -> str:
        paid.append(current_node_context().idempotency_key)
        return "paid"

    def booked(record: ExecutionRecord) -> object:
        """What the bank booked; asked only past the record's deadline, so "no" is final."""
        if record.idempotency_key in paid:
            return "paid"
        return DeviceFailure(record.node_id, "the bank never got it")

    pay_tool = pev.tool(pay, effect="action", timeout_s=0.2, reconcile=booked)
    store = StallingStore()
    first = asyncio.create_task(
        pev.run(
            "pay",
            planner=ScriptedPlanner(PLAN),
            tools=[pay_tool],
            store=store,
            policy=RecoveryPolicy(lease_s=0.3),
        )
    )
    try:
        async with asyncio.timeout(10):
            await store.stalled.wait()
            (task,) = await store.list_tasks()
            while (lease := await store.lease(task.task_id)) and lease.live(utc_now()):
                await asyncio.sleep(0.02)
        second = await pev.resume(
            task.task_id, store=store, planner=ScriptedPlanner(), tools=[pay_tool]
        )
        store.wake.set()
        with pytest.raises(pev.LeaseLost):
            async with asyncio.timeout(10):
                await first
    finally:
        store.wake.set()
        first.cancel()
    assert second.status == "failed"
    state = await Ledger(store).state(task.task_id)
    (record,) = state.records.values()
    assert record.status is RecordStatus.FAILED  # settled on takeover: it did not happen...
    assert paid == []  # ...and it never does
    await store.close()
