"""What only the SQLite store promises: durable settings, append-only rows, versioned files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.support.builders import T0

from pev.errors import (
    LedgerCorruptError,
    SchemaVersionError,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from pev.ledger import SCHEMA_VERSION, TERMINAL_PHASES, Ledger, TaskPhase
from pev.stores import MemoryStore, SQLiteStore

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory


@pytest.fixture
def backend(backends: dict[str, Backend]) -> Backend:
    """Only the SQLite backend, for every fixture built on ``backend`` in this module."""
    return backends["sqlite"]


@contextlib.contextmanager
def connect(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A plain connection of the test's own to the database file, in autocommit mode."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


# --- settings and schema ---------------------------------------------------------------------


async def test_journal_is_wal(store: SQLiteStore) -> None:
    """The file uses write-ahead logging, so readers never block the writer."""
    with connect(store.location) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_commits_are_fully_synchronous(store: SQLiteStore) -> None:
    """The store's connection flushes every commit to disk (``synchronous=FULL``)."""
    assert store._db.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # 2 is FULL


async def test_file_is_marked_as_a_pev_ledger(store: SQLiteStore) -> None:
    """The file carries pev's application id and the schema version it was written with."""
    with connect(store.location) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x70657631
        version = conn.execute("SELECT value FROM pev_meta WHERE key = 'schema_version'")
        assert version.fetchone()[0] == str(SCHEMA_VERSION)


async def test_event_rows_cannot_be_updated(store: SQLiteStore, tasks: TaskFactory) -> None:
    """A trigger refuses any UPDATE of an event row."""
    await tasks.executing("t1")
    with connect(store.location) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE pev_events SET event = '{}' WHERE task_id = 't1' AND seq = 2")


async def test_event_rows_cannot_be_deleted(store: SQLiteStore, tasks: TaskFactory) -> None:
    """A trigger refuses any DELETE of an event row."""
    await tasks.executing("t1")
    with connect(store.location) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM pev_events WHERE task_id = 't1'")
    assert len(await store.read("t1")) == 2


async def test_missing_folder_is_created(tmp_path: Path) -> None:
    """A database path in folders that do not exist yet creates them."""
    store = SQLiteStore(tmp_path / "a" / "b" / "ledger.db")
    try:
        assert await store.list_tasks() == ()
    finally:
        await store.close()
    assert (tmp_path / "a" / "b" / "ledger.db").is_file()


def test_without_create_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    """create=False names the missing ledger in one line, and makes neither file nor folder."""
    path = tmp_path / "nowhere" / "ledger.db"
    with pytest.raises(UsageError) as raised:
        SQLiteStore(path, create=False)
    message = str(raised.value)
    assert message.startswith(f"no pev ledger at {path}; ")
    assert "\n" not in message
    assert not (tmp_path / "nowhere").exists()


def _unopenable(tmp_path: Path, case: str) -> str:
    """A path that holds no ledger file, of the kind ``case`` names."""
    regular = tmp_path / "somefile"
    regular.write_text("x", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "empty.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "gone.db")
    return {
        "an-empty-file": str(tmp_path / "empty.db"),
        "a-link-to-nothing": str(tmp_path / "link.db"),
        "a-folder": str(tmp_path / "folder"),
        "a-pipe": str(tmp_path / "pipe"),
        "a-nul": str(tmp_path / "led\x00ger.db"),
        "under-a-file": str(regular / "ledger.db"),
        "missing": str(tmp_path / "ledger.db"),
    }[case]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize(
    ("case", "error", "words"),
    [
        pytest.param("a-folder", StoreError, "is a folder, not a ledger file", id="a-folder"),
        pytest.param("a-pipe", StoreError, "is not a regular file", id="a-pipe"),
        pytest.param("a-nul", StoreError, "holds a NUL character", id="a-nul"),
        pytest.param("under-a-file", UsageError, "somefile is a file, not a folder", id="under"),
        pytest.param("missing", UsageError, "no pev ledger at", id="missing"),
        pytest.param("an-empty-file", UsageError, "(an empty file, no ledger yet)", id="empty"),
        pytest.param("a-link-to-nothing", UsageError, "no pev ledger at", id="dangling-link"),
    ],
)
def test_without_create_a_path_that_holds_no_ledger_is_one_line(
    tmp_path: Path, case: str, error: type[Exception], words: str
) -> None:
    """create=False refuses a path without a ledger file in one line, as creating does."""
    path = _unopenable(tmp_path, case)
    there = _contents(tmp_path)
    with pytest.raises(error) as raised:
        SQLiteStore(path, create=False)
    message = str(raised.value)
    assert words in message
    assert "\n" not in message
    assert _contents(tmp_path) == there  # nothing made, nothing written
    if error is StoreError:  # the very error of the creating path
        with pytest.raises(StoreError) as creating:
            SQLiteStore(path)
        assert str(creating.value) == message


def _contents(folder: Path) -> list[tuple[Path, int]]:
    """Each path under ``folder`` with its size (a link, a pipe: its own, not followed)."""
    return sorted((path, path.lstat().st_size) for path in folder.rglob("*"))


async def test_without_create_an_existing_ledger_opens(
    store: SQLiteStore, tasks: TaskFactory
) -> None:
    """create=False opens a ledger that is there, for reading and writing alike."""
    await tasks.executing("t1")
    again = SQLiteStore(store.location, create=False)
    try:
        assert [row.task_id for row in await again.list_tasks()] == ["t1"]
        await Ledger(again).create("y", task_id="t2")
        assert await again.summary("t2") is not None
    finally:
        await again.close()


async def test_private_in_memory_database(tasks: TaskFactory) -> None:
    """``":memory:"`` gives a working store that keeps nothing on disk."""
    store = SQLiteStore(":memory:")
    try:
        ledger = Ledger(store, clock=tasks.clock)
        state = await ledger.create({"q": 1}, task_id="t1")
        assert await Ledger(store).state("t1") == state
    finally:
        await store.close()


# --- durability ------------------------------------------------------------------------------


async def test_reopened_file_reads_the_same_ledgers(
    store: SQLiteStore, ledger: Ledger, tasks: TaskFactory
) -> None:
    """After close and reopen, every entry, index row and state reads back the same."""
    states = {
        "wait": await tasks.awaiting_replan("wait"),
        "done": await tasks.finished("done"),
        "run": await tasks.executing("run"),
    }
    entries = {task_id: await store.read(task_id) for task_id in states}
    listed = await store.list_tasks()
    await store.close()

    again = SQLiteStore(store.location)
    try:
        assert {task_id: await again.read(task_id) for task_id in states} == entries
        assert await again.list_tasks() == listed
        fresh = Ledger(again)
        for task_id, state in states.items():
            assert await fresh.state(task_id) == state
            assert (await fresh.verify(task_id)).ok
    finally:
        await again.close()


async def test_reopened_file_takes_further_appends(store: SQLiteStore, tasks: TaskFactory) -> None:
    """A reopened ledger continues the chain where the closed one left it."""
    await tasks.executing("t1")
    await store.close()
    again = SQLiteStore(store.location)
    try:
        fresh = Ledger(again, clock=tasks.clock)
        state = await fresh.append("t1", [tasks.capture_failed()])
        assert state.event_count == 3
        assert (await fresh.verify("t1")).ok
    finally:
        await again.close()


# --- refusing files it must not read ---------------------------------------------------------


def _set_schema_version(path: str, value: str | None) -> None:
    with connect(path) as conn:
        if value is None:
            conn.execute("DELETE FROM pev_meta WHERE key = 'schema_version'")
        else:
            conn.execute("UPDATE pev_meta SET value = ? WHERE key = 'schema_version'", (value,))


@pytest.mark.parametrize(
    ("written", "found", "advice"),
    [
        pytest.param(str(SCHEMA_VERSION + 1), SCHEMA_VERSION + 1, "upgrade pev", id="newer"),
        pytest.param("0", 0, "open it with the pev release that wrote it", id="older"),
        pytest.param(None, 0, "open it with the pev release that wrote it", id="unversioned"),
    ],
)
async def test_other_schema_version_is_refused(
    store: SQLiteStore, tasks: TaskFactory, written: str | None, found: int, advice: str
) -> None:
    """A ledger of another schema version raises SchemaVersionError saying what to do."""
    await tasks.executing("t1")
    await store.close()
    _set_schema_version(store.location, written)
    with pytest.raises(SchemaVersionError, match=advice) as info:
        SQLiteStore(store.location)
    assert (info.value.found, info.value.expected) == (found, SCHEMA_VERSION)
    assert store.location in str(info.value)


async def test_unreadable_schema_version_is_refused(store: SQLiteStore, tasks: TaskFactory) -> None:
    """A schema version that is not a number raises StoreError, not a bare ValueError."""
    await tasks.executing("t1")
    await store.close()
    _set_schema_version(store.location, "banana")
    with pytest.raises(StoreError, match="not a number"):
        SQLiteStore(store.location)


async def test_refused_schema_version_leaves_the_file_alone(
    store: SQLiteStore, tasks: TaskFactory
) -> None:
    """Refusing a newer ledger does not rewrite its version."""
    await tasks.executing("t1")
    await store.close()
    _set_schema_version(store.location, "2")
    with pytest.raises(SchemaVersionError):
        SQLiteStore(store.location)
    with connect(store.location) as conn:
        version = conn.execute("SELECT value FROM pev_meta WHERE key = 'schema_version'")
        assert version.fetchone()[0] == "2"


@pytest.fixture
def foreign_db(tmp_path: Path) -> Path:
    """A SQLite file of another application: its own application id and tables."""
    path = tmp_path / "other.db"
    with connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    return path


async def test_database_of_another_application_is_refused(foreign_db: Path) -> None:
    """A SQLite file whose application id is not pev's raises StoreError naming the way out."""
    with pytest.raises(StoreError, match="another application") as info:
        SQLiteStore(foreign_db)
    assert not isinstance(info.value, SchemaVersionError)
    assert "new file" in str(info.value)


async def test_database_of_another_application_is_left_alone(foreign_db: Path) -> None:
    """Refusing another application's file changes nothing in it: no tables, no WAL switch."""
    with pytest.raises(StoreError):
        SQLiteStore(foreign_db)
    with connect(foreign_db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert tables == {"photos"}
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


async def test_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite at all raises StoreError."""
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 100)
    with pytest.raises(StoreError):
        SQLiteStore(path)


# --- corrupt rows ----------------------------------------------------------------------------


def _overwrite_event(path: str, task_id: str, seq: int, text: str) -> None:
    with connect(path) as conn:
        conn.execute("DROP TRIGGER pev_events_no_update")
        conn.execute(
            "UPDATE pev_events SET event = ? WHERE task_id = ? AND seq = ?", (text, task_id, seq)
        )


GARBAGE = [
    pytest.param("{not json at all", id="not-json"),
    pytest.param('{"kind": "no_such_event"}', id="unknown-kind"),
    pytest.param("[1, 2, 3]", id="wrong-shape"),
    pytest.param('{"kind": "capture_failed", "revision": 1}', id="missing-fields"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_event_makes_read_name_its_seq(
    store: SQLiteStore, tasks: TaskFactory, garbage: str
) -> None:
    """A row whose event cannot be decoded makes ``read`` raise LedgerCorruptError naming it."""
    await tasks.awaiting_replan("t1")
    _overwrite_event(store.location, "t1", 4, garbage)
    with pytest.raises(LedgerCorruptError, match="event 4") as info:
        await store.read("t1")
    assert (info.value.task_id, info.value.seq) == ("t1", 4)


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_event_is_reported_by_verify(
    store: SQLiteStore, tasks: TaskFactory, garbage: str
) -> None:
    """``Ledger.verify`` reports a row that cannot be decoded as the first bad event."""
    await tasks.awaiting_replan("t1")
    _overwrite_event(store.location, "t1", 4, garbage)
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, 4)
    assert "event 4" in report.problem


async def test_rows_after_the_garbage_still_read(store: SQLiteStore, tasks: TaskFactory) -> None:
    """Reading after a garbage row's seq is unaffected by it."""
    await tasks.awaiting_replan("t1")
    _overwrite_event(store.location, "t1", 4, "{not json at all")
    assert [entry.seq for entry in await store.read("t1", after=4)] == [5, 6, 7, 8, 9]


async def test_reading_never_waits_for_a_writer(store: SQLiteStore, tasks: TaskFactory) -> None:
    """While another connection holds the write lock, a fresh store opens, lists and reads."""
    await tasks.executing("t1")
    writer = sqlite3.connect(store.location, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO pev_meta (key, value) VALUES ('busy', 'writing')")
        reader = SQLiteStore(store.location, busy_timeout_s=0.2)
        try:
            assert [row.task_id for row in await reader.list_tasks()] == ["t1"]
            assert len(await reader.read("t1")) == 2
            assert await reader.summary("t1") is not None
        finally:
            await reader.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()


async def test_a_claim_searches_only_the_claimable_tasks(store: SQLiteStore) -> None:
    """The claim's search goes through the claimable-tasks index, whose condition names every
    terminal phase and awaiting_approval: however many tasks have ended or wait for a person,
    it reads none of them."""
    from pev.stores._sqlite import _SELECT_CLAIMABLE
    from pev.stores._sqlite_db import RUNNABLE_TASKS

    unclaimable = sorted(str(phase) for phase in {*TERMINAL_PHASES, TaskPhase.AWAITING_APPROVAL})
    assert f"phase NOT IN ({', '.join(repr(p) for p in unclaimable)})" == RUNNABLE_TASKS
    plan = store._db.conn.execute("EXPLAIN QUERY PLAN " + _SELECT_CLAIMABLE, ("now", 5)).fetchall()
    assert "pev_tasks_claimable" in " ".join(str(row[-1]) for row in plan)


def index_names(path: str | Path) -> set[str]:
    """The names of the indexes in the ledger file at ``path``."""
    with connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}


async def test_a_file_with_the_runnable_tasks_index_gets_the_claimable_one(
    store: SQLiteStore, tasks: TaskFactory
) -> None:
    """A file an older pev made (its index of the tasks that have not ended, which let a claim
    take a task awaiting approval) is brought up to date when it is opened: the old index is
    dropped, the new one made, and a claim leaves the waiting task alone."""
    await tasks.awaiting_approval("waiting")
    await tasks.planning("new")
    await store.close()
    with connect(store.location) as conn:
        conn.execute("DROP INDEX pev_tasks_claimable")
        conn.execute(
            "CREATE INDEX pev_tasks_runnable ON pev_tasks (created_at, task_id) "
            "WHERE phase NOT IN ('cancelled', 'failed', 'partial', 'succeeded')"
        )
    reopened = SQLiteStore(store.location)
    try:
        assert {"pev_tasks_claimable", "pev_tasks_runnable"} & index_names(store.location) == {
            "pev_tasks_claimable"
        }
        claimed = await reopened.claim("w", now=T0, lease_s=30, limit=5)
        assert [lease.task_id for lease in claimed] == ["new"]
    finally:
        await reopened.close()


@pytest.mark.parametrize("offload", [False, True])
async def test_a_write_waits_for_another_writer_without_blocking_the_loop(
    tmp_path: Path, offload: bool
) -> None:
    """Another connection holds the write lock for a while: the append waits (the event loop
    runs meanwhile), then lands once the lock is free; held past the busy timeout, it is a
    StoreError naming the lock, and nothing is written."""
    path = tmp_path / "ledger.db"
    store = SQLiteStore(path, busy_timeout_s=5, offload=offload)
    impatient = SQLiteStore(path, busy_timeout_s=0.2, offload=offload)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        ledger = Ledger(store)
        writer.execute("BEGIN IMMEDIATE")
        creating = asyncio.create_task(ledger.create("x", task_id="t1"))
        ticks = 0
        while ticks < 20:  # the loop is free while the append waits for the lock
            await asyncio.sleep(0.01)
            ticks += 1
        assert not creating.done()
        # Straight to the store: the ledger would retry an append the store did not answer.
        elsewhere = MemoryStore()
        await Ledger(elsewhere).create("y", task_id="t2")
        entries, summary = await elsewhere.read("t2"), await elsewhere.summary("t2")
        assert summary is not None
        with pytest.raises(StoreUnavailable, match="stayed locked by another writer") as raised:
            await impatient.append(entries, summary)
        assert (raised.value.operation, raised.value.location) == ("write", str(path))
        with pytest.raises(StoreUnavailable) as raised:
            await impatient.acquire_lease("t1", "w", now=T0, lease_s=30)
        assert raised.value.operation == "lease"
        writer.execute("COMMIT")
        await asyncio.wait_for(creating, 5)
        assert [s.task_id for s in await store.list_tasks()] == ["t1"]
    finally:
        writer.close()
        await impatient.close()
        await store.close()


async def test_opening_a_file_locked_past_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    """A file another process keeps locked while it is opened: StoreUnavailable, to retry."""
    path = tmp_path / "ledger.db"
    await SQLiteStore(path).close()
    with connect(path) as holder:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="locked past the busy timeout") as raised:
            SQLiteStore(path, busy_timeout_s=0.1)
        holder.execute("ROLLBACK")
    assert (raised.value.operation, raised.value.location) == ("connect", str(path))
    assert "\n" not in str(raised.value)


async def test_a_read_that_stays_locked_is_unavailable(store: SQLiteStore) -> None:
    """A read that keeps meeting a lock past the busy timeout is StoreUnavailable ("read")."""
    impatient = SQLiteStore(store.location, busy_timeout_s=0.05)

    def locked(conn: sqlite3.Connection) -> None:
        # A WAL reader meets a lock only in rare moments (another connection's recovery):
        # raised here as SQLite raises it.
        raise sqlite3.OperationalError("database is locked")

    try:
        with pytest.raises(StoreUnavailable) as raised:
            await impatient._db.run(locked)  # private: the one way to make a read meet a lock
        assert raised.value.operation == "read"
    finally:
        await impatient.close()


@pytest.mark.parametrize(
    ("message", "busy"),
    [
        ("database is locked", True),
        ("database table is locked", True),
        ("disk I/O error", False),
        ("database or disk is full", False),
        ("no such table: pev_events", False),
    ],
)
def test_only_a_lock_is_transient(message: str, busy: bool) -> None:
    """A lock is worth a retry (StoreUnavailable); a disk I/O error is not, and stays a
    StoreError, even though a retry might clear it."""
    from pev.stores._sqlite_db import is_busy

    assert is_busy(sqlite3.OperationalError(message)) is busy
