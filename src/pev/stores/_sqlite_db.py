"""One SQLite file holding pev ledgers: its connections, its schema, its transactions.

:class:`SQLiteDatabase` opens (and if need be creates) the file: WAL journal, ``synchronous=FULL``
so each commit is durable when it returns, the tables of the ledger, the leases and experience,
and a version check. An uncontended call runs on the caller's thread: a durable commit costs about
one disk flush (0.1 to 1 ms on a local SSD), less than handing it to another thread and back.
When another process holds the write lock, the call pauses without blocking the event loop and
tries again (up to ``busy_timeout_s``), so a loop never stalls behind another writer.
``offload=True`` sends every call to the database's own thread, for slow or networked disks.
The store (:mod:`pev.stores._sqlite`) and its experience half (:mod:`pev.stores._sqlite_lessons`)
run their statements through it: a write in a transaction of its own (:meth:`SQLiteDatabase.write`),
or appends issued together in one, a savepoint each (:meth:`SQLiteDatabase.together`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import re
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from pev import codec
from pev.errors import CodecError, SchemaVersionError, StoreError
from pev.ledger import SCHEMA_VERSION
from pev.stores._sqlite_file import (
    check_not_foreign,
    make_room,
    one_line,
    os_reason,
    unreadable,
)
from pev.stores._wakeups import watched

__all__ = ["RUNNABLE_TASKS", "Busy", "SQLiteDatabase", "query_rows"]

T = TypeVar("T")
log = logging.getLogger("pev.stores")

# How long a write that found the database locked pauses before it tries again: at first, and
# at most (the pause doubles in between).
_FIRST_RETRY_S = 0.0005
_LAST_RETRY_S = 0.01

# Tasks a worker may claim, unless another holds their lease: those that have not ended and do
# not wait for a person's approval (UNCLAIMABLE_PHASES). The condition of the pev_tasks_claimable
# index, which a claim's query spells out the same way so that SQLite uses it (a file opened
# without the index gets it then).
RUNNABLE_TASKS = "phase NOT IN ('awaiting_approval', 'cancelled', 'failed', 'partial', 'succeeded')"

# Marks a database file as a pev ledger (PRAGMA application_id): "pev1".
_APPLICATION_ID = 0x70657631

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pev_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pev_events (
    task_id   TEXT    NOT NULL,
    seq       INTEGER NOT NULL CHECK (seq >= 1),
    at        TEXT    NOT NULL,
    schema    INTEGER NOT NULL,
    kind      TEXT    NOT NULL,
    event     TEXT    NOT NULL,
    prev_hash TEXT    NOT NULL,
    hash      TEXT    NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS pev_events_no_update BEFORE UPDATE ON pev_events
BEGIN SELECT RAISE(ABORT, 'pev ledger events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS pev_events_no_delete BEFORE DELETE ON pev_events
BEGIN SELECT RAISE(ABORT, 'pev ledger events are append-only'); END;
CREATE TABLE IF NOT EXISTS pev_tasks (
    task_id         TEXT PRIMARY KEY,
    phase           TEXT    NOT NULL,
    status          TEXT,
    reason          TEXT,
    title           TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    event_count     INTEGER NOT NULL,
    head_hash       TEXT    NOT NULL,
    replan_deadline TEXT
);
CREATE INDEX IF NOT EXISTS pev_tasks_by_created ON pev_tasks (created_at DESC, task_id DESC);
CREATE INDEX IF NOT EXISTS pev_tasks_by_phase ON pev_tasks (phase, created_at DESC);
CREATE INDEX IF NOT EXISTS pev_tasks_waiting ON pev_tasks (replan_deadline)
    WHERE replan_deadline IS NOT NULL;
CREATE INDEX IF NOT EXISTS pev_tasks_claimable ON pev_tasks (created_at, task_id)
    WHERE phase NOT IN ('awaiting_approval', 'cancelled', 'failed', 'partial', 'succeeded');
CREATE TABLE IF NOT EXISTS pev_leases (
    task_id    TEXT PRIMARY KEY,
    owner      TEXT    NOT NULL,
    epoch      INTEGER NOT NULL CHECK (epoch >= 1),
    expires_at TEXT    NOT NULL
) WITHOUT ROWID;
"""

# Experience (docs/design.md §8): episodes, lessons, and which episodes support which lesson.
# These are derived data, not the ledger: a lesson row is replaced as its support grows. They are
# created with IF NOT EXISTS when any ledger is opened, so a file written before them gets them
# then; the event schema, and so SCHEMA_VERSION, is unchanged.
_EXPERIENCE_SCHEMA = """
CREATE TABLE IF NOT EXISTS pev_episodes (
    task_id TEXT PRIMARY KEY,
    episode TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pev_lesson_support (
    lesson_id TEXT NOT NULL,
    task_id   TEXT NOT NULL,
    PRIMARY KEY (lesson_id, task_id)
);
CREATE TABLE IF NOT EXISTS pev_lessons (
    id          TEXT PRIMARY KEY,
    status      TEXT    NOT NULL,
    independent INTEGER NOT NULL,
    support     INTEGER NOT NULL,
    terms       TEXT    NOT NULL,
    lesson      TEXT    NOT NULL
);
"""
# The full-text index of the lessons' search terms; its rowid is the lesson row's rowid.
_CREATE_FTS = "CREATE VIRTUAL TABLE IF NOT EXISTS pev_lessons_fts USING fts5(terms)"

# What files made by an older pev hold and this one drops when it opens them: the index of the
# tasks that have not ended, whose condition let claims take a task awaiting approval
# (pev_tasks_claimable replaces it).
_RETIRED_SCHEMA = """
DROP INDEX IF EXISTS pev_tasks_runnable;
"""

# Every table, index and trigger the schemas create, and those they drop: a file holding all of
# the first and none of the second needs no write to be opened.
_SCHEMA_OBJECTS = frozenset(
    re.findall(r"CREATE (?:TABLE|INDEX|TRIGGER) IF NOT EXISTS (\w+)", _SCHEMA + _EXPERIENCE_SCHEMA)
)
_RETIRED_OBJECTS = frozenset(
    re.findall(r"DROP (?:TABLE|INDEX|TRIGGER) IF EXISTS (\w+)", _RETIRED_SCHEMA)
)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.execute(query, (name,)).fetchone() is not None


class SQLiteDatabase:
    """A pev ledger file, opened (created, with its folder, if missing) and checked.

    Its arguments and errors are :class:`~pev.stores.SQLiteStore`'s, which opens it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        offload: bool = False,
    ) -> None:
        in_memory = str(path) == ":memory:"
        self._location = str(path) if in_memory else str(Path(path).expanduser())
        if not in_memory:
            make_room(self._location)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pev-sqlite")
        self._inline: sqlite3.Connection | None = None
        self._full_text = False
        self._inline_lock = threading.Lock()
        try:
            self._busy_timeout_s = busy_timeout_s
            self._conn = self._executor.submit(self._open, busy_timeout_s).result()
            if not (offload or in_memory):
                # No busy wait on the caller's thread: a locked database sends the call to the
                # store's thread instead.
                self._inline = self._connect(timeout_s=0.0)
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self._closed = False

    @property
    def location(self) -> str:
        """The database file's path."""
        return self._location

    def _connect(self, *, timeout_s: float) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._location, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the ledger {self._location} ({os_reason(self._location) or exc}); "
                "name a file you can read and write"
            ) from exc
        try:
            conn.execute("PRAGMA synchronous=FULL")  # the first statement reads the schema
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            conn.close()
            raise unreadable(self._location, exc) from exc
        return conn

    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        conn = self._connect(timeout_s=busy_timeout_s)
        try:
            self._prepare(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        try:
            # Checked before anything else: switching to WAL would change another app's file.
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id not in (0, _APPLICATION_ID):
                raise StoreError(
                    f"{self._location} is an SQLite database of another application "
                    f"(application_id {app_id:#x}); point pev at a new file"
                )
            if app_id == 0:
                check_not_foreign(conn, self._location)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            if app_id == _APPLICATION_ID and self._is_current(conn):
                # Nothing to create: opening reads only, so it never waits for another
                # process's write transaction (listing tasks works while a writer is busy).
                self._full_text = _has_table(conn, "pev_lessons_fts")
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_schema_version(conn)
                for statement in (_SCHEMA + _EXPERIENCE_SCHEMA + _RETIRED_SCHEMA).split(";\n"):
                    if statement.strip():
                        conn.execute(statement)
                self._full_text = self._prepare_fts(conn)
                conn.execute(
                    "INSERT OR IGNORE INTO pev_meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(f"cannot prepare the ledger {self._location}: {exc}") from exc
            raise unreadable(self._location, exc) from exc
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise unreadable(self._location, exc) from exc

    def _is_current(self, conn: sqlite3.Connection) -> bool:
        """Whether the file holds every table, index and trigger, none retired, at this version."""
        found = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'pev_%'")
        }
        if not found >= _SCHEMA_OBJECTS or found & _RETIRED_OBJECTS:
            return False
        self._check_schema_version(conn)
        if "pev_lessons_fts" not in found:
            # A file made where FTS5 was missing: this SQLite may have it, and then creating the
            # index is a write.
            return not conn.execute("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()[0]
        # Lessons written where FTS5 was missing leave the index behind: refill it (a write).
        count = "SELECT (SELECT count(*) FROM pev_lessons_fts) = (SELECT count(*) FROM pev_lessons)"
        try:
            return bool(conn.execute(count).fetchone()[0])
        except sqlite3.OperationalError:
            return False  # an FTS5 index this SQLite cannot read: the full open copes with it

    @staticmethod
    def _prepare_fts(conn: sqlite3.Connection) -> bool:
        """Create the lessons' FTS5 index (filling it if it lags); False without FTS5."""
        try:
            conn.execute(_CREATE_FTS)
            indexed = conn.execute("SELECT count(*) FROM pev_lessons_fts").fetchone()[0]
        except sqlite3.OperationalError:
            return False  # this SQLite was built without FTS5: search matches stored terms
        if indexed != conn.execute("SELECT count(*) FROM pev_lessons").fetchone()[0]:
            conn.execute("DELETE FROM pev_lessons_fts")
            conn.execute(
                "INSERT INTO pev_lessons_fts (rowid, terms) SELECT rowid, terms FROM pev_lessons"
            )
        return True

    @property
    def full_text(self) -> bool:
        """True when lesson search uses SQLite's FTS5 index (else a plain term match)."""
        return self._full_text

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection of the store's own thread (for tests that inspect the file)."""
        return self._conn

    def _check_schema_version(self, conn: sqlite3.Connection) -> None:
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pev_meta'"
        ).fetchone()
        if not has_meta:
            return
        row = conn.execute("SELECT value FROM pev_meta WHERE key = 'schema_version'").fetchone()
        try:
            found = int(row[0]) if row else 0
        except ValueError:
            raise StoreError(
                f"{self._location}: the ledger's schema_version {row[0]!r} is not a number; "
                "the file is damaged or not a pev ledger"
            ) from None
        if found != SCHEMA_VERSION:
            raise SchemaVersionError(location=self._location, found=found, expected=SCHEMA_VERSION)

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` inline when the database is free, else wait for it without blocking.

        A write that finds another process's write lock is tried again inline after a short
        pause (0.5 ms at first, doubling up to 10 ms, jittered), the event loop free meanwhile,
        until ``busy_timeout_s`` has passed. Waiting in SQLite's own busy handler instead would
        sleep on the store's one thread, up to 100 ms at a time, while every other call of this
        process queued behind it and the lock often stood free. Calls go to that thread only
        when offloaded, or when another thread is using the inline connection.
        """
        if self._closed:
            raise StoreError(f"the SQLite store {self._location} is closed")
        guarded = functools.partial(self._guarded, work)
        if self._inline is None:
            return await self._offloaded(guarded)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._busy_timeout_s
        pause = _FIRST_RETRY_S
        while True:
            if not self._inline_lock.acquire(blocking=False):
                return await self._offloaded(guarded)  # another thread is using it: wait there
            try:
                return guarded(self._inline)
            except Busy as exc:
                if loop.time() >= give_up:
                    raise self._locked(exc) from exc
            finally:
                self._inline_lock.release()
            await asyncio.sleep(pause * random.uniform(0.5, 1.5))  # noqa: S311 - jitter only
            pause = min(pause * 2, _LAST_RETRY_S)

    def _guarded(self, work: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
        """Run ``work``; what SQLite raises reading a damaged file becomes a StoreError."""
        try:
            return work(conn)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise Busy from exc
            raise unreadable(self._location, exc) from exc
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            # A text column whose bytes are not UTF-8, or a page SQLite finds malformed.
            raise unreadable(self._location, exc) from exc

    async def _offloaded(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` on the store's thread (its connection waits in SQLite's busy handler)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, work, self._conn
            )
        except Busy as exc:
            raise self._locked(exc) from exc

    def _locked(self, exc: Busy) -> StoreError:
        return StoreError(
            f"the ledger {self._location} stayed locked by another writer past the busy "
            f"timeout: {exc.__cause__}"
        )

    @contextlib.asynccontextmanager
    async def changes(self, every_s: float) -> AsyncIterator[asyncio.Event]:
        """While the block runs, an event set when another connection has committed.

        It reads ``PRAGMA data_version`` every ``every_s`` seconds: a read of one page of the
        file's header, which takes no lock and writes nothing, and changes whenever another
        connection (in this process or any other) commits.
        """
        # Read before the block runs: a commit made as soon as it starts is a change.
        seen = await self.run(_data_version)
        watch = functools.partial(self._watch, every_s=every_s, seen=seen)
        async with watched(watch, name="pev-sqlite-changes") as event:
            yield event

    async def _watch(self, event: asyncio.Event, *, every_s: float, seen: object) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                version = await self.run(_data_version)
            except StoreError as exc:  # the next look may succeed; waiters still poll meanwhile
                log.warning("watching %s for changes failed: %s", self._location, exc)
                continue
            if version != seen:
                seen = version
                event.set()

    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one write transaction (see :meth:`run` and :meth:`transaction`)."""
        return await self.run(lambda conn: self.transaction(conn, work))

    async def query(self, sql: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        """The rows of one statement."""
        return await self.run(lambda conn: query_rows(conn, sql, params))

    def decode(self, text: object, into: type[T], what: str) -> T:
        """``text`` decoded as ``into``; a StoreError naming ``what`` if it cannot be."""
        try:
            return codec.loads(str(text), into)
        except CodecError as exc:
            raise StoreError(f"{self._location}: {what} cannot be read: {exc}") from exc

    def transaction(self, conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one write transaction (``Busy`` when another writer holds the lock)."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise Busy from exc
        try:
            result = work(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"a write to {self._location} failed: {exc}") from exc
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return result

    async def together(
        self, works: Sequence[Callable[[sqlite3.Connection], T]]
    ) -> list[T | BaseException]:
        """Run ``works`` in one write transaction, each in a savepoint of its own; one outcome each.

        A work that raises is rolled back to its savepoint alone, and its outcome is its error
        (an SQLite error as the StoreError a write of its own would raise); the others are
        committed together, with one durable COMMIT. A lone work needs no savepoint: it is the
        transaction. The whole call raises, committing nothing, when the transaction itself
        fails: its BEGIN (``Busy`` when another writer holds the lock, which :meth:`run` waits
        out), its COMMIT, or a work's error that made SQLite roll the whole transaction back
        (a full disk, an I/O error).
        """
        return await self.run(functools.partial(self._together, works))

    def _together(
        self, works: Sequence[Callable[[sqlite3.Connection], T]], conn: sqlite3.Connection
    ) -> list[T | BaseException]:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise Busy from exc
        savepoints = len(works) > 1
        outcomes: list[T | BaseException] = []
        try:
            for work in works:
                if savepoints:
                    conn.execute("SAVEPOINT pev_append")
                try:
                    outcomes.append(work(conn))
                except Exception as exc:  # the work's own error, for its caller alone
                    failure = self._failure(exc)
                    if not conn.in_transaction:
                        raise failure from exc  # SQLite rolled back the works before it too
                    outcomes.append(failure)
                    if savepoints:
                        conn.execute("ROLLBACK TO pev_append")
                if savepoints:
                    conn.execute("RELEASE pev_append")
            if all(isinstance(outcome, BaseException) for outcome in outcomes):
                conn.execute("ROLLBACK")  # nothing to keep: no commit to wait for
            else:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._roll_back(conn)
            raise StoreError(f"a write to {self._location} failed: {exc}") from exc
        except BaseException:
            self._roll_back(conn)
            raise
        return outcomes

    def _failure(self, exc: Exception) -> Exception:
        """The error a work's caller gets: what a write of its own would have raised."""
        if isinstance(exc, sqlite3.Error):
            failure: Exception = StoreError(f"a write to {self._location} failed: {exc}")
        elif isinstance(exc, UnicodeDecodeError):
            failure = unreadable(self._location, exc)
        else:
            return exc
        failure.__cause__ = exc
        return failure

    @staticmethod
    def _roll_back(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:  # SQLite may have rolled back already (a full disk, say)
            conn.execute("ROLLBACK")

    async def close(self) -> None:
        """Close the database and its thread; the store is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        with self._inline_lock:
            if self._inline is not None:
                self._inline.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)


class Busy(Exception):  # noqa: N818 - a signal between the store's parts, not an error users see
    """The database is locked by another writer; the call may be retried elsewhere."""


def query_rows(
    conn: sqlite3.Connection, query: str, params: Sequence[object]
) -> list[tuple[object, ...]]:
    """The rows of ``query`` (``Busy`` when another writer holds the lock)."""
    try:
        return conn.execute(query, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise Busy from exc
        raise StoreError(f"query failed: {one_line(exc)}") from exc
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise StoreError(f"query failed, the ledger file is damaged: {one_line(exc)}") from exc


def _data_version(conn: sqlite3.Connection) -> object:
    """The connection's ``data_version``: it changes when another connection commits."""
    return query_rows(conn, "PRAGMA data_version", ())[0][0]
