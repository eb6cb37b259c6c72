"""Leases on every backend: acquire, renew, release, and the fence every append is checked by.

Each test runs against every store in ``BACKENDS`` (see conftest.py): the lease rules live once
in ``pev.ledger._lease`` and each store applies them in its own transactions.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from tests.support.builders import T0

from pev.errors import LeaseHeld, LeaseLost, UnknownTaskError
from pev.ledger import (
    Lease,
    Ledger,
    LedgerEntry,
    RevisionKind,
    RevisionStarted,
    Store,
    TaskSummary,
    apply,
    seal,
    summarize,
)
from pev.model import Plan, PlanNode, TaskId

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import TaskFactory

PLAN = Plan("fetch the answer", (PlanNode("a", "fetch it", tool="fetch"),))
LEASE_S = 30.0
LATER = T0 + timedelta(seconds=LEASE_S + 1)


async def test_a_first_lease_has_epoch_one(store: Store, tasks: TaskFactory) -> None:
    """The first driver of a task gets epoch 1, until now + lease_s; the store reports it."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    assert (lease.owner, lease.epoch, lease.expires_at) == ("a", 1, T0 + timedelta(seconds=30))
    assert await store.lease("t1") == lease
    assert await store.lease("nobody") is None


async def test_a_live_lease_is_held_against_another_owner(store: Store, tasks: TaskFactory) -> None:
    """Another owner is refused with LeaseHeld, naming the holder and the expiry."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    with pytest.raises(LeaseHeld) as held:
        await store.acquire_lease("t1", "b", now=T0 + timedelta(seconds=29), lease_s=LEASE_S)
    assert (held.value.owner, held.value.expires_at) == ("a", lease.expires_at)
    assert await store.lease("t1") == lease


async def test_an_expired_lease_is_taken_over_under_the_next_epoch(
    store: Store, tasks: TaskFactory
) -> None:
    """Past its expiry, the lease goes to the next owner with epoch + 1."""
    await tasks.planning("t1")
    await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    taken = await store.acquire_lease("t1", "b", now=LATER, lease_s=LEASE_S)
    assert (taken.owner, taken.epoch) == ("b", 2)


async def test_the_same_owner_acquiring_again_keeps_its_epoch(
    store: Store, tasks: TaskFactory
) -> None:
    """A live lease acquired again by its owner is extended, not a takeover."""
    await tasks.planning("t1")
    await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    again = await store.acquire_lease("t1", "a", now=T0 + timedelta(seconds=10), lease_s=LEASE_S)
    assert (again.epoch, again.expires_at) == (1, T0 + timedelta(seconds=40))


async def test_a_lease_needs_a_task(store: Store) -> None:
    """A lease on a task the store does not hold is UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        await store.acquire_lease("nobody", "a", now=T0, lease_s=LEASE_S)


async def test_renewal_extends_the_current_lease(store: Store, tasks: TaskFactory) -> None:
    """A heartbeat moves the expiry on, even past the old one when nobody took over."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    longer = await store.renew_lease(lease, now=LATER, lease_s=LEASE_S)
    assert (longer.epoch, longer.expires_at) == (1, LATER + timedelta(seconds=30))
    assert await store.lease("t1") == longer


async def test_renewal_after_a_takeover_is_lease_lost(store: Store, tasks: TaskFactory) -> None:
    """The old owner's heartbeat after a takeover is refused; the new lease stands."""
    await tasks.planning("t1")
    old = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    new = await store.acquire_lease("t1", "b", now=LATER, lease_s=LEASE_S)
    with pytest.raises(LeaseLost) as lost:
        await store.renew_lease(old, now=LATER, lease_s=LEASE_S)
    assert (lost.value.owner, lost.value.epoch) == ("a", 1)
    assert await store.lease("t1") == new


async def test_a_released_lease_is_free_at_once(store: Store, tasks: TaskFactory) -> None:
    """After release another owner takes the lease at once, under the next epoch."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    await store.release_lease(lease, now=T0 + timedelta(seconds=1))
    taken = await store.acquire_lease("t1", "b", now=T0 + timedelta(seconds=2), lease_s=LEASE_S)
    assert (taken.owner, taken.epoch) == ("b", 2)


async def test_releasing_a_lease_taken_over_changes_nothing(
    store: Store, tasks: TaskFactory
) -> None:
    """A stale owner's release leaves the new owner's lease as it is."""
    await tasks.planning("t1")
    old = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    new = await store.acquire_lease("t1", "b", now=LATER, lease_s=LEASE_S)
    await store.release_lease(old, now=LATER)
    assert await store.lease("t1") == new


async def _next_batch(ledger: Ledger, task_id: str) -> tuple[tuple[LedgerEntry, ...], TaskSummary]:
    """The entries and index row of the next append of a planning task (not written)."""
    state = await ledger.state(task_id)
    head = (await ledger.entries(task_id))[-1]
    event = RevisionStarted(number=1, revision_kind=RevisionKind.INITIAL, reason="r", plan=PLAN)
    batch = seal(state.task_id, [event], after_seq=head.seq, prev_hash=head.hash, at=LATER)
    return batch, summarize(apply(state, event, at=LATER), head_hash=batch[-1].hash)


async def test_an_append_under_the_current_lease_is_written(
    store: Store, tasks: TaskFactory
) -> None:
    """The fence of the task's current lease lets the append through."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    entries, summary = await _next_batch(tasks.ledger, "t1")
    await store.append(entries, summary, fence=lease)
    assert len(await store.read("t1")) == 2


async def test_an_append_under_a_stale_lease_writes_nothing(
    store: Store, tasks: TaskFactory
) -> None:
    """A driver taken over (a paused process, say) is refused in the append's own transaction."""
    await tasks.planning("t1")
    old = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    await store.acquire_lease("t1", "b", now=LATER, lease_s=LEASE_S)
    entries, summary = await _next_batch(tasks.ledger, "t1")
    with pytest.raises(LeaseLost):
        await store.append(entries, summary, fence=old)
    assert len(await store.read("t1")) == 1
    summary_now = await store.summary("t1")
    assert summary_now is not None
    assert summary_now.event_count == 1


async def test_a_fence_without_any_lease_is_refused(store: Store, tasks: TaskFactory) -> None:
    """A lease that the store never granted fences nothing through."""
    await tasks.planning("t1")
    forged = Lease(task_id=TaskId("t1"), owner="a", epoch=1, expires_at=LATER)
    entries, summary = await _next_batch(tasks.ledger, "t1")
    with pytest.raises(LeaseLost):
        await store.append(entries, summary, fence=forged)
    assert len(await store.read("t1")) == 1


async def test_a_lease_of_an_older_epoch_fences_nothing_even_for_its_owner(
    store: Store, tasks: TaskFactory
) -> None:
    """The fence compares the epoch too: an owner's own expired lease, taken again, is stale."""
    await tasks.planning("t1")
    first = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    again = await store.acquire_lease("t1", "a", now=LATER, lease_s=LEASE_S)
    assert (first.owner, first.epoch, again.owner, again.epoch) == ("a", 1, "a", 2)
    entries, summary = await _next_batch(tasks.ledger, "t1")
    with pytest.raises(LeaseLost) as lost:
        await store.append(entries, summary, fence=first)
    assert (lost.value.owner, lost.value.epoch) == ("a", 1)
    with pytest.raises(LeaseLost):
        await store.renew_lease(first, now=LATER, lease_s=LEASE_S)
    await store.release_lease(first, now=LATER)
    assert await store.lease("t1") == again
    assert len(await store.read("t1")) == 1
