"""The Ledger facade: fold before write, read-through state, expiry, cancel, verify."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from tests.support.builders import T0, revision

from pev.errors import StateError, UnknownTaskError
from pev.kernel import GlobalReplan, TaskStatus, TerminalReason
from pev.ledger import AwaitingReplan, Ledger, RoundExecuted, TaskPhase, dispatch
from pev.model import Plan, PlanNode, VerificationContract, VerificationMode
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import FakeClock

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "water the plants", ("soil is damp",))
PLAN = Plan("water the plants", (PlanNode("pour", "pour water", tool="can"),))
FIRST_REVISION = revision(1, plan=PLAN, reason="initial plan")


async def _awaiting_replan(ledger: Ledger, task_id: str, *, now: datetime = T0) -> None:
    """Create a task, run revision 1, and decide a global replan at ``now`` (due 60 s later)."""
    policy = RecoveryPolicy(replan_timeout_s=60)
    await ledger.create("water", contract=CONTRACT, policy=policy, task_id=task_id)
    first = [FIRST_REVISION, RoundExecuted(revision=1, executed_ok=True)]
    state = await ledger.append(task_id, first)
    await ledger.append(task_id, dispatch(state, GlobalReplan("try again"), now=now))


async def test_refused_batch_writes_nothing() -> None:
    """A batch with one event the state refuses is not written at all, not even its first part."""
    ledger = Ledger(MemoryStore(), clock=FakeClock(T0))
    await ledger.create("water", contract=CONTRACT, task_id="t")
    with pytest.raises(StateError):
        await ledger.append("t", [FIRST_REVISION, RoundExecuted(revision=2, executed_ok=True)])
    assert len(await ledger.entries("t")) == 1
    assert (await ledger.state("t")).phase is TaskPhase.PLANNING


async def test_state_reads_through_another_writer() -> None:
    """A second Ledger over the same store sees the events the first one wrote."""
    store = MemoryStore()
    first, second = Ledger(store, clock=FakeClock(T0)), Ledger(store, clock=FakeClock(T0))
    await first.create("water", contract=CONTRACT, task_id="t")
    assert (await second.state("t")).phase is TaskPhase.PLANNING
    await first.cancel("t", reason="rain")
    assert (await second.state("t")).phase is TaskPhase.CANCELLING


async def test_state_of_an_unknown_task_raises() -> None:
    """Asking for a task that does not exist raises UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        await Ledger(MemoryStore()).state("nope")


async def test_expire_overdue_ends_only_overdue_tasks() -> None:
    """expire_overdue fails the task past its replan deadline and leaves the other."""
    clock = FakeClock(T0)
    ledger = Ledger(MemoryStore(), clock=clock)
    await _awaiting_replan(ledger, "late")
    later = T0 + timedelta(seconds=30)
    clock.set(later)
    await _awaiting_replan(ledger, "fresh", now=later)  # due at T0 + 90 s
    assert await ledger.expire_overdue(T0 + timedelta(seconds=60)) == ("late",)
    late = await ledger.state("late")
    assert late.finished is not None
    assert (late.finished.status, late.finished.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    assert (await ledger.state("fresh")).phase is TaskPhase.AWAITING_REPLAN


async def test_cancel_of_an_ended_task_returns_it_unchanged() -> None:
    """Cancelling a terminal task writes nothing and returns its state."""
    ledger = Ledger(MemoryStore(), clock=FakeClock(T0))
    await _awaiting_replan(ledger, "t")
    ended = await ledger.cancel("t", reason="first")
    assert ended.phase is TaskPhase.CANCELLED
    count = len(await ledger.entries("t"))
    assert await ledger.cancel("t", reason="second") == ended
    assert len(await ledger.entries("t")) == count


async def test_awaiting_replan_deadline_follows_the_policy() -> None:
    """The awaiting_replan event carries now + replan_timeout_s."""
    ledger = Ledger(MemoryStore(), clock=FakeClock(T0))
    await _awaiting_replan(ledger, "t")
    last = (await ledger.entries("t"))[-1].event
    assert last == AwaitingReplan(
        action=GlobalReplan("try again"), deadline=T0 + timedelta(seconds=60)
    )


async def test_whole_number_timeouts_verify_after_a_sqlite_round_trip(tmp_path: Path) -> None:
    """A policy with int timeouts hashes the same before storing and after reading back."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        policy = RecoveryPolicy(replan_timeout_s=30, task_timeout_s=600)
        await Ledger(store).create("water", contract=CONTRACT, policy=policy, task_id="t")
        report = await Ledger(store).verify("t")
        assert report.ok, report.problem
    finally:
        await store.close()
