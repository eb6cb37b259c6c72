"""The SQLite store: pev's embedded default ledger (docs/design.md §5.5).

One file, WAL journal, ``synchronous=FULL`` so each append is durable when it returns, and a
primary key on (task id, sequence) so that of two writers appending the same sequence number one
wins and the other gets :class:`~pev.errors.ConflictError`. Writers take SQLite's write lock with
``BEGIN IMMEDIATE``, which makes the store safe for several processes on one machine. Events are
append-only in the schema itself: triggers refuse any UPDATE or DELETE of an event row.

An uncontended call runs on the caller's thread: a durable commit costs about one disk flush
(0.1 to 1 ms on a local SSD), less than handing it to another thread and back. When another
process holds the write lock, the call moves to the store's own thread and waits there (up to
``busy_timeout_s``), so an event loop never stalls behind another writer. ``offload=True`` sends
every call to that thread, for slow or networked disks.

The same file keeps experience (docs/design.md §8, :class:`~pev.experience.LessonStore`):
episodes, lessons and their support, with an FTS5 full-text index over the lessons where this
SQLite has FTS5 (a term match over the stored search terms where it has not).
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pev import codec
from pev.errors import (
    CodecError,
    ConflictError,
    LedgerCorruptError,
    SchemaVersionError,
    StoreError,
    UnknownTaskError,
)
from pev.experience import Episode, Lesson, LessonStatus, lesson_terms, search_terms
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    GENESIS_HASH,
    SCHEMA_VERSION,
    TERMINAL_PHASES,
    Event,
    Lease,
    LedgerEntry,
    TaskPhase,
    TaskSummary,
    acquired,
    check_batch,
    fenced,
    released,
    renewed,
)
from pev.ledger._chain import entry_texts
from pev.model import TaskId
from pev.stores._memory import rank_by_terms

__all__ = ["SQLiteStore"]

T = TypeVar("T")

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
_UPSERT_LESSON = (
    "INSERT INTO pev_lessons (id, status, independent, support, terms, lesson) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "independent = excluded.independent, support = excluded.support, terms = excluded.terms, "
    "lesson = excluded.lesson RETURNING rowid"
)
# Active first, then most independent support: the order lessons are listed in.
_LESSON_ORDER = "(status = 'active') DESC, independent DESC, support DESC, id"

_INSERT_EVENT = (
    "INSERT INTO pev_events (task_id, seq, at, schema, kind, event, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_TASK = (
    "INSERT INTO pev_tasks (task_id, phase, status, reason, title, created_at, updated_at, "
    "event_count, head_hash, replan_deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (task_id) DO UPDATE SET phase = excluded.phase, status = excluded.status, "
    "reason = excluded.reason, title = excluded.title, updated_at = excluded.updated_at, "
    "event_count = excluded.event_count, head_hash = excluded.head_hash, "
    "replan_deadline = excluded.replan_deadline"
)
_SELECT_HEAD = (
    "SELECT event_count, head_hash, phase, status, reason, title, replan_deadline "
    "FROM pev_tasks WHERE task_id = ?"
)
_UPDATE_HEAD = (
    "UPDATE pev_tasks SET updated_at = ?, event_count = ?, head_hash = ? WHERE task_id = ?"
)
_SELECT_LEASE = "SELECT owner, epoch, expires_at FROM pev_leases WHERE task_id = ?"
_UPSERT_LEASE = (
    "INSERT INTO pev_leases (task_id, owner, epoch, expires_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
    "expires_at = excluded.expires_at"
)

# Runnable tasks, oldest first: not ended (a terminal phase each `?`), the lease free at `now`.
_ENDED = ", ".join("?" for _ in TERMINAL_PHASES)
_SELECT_CLAIMABLE = (
    "SELECT t.task_id, l.owner, l.epoch, l.expires_at FROM pev_tasks t "  # noqa: S608 - only ?s
    f"LEFT JOIN pev_leases l ON l.task_id = t.task_id WHERE t.phase NOT IN ({_ENDED}) "
    "AND (l.task_id IS NULL OR l.expires_at <= ?) ORDER BY t.created_at, t.task_id LIMIT ?"
)

# Every table, index and trigger the schemas create: a file holding them all needs no write to
# be opened.
_SCHEMA_OBJECTS = frozenset(
    re.findall(r"CREATE (?:TABLE|INDEX|TRIGGER) IF NOT EXISTS (\w+)", _SCHEMA + _EXPERIENCE_SCHEMA)
)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.execute(query, (name,)).fetchone() is not None


def _lease_of(conn: sqlite3.Connection, task_id: str) -> Lease | None:
    row = conn.execute(_SELECT_LEASE, (task_id,)).fetchone()
    if row is None:
        return None
    return Lease(
        task_id=TaskId(task_id),
        owner=str(row[0]),
        epoch=int(row[1]),
        expires_at=_parse_time(row[2]),
    )


def _keep_lease(conn: sqlite3.Connection, lease: Lease) -> None:
    conn.execute(
        _UPSERT_LEASE, (lease.task_id, lease.owner, lease.epoch, _time_key(lease.expires_at))
    )


def _listed(task_row: tuple[object, ...]) -> tuple[object, ...]:
    """The index row's columns that list and filter tasks: phase, status, reason, title, wait."""
    return (task_row[1], task_row[2], task_row[3], task_row[4], task_row[9])


def _head_of(task_row: tuple[object, ...]) -> tuple[object, ...]:
    """The index row's columns that every append moves: updated_at, event_count, head_hash."""
    return (task_row[6], task_row[7], task_row[8])


_SUMMARY_COLUMNS = (
    "task_id, phase, status, reason, title, created_at, updated_at, event_count, head_hash, "
    "replan_deadline"
)


def _time_key(value: datetime) -> str:
    """Fixed-width UTC text, so that times sort as strings."""
    utc = value if value.tzinfo is UTC else value.astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


class SQLiteStore:
    """A ledger in one SQLite file, safe for several processes on one machine.

    Args:
        path: The database file; created (with its folder) if missing. ``":memory:"`` gives a
            private in-memory database.
        busy_timeout_s: How long a writer waits for another process's write lock.
        offload: Run every database call on the store's thread, never on the caller's.

    Raises:
        SchemaVersionError: The file holds a pev ledger of another schema version.
        StoreError: The file is not a pev ledger, or cannot be opened.
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
            Path(self._location).parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pev-sqlite")
        self._inline: sqlite3.Connection | None = None
        self._full_text = False
        self._inline_lock = threading.Lock()
        try:
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
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the ledger {self._location}: {exc}") from exc
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
                for statement in (_SCHEMA + _EXPERIENCE_SCHEMA).split(";\n"):
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
        except sqlite3.Error as exc:
            raise StoreError(f"cannot prepare the ledger {self._location}: {exc}") from exc

    def _is_current(self, conn: sqlite3.Connection) -> bool:
        """Whether the file already holds every table, index and trigger, at this version."""
        found = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'pev_%'")
        }
        if not found >= _SCHEMA_OBJECTS:
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
    def full_text_search(self) -> bool:
        """True when lesson search uses SQLite's FTS5 index (else a plain term match)."""
        return self._full_text

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

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` inline when the database is free, else on the store's thread."""
        if self._closed:
            raise StoreError(f"the SQLite store {self._location} is closed")
        if self._inline is not None and self._inline_lock.acquire(blocking=False):
            try:
                return work(self._inline)
            except _Busy:
                pass  # another process holds the lock: wait for it off the caller's thread
            finally:
                self._inline_lock.release()
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, work, self._conn
            )
        except _Busy as exc:
            raise StoreError(
                f"the ledger {self._location} stayed locked by another writer past the busy "
                f"timeout: {exc.__cause__}"
            ) from exc

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append a batch and its index row in one durable transaction (fenced by ``fence``)."""
        # Entries the ledger just sealed bring the texts it hashed: no event is encoded twice.
        rows: list[tuple[object, ...]] = [
            (
                entry.task_id,
                entry.seq,
                at_text,
                entry.schema,
                entry.event.kind,
                text,
                entry.prev_hash,
                entry.hash,
            )
            for entry, (at_text, text) in zip(entries, entry_texts(entries), strict=True)
        ]
        task_row = (
            summary.task_id,
            str(summary.phase),
            summary.status.value if summary.status else None,
            summary.reason.value if summary.reason else None,
            summary.title,
            _time_key(summary.created_at),
            _time_key(summary.updated_at),
            summary.event_count,
            summary.head_hash,
            _time_key(summary.replan_deadline) if summary.replan_deadline else None,
        )

        def work(conn: sqlite3.Connection) -> None:
            task_id = entries[0].task_id if entries else ""
            head = conn.execute(_SELECT_HEAD, (task_id,)).fetchone()
            first = None
            if fence is not None:
                first = fenced(_lease_of(conn, task_id), fence, new_task=head is None)
            head_seq, head_hash = (int(head[0]), str(head[1])) if head else (0, GENESIS_HASH)
            check_batch(entries, summary, head_seq=head_seq, head_hash=head_hash)
            try:
                if len(rows) == 1:
                    conn.execute(_INSERT_EVENT, rows[0])
                else:
                    conn.executemany(_INSERT_EVENT, rows)
            except sqlite3.IntegrityError as exc:
                raise ConflictError(task_id, entries[0].seq) from exc
            if head is not None and tuple(head[2:]) == _listed(task_row):
                # Most appends change only the head: updating just those columns leaves the
                # row's indexes alone, which keeps the commit as small as the event itself.
                conn.execute(_UPDATE_HEAD, (*_head_of(task_row), task_id))
            else:
                conn.execute(_UPSERT_TASK, task_row)
            if first is not None:
                _keep_lease(conn, first)

        await self._run(lambda conn: self._transaction(conn, work))

    async def acquire_lease(
        self, task_id: str, owner: str, *, now: datetime, lease_s: float
    ) -> Lease:
        """Take the task's lease for ``owner``, in one immediate transaction."""

        def work(conn: sqlite3.Connection) -> Lease:
            if (
                conn.execute("SELECT 1 FROM pev_tasks WHERE task_id = ?", (task_id,)).fetchone()
                is None
            ):
                raise UnknownTaskError(task_id)
            lease = acquired(_lease_of(conn, task_id), task_id, owner, now=now, lease_s=lease_s)
            _keep_lease(conn, lease)
            return lease

        return await self._run(lambda conn: self._transaction(conn, work))

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        """Take the leases of up to ``limit`` runnable tasks, oldest first, in one transaction."""
        if limit <= 0:
            return ()
        ended = sorted(str(phase) for phase in TERMINAL_PHASES)

        def work(conn: sqlite3.Connection) -> tuple[Lease, ...]:
            # BEGIN IMMEDIATE holds the write lock from the read on: nobody claims in between.
            rows = conn.execute(_SELECT_CLAIMABLE, (*ended, _time_key(now), limit)).fetchall()
            taken: list[Lease] = []
            for task_id, lease_owner, epoch, expires_at in rows:
                current = (
                    None
                    if lease_owner is None
                    else Lease(
                        task_id=TaskId(str(task_id)),
                        owner=str(lease_owner),
                        epoch=int(epoch),
                        expires_at=_parse_time(str(expires_at)),
                    )
                )
                lease = acquired(current, str(task_id), owner, now=now, lease_s=lease_s)
                _keep_lease(conn, lease)
                taken.append(lease)
            return tuple(taken)

        return await self._run(lambda conn: self._transaction(conn, work))

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Extend the lease while it is the task's current one, in one transaction."""

        def work(conn: sqlite3.Connection) -> Lease:
            longer = renewed(_lease_of(conn, lease.task_id), lease, now=now, lease_s=lease_s)
            _keep_lease(conn, longer)
            return longer

        return await self._run(lambda conn: self._transaction(conn, work))

    async def release_lease(self, lease: Lease, *, now: datetime) -> None:
        """Free the lease from ``now``, unless it was taken over."""

        def work(conn: sqlite3.Connection) -> None:
            freed = released(_lease_of(conn, lease.task_id), lease, now=now)
            if freed is not None:
                _keep_lease(conn, freed)

        await self._run(lambda conn: self._transaction(conn, work))

    async def lease(self, task_id: str) -> Lease | None:
        """The task's current lease, or ``None``."""
        return await self._run(lambda conn: _lease_of(conn, task_id))

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries after ``after``, decoded; a row that cannot be read is named."""
        rows = await self._run(lambda conn: self._read_rows(conn, task_id, after))
        return tuple(self._decode_row(task_id, row) for row in rows)

    def _read_rows(
        self, conn: sqlite3.Connection, task_id: str, after: int
    ) -> list[tuple[object, ...]]:
        rows = _query(
            conn,
            "SELECT seq, at, schema, event, prev_hash, hash FROM pev_events "
            "WHERE task_id = ? AND seq > ? ORDER BY seq",
            (task_id, after),
        )
        if not rows and (
            after <= 0
            or not _query(conn, "SELECT 1 FROM pev_events WHERE task_id = ? LIMIT 1", (task_id,))
        ):
            raise UnknownTaskError(task_id)
        return rows

    def _decode_row(self, task_id: str, row: tuple[object, ...]) -> LedgerEntry:
        seq, at, schema, event, prev_hash, hash_ = row
        if not isinstance(seq, int):
            raise LedgerCorruptError(
                f"task {task_id}: a stored event has sequence {seq!r}", task_id=task_id, seq=0
            )
        if schema != SCHEMA_VERSION:
            raise SchemaVersionError(
                location=f"{self._location} (task {task_id}, event {seq})",
                found=int(schema) if isinstance(schema, int) else 0,
                expected=SCHEMA_VERSION,
            )
        try:
            return LedgerEntry(
                task_id=TaskId(task_id),
                seq=seq,
                at=codec.loads(str(at), datetime),
                schema=SCHEMA_VERSION,
                event=codec.loads(str(event), Event),
                prev_hash=str(prev_hash),
                hash=str(hash_),
            )
        except CodecError as exc:
            raise LedgerCorruptError(
                f"task {task_id}: event {seq} cannot be read: {exc}", task_id=task_id, seq=seq
            ) from exc

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None``."""
        query = f"SELECT {_SUMMARY_COLUMNS} FROM pev_tasks WHERE task_id = ?"  # noqa: S608 - fixed column list
        rows = await self._run(lambda conn: _query(conn, query, (task_id,)))
        return _summary_from_row(rows[0]) if rows else None

    async def list_tasks(
        self,
        *,
        phases: Collection[TaskPhase] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[TaskSummary, ...]:
        """Index rows, newest first, optionally only those in ``phases``."""
        query = f"SELECT {_SUMMARY_COLUMNS} FROM pev_tasks"  # noqa: S608 - fixed column list
        params: list[object] = []
        if phases is not None:
            wanted = sorted(str(phase) for phase in phases)
            query += f" WHERE phase IN ({', '.join('?' for _ in wanted)})"
            params.extend(wanted)
        query += " ORDER BY created_at DESC, task_id DESC LIMIT ? OFFSET ?"
        params.extend([limit, offset])
        rows = await self._run(lambda conn: _query(conn, query, params))
        return tuple(_summary_from_row(row) for row in rows)

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting for a replan whose deadline is at or before ``now``, earliest first."""
        query = (
            "SELECT task_id FROM pev_tasks WHERE replan_deadline IS NOT NULL "
            "AND replan_deadline <= ? ORDER BY replan_deadline"
        )
        rows = await self._run(lambda conn: _query(conn, query, (_time_key(now),)))
        return tuple(TaskId(str(row[0])) for row in rows)

    async def save_episode(self, episode: Episode, *, supports: Collection[str] = ()) -> None:
        """Keep an episode once, with the lessons it supports, in one transaction."""
        row = (episode.task_id, codec.dumps(episode))
        links = [(lesson_id, episode.task_id) for lesson_id in dict.fromkeys(supports)]

        def work(conn: sqlite3.Connection) -> None:
            saved = conn.execute(
                "INSERT INTO pev_episodes (task_id, episode) VALUES (?, ?) "
                "ON CONFLICT (task_id) DO NOTHING",
                row,
            )
            if saved.rowcount and links:
                conn.executemany(
                    "INSERT OR IGNORE INTO pev_lesson_support (lesson_id, task_id) VALUES (?, ?)",
                    links,
                )

        await self._run(lambda conn: self._transaction(conn, work))

    async def episode(self, task_id: str) -> Episode | None:
        """The episode of a task, or ``None``."""
        query = "SELECT episode FROM pev_episodes WHERE task_id = ?"
        rows = await self._run(lambda conn: _query(conn, query, (task_id,)))
        return self._decode(rows[0][0], Episode, f"episode {task_id}") if rows else None

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes supporting a lesson, in save order."""
        query = (
            "SELECT e.task_id, e.episode FROM pev_lesson_support s "
            "JOIN pev_episodes e ON e.task_id = s.task_id WHERE s.lesson_id = ? ORDER BY s.rowid"
        )
        rows = await self._run(lambda conn: _query(conn, query, (lesson_id,)))
        return tuple(self._decode(text, Episode, f"episode {task}") for task, text in rows)

    async def save_lesson(self, lesson: Lesson) -> None:
        """Insert or replace a lesson by id, and its full-text entry."""
        terms = " ".join(lesson_terms(lesson))
        row = (
            lesson.id,
            str(lesson.status),
            lesson.independent,
            len(lesson.support),
            terms,
            codec.dumps(lesson),
        )

        def work(conn: sqlite3.Connection) -> None:
            rowid = conn.execute(_UPSERT_LESSON, row).fetchone()[0]
            if self._full_text:
                conn.execute("DELETE FROM pev_lessons_fts WHERE rowid = ?", (rowid,))
                conn.execute(
                    "INSERT INTO pev_lessons_fts (rowid, terms) VALUES (?, ?)", (rowid, terms)
                )

        await self._run(lambda conn: self._transaction(conn, work))

    async def lesson(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        query = "SELECT id, lesson FROM pev_lessons WHERE id = ?"
        rows = await self._run(lambda conn: _query(conn, query, (lesson_id,)))
        return self._lessons_of(rows)[0] if rows else None

    async def lessons(self, *, status: LessonStatus | None = None) -> tuple[Lesson, ...]:
        """Every lesson (or those with ``status``), most independent support first."""
        query = "SELECT id, lesson FROM pev_lessons WHERE (? IS NULL OR status = ?) "
        query += f"ORDER BY {_LESSON_ORDER}"
        wanted = str(status) if status is not None else None
        rows = await self._run(lambda conn: _query(conn, query, (wanted, wanted)))
        return self._lessons_of(rows)

    async def search_lessons(
        self, query: str, *, limit: int = 5, status: LessonStatus | None = None
    ) -> tuple[Lesson, ...]:
        """Lessons holding any of the query's terms, by FTS5 rank (bm25), then support."""
        terms = search_terms(query)
        if not terms:
            return ()
        wanted = str(status) if status is not None else None
        if self._full_text:
            # Each term is letters and digits only (search_terms), quoted as an FTS5 string.
            match = " OR ".join(f'"{term}"' for term in terms)
            sql = (
                "SELECT l.id, l.lesson FROM pev_lessons_fts f "
                "JOIN pev_lessons l ON l.rowid = f.rowid "
                "WHERE pev_lessons_fts MATCH ? AND (? IS NULL OR l.status = ?) "
                "ORDER BY bm25(pev_lessons_fts), l.independent DESC, l.id LIMIT ?"
            )
            rows = await self._run(lambda conn: _query(conn, sql, (match, wanted, wanted, limit)))
            return self._lessons_of(rows)
        # Without FTS5: LIKE finds the rows holding a term, and the exact terms rank them.
        like = " OR ".join("terms LIKE ?" for _ in terms)
        sql = (
            f"SELECT id, lesson FROM pev_lessons WHERE ({like}) "  # noqa: S608 - placeholders only
            f"AND (? IS NULL OR status = ?) ORDER BY {_LESSON_ORDER}"
        )
        params = [f"%{term}%" for term in terms] + [wanted, wanted]
        rows = await self._run(lambda conn: _query(conn, sql, params))
        return rank_by_terms(self._lessons_of(rows), terms, limit=limit)

    def _lessons_of(self, rows: Sequence[tuple[object, ...]]) -> tuple[Lesson, ...]:
        return tuple(self._decode(text, Lesson, f"lesson {lesson_id}") for lesson_id, text in rows)

    def _decode(self, text: object, into: type[T], what: str) -> T:
        try:
            return codec.loads(str(text), into)
        except CodecError as exc:
            raise StoreError(f"{self._location}: {what} cannot be read: {exc}") from exc

    def _transaction(self, conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one write transaction (``_Busy`` when another writer holds the lock)."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _Busy from exc
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


class _Busy(Exception):  # noqa: N818 - a private signal, not an error users see
    """The database is locked by another writer; the call may be retried elsewhere."""


def _query(
    conn: sqlite3.Connection, query: str, params: Sequence[object]
) -> list[tuple[object, ...]]:
    try:
        return conn.execute(query, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise _Busy from exc
        raise StoreError(f"query failed: {exc}") from exc


def _summary_from_row(row: tuple[object, ...]) -> TaskSummary:
    (task_id, phase, status, reason, title, created, updated, count, head, deadline) = row
    return TaskSummary(
        task_id=TaskId(str(task_id)),
        phase=TaskPhase(str(phase)),
        status=TaskStatus(str(status)) if status is not None else None,
        reason=TerminalReason(str(reason)) if reason is not None else None,
        title=str(title),
        created_at=_parse_time(str(created)),
        updated_at=_parse_time(str(updated)),
        event_count=int(str(count)),
        head_hash=str(head),
        replan_deadline=_parse_time(str(deadline)) if deadline is not None else None,
    )
