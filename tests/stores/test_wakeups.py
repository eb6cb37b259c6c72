"""Wake-ups: a store that can tell idle workers a task may have become runnable.

PostgreSQL signals every process through ``LISTEN``/``NOTIFY``; the memory store signals the
workers of its own process; SQLite has no way to, and its workers poll (see docs/workers.md).
Each test runs on every backend that has wake-ups, listening on a second store over the same
ledgers where there is one (PostgreSQL), so a signal crosses connections as it crosses
processes.
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
from pev.stores import MemoryStore, SQLiteStore

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

WAIT_S = 10.0  # the most a signal may take to arrive: generous, it is a bound, not a timing
QUIET_S = 0.3  # how long a waiter sees nothing where nothing is signalled


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """The backends with wake-ups (SQLite has none: see the last tests)."""
    return backends[request.param]


@pytest.fixture
def waking(other: Store) -> Wakeups:
    """The wake-ups of a second store over the same ledgers."""
    assert isinstance(other, Wakeups)
    return other


@asynccontextmanager
async def listening(waking: Wakeups) -> AsyncIterator[asyncio.Event]:
    """The wake-up event, once the store listens, cleared of the set its start makes."""
    async with waking.wakeups() as woken:
        if not isinstance(waking, MemoryStore):  # a listener sets it once it listens
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


async def test_a_task_written_with_its_drivers_lease_wakes_nobody(
    waking: Wakeups, tasks: TaskFactory
) -> None:
    """``pev.run`` writes its task under its lease: nobody could claim it, nobody is woken."""
    lease = Lease(task_id=TaskId("t1"), owner="run", epoch=1, expires_at=T0 + timedelta(1))
    async with listening(waking) as woken:
        await tasks.ledger.create({"question": "t1"}, contract=tasks.contract, lease=lease)
        await tasks.ledger.append("t1", [tasks.revision()], fence=lease)
        assert await _quiet(woken)


@pytest.mark.parametrize(("phase", "wakes"), [("planning", True), ("finished", False)])
async def test_releasing_a_lease_wakes_the_waiters_only_if_its_task_goes_on(
    store: Store, waking: Wakeups, tasks: TaskFactory, phase: str, wakes: bool
) -> None:
    """A draining worker leaves its tasks unfinished and their leases free: a signal. Every
    drive that ends a task releases its lease too; that makes nothing runnable: no signal."""
    await getattr(tasks, phase)("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    async with listening(waking) as woken:
        await store.release_lease(lease, now=T0 + timedelta(seconds=1))
        if wakes:
            await asyncio.wait_for(woken.wait(), WAIT_S)
        else:
            assert await _quiet(woken)


def test_the_sqlite_store_has_no_wake_ups() -> None:
    """Another process's commit cannot reach SQLite waiters: its workers poll instead."""
    assert not isinstance(SQLiteStore(":memory:"), Wakeups)
    assert isinstance(MemoryStore(), Wakeups)


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
