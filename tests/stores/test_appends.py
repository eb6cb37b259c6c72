"""Followers: a store tells the followers of a task that its ledger grew (``pev.ledger.Appends``).

Every store sets the event of a task's followers once an append to it commits, for the appends
it makes itself, from any thread; PostgreSQL also hears every other process's, through
``LISTEN``/``NOTIFY`` (here a second store object over the same schema stands for another
process). :func:`pev.ledger.follow` reads the ledger when told, and every ``follow_poll_s``
anyway: on every backend a follower sees each entry once, in order, to the task's end.

A PostgreSQL store serves one event loop at a time (its pool follows the loop that uses it), so
appends from another thread are tested on the memory and SQLite stores; on PostgreSQL, those of
another store object stand for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.support import builders, postgres

from pev.errors import ConflictError, UnknownTaskError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    Appends,
    CaptureFailed,
    Ledger,
    LedgerEntry,
    Store,
    TaskFinished,
    finish,
    follow,
)
from pev.model import EvidencePhase, Plan, PlanNode
from pev.stores import SQLiteStore

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory
    from pev.testing import FakeClock

WAIT_S = 10.0  # the most a signal may take to arrive: generous, it is a bound, not a timing
QUIET_S = 0.3  # how long a follower sees nothing where nothing is signalled
APPENDS = 12  # appends a follower sees arrive one by one
REVISION = builders.revision(
    1, plan=Plan("fetch it", (PlanNode("a", "fetch it", tool="fetch"),)), reason="initial plan"
)


def look(number: int) -> CaptureFailed:
    """An event legal in any phase of a live task, told apart by its number."""
    return CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=f"look {number}")


@pytest.fixture(params=["memory", "postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """Every backend."""
    return backends[request.param]


IN_PROCESS = pytest.mark.parametrize("backend", ["memory", "sqlite"], indirect=True)
POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def appends(store: Store) -> Appends:
    """``store`` as a store that tells followers (every pev store is one)."""
    assert isinstance(store, Appends)
    return store


@asynccontextmanager
async def following(store: Store, task_id: str) -> AsyncIterator[asyncio.Event]:
    """The task's append event, once the store listens, cleared of the set its start makes.

    For the first follower of a store: where the store listens already, no start is signalled.
    """
    async with appends(store).appended(task_id) as appended:
        if isinstance(store, postgres.PostgresStore):  # a listener sets it once it listens
            await asyncio.wait_for(appended.wait(), WAIT_S)
            appended.clear()
        yield appended


async def _quiet(event: asyncio.Event) -> bool:
    """Whether nothing sets ``event`` for a while."""
    try:
        await asyncio.wait_for(event.wait(), QUIET_S)
    except TimeoutError:
        return True
    return False


async def _end(ledger: Ledger, task_id: str) -> None:
    """End the task: its last entry is a ``task_finished``."""
    state = await ledger.state(task_id)
    await ledger.append(task_id, [finish(state, TaskStatus.CANCELLED, TerminalReason.CANCELLED)])


async def _write_to_the_end(ledger: Ledger, task_id: str) -> None:
    """Append ``APPENDS`` events one at a time, letting followers read between them, then end."""
    for number in range(APPENDS):
        await ledger.append(task_id, [look(number)])
        await asyncio.sleep(0.005)
    await _end(ledger, task_id)


async def _collect(stream: AsyncIterator[tuple[LedgerEntry, ...]]) -> list[tuple[LedgerEntry, ...]]:
    return [batch async for batch in stream]


# --- the signal ------------------------------------------------------------------------------


async def test_each_store_reads_anyway_each_second(store: Store) -> None:
    """Every store hears every append (SQLite by watching its file): reads are a safety net."""
    assert appends(store).follow_poll_s == 1.0


async def test_an_append_tells_the_tasks_followers(store: Store, tasks: TaskFactory) -> None:
    """Each follower of the task, however many, is told once the append committed."""
    await tasks.planning("t1")
    # The second follower joins a store that listens already: no start of listening to wait for.
    async with following(store, "t1") as first, appends(store).appended("t1") as second:
        await tasks.ledger.append("t1", [REVISION])
        await asyncio.wait_for(first.wait(), WAIT_S)
        await asyncio.wait_for(second.wait(), WAIT_S)


async def test_an_append_to_another_task_tells_nobody(store: Store, tasks: TaskFactory) -> None:
    """Only the followers of the task appended to are told."""
    await tasks.planning("t1")
    await tasks.planning("t2")
    async with following(store, "t1") as appended:
        await tasks.ledger.append("t2", [REVISION])
        assert await _quiet(appended)


async def test_an_append_that_fails_tells_nobody(
    store: Store, tasks: TaskFactory, clock: FakeClock
) -> None:
    """An append refused (another writer took its sequence number) wrote nothing: no signal."""
    await tasks.planning("t1")
    stale = Ledger(store, clock=clock)
    await stale.state("t1")  # it will append after the head it read
    await tasks.ledger.append("t1", [REVISION])
    async with following(store, "t1") as appended:
        with pytest.raises(ConflictError):
            await stale.append("t1", [REVISION])
        assert await _quiet(appended)


@IN_PROCESS
async def test_an_append_from_another_thread_tells_the_followers(
    store: Store, tasks: TaskFactory, clock: FakeClock
) -> None:
    """A follower waiting in this thread's loop is told of an append made through the same
    store object in another thread, on an event loop of its own."""
    await tasks.planning("t1")
    elsewhere = Ledger(store, clock=clock)
    async with following(store, "t1") as appended:
        await asyncio.to_thread(asyncio.run, elsewhere.append("t1", [REVISION]))
        await asyncio.wait_for(appended.wait(), WAIT_S)


async def test_a_postgres_append_by_another_store_tells_the_followers(clock: FakeClock) -> None:
    """Another store object (another pool, as another process would have) appends: this one's
    followers hear of it through ``NOTIFY``, without reading."""
    store = postgres.throwaway_store(max_size=2)
    other = postgres.same_schema(store, max_size=2)
    try:
        await Ledger(store, clock=clock).create({"question": "t1"}, task_id="t1")
        async with following(store, "t1") as appended:
            await Ledger(other, clock=clock).append("t1", [REVISION])
            await asyncio.wait_for(appended.wait(), WAIT_S)
    finally:
        await other.close()
        await store.close()


async def test_an_sqlite_append_by_another_connection_tells_the_followers(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Another store object on the same file (another process, in effect) appends: this one's
    followers are told by the watch of the file's data_version, not found by their reads."""
    store, other = SQLiteStore(tmp_path / "ledger.db"), SQLiteStore(tmp_path / "ledger.db")
    try:
        await Ledger(store, clock=clock).create({"question": "t1"}, task_id="t1")
        async with following(store, "t1") as appended, following(store, "t1") as second:
            await asyncio.sleep(0.05)  # the watch has read the file's version
            await Ledger(other, clock=clock).append("t1", [REVISION])
            await asyncio.wait_for(appended.wait(), WAIT_S)
            await asyncio.wait_for(second.wait(), WAIT_S)
    finally:
        await other.close()
        await store.close()


@POSTGRES
async def test_one_postgres_connection_listens_for_every_follower_of_a_loop(
    store: Store, tasks: TaskFactory
) -> None:
    """Followers of any number of tasks share one listening connection, closed with the last of
    them; a process nobody follows in holds none."""
    assert isinstance(store, postgres.PostgresStore)
    listeners = (
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' AND query LIKE %s"
    )
    pattern = f"%pev_events:{store.schema}%"
    await tasks.planning("t1")
    await tasks.planning("t2")
    joined = appends(store)
    async with following(store, "t1"), joined.appended("t2"), joined.appended("t1"):
        assert postgres.execute(listeners, params=(pattern,)) == [(1,)]
    for _ in range(100):  # the server notes a closed connection shortly after
        if postgres.execute(listeners, params=(pattern,)) == [(0,)]:
            break
        await asyncio.sleep(0.05)
    assert postgres.execute(listeners, params=(pattern,)) == [(0,)]


async def test_a_postgres_follower_whose_listener_is_cut_is_told_to_read(clock: FakeClock) -> None:
    """A listening connection killed on the server is made again; once it listens, every
    follower is told to read (appends meanwhile went unheard), and later appends are heard."""
    store = postgres.throwaway_store(max_size=2)
    try:
        ledger = Ledger(store, clock=clock)
        await ledger.create({"question": "t1"}, task_id="t1")
        async with following(store, "t1") as appended:
            cut = postgres.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %%' AND query LIKE %s",
                params=(f"%pev_events:{store.schema}%",),
            )
            assert cut == [(True,)]
            await asyncio.wait_for(appended.wait(), WAIT_S)  # listening again: read
            appended.clear()
            other = postgres.same_schema(store, max_size=2)
            try:
                await Ledger(other, clock=clock).append("t1", [REVISION])
            finally:
                await other.close()
            await asyncio.wait_for(appended.wait(), WAIT_S)
    finally:
        await store.close()


# --- following -------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["same", "other"])
async def test_follow_yields_every_entry_once_in_order_to_the_end(
    store: Store, other: Store, tasks: TaskFactory, clock: FakeClock, writer: str
) -> None:
    """A follower reading while another writes sees each entry once, in order, and its
    iteration ends with the ``task_finished``; whether the writer is its own store object or
    another over the same ledgers (another process's, in effect)."""
    await tasks.executing("t1")
    ledger = tasks.ledger if writer == "same" else Ledger(other, clock=clock)
    following_task = asyncio.create_task(_collect(follow(store, "t1")))
    await _write_to_the_end(ledger, "t1")
    batches = await asyncio.wait_for(following_task, WAIT_S)
    seen = [entry for batch in batches for entry in batch]
    assert seen == list(await store.read("t1"))
    assert [entry.seq for entry in seen] == list(range(1, APPENDS + 4))
    assert isinstance(seen[-1].event, TaskFinished)
    assert all(batches)
    assert len(batches) > 1  # it read while they were written, not once at the end


async def test_a_follower_that_waits_sees_a_task_written_after_it_started(
    store: Store, tasks: TaskFactory
) -> None:
    """``wait=True``: a task not written yet is waited for, its first append told as any other,
    and every entry then seen once, in order, to its end; without it, the id is unknown."""
    with pytest.raises(UnknownTaskError):
        await anext(follow(store, "late"))
    following_task = asyncio.create_task(_collect(follow(store, "late", wait=True)))
    assert await _quiet_task(following_task)
    await tasks.executing("late")
    await _write_to_the_end(tasks.ledger, "late")
    batches = await asyncio.wait_for(following_task, WAIT_S)
    seen = [entry for batch in batches for entry in batch]
    assert seen == list(await store.read("late"))
    assert isinstance(seen[-1].event, TaskFinished)


async def _quiet_task(task: asyncio.Task[object]) -> bool:
    """Whether ``task`` is still waiting after ``QUIET_S``."""
    await asyncio.sleep(QUIET_S)
    return not task.done()


async def test_a_follower_that_stops_reading_catches_up(store: Store, tasks: TaskFactory) -> None:
    """A follower that stops reading while appends go on misses none of them: its next look
    reads everything written meanwhile, in order, and the stream ends with the task."""
    await tasks.executing("t1")
    async with contextlib.aclosing(follow(store, "t1")) as stream:
        first = await anext(stream)
        await _write_to_the_end(tasks.ledger, "t1")  # nobody reads meanwhile
        rest = [batch async for batch in stream]
    seen = [entry for batch in (first, *rest) for entry in batch]
    assert seen == list(await store.read("t1"))
    assert [entry.seq for entry in first] == [1, 2]
    assert len(rest) == 1  # one look caught up with all of it


async def test_a_follower_after_a_sequence_number_starts_there(
    store: Store, tasks: TaskFactory
) -> None:
    """``after=n`` gives the entries from n + 1 on, as they come, to the end."""
    await tasks.executing("t1")
    following_task = asyncio.create_task(_collect(follow(store, "t1", after=1)))
    await _write_to_the_end(tasks.ledger, "t1")
    batches = await asyncio.wait_for(following_task, WAIT_S)
    assert [entry.seq for batch in batches for entry in batch] == list(range(2, APPENDS + 4))
