"""Wake-ups: a store tells idle workers a task may have become runnable.

PostgreSQL signals every process through ``LISTEN``/``NOTIFY``; the memory store signals the
workers of its own process; an SQLite store watches its file for other connections' commits
(see docs/workers.md). Each test listens on a second store over the same ledgers where there is
one (SQLite, PostgreSQL), so a signal crosses connections as it crosses processes.
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

from pev.ledger import Lease, Ledger, Store, Wakeups
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
