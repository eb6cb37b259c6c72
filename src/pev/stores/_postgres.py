"""The PostgreSQL store: ledgers for many workers on many machines (docs/stores.md).

The same contract as the SQLite store (docs/design.md §5.5), over psycopg 3 and a pool of
connections: each append is one statement (a function of the schema) that locks the task's index
row (``FOR UPDATE``), so appends, lease takeovers and heartbeats of one task take turns, and the
fence of an append is checked under that lock; the primary key on (task id, sequence) turns a
lost race into :class:`~pev.errors.ConflictError`. Lease changes and claims are single
statements too, each its own transaction: a process frozen between two of its statements (a GC
pause, SIGSTOP, a frozen VM) holds no lock meanwhile, so it keeps nobody from taking its tasks
over once its leases expire (docs/workers.md). An error that says the server could not be
reached or did not answer in time is :class:`~pev.errors.StoreUnavailable`. Appends issued
together share one transaction, each in a subtransaction of its own (:mod:`pev.stores._group`).
Events are kept as the canonical JSON text that was hashed, and triggers refuse any UPDATE,
DELETE or TRUNCATE of them. Episodes and lessons are kept beside the ledgers
(:mod:`pev.stores._postgres_lessons`). Every committed append notifies its task's followers, in
any process (:mod:`pev.stores._follow`); an append written by no driver that leaves its task
claimable wakes idle workers.

The tables live in one PostgreSQL schema (``pev`` unless named), whose version is recorded; see
:mod:`pev.stores._postgres_schema` for the tables and their migrations. Needs the ``postgres``
extra: ``pip install 'pev-agent[postgres]'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any

from pev.errors import (
    ConflictError,
    LeaseLost,
    StoreError,
    StoreUnavailable,
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
    released,
    renewed,
)
from pev.ledger._chain import entry_texts
from pev.ledger._lease import is_free
from pev.ledger._store import decode_entry
from pev.ledger._watch import TaskMark, WatchedStore
from pev.model import TaskId
from pev.stores._follow import Followers
from pev.stores._group import GroupCommit
from pev.stores._postgres_db import Database, TupleRow, unavailable_state
from pev.stores._postgres_lessons import PostgresLessons
from pev.stores._postgres_schema import RUNNABLE_TASKS
from pev.stores._wakeups import TaskSignals

__all__ = ["PostgresStore"]

# One append, checked and written by the schema's function (see _postgres_schema.py), which
# answers its expected failures as a row: (outcome, detail, head seq, head hash, lease owner,
# lease epoch, lease expiry).
_APPEND = (
    "SELECT * FROM {s}.pev_append(%s::text, %s::bigint[], %s::text[], %s::integer[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text, %s::text, %s::text, %s::text, "
    "%s::timestamptz, %s::timestamptz, %s::bigint, %s::text, %s::timestamptz, %s::text, "
    "%s::bigint, %s::timestamptz, %s::text, %s::text)"
)
# The most appends one transaction holds. Each is a subtransaction that writes, and PostgreSQL
# keeps the first 64 of a transaction where every other session's snapshot sees them at no cost;
# past that, their snapshots look each one up, for as long as the transaction lasts.
_GROUP_LIMIT = 64
# Lease changes and claims: each statement below is its own transaction (the pool's connections
# autocommit), so none leaves a lock held while its process runs Python, or is frozen. The rules
# stay in pev.ledger._lease: a change reads the lease, computes the next one there, and writes
# it only if the lease is still the one it read (compare and set), under the task's index row
# lock, the lock every append of the task takes first; if another writer changed it meanwhile,
# the change is computed again from what it wrote.
_SELECT_LEASE = "SELECT owner, epoch, expires_at FROM {s}.pev_leases WHERE task_id = %s"
# The task's phase (no row: no such task) and its lease (NULLs: none).
_READ_LEASE = (
    "SELECT t.phase, l.owner, l.epoch, l.expires_at FROM {s}.pev_tasks t "
    "LEFT JOIN {s}.pev_leases l ON l.task_id = t.task_id WHERE t.task_id = %(task)s"
)
# Writes the lease if the task's current one is still ``was`` (none: was_owner NULL); when asked
# (``wake``) and the task is left claimable, wakes the workers once committed. Answers the task's
# phase (NULL: no such task) and whether the lease was written.
_SWAP_LEASE = (
    "WITH task AS (SELECT task_id, phase FROM {s}.pev_tasks WHERE task_id = %(task)s "  # noqa: S608 - constants
    "FOR UPDATE), "
    "written AS (INSERT INTO {s}.pev_leases AS l (task_id, owner, epoch, expires_at) "
    "SELECT task_id, %(owner)s::text, %(epoch)s::bigint, %(expires)s::timestamptz FROM task "
    "ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
    "expires_at = excluded.expires_at WHERE l.owner = %(was_owner)s::text "
    "AND l.epoch = %(was_epoch)s::bigint AND l.expires_at = %(was_expires)s::timestamptz "
    "RETURNING l.task_id) "
    "SELECT (SELECT phase FROM task), EXISTS (SELECT FROM written), "
    "(SELECT count(pg_notify(%(channel)s, '')) FROM written, task "
    f"WHERE %(wake)s::boolean AND task.{RUNNABLE_TASKS})"
)
# How many times in a row a lease change may find its lease changed by another writer between
# its read and its write before it gives up (StoreUnavailable): each time, another one got on.
_SWAP_TRIES = 50
# A claim's search: runnable tasks whose lease is free, oldest first, with their lease. The
# condition on the phase is the claimable-tasks index's own, spelled out, so that the search
# reads only tasks that have not ended and do not await approval.
_CLAIMABLE = (
    "SELECT t.task_id, l.owner, l.epoch, l.expires_at FROM {s}.pev_tasks t "  # noqa: S608 - constants
    f"LEFT JOIN {{s}}.pev_leases l ON l.task_id = t.task_id WHERE t.{RUNNABLE_TASKS} "
    "AND (l.task_id IS NULL OR l.expires_at <= %s) AND t.task_id <> ALL(%s) "
    "ORDER BY t.created_at, t.task_id LIMIT %s"
)
# A claim's take: the next lease of each task found, each written only if the task's row is not
# locked (an append, a lease change, another claim: SKIP LOCKED), the task is still claimable,
# and its lease is still the one found. Answers the tasks whose lease it wrote.
_TAKE = (
    "WITH wanted AS (SELECT * FROM unnest(%(tasks)s::text[], %(epochs)s::bigint[], "  # noqa: S608 - constants
    "%(expiries)s::timestamptz[], %(was_owners)s::text[], %(was_epochs)s::bigint[], "
    "%(was_expiries)s::timestamptz[]) "
    "AS w (task_id, epoch, expires_at, was_owner, was_epoch, was_expires)), "
    "task AS (SELECT t.task_id FROM {s}.pev_tasks t WHERE t.task_id = ANY(%(tasks)s::text[]) "
    f"AND t.{RUNNABLE_TASKS} ORDER BY t.task_id FOR UPDATE SKIP LOCKED) "
    "INSERT INTO {s}.pev_leases AS l (task_id, owner, epoch, expires_at) "
    "SELECT w.task_id, %(owner)s::text, w.epoch, w.expires_at FROM wanted w "
    "JOIN task USING (task_id) "
    "ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
    "expires_at = excluded.expires_at WHERE (l.owner, l.epoch, l.expires_at) = "
    "(SELECT w.was_owner, w.was_epoch, w.was_expires FROM wanted w WHERE w.task_id = l.task_id) "
    "RETURNING l.task_id"
)
_SUMMARY = (
    "SELECT task_id, phase, status, reason, title, created_at, updated_at, event_count, "
    "head_hash, replan_deadline FROM {s}.pev_tasks"
)


class PostgresStore(PostgresLessons, WatchedStore):
    """Ledgers, leases and lessons in a PostgreSQL schema, shared by any number of processes.

    The store connects on first use (a constructor cannot wait for a server): it then creates an
    empty schema at the current version, or checks that an existing one is pev's and at this
    version. :meth:`close` closes its pool of connections.

    Args:
        url: A libpq connection URL (``postgresql://user:password@host:5432/dbname``) or
            key/value string.
        schema: The PostgreSQL schema holding pev's tables.
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most.
        create: Create the schema's tables on first use when the database holds none. With
            ``False`` (read-only tools: ``pev tasks``, ``pev show``), such a database is a
            :class:`~pev.errors.UsageError` on first use and nothing is created.

    Raises:
        UsageError: The URL cannot be parsed, the schema name is not a plain one, or the pool
            sizes do not make sense.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = "pev",
        min_size: int = 1,
        max_size: int = 10,
        create: bool = True,
    ) -> None:
        super().__init__(
            Database(url, schema=schema, min_size=min_size, max_size=max_size, create=create)
        )
        WatchedStore.__init__(self)
        # The channel its writers NOTIFY and its workers LISTEN on (a name is at most 63 bytes).
        self._channel = f"pev:{self._db.schema}"[:63]
        # The channel every committed append NOTIFYs with its task's id, for followers.
        # The channel every committed append notifies with its task's id (migration 6).
        self._events_channel = f"pev_events:{self._db.schema}"[:63]
        self._followers = Followers(
            self._listen_appends, name=f"pev-listen-{self._events_channel}", ready=self._db.connect
        )
        self._appends: GroupCommit[tuple[object, ...], TupleRow | None] = GroupCommit(
            self._commit_appends, limit=_GROUP_LIMIT
        )

    @property
    def location(self) -> str:
        """Where the ledgers are: the URL without its password, and the schema."""
        return self._db.location

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding pev's tables."""
        return self._db.schema

    async def upgrade(self) -> tuple[int, int]:
        """Bring the schema to this pev's version, in one transaction; ``(before, after)``.

        Applies each missing migration in order, under the schema's advisory lock, so two
        upgraders take turns (the second finds nothing left to do). An empty schema is created.

        Raises:
            SchemaVersionError: The schema is newer than this pev.
            StoreError: The schema is not pev's, or the server cannot be reached.
        """
        return await self._db.upgrade()

    async def version(self) -> int:
        """The version the schema's tables are at (0: no pev tables yet)."""
        return await self._db.version()

    async def close(self) -> None:
        """Close the pool's connections; the store is unusable afterwards."""
        await self._db.close()

    async def _change_lease(
        self,
        task_id: str,
        change: Callable[[bool, Lease | None], Lease | None],
        *,
        wake: bool = False,
    ) -> Lease | None:
        """Write ``change(known, current)``, the task's next lease, and return it.

        The current lease is read without a lock; ``change`` applies a rule of
        :mod:`pev.ledger._lease` to whether the task exists and that lease (it may raise;
        ``None``: nothing to write). One statement then writes the next lease only if the
        current one is unchanged meanwhile (a compare-and-set: no lock is held between the two,
        so a frozen process blocks nobody); otherwise the rule is applied again to the lease
        another writer left. With ``wake``, the workers are woken if the task is left claimable.

        Raises:
            StoreUnavailable: The server did not answer, or other writers changed the lease
                under every one of the tries.
        """
        for _ in range(_SWAP_TRIES):
            rows = await self._db.query(_READ_LEASE, {"task": task_id}, operation="lease")
            current = _lease_from(task_id, rows[0][1:] if rows else None)
            lease = change(bool(rows), current)
            if lease is None:
                return None
            ((phase, written, _),) = await self._db.query(
                _SWAP_LEASE,
                {
                    "task": task_id,
                    "owner": lease.owner,
                    "epoch": lease.epoch,
                    "expires": lease.expires_at,
                    "was_owner": current.owner if current else None,
                    "was_epoch": current.epoch if current else None,
                    "was_expires": current.expires_at if current else None,
                    "channel": self._channel,
                    "wake": wake,
                },
                operation="lease",
            )
            if written:
                return lease
            if phase is None:
                change(False, None)  # the task is gone: its rule raises
                return None
        raise StoreUnavailable(
            f"the lease of task {task_id} in {self.location} was changed by other writers under "
            f"{_SWAP_TRIES} attempts in a row to change it (contention, not a lost server); "
            "try again",
            location=self.location,
            operation="lease",
        )

    # --- the ledger --------------------------------------------------------------------------

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append a batch and its index row, atomically and durably (fenced by ``fence``).

        One statement checks and writes the append under the task's index row lock. Appends
        issued in the same turn of the event loop share one transaction, sent in one round trip
        (see :class:`~pev.stores._group.GroupCommit`): each is rolled back alone if it fails,
        and raises to its own caller; every caller returns once the shared COMMIT succeeded.
        """
        # What the batch must be whatever the stored head: checked before anything is sent.
        if not entries:
            check_batch(entries, summary, head_seq=0, head_hash=GENESIS_HASH)  # refuses it
        first = entries[0]
        check_batch(entries, summary, head_seq=first.seq - 1, head_hash=first.prev_hash)
        texts = entry_texts(entries)
        row = await self._appends.submit(
            (
                first.task_id,
                [entry.seq for entry in entries],
                [at_text for at_text, _ in texts],
                [int(entry.schema) for entry in entries],
                [entry.event.kind for entry in entries],
                [text for _, text in texts],
                [entry.prev_hash for entry in entries],
                [entry.hash for entry in entries],
                str(summary.phase),
                summary.status.value if summary.status else None,
                summary.reason.value if summary.reason else None,
                summary.title,
                summary.created_at,
                summary.updated_at,
                summary.event_count,
                summary.head_hash,
                summary.replan_deadline,
                fence.owner if fence else None,
                fence.epoch if fence else None,
                fence.expires_at if fence else None,
                self._channel,
                self._events_channel,
            )
        )
        if row is None:
            raise StoreError(f"{self.location}: an append of task {first.task_id} had no answer")
        outcome, detail, head_seq, head_hash, *_ = row
        if outcome == "ok":
            return
        if outcome == "conflict":
            raise ConflictError(first.task_id, first.seq)
        if outcome == "refused" and detail == "lease" and fence is not None:
            # The store's own fence refused it (not the task's current lease): whatever else
            # the row says, the driver lost its lease.
            raise LeaseLost(first.task_id, owner=fence.owner, epoch=fence.epoch)
        if outcome == "refused":
            # The very check of the other stores, on the head the function found.
            if head_seq is None:
                check_batch(entries, summary, head_seq=0, head_hash=GENESIS_HASH)
            else:
                check_batch(entries, summary, head_seq=int(head_seq), head_hash=str(head_hash))
        if outcome == "failed" and unavailable_state(str(detail).partition(" ")[0]):
            # A lock timeout or a deadlock inside the function: rolled back, try again.
            raise StoreUnavailable(
                f"a write to {self.location} failed: {detail}",
                location=self.location,
                operation="write",
            )
        raise StoreError(f"a write to {self.location} failed: {detail or outcome}")

    async def _commit_appends(
        self, appends: Sequence[tuple[object, ...]]
    ) -> list[TupleRow | BaseException | None]:
        """Commit appends together: one transaction, one round trip, one row each, in order."""
        # Each append locks its task's row: taken in one order (by task id, the appends of one
        # task in the order they were issued), two batches never wait for each other in a cycle.
        order = sorted(range(len(appends)), key=lambda index: str(appends[index][0]))
        rows = await self._db.together(_APPEND, [appends[index] for index in order])
        answered: list[TupleRow | BaseException | None] = [None] * len(appends)
        for index, row in zip(order, rows, strict=True):
            answered[index] = row
            if row is not None and row[0] == "ok":  # committed: its followers may read it
                self._followers.signal(str(appends[index][0]))
        return answered

    async def acquire_lease(
        self, task_id: str, owner: str, *, now: datetime, lease_s: float
    ) -> Lease:
        """Take the task's lease for ``owner`` (a compare-and-set statement; see _change_lease)."""

        def change(known: bool, current: Lease | None) -> Lease:
            if not known:
                raise UnknownTaskError(task_id)
            return acquired(current, task_id, owner, now=now, lease_s=lease_s)

        lease = await self._change_lease(task_id, change)
        assert lease is not None  # noqa: S101 - change always gives one or raises
        return lease

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        """Take the leases of up to ``limit`` runnable tasks, oldest first.

        A search finds runnable tasks whose lease is free; one statement then takes their next
        leases, each under its task's index row lock, skipping a row another statement holds
        (``FOR UPDATE SKIP LOCKED``: an append, a lease change, another claim), a task that
        ended or came to await approval meanwhile, and one whose lease changed since the search
        (another claimer took it): concurrent claimers never take one task twice. While fewer
        than ``limit`` were taken and tasks were passed by, the search goes on past them. No
        statement holds a lock past itself.
        """
        taken: list[Lease] = []
        seen: list[str] = []
        while len(taken) < limit:
            found = await self._db.query(
                _CLAIMABLE, (now, seen, limit - len(taken)), operation="lease"
            )
            if not found:
                break
            wanted: list[tuple[Lease | None, Lease]] = []
            for task_id, *lease_row in found:
                seen.append(str(task_id))
                current = _lease_from(str(task_id), lease_row)
                if is_free(current, now):
                    wanted.append(
                        (current, acquired(current, str(task_id), owner, now=now, lease_s=lease_s))
                    )
            written = {str(row[0]) for row in await self._take(owner, wanted)}
            got = [lease for _, lease in wanted if lease.task_id in written]
            taken.extend(got)
            if len(got) == len(found):
                break
        return tuple(taken)

    async def _take(
        self, owner: str, wanted: Sequence[tuple[Lease | None, Lease]]
    ) -> list[TupleRow]:
        """Write each lease of ``wanted`` whose task is free to lock and still holds the first."""
        if not wanted:
            return []
        return await self._db.query(
            _TAKE,
            {
                "tasks": [lease.task_id for _, lease in wanted],
                "epochs": [lease.epoch for _, lease in wanted],
                "expiries": [lease.expires_at for _, lease in wanted],
                "was_owners": [was.owner if was else None for was, _ in wanted],
                "was_epochs": [was.epoch if was else None for was, _ in wanted],
                "was_expiries": [was.expires_at if was else None for was, _ in wanted],
                "owner": owner,
            },
            operation="lease",
        )

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Extend the lease while it is the task's current one, in one statement."""

        def change(known: bool, current: Lease | None) -> Lease:
            return renewed(current, lease, now=now, lease_s=lease_s)

        longer = await self._change_lease(lease.task_id, change)
        assert longer is not None  # noqa: S101 - change always gives one or raises
        return longer

    async def release_lease(self, lease: Lease, *, now: datetime) -> None:
        """Free the lease from ``now``, unless it was taken over; wake workers if unfinished."""

        def change(known: bool, current: Lease | None) -> Lease | None:
            return released(current, lease, now=now)

        await self._change_lease(lease.task_id, change, wake=True)

    def wakeups(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set when a task may have become runnable, by any process (``LISTEN``).

        See :class:`pev.ledger.Wakeups`. The store's writers ``NOTIFY`` in the transaction that
        makes a task runnable, so the signal comes once it is committed; the event is also set
        whenever listening (re)starts, since signals may have been missed before.
        """
        return self._db.notifications(self._channel)

    @property
    def follow_poll_s(self) -> float:
        """How often a follower reads anyway: every second, since it hears every process.

        Every committed append notifies the followers of its task, in any process
        (``LISTEN``/``NOTIFY``); the reads only cover a listening connection being made again.
        """
        return 1.0

    def appended(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set once an append to ``task_id`` commits, in any process.

        See :class:`pev.ledger.Appends`. Each append notifies the schema's events channel with
        its task's id in its own transaction; while anyone in this process follows a task, one
        connection per event loop listens on it (:mod:`pev.stores._follow`). This
        store's own appends set the event as soon as they commit.

        Raises:
            StoreError: The database cannot be reached, or is not a pev schema of this version.
        """
        return self._followers.follow(task_id)

    async def _listen_appends(self, signals: TaskSignals) -> None:
        """Tell ``signals`` of every committed append, until cancelled (``LISTEN``)."""
        await self._db.listen(
            self._events_channel,
            what="appends",
            listening=signals.signal_all,
            heard=signals.signal,
        )

    async def lease(self, task_id: str) -> Lease | None:
        """The task's current lease, or ``None``."""
        rows = await self._db.query(_SELECT_LEASE, (task_id,))
        return _lease_from(task_id, rows[0] if rows else None)

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries after ``after``, decoded; a row that cannot be read is named."""
        location = self._db.location
        return tuple(
            decode_entry(raw, location=location) for raw in await self._rows(task_id, after)
        )

    async def read_raw(self, task_id: str) -> tuple[RawEntry, ...]:
        """The task's rows as stored, in sequence order (see :class:`pev.ledger.Store`)."""
        return await self._rows(task_id, 0)

    async def ledger_task_ids(self) -> tuple[str, ...]:
        """Every task that has events, sorted: from the events table, not the index."""
        rows = await self._db.query("SELECT DISTINCT task_id FROM {s}.pev_events", ())
        return tuple(sorted(str(row[0]) for row in rows))

    async def _rows(self, task_id: str, after: int) -> tuple[RawEntry, ...]:
        rows = await self._db.query(
            "SELECT seq, at, schema, event, prev_hash, hash FROM {s}.pev_events "
            "WHERE task_id = %s AND seq > %s ORDER BY seq",
            (task_id, after),
        )
        if not rows and (
            after <= 0
            or not await self._db.query(
                "SELECT 1 FROM {s}.pev_events WHERE task_id = %s LIMIT 1", (task_id,)
            )
        ):
            raise UnknownTaskError(task_id)
        return tuple(
            RawEntry(
                task_id=task_id,
                seq=int(seq),
                at=str(at),
                schema=int(schema),
                event=str(event),
                prev_hash=str(prev_hash),
                hash=str(hash_),
            )
            for seq, at, schema, event, prev_hash, hash_ in rows
        )

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None``."""
        rows = await self._db.query(_SUMMARY + " WHERE task_id = %s", (task_id,))
        return _summary_from_row(rows[0]) if rows else None

    async def list_tasks(
        self,
        *,
        phases: Collection[TaskPhase] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[TaskSummary, ...]:
        """Index rows, newest first, optionally only those in ``phases``."""
        query = _SUMMARY
        params: list[object] = []
        if phases is not None:
            query += " WHERE phase = ANY(%s)"
            params.append(sorted(str(phase) for phase in phases))
        query += " ORDER BY created_at DESC, task_id DESC LIMIT %s OFFSET %s"
        params.extend([limit, offset])
        return tuple(_summary_from_row(row) for row in await self._db.query(query, params))

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting (for a replan or an approval) whose deadline is at or before ``now``.

        Earliest deadline first: the index row's ``replan_deadline``, which holds the deadline of
        whatever the task waits for.
        """
        rows = await self._db.query(
            "SELECT task_id FROM {s}.pev_tasks WHERE replan_deadline IS NOT NULL "
            "AND replan_deadline <= %s ORDER BY replan_deadline, task_id",
            (now,),
        )
        return tuple(TaskId(str(row[0])) for row in rows)

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """The phase and lease of each of ``task_ids`` that exists, in one indexed query."""
        rows = await self._db.query(
            "SELECT t.task_id, t.phase, l.owner, l.epoch FROM {s}.pev_tasks t "
            "LEFT JOIN {s}.pev_leases l ON l.task_id = t.task_id WHERE t.task_id = ANY(%s)",
            (list(task_ids),),
        )
        return tuple(
            TaskMark(str(task_id), TaskPhase(phase), owner, epoch)
            for task_id, phase, owner, epoch in rows
        )


def _lease_from(task_id: str, row: Sequence[Any] | None) -> Lease | None:
    """The lease of an (owner, epoch, expiry) row; ``None`` for no row or a row of NULLs."""
    if row is None or row[0] is None:
        return None
    owner, epoch, expires_at = row
    return Lease(
        task_id=TaskId(task_id), owner=str(owner), epoch=int(epoch), expires_at=_utc(expires_at)
    )


def _utc(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise StoreError(f"a stored time is {value!r}, not a timestamp")
    return value.astimezone(UTC)


def _utc_or_none(value: object) -> datetime | None:
    return None if value is None else _utc(value)


def _summary_from_row(row: TupleRow) -> TaskSummary:
    (task_id, phase, status, reason, title, created, updated, count, head, deadline) = row
    return TaskSummary(
        task_id=TaskId(str(task_id)),
        phase=TaskPhase(str(phase)),
        status=TaskStatus(str(status)) if status is not None else None,
        reason=TerminalReason(str(reason)) if reason is not None else None,
        title=str(title),
        created_at=_utc(created),
        updated_at=_utc(updated),
        event_count=int(count),
        head_hash=str(head),
        replan_deadline=_utc_or_none(deadline),
    )
