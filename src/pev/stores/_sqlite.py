"""The SQLite store: pev's embedded default ledger (docs/design.md §5.5).

One file (:mod:`pev.stores._sqlite_db`: WAL, every append durable when it returns, safe for
several processes on one machine; appends issued together share one commit, each in a savepoint
of its own: :mod:`pev.stores._group`), with a primary key on (task id, sequence) so that of two
writers appending the same sequence number one wins and the other gets
:class:`~pev.errors.ConflictError`. Writers take SQLite's write lock with ``BEGIN IMMEDIATE``;
events are append-only in the schema itself: triggers refuse any UPDATE or DELETE of an event
row. Leases are kept beside the ledgers, and claims take them in one immediate transaction.

The same file keeps experience (docs/design.md §8, :mod:`pev.stores._sqlite_lessons`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from pev.errors import (
    ConflictError,
    UnknownTaskError,
)
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    GENESIS_HASH,
    Lease,
    LedgerEntry,
    RawEntry,
    TaskPhase,
    TaskSummary,
    acquired,
    check_batch,
    fenced,
    released,
    renewed,
)
from pev.ledger._chain import entry_texts
from pev.ledger._store import decode_entry
from pev.ledger._watch import TaskMark, WatchedStore
from pev.model import TaskId
from pev.stores._follow import Followers
from pev.stores._group import GroupCommit
from pev.stores._sqlite_db import RUNNABLE_TASKS, SQLiteDatabase, query_rows
from pev.stores._sqlite_lessons import SQLiteLessons
from pev.stores._wakeups import TaskSignals, Waiters, wakes_workers

__all__ = ["SQLiteStore"]

T = TypeVar("T")

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
# An event row's columns, as read back.
_COLUMNS = "seq, at, schema, event, prev_hash, hash"
# The same, texts as their bytes: a text column holding bytes that are not UTF-8 is still read.
_RAW_COLUMNS = (
    "seq, CAST(at AS BLOB), schema, CAST(event AS BLOB), CAST(prev_hash AS BLOB), "
    "CAST(hash AS BLOB)"
)


_SELECT_LEASE = "SELECT owner, epoch, expires_at FROM pev_leases WHERE task_id = ?"
_UPSERT_LEASE = (
    "INSERT INTO pev_leases (task_id, owner, epoch, expires_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
    "expires_at = excluded.expires_at"
)

# The phase and lease of the tasks a watch follows: their ids as one JSON array, so that one
# statement serves any number of them, each found through the primary keys.
_SELECT_MARKS = (
    "SELECT t.task_id, t.phase, l.owner, l.epoch FROM json_each(?) AS ids "
    "JOIN pev_tasks t ON t.task_id = ids.value LEFT JOIN pev_leases l ON l.task_id = t.task_id"
)

# How often a waiting worker's store looks for another connection's commits.
_WATCH_S = 0.05
# How often the followers' watch looks for another connection's commits (one header read, no
# lock: while anyone follows, a hundred a second cost the store's thread next to nothing).
_FOLLOW_WATCH_S = 0.01
# How often a follower reads a task's ledger anyway, should the watch fail.
_FOLLOW_POLL_S = 1.0

# The most appends one commit holds: a burst of thousands is committed a few hundred at a time,
# so that no transaction (nor the write lock other processes wait for) grows without bound.
_GROUP_LIMIT = 256

# Runnable tasks, oldest first: not ended nor awaiting approval (through the claimable-tasks
# index), lease free at `now`.
_SELECT_CLAIMABLE = (
    "SELECT t.task_id, l.owner, l.epoch, l.expires_at FROM pev_tasks t "  # noqa: S608 - constants
    f"LEFT JOIN pev_leases l ON l.task_id = t.task_id WHERE t.{RUNNABLE_TASKS} "
    "AND (l.task_id IS NULL OR l.expires_at <= ?) ORDER BY t.created_at, t.task_id LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class _Append:
    """An append waiting for its group's commit, and whom to tell once it is committed."""

    task_id: str
    work: Callable[[sqlite3.Connection], None]
    wakes: bool  # written by no driver, it leaves its task claimable: idle workers may take it


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
    """A time :func:`_time_key` wrote.

    Read with ``fromisoformat``: a fenced append reads one, and ``strptime`` costs tens of
    times as much.
    """
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is not UTC or not text.endswith("Z"):
        raise ValueError(f"{text!r} is not a time as the ledger writes them")
    return parsed


class SQLiteStore(SQLiteLessons, WatchedStore):
    """A ledger in one SQLite file, safe for several processes on one machine.

    Many processes may open (and create) the same file at once: what meets another opener's
    lock is tried again within ``busy_timeout_s``. A read, an append or a lease change that
    finds the file locked past ``busy_timeout_s`` raises
    :class:`~pev.errors.StoreUnavailable` (``operation`` ``"read"``, ``"write"`` or
    ``"lease"``): nothing is wrong with the file, and the call may be tried again.

    Args:
        path: The database file; created (with its folder) if missing, unless ``create`` is
            False. ``":memory:"`` gives a private in-memory database.
        busy_timeout_s: How long a call (and opening the file) waits for another process's
            lock.
        offload: Run every database call on the store's thread, never on the caller's.
        create: Create the file (and its folder) if it is missing. With ``False``, a missing
            file is a :class:`~pev.errors.UsageError` and nothing is created: for commands
            that only read a ledger.

    Raises:
        SchemaVersionError: The file holds a pev ledger of another schema version.
        StoreUnavailable: Another process kept the file locked past ``busy_timeout_s`` while
            it was opened (``operation`` ``"connect"``).
        StoreError: The file is not a pev ledger, or cannot be opened.
        UsageError: ``create`` is False and no file is at ``path``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        offload: bool = False,
        create: bool = True,
    ) -> None:
        super().__init__(
            SQLiteDatabase(path, busy_timeout_s=busy_timeout_s, offload=offload, create=create)
        )
        WatchedStore.__init__(self)
        self._appends: GroupCommit[_Append, None] = GroupCommit(
            self._commit_appends, limit=_GROUP_LIMIT
        )
        self._followers = Followers(self._watch_file, name="pev-sqlite-follow")
        self._waiters = Waiters()

    @property
    def location(self) -> str:
        """The database file's path."""
        return self._db.location

    @property
    def full_text_search(self) -> bool:
        """True when lesson search uses SQLite's FTS5 index (else a plain term match)."""
        return self._db.full_text

    def wakeups(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set when a task may have become runnable (see :class:`pev.ledger.Wakeups`).

        No process can signal another through an SQLite file, so this watches the file itself:
        the event is set whenever another connection has committed (``PRAGMA data_version``,
        read every 50 ms without taking a lock), which covers every new task, approval,
        rejection, cancel and lease released by another process, and more (each commit of a
        busy fleet). An idle worker so finds a new task within about 50 ms, at the cost of a few
        reads a second. A connection does not see its own commits change ``data_version``, so
        this store's own appends that leave a task claimable without a driver (a task
        submitted, approved, rejected or cancelled through it) set the event directly.
        """
        return self._woken()

    @contextlib.asynccontextmanager
    async def _woken(self) -> AsyncIterator[asyncio.Event]:
        async with self._db.changes(_WATCH_S) as changed, self._waiters.watch(changed):
            yield changed

    @property
    def follow_poll_s(self) -> float:
        """How often a follower reads anyway: every second.

        This store tells followers of its own appends at once, and of other connections' (other
        processes') within about 10 ms, by watching the file (:meth:`appended`): the reads are
        a safety net.
        """
        return _FOLLOW_POLL_S

    def appended(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set once an append to ``task_id`` commits (see :class:`pev.ledger.Appends`).

        Set by the appends of this store object, from any thread, once their group's commit has
        succeeded. Another process's commit cannot signal this one, so while anyone follows a
        task, one watch per event loop reads the file's ``PRAGMA data_version`` every 10 ms
        (without a lock) and, once another connection has committed, sets the events of every
        follower: each then reads its task's new entries, if any.
        """
        return self._followers.follow(task_id)

    async def _watch_file(self, signals: TaskSignals) -> None:
        """Tell every follower to read once another connection committed, until cancelled."""
        async with self._db.changes(_FOLLOW_WATCH_S) as changed:
            while True:
                await changed.wait()
                changed.clear()
                signals.signal_all()

    async def close(self) -> None:
        """Close the database and its thread; the store is unusable afterwards."""
        await self._db.close()

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append a batch and its index row, atomically and durably (fenced by ``fence``).

        Appends issued in the same turn of the event loop share one durable transaction, each in
        a savepoint of its own (see :class:`~pev.stores._group.GroupCommit`): one that fails is
        rolled back alone and raises to its own caller, and every caller returns only once the
        shared COMMIT has succeeded. A lone append is a transaction of its own, as before.
        """
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

        task_id = entries[0].task_id if entries else ""
        await self._appends.submit(_Append(task_id, work, wakes_workers(summary, fence)))

    async def _commit_appends(self, appends: Sequence[_Append]) -> list[BaseException | None]:
        """Commit appends together, in one transaction; then tell whom each one written concerns.

        Its task's followers, and the idle workers when it left its task claimable.
        """
        outcomes = await self._db.together([append.work for append in appends])
        for append, outcome in zip(appends, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                self._followers.signal(append.task_id)
                if append.wakes:
                    self._waiters.signal()
        return outcomes

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

        return await self._db.write(work, operation="lease")

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        """Take the leases of up to ``limit`` runnable tasks, oldest first, in one transaction.

        A look without the write lock comes first: a worker that finds nothing to claim (most
        looks of a busy fleet) never takes the lock the other processes' appends wait for.
        """
        if limit <= 0:
            return ()
        if not await self._db.query(_SELECT_CLAIMABLE, (_time_key(now), 1)):
            return ()

        def work(conn: sqlite3.Connection) -> tuple[Lease, ...]:
            # BEGIN IMMEDIATE holds the write lock from the read on: nobody claims in between.
            rows = conn.execute(_SELECT_CLAIMABLE, (_time_key(now), limit)).fetchall()
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

        return await self._db.write(work, operation="lease")

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Extend the lease while it is the task's current one, in one transaction."""

        def work(conn: sqlite3.Connection) -> Lease:
            longer = renewed(_lease_of(conn, lease.task_id), lease, now=now, lease_s=lease_s)
            _keep_lease(conn, longer)
            return longer

        return await self._db.write(work, operation="lease")

    async def release_lease(self, lease: Lease, *, now: datetime) -> None:
        """Free the lease from ``now``, unless it was taken over."""

        def work(conn: sqlite3.Connection) -> None:
            freed = released(_lease_of(conn, lease.task_id), lease, now=now)
            if freed is not None:
                _keep_lease(conn, freed)

        await self._db.write(work, operation="lease")

    async def lease(self, task_id: str) -> Lease | None:
        """The task's current lease, or ``None``."""
        return await self._db.run(lambda conn: _lease_of(conn, task_id))

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries after ``after``, decoded; a row that cannot be read is named."""
        rows = await self._db.run(lambda conn: self._read_rows(conn, task_id, after))
        location = self._db.location
        return tuple(decode_entry(_raw_of(task_id, row), location=location) for row in rows)

    async def read_raw(self, task_id: str) -> tuple[RawEntry, ...]:
        """The task's rows as stored, in sequence order (see :class:`pev.ledger.Store`).

        Texts are read as bytes, so one whose bytes are not UTF-8 comes back (its bad bytes as
        surrogate escapes) for the check to name, instead of failing the read.
        """
        rows = await self._db.run(lambda conn: self._read_rows(conn, task_id, 0, _RAW_COLUMNS))
        return tuple(_raw_of(task_id, row) for row in rows)

    async def ledger_task_ids(self) -> tuple[str, ...]:
        """Every task that has events, sorted: from the events table, not the index."""
        rows = await self._db.query("SELECT DISTINCT task_id FROM pev_events", ())
        return tuple(sorted(str(row[0]) for row in rows))

    def _read_rows(
        self, conn: sqlite3.Connection, task_id: str, after: int, columns: str = _COLUMNS
    ) -> list[tuple[object, ...]]:
        rows = query_rows(
            conn,
            f"SELECT {columns} FROM pev_events WHERE task_id = ? AND seq > ? ORDER BY seq",  # noqa: S608 - fixed column lists
            (task_id, after),
        )
        if not rows and (
            after <= 0
            or not query_rows(
                conn, "SELECT 1 FROM pev_events WHERE task_id = ? LIMIT 1", (task_id,)
            )
        ):
            raise UnknownTaskError(task_id)
        return rows

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None``."""
        query = f"SELECT {_SUMMARY_COLUMNS} FROM pev_tasks WHERE task_id = ?"  # noqa: S608 - fixed column list
        rows = await self._db.query(query, (task_id,))
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
        rows = await self._db.query(query, params)
        return tuple(_summary_from_row(row) for row in rows)

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting (for a replan or an approval) whose deadline is at or before ``now``.

        Earliest deadline first: the index row's ``replan_deadline``, which holds the deadline of
        whatever the task waits for.
        """
        query = (
            "SELECT task_id FROM pev_tasks WHERE replan_deadline IS NOT NULL "
            "AND replan_deadline <= ? ORDER BY replan_deadline"
        )
        rows = await self._db.run(lambda conn: query_rows(conn, query, (_time_key(now),)))
        return tuple(TaskId(str(row[0])) for row in rows)

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """The phase and lease of each of ``task_ids`` that exists, in one indexed query."""
        rows = await self._db.query(_SELECT_MARKS, (json.dumps(list(task_ids)),))
        return tuple(_mark_of(row) for row in rows)


def _mark_of(row: tuple[object, ...]) -> TaskMark:
    task_id, phase, owner, epoch = row
    return TaskMark(
        str(task_id),
        TaskPhase(str(phase)),
        None if owner is None else str(owner),
        None if epoch is None else _number(epoch),
    )


def _raw_of(task_id: str, row: tuple[object, ...]) -> RawEntry:
    """A stored row as it is; a column of the wrong type (a damaged row) kept as best it can."""
    seq, at, schema, event, prev_hash, hash_ = row
    return RawEntry(
        task_id=task_id,
        seq=_number(seq),
        at=_text(at),
        schema=_number(schema),
        event=_text(event),
        prev_hash=_text(prev_hash),
        hash=_text(hash_),
    )


def _number(value: object) -> int:
    # Only a damaged row holds anything but an integer here: 0 is no sequence number or schema
    # pev writes, so the check names the row.
    return value if isinstance(value, int) else 0


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return "" if value is None else str(value)


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
