"""Claims on every backend: take the leases of runnable tasks, oldest first, never twice.

Each test runs against every store in ``BACKENDS`` (see conftest.py), and a PostgreSQL schema
upgraded from version 5. A task is runnable when it has not ended, does not await a person's
approval, and its lease is free (none yet, expired or released); ``claim`` takes the leases of
up to ``limit`` of them in one transaction, under the rules of ``pev.ledger.acquired``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from tests.support.builders import T0

from pev.errors import LeaseLost
from pev.ledger import (
    GENESIS_HASH,
    ApprovalRequested,
    Lease,
    Store,
    TaskPhase,
    apply,
    new_task,
    seal,
    summarize,
)
from pev.model import TaskId
from pev.policy import RecoveryPolicy

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

LEASE_S = 30.0
LATER = T0 + timedelta(seconds=LEASE_S + 1)


@pytest.fixture(params=["memory", "postgres", "postgres-upgraded", "sqlite"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """Every backend, and a PostgreSQL schema made at version 5 and upgraded: claims search
    the index migration 6 makes."""
    return backends[request.param]


def _ids(leases: tuple[Lease, ...]) -> list[str]:
    return [lease.task_id for lease in leases]


async def test_claims_new_tasks_oldest_first_up_to_the_limit(
    store: Store, tasks: TaskFactory
) -> None:
    """Oldest task first (by creation, not by id), epoch 1, until now + lease_s."""
    for task_id in ("t3", "t1", "t2"):
        await tasks.planning(task_id)
    claimed = await store.claim("a", now=T0, lease_s=LEASE_S, limit=2)
    assert _ids(claimed) == ["t3", "t1"]
    for lease in claimed:
        assert (lease.owner, lease.epoch) == ("a", 1)
        assert lease.expires_at == T0 + timedelta(seconds=LEASE_S)
        assert await store.lease(lease.task_id) == lease
    assert await store.lease("t2") is None
    rest = await store.claim("b", now=T0, lease_s=LEASE_S, limit=5)
    assert _ids(rest) == ["t2"]
    assert await store.claim("c", now=T0, lease_s=LEASE_S, limit=5) == ()


async def test_a_limit_of_zero_or_less_claims_nothing(store: Store, tasks: TaskFactory) -> None:
    """No lease is taken for a limit of 0 or below."""
    await tasks.planning("t1")
    assert await store.claim("a", now=T0, lease_s=LEASE_S, limit=0) == ()
    assert await store.claim("a", now=T0, lease_s=LEASE_S, limit=-1) == ()
    assert await store.lease("t1") is None


async def test_skips_ended_tasks_and_live_leases(store: Store, tasks: TaskFactory) -> None:
    """A finished task, or one another owner (or the claimer itself) drives, is not claimed."""
    await tasks.finished("done")
    await tasks.planning("held")
    await tasks.executing("mine")
    await tasks.awaiting_replan("free")
    await store.acquire_lease("held", "other", now=T0, lease_s=LEASE_S)
    await store.acquire_lease("mine", "a", now=T0, lease_s=LEASE_S)
    claimed = await store.claim("a", now=T0 + timedelta(seconds=1), lease_s=LEASE_S, limit=10)
    assert _ids(claimed) == ["free"]
    assert await store.lease("done") is None
    held = await store.lease("held")
    assert held is not None
    assert held.owner == "other"


async def test_takes_over_an_expired_lease_under_the_next_epoch(
    store: Store, tasks: TaskFactory
) -> None:
    """Past its expiry, a lease is claimed with epoch + 1; the old owner's fence is refused."""
    await tasks.planning("t1")
    await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    (taken,) = await store.claim("b", now=LATER, lease_s=LEASE_S, limit=5)
    assert (taken.task_id, taken.owner, taken.epoch) == ("t1", "b", 2)
    assert await store.lease("t1") == taken


async def test_a_released_lease_is_claimable_at_once(store: Store, tasks: TaskFactory) -> None:
    """A lease released a second ago is free: claimed under the next epoch."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=LEASE_S)
    await store.release_lease(lease, now=T0 + timedelta(seconds=1))
    (taken,) = await store.claim("b", now=T0 + timedelta(seconds=2), lease_s=LEASE_S, limit=1)
    assert (taken.owner, taken.epoch) == ("b", 2)


async def test_a_task_created_under_a_lease_is_never_claimable_while_it_lives(
    store: Store, tasks: TaskFactory
) -> None:
    """``pev.run`` writes its task with its lease: the store holds it, a claim passes it by."""
    lease = Lease(task_id=TaskId("t1"), owner="run", epoch=1, expires_at=LATER)
    await tasks.ledger.create({"question": "t1"}, contract=tasks.contract, lease=lease)
    assert await store.lease("t1") == lease
    assert await store.claim("b", now=T0, lease_s=LEASE_S, limit=5) == ()
    await tasks.ledger.append("t1", [tasks.revision()], fence=lease)  # its own fence holds
    (taken,) = await store.claim("b", now=LATER, lease_s=LEASE_S, limit=5)
    assert (taken.owner, taken.epoch) == ("b", 2)  # once it expired, like any other


async def test_a_new_task_under_a_lease_that_is_not_a_first_one_is_refused(
    store: Store, tasks: TaskFactory
) -> None:
    """A creating append fenced by an epoch above 1 fences nothing real: nothing is written."""
    stale = Lease(task_id=TaskId("t1"), owner="run", epoch=2, expires_at=LATER)
    created = new_task(
        TaskId("t1"), input="x", contract=tasks.contract, policy=RecoveryPolicy(), now=T0
    )
    entries = seal(TaskId("t1"), (created,), after_seq=0, prev_hash=GENESIS_HASH, at=T0)
    state = apply(None, created, at=T0)
    assert state is not None
    with pytest.raises(LeaseLost):
        await store.append(entries, summarize(state, head_hash=entries[-1].hash), fence=stale)
    assert await store.summary("t1") is None
    assert await store.lease("t1") is None


async def test_an_append_fenced_by_a_claimed_lease_is_written(
    store: Store, tasks: TaskFactory
) -> None:
    """A claimed lease is the task's current one: its fence lets an append through."""
    await tasks.planning("t1")
    (lease,) = await store.claim("a", now=T0, lease_s=LEASE_S, limit=1)
    await tasks.ledger.append("t1", [tasks.revision()], fence=lease)
    assert len(await store.read("t1")) == 2


async def test_concurrent_claimers_get_disjoint_tasks(
    store: Store, other: Store, tasks: TaskFactory
) -> None:
    """Two claimers racing on two stores of the same ledgers share the runnable tasks out."""
    names = [f"t{n}" for n in range(8)]
    for task_id in names:
        await tasks.planning(task_id)
    await other.lease("t0")  # open its connections before the race
    mine, theirs = await asyncio.gather(
        store.claim("a", now=T0, lease_s=LEASE_S, limit=5),
        other.claim("b", now=T0, lease_s=LEASE_S, limit=5),
    )
    assert not set(_ids(mine)) & set(_ids(theirs))
    assert sorted(_ids(mine) + _ids(theirs)) == names
    for lease in (*mine, *theirs):
        assert await store.lease(lease.task_id) == lease


async def test_a_task_awaiting_approval_is_claimed_only_once_approved(
    store: Store, tasks: TaskFactory
) -> None:
    """A task waiting for a person holds no lease, yet no claim takes it; approved, it is."""
    await tasks.awaiting_approval("t1")
    assert await store.lease("t1") is None
    assert await store.claim("a", now=LATER, lease_s=LEASE_S, limit=5) == ()
    await tasks.ledger.approve("t1", by="ada")
    (taken,) = await store.claim("a", now=LATER, lease_s=LEASE_S, limit=5)
    assert (taken.task_id, taken.owner, taken.epoch) == ("t1", "a", 1)


async def test_a_rejected_task_is_claimed_to_be_planned_again(
    store: Store, tasks: TaskFactory
) -> None:
    """A rejection sends the task back to await a replan: a worker may take it again."""
    await tasks.awaiting_approval("t1")
    await tasks.ledger.reject("t1", by="ada", reason="not that way")
    summary = await store.summary("t1")
    assert summary is not None
    assert summary.phase is TaskPhase.AWAITING_REPLAN
    assert _ids(await store.claim("a", now=T0, lease_s=LEASE_S, limit=5)) == ["t1"]


async def test_a_driver_that_asks_for_approval_leaves_its_task_to_nobody(
    store: Store, tasks: TaskFactory
) -> None:
    """A driver asks for approval under its lease and releases it (the task waits holding no
    lease): neither at once nor once the lease would have expired does a claim take it, while
    other tasks are still claimed."""
    await tasks.planning("t1")
    (lease,) = await store.claim("a", now=T0, lease_s=LEASE_S, limit=1)
    await tasks.ledger.append("t1", [tasks.revision(), ApprovalRequested(revision=1)], fence=lease)
    await store.release_lease(lease, now=T0 + timedelta(seconds=1))
    await tasks.planning("t2")
    later = LATER + timedelta(seconds=LEASE_S)  # past the lease t1 held, had it kept it
    assert _ids(await store.claim("b", now=T0, lease_s=LEASE_S * 10, limit=5)) == ["t2"]
    assert await store.claim("b", now=later, lease_s=LEASE_S, limit=5) == ()
