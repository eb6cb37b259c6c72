"""Wake-ups: a store tells idle workers a task may have become runnable.

PostgreSQL signals every process through ``LISTEN``/``NOTIFY``; the memory store signals the
workers of its own process; an SQLite store watches its file for other connections' commits,
and signals the workers waiting on it of its own (see docs/workers.md). A task becomes
runnable when it is submitted, when a person approves, rejects or cancels it, or when a draining
worker releases it; never while it awaits approval. Each test listens on a second store over
the same ledgers where there is one (SQLite, PostgreSQL), so a signal crosses connections as it
crosses processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from tests.support import postgres
from tests.support.builders import T0

from pev.ledger import ApprovalRequested, Lease, Ledger, Store, TaskPhase, Wakeups
from pev.model import TaskId

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

WAIT_S = 10.0  # the most a signal may take to arrive: generous, it is a bound, not a timing
QUIET_S = 0.3  # how long a waiter sees nothing where nothing is signalled


@pytest.fixture(params=["memory", "postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """Every backend; the tests that say nobody is woken leave out SQLite, which wakes its
    waiters on any other connection's commit."""
    return backends[request.param]


SIGNALLING = pytest.mark.parametrize("backend", ["memory", "postgres"], indirect=True)


@pytest.fixture
def waking(other: Store) -> Wakeups:
    """The wake-ups of a second store over the same ledgers."""
    assert isinstance(other, Wakeups)
    return other


@asynccontextmanager
async def listening(waking: Wakeups) -> AsyncIterator[asyncio.Event]:
    """The wake-up event, once the store listens, cleared of the set its start makes."""
    async with waking.wakeups() as woken:
        if isinstance(waking, postgres.PostgresStore):  # a listener sets it once it listens
            await asyncio.wait_for(woken.wait(), WAIT_S)
            woken.clear()
        yield woken


async def _quiet(woken: asyncio.Event) -> bool:
    """Whether nothing sets ``woken`` for a while."""
    try:
        await asyncio.wait_for(woken.wait(), QUIET_S)
    except TimeoutError:
        return True
    return False


async def test_a_submitted_task_wakes_the_waiters(waking: Wakeups, tasks: TaskFactory) -> None:
    """A task written without a lease (``pev.submit``) is runnable: the waiters are told."""
    async with listening(waking) as woken:
        await tasks.planning("t1")
        await asyncio.wait_for(woken.wait(), WAIT_S)


@SIGNALLING
async def test_a_task_written_with_its_drivers_lease_wakes_nobody(
    waking: Wakeups, tasks: TaskFactory
) -> None:
    """``pev.run`` writes its task under its lease: nobody could claim it, nobody is woken."""
    lease = Lease(task_id=TaskId("t1"), owner="run", epoch=1, expires_at=T0 + timedelta(1))
    async with listening(waking) as woken:
        await tasks.ledger.create({"question": "t1"}, contract=tasks.contract, lease=lease)
        await tasks.ledger.append("t1", [tasks.revision()], fence=lease)
        assert await _quiet(woken)


async def test_releasing_an_unfinished_tasks_lease_wakes_the_waiters(
    store: Store, waking: Wakeups, tasks: TaskFactory
) -> None:
    """A draining worker leaves its tasks unfinished and their leases free: a signal."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    async with listening(waking) as woken:
        await store.release_lease(lease, now=T0 + timedelta(seconds=1))
        await asyncio.wait_for(woken.wait(), WAIT_S)


@SIGNALLING
async def test_releasing_an_ended_tasks_lease_wakes_nobody(
    store: Store, waking: Wakeups, tasks: TaskFactory
) -> None:
    """Every drive that ends a task releases its lease; that makes nothing runnable."""
    await tasks.finished("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    async with listening(waking) as woken:
        await store.release_lease(lease, now=T0 + timedelta(seconds=1))
        assert await _quiet(woken)


DECISIONS = [
    pytest.param("approve", id="approved"),
    pytest.param("reject", id="rejected"),
    pytest.param("cancel", id="cancelled"),
]


async def _before(tasks: TaskFactory, decision: str) -> None:
    """The task as it stands before the person decides: waiting for them, or running."""
    if decision == "cancel":
        await tasks.executing("t1")
    else:
        await tasks.awaiting_approval("t1")


async def _decide(tasks: TaskFactory, decision: str) -> None:
    """What the person writes, without a lease, from any process."""
    if decision == "approve":
        await tasks.ledger.approve("t1", by="ada")
    elif decision == "reject":
        await tasks.ledger.reject("t1", by="ada", reason="not that way")
    else:
        await tasks.ledger.cancel("t1", reason="stop")


@pytest.mark.parametrize("decision", DECISIONS)
async def test_a_persons_decision_wakes_the_waiters(
    store: Store, waking: Wakeups, tasks: TaskFactory, decision: str
) -> None:
    """An approval (to executing), a rejection (to awaiting_replan) or a cancel (to cancelling)
    leaves a task that no driver holds with work to do: the waiters are told."""
    await _before(tasks, decision)
    async with listening(waking) as woken:
        await _decide(tasks, decision)
        await asyncio.wait_for(woken.wait(), WAIT_S)
    summary = await store.summary("t1")
    assert summary is not None
    assert summary.phase in {TaskPhase.EXECUTING, TaskPhase.AWAITING_REPLAN, TaskPhase.CANCELLING}


@SIGNALLING
async def test_a_task_that_comes_to_await_approval_wakes_nobody(
    waking: Wakeups, tasks: TaskFactory
) -> None:
    """A task waiting for a person cannot be claimed: asking for approval wakes nobody, even
    written without a lease."""
    await tasks.planning("t1")
    async with listening(waking) as woken:
        await tasks.ledger.append("t1", [tasks.revision(), ApprovalRequested(revision=1)])
        assert await _quiet(woken)


@SIGNALLING
async def test_releasing_the_lease_of_a_task_awaiting_approval_wakes_nobody(
    store: Store, waking: Wakeups, tasks: TaskFactory
) -> None:
    """A driver that asked for approval releases its lease: nobody could claim the task."""
    await tasks.awaiting_approval("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    async with listening(waking) as woken:
        await store.release_lease(lease, now=T0 + timedelta(seconds=1))
        assert await _quiet(woken)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("decision", [pytest.param("submit", id="submitted"), *DECISIONS])
async def test_an_sqlite_store_wakes_its_own_waiters(
    store: Store, tasks: TaskFactory, decision: str
) -> None:
    """A connection does not see its own commits change ``data_version``: a task submitted, or
    a person's decision, written through the waiter's own store object wakes it all the same."""
    assert isinstance(store, Wakeups)
    if decision != "submit":
        await _before(tasks, decision)
    async with store.wakeups() as woken:
        if decision == "submit":
            await tasks.planning("t1")
        else:
            await _decide(tasks, decision)
        await asyncio.wait_for(woken.wait(), WAIT_S)


async def test_a_quiet_store_wakes_nobody(waking: Wakeups) -> None:
    """Nothing written, nothing signalled: an idle worker costs no claims."""
    async with listening(waking) as woken:
        assert await _quiet(woken)


async def test_a_postgres_listener_whose_connection_is_cut_listens_again() -> None:
    """A listener whose server connection is killed reconnects, sets the event (signals may
    have been lost meanwhile) and is woken by the next submission."""
    postgres.require()
    store = postgres.throwaway_store(max_size=2)
    try:
        ledger = Ledger(store)
        async with listening(store) as woken:
            cut = postgres.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %%' AND query LIKE %s",
                params=(f"%{store.schema}%",),
            )
            assert cut == [(True,)]
            await asyncio.wait_for(woken.wait(), WAIT_S)  # listening again
            woken.clear()
            await ledger.create("after the cut", task_id="t1")
            await asyncio.wait_for(woken.wait(), WAIT_S)
    finally:
        await store.close()
