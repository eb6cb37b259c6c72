"""One SQLite file holding pev ledgers: its connections, its schema, its transactions.

:class:`SQLiteDatabase` opens (and if need be creates) the file: WAL journal, ``synchronous=FULL``
so each commit is durable when it returns, the tables of the ledger, the leases and experience,
and a version check. An uncontended call runs on the caller's thread: a durable commit costs about
one disk flush (0.1 to 1 ms on a local SSD), less than handing it to another thread and back.
When another process holds the write lock, the call pauses without blocking the event loop and
tries again (up to ``busy_timeout_s``), so a loop never stalls behind another writer; a lock held
past that is :class:`~pev.errors.StoreUnavailable` (try again later), never damage. Opening is
safe from many processes at once: what meets another opener's lock (switching to WAL, creating
the schema, checking its version) is tried again within ``busy_timeout_s``, and creating the
schema twice changes nothing.
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
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from pev import codec
from pev.errors import CodecError, SchemaVersionError, StoreError, StoreUnavailable, UsageError
from pev.ledger import SCHEMA_VERSION
from pev.stores._sqlite_file import (
    check_ledger_path,
    check_not_foreign,
    make_room,
    one_line,
    os_reason,
    unreadable,
    why_not_there,
)
from pev.stores._wakeups import watched

__all__ = ["RUNNABLE_TASKS", "Busy", "SQLiteDatabase", "is_busy", "query_rows"]

T = TypeVar("T")
log = logging.getLogger("pev.stores")

# How long a write that found the database locked pauses before it tries again: at first, and
# at most (the pause doubles in between).
_FIRST_RETRY_S = 0.0005
_LAST_RETRY_S = 0.01
# The same for opening, which runs once per store: the pause grows to a little more, since the
# lock it waits for (another opener creating the schema) is held for a disk flush or two.
_LAST_OPEN_RETRY_S = 0.05

# SQLite's primary result codes for a lock it could not take (SQLITE_BUSY, SQLITE_LOCKED); an
# extended code (SQLITE_BUSY_RECOVERY, say) holds one in its low byte.
_LOCK_CODES = frozenset({5, 6})

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
        create: bool = True,
    ) -> None:
        in_memory = str(path) == ":memory:"
        self._location = str(path) if in_memory else str(Path(path).expanduser())
        # Without create, SQLite is told to open the file read-write only (never to make it), so
        # that a file removed between the check and the open is not made either.
        self._uri: str | None = None
        if not in_memory:
            if create:
                make_room(self._location)
            else:
                self._uri = _existing(self._location)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pev-sqlite")
        self._inline: sqlite3.Connection | None = None
        self._full_text = False
        self._inline_lock = threading.Lock()
        try:
            self._busy_timeout_s = busy_timeout_s
            self._conn = self._executor.submit(self._open, busy_timeout_s).result()
            if not (offload or in_memory):
                # No busy wait on the caller's thread: a locked database sends the call to the
                # store's thread instead. Its first read of the schema may still meet another
                # opener's lock: tried again like the opening itself.
                self._inline = self._retrying(
                    functools.partial(self._connect, timeout_s=0.0), busy_timeout_s
                )
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self._closed = False

    @property
    def location(self) -> str:
        """The database file's path."""
        return self._location

    def _connect(self, *, timeout_s: float) -> sqlite3.Connection:
        """A new connection, its first read of the schema done (``Busy`` if a lock stops it)."""
        try:
            conn = sqlite3.connect(
                self._uri or self._location,
                timeout=timeout_s,
                isolation_level=None,
                check_same_thread=False,
                uri=self._uri is not None,
            )
        except sqlite3.Error as exc:
            # A read-only opening of a path with no file (a link to nothing too) names no ledger.
            if self._uri is not None and not os.path.exists(self._location):
                raise _no_ledger(self._location) from exc
            raise StoreError(
                f"cannot open the ledger {self._location} ({os_reason(self._location) or exc}); "
                "name a file you can read and write"
            ) from exc
        try:
            conn.execute("PRAGMA synchronous=FULL")  # the first statement reads the schema
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            conn.close()
            if is_busy(exc):
                raise Busy from exc
            raise unreadable(self._location, exc) from exc
        return conn

    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        return self._retrying(functools.partial(self._open_once, busy_timeout_s), busy_timeout_s)

    def _open_once(self, busy_timeout_s: float) -> sqlite3.Connection:
        conn = self._connect(timeout_s=busy_timeout_s)
        try:
            self._prepare(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _retrying(self, open_: Callable[[], T], busy_timeout_s: float) -> T:
        """``open_()``, tried again while another opener's lock stops it, up to the busy timeout.

        SQLite's busy handler does not cover every lock an opener meets: switching a new file
        to WAL, for one, fails at once while another connection is doing the same. Every step
        of opening is safe to repeat (the schema is created with IF NOT EXISTS, in one immediate
        transaction), so the whole of it is repeated after a short pause.

        Raises:
            StoreUnavailable: The file stayed locked past ``busy_timeout_s``.
        """
        give_up = time.monotonic() + busy_timeout_s
        pause = _FIRST_RETRY_S
        while True:
            try:
                return open_()
            except Busy as exc:
                if time.monotonic() >= give_up:
                    raise StoreUnavailable(
                        f"cannot open the ledger {self._location}: another process kept it "
                        f"locked past the busy timeout ({busy_timeout_s:g} s): {exc.__cause__}; "
                        "try again, or give a longer busy_timeout_s",
                        location=self._location,
                        operation="connect",
                    ) from exc
            time.sleep(pause * random.uniform(0.5, 1.5))  # noqa: S311 - jitter only
            pause = min(pause * 2, _LAST_OPEN_RETRY_S)

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
                if self._uri is not None and not _has_table(conn, "pev_events"):
                    # An empty file: opening it only to read must not make it a ledger.
                    raise _no_ledger(self._location, why="an empty file, no ledger yet")
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
                self._roll_back(conn)
                raise
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if is_busy(exc):
                raise Busy from exc  # another opener's lock: the whole opening is tried again
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

    async def run(self, work: Callable[[sqlite3.Connection], T], *, operation: str = "read") -> T:
        """Run ``work`` inline when the database is free, else wait for it without blocking.

        A write that finds another process's write lock is tried again inline after a short
        pause (0.5 ms at first, doubling up to 10 ms, jittered), the event loop free meanwhile,
        until ``busy_timeout_s`` has passed. Waiting in SQLite's own busy handler instead would
        sleep on the store's one thread, up to 100 ms at a time, while every other call of this
        process queued behind it and the lock often stood free. Calls go to that thread only
        when offloaded, or when another thread is using the inline connection.

        Raises:
            StoreUnavailable: The database stayed locked past ``busy_timeout_s``; its
                ``operation`` is ``operation`` (what ``work`` does: ``"read"``, ``"write"``,
                ``"lease"``).
        """
        if self._closed:
            raise StoreError(f"the SQLite store {self._location} is closed")
        guarded = functools.partial(self._guarded, work)
        if self._inline is None:
            return await self._offloaded(guarded, operation)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._busy_timeout_s
        pause = _FIRST_RETRY_S
        while True:
            if not self._inline_lock.acquire(blocking=False):
                # Another thread is using it: wait there.
                return await self._offloaded(guarded, operation)
            try:
                return guarded(self._inline)
            except Busy as exc:
                if loop.time() >= give_up:
                    raise self._locked(exc, operation) from exc
            finally:
                self._inline_lock.release()
            await asyncio.sleep(pause * random.uniform(0.5, 1.5))  # noqa: S311 - jitter only
            pause = min(pause * 2, _LAST_RETRY_S)

    def _guarded(self, work: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
        """Run ``work``; what SQLite raises reading a damaged file becomes a StoreError."""
        try:
            return work(conn)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if is_busy(exc):
                raise Busy from exc
            # A text column whose bytes are not UTF-8, or a page SQLite finds malformed.
            raise unreadable(self._location, exc) from exc

    async def _offloaded(self, work: Callable[[sqlite3.Connection], T], operation: str) -> T:
        """Run ``work`` on the store's thread (its connection waits in SQLite's busy handler)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, work, self._conn
            )
        except Busy as exc:
            raise self._locked(exc, operation) from exc

    def _locked(self, exc: Busy, operation: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"the ledger {self._location} stayed locked by another writer past the busy "
            f"timeout ({self._busy_timeout_s:g} s): {exc.__cause__}; try again",
            location=self._location,
            operation=operation,
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

    async def write(
        self, work: Callable[[sqlite3.Connection], T], *, operation: str = "write"
    ) -> T:
        """Run ``work`` in one write transaction (see :meth:`run` and :meth:`transaction`)."""
        return await self.run(lambda conn: self.transaction(conn, work), operation=operation)

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
        """Run ``work`` in one write transaction (``Busy`` when another writer holds the lock).

        A lock met inside it (a busy COMMIT) rolls it back and is ``Busy`` too: nothing was
        written, so :meth:`run` may try the whole transaction again.
        """
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise Busy from exc
        try:
            result = work(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._roll_back(conn)
            if is_busy(exc):
                raise Busy from exc
            raise StoreError(f"a write to {self._location} failed: {exc}") from exc
        except BaseException:
            self._roll_back(conn)
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
        (a full disk, an I/O error), or a lock met inside it (``Busy`` again: it is rolled back
        and tried again whole, then :class:`~pev.errors.StoreUnavailable` past the timeout).
        """
        return await self.run(functools.partial(self._together, works), operation="write")

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
                    if is_busy(exc):
                        raise  # the whole transaction is rolled back and tried again
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
            if is_busy(exc):
                raise Busy from exc
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


def is_busy(exc: BaseException) -> bool:
    """Whether SQLite raised ``exc`` because a lock was held (busy or locked): worth a retry.

    Only that: a disk I/O error, a full disk or a damaged page is not, even when a retry might
    clear it, and stays a :class:`~pev.errors.StoreError`.
    """
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _LOCK_CODES
    message = str(exc)
    return any(
        f"database {what}is locked" in message for what in ("", "table ", "schema ")
    ) or message.startswith("database is busy")


def _existing(location: str) -> str:
    """The URI that opens the ledger file at ``location`` without creating it.

    Raises:
        StoreError: The path cannot name a ledger file (as when creating one: a NUL, a folder,
            a device, a pipe or a socket).
        UsageError: No file is there (its folder missing or a regular file, say).
    """
    check_ledger_path(location)
    try:
        os.lstat(location)
    except FileNotFoundError:
        raise _no_ledger(location) from None
    except PermissionError as exc:
        raise UsageError(
            f"cannot reach {location} ({exc.strerror}: a folder on its path may not be "
            "searched); check the path and its folders' permissions"
        ) from None
    except OSError as exc:
        raise _no_ledger(location, why=why_not_there(location, exc)) from None
    uri = Path(location).absolute().as_uri()
    return f"{uri}?mode=rw"


def _no_ledger(location: str, *, why: str | None = None) -> UsageError:
    if why is not None:  # nothing can be there either: running a task would not make one
        return UsageError(f"no pev ledger at {location} ({why}); check the path (--db, PEV_DB)")
    return UsageError(
        f"no pev ledger at {location}; check the path (--db, PEV_DB), or run or submit a task "
        "to create one there"
    )


def query_rows(
    conn: sqlite3.Connection, query: str, params: Sequence[object]
) -> list[tuple[object, ...]]:
    """The rows of ``query`` (``Busy`` when another writer holds the lock)."""
    try:
        return conn.execute(query, params).fetchall()
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise Busy from exc
        raise StoreError(f"query failed: {one_line(exc)}") from exc
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise StoreError(f"query failed, the ledger file is damaged: {one_line(exc)}") from exc


def _data_version(conn: sqlite3.Connection) -> object:
    """The connection's ``data_version``: it changes when another connection commits."""
    return query_rows(conn, "PRAGMA data_version", ())[0][0]
