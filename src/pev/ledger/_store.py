"""The one contract every ledger store keeps (docs/design.md §5.5)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

from pev import codec
from pev.errors import (
    CodecError,
    ConflictError,
    LedgerCorruptError,
    SchemaVersionError,
    StoreError,
)
from pev.ledger._events import Event, EventSchema, LedgerEntry, RawEntry
from pev.ledger._lease import Lease
from pev.ledger._phases import TaskPhase
from pev.ledger._summary import TaskSummary
from pev.model import TaskId

__all__ = ["Appends", "Store", "Wakeups", "check_batch", "decode_entry"]


@runtime_checkable
class Store(Protocol):
    """Durable, append-only storage of task ledgers and their index.

    A store does not interpret events; the :class:`~pev.ledger.Ledger` folds and seals them. A
    store guarantees:

    * ``append`` is atomic and durable: all of ``entries`` and the index row, or nothing, and
      committed durably by the time it returns. Appends issued together may share one commit
      (group commit); each stays all or nothing on its own, and its failure is its caller's
      alone. A caller cancelled while its append runs cannot tell whether it was written;
    * sequence numbers per task are unique and gap-free: a writer that appends a sequence number
      another writer already wrote gets :class:`~pev.errors.ConflictError` and writes nothing;
    * the first entry links to the stored head (``prev_hash``), else
      :class:`~pev.errors.StoreError`;
    * an append that carries a lease (``fence``) is refused with
      :class:`~pev.errors.LeaseLost` unless that lease is the task's current one, checked in
      the append's own transaction; an append that creates its task under a lease takes that
      lease with the task (:func:`~pev.ledger.fenced`);
    * what was written is read back unchanged, in sequence order;
    * leases follow :func:`~pev.ledger.acquired`, :func:`~pev.ledger.renewed` and
      :func:`~pev.ledger.released`, each applied in one transaction;
    * ``claim`` takes each lease it returns in one transaction: two claimers never get the
      same task.
    """

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Write consecutive entries of one task and its new index row, atomically and durably.

        Raises:
            ConflictError: Another writer already appended the first entry's sequence number.
            LeaseLost: ``fence`` is given and is not the task's current lease (for a new task:
                is not a first lease, epoch 1).
            StoreError: The entries are empty, mixed, not consecutive, or do not link to the head.
        """
        ...

    async def acquire_lease(
        self, task_id: str, owner: str, *, now: datetime, lease_s: float
    ) -> Lease:
        """Take the task's lease for ``owner`` until ``now + lease_s`` (see ``acquired``).

        Raises:
            UnknownTaskError: No task has that id.
            LeaseHeld: Another owner holds a live lease.
        """
        ...

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        """Take the leases of up to ``limit`` runnable tasks for ``owner``, oldest task first.

        A task is runnable when it has not ended (its phase is not terminal) and its lease is
        free at ``now`` (none yet, expired or released). Each lease taken follows ``acquired``:
        epoch 1 for a first lease, the previous epoch + 1 on a takeover. The leases are taken
        atomically, so concurrent claimers get disjoint tasks; ordered by the tasks' creation
        time, then id. ``limit <= 0`` takes nothing.
        """
        ...

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Extend ``lease`` to ``now + lease_s`` while it is the task's current one.

        Raises:
            LeaseLost: The task's lease has another owner or epoch.
        """
        ...

    async def release_lease(self, lease: Lease, *, now: datetime) -> None:
        """Free ``lease`` from ``now``; a lease taken over meanwhile is left as it is."""
        ...

    async def lease(self, task_id: str) -> Lease | None:
        """The task's current lease (live or not), or ``None`` if it never had one."""
        ...

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries with ``seq > after``, in order.

        Raises:
            UnknownTaskError: No task has that id.
            LedgerCorruptError: A stored entry cannot be decoded (names its sequence number).
            SchemaVersionError: A stored entry has an event schema newer than this pev knows.
        """
        ...

    async def read_raw(self, task_id: str) -> tuple[RawEntry, ...]:
        """Every stored entry of the task as stored, in sequence order: nothing decoded or checked.

        What ``pev ledger verify`` checks a chain from: a damaged entry comes back as it is
        (text that is not UTF-8 with its bytes kept as surrogate escapes), so that the check
        can name it instead of failing to read it.

        Raises:
            UnknownTaskError: The store holds no event of that task.
        """
        ...

    async def ledger_task_ids(self) -> tuple[str, ...]:
        """The id of every task that has events, sorted: read from the events, not the index."""
        ...

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None`` if there is no such task."""
        ...

    async def list_tasks(
        self,
        *,
        phases: Collection[TaskPhase] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[TaskSummary, ...]:
        """Index rows, newest first, optionally only those in ``phases``."""
        ...

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting (for a replan or an approval) whose deadline is at or before ``now``.

        Earliest deadline first: the index row's ``replan_deadline``, which holds the deadline of
        whatever the task waits for.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads; the store is unusable afterwards."""
        ...


@runtime_checkable
class Wakeups(Protocol):
    """A store that tells idle workers when a task may have become runnable (optional).

    Workers of a store without it (a store of your own, say) look for tasks by polling, backing
    off while they find none (docs/workers.md).
    """

    def wakeups(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """While entered, an event the store sets when a task may have become runnable.

        It is set at least when a task is created without a lease (``pev.submit``), when a
        person's approval, rejection or cancel is written to a task without a lease and leaves
        it claimable, and when the lease of a claimable task is released (a worker draining),
        by this process or any other the store reaches (a task awaiting approval is not
        claimable); a store may set it more often (SQLite: whenever another connection
        committed), each time costing a waiter one look. A lease that simply expires
        sets nothing: a worker still looks every ``poll_s``. The waiter clears the event before
        it looks, so a signal that comes while it looks is not lost.
        """
        ...


@runtime_checkable
class Appends(Protocol):
    """A store that tells followers of a task when its ledger grew (optional).

    :func:`pev.ledger.follow` reads a task's new entries when told, and also every
    :attr:`follow_poll_s` in case a signal never comes (an append by a process the store cannot
    hear from, a listener that reconnects). Followers of a store without it poll
    (:data:`pev.ledger.FOLLOW_POLL_S`).
    """

    @property
    def follow_poll_s(self) -> float:
        """How often a follower reads anyway: rarely where every append is heard, else often."""
        ...

    def appended(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """While entered, an event the store sets once an append to ``task_id`` has committed.

        It is set at least for the appends this store object makes (in any thread), and for
        those of other processes where the store hears of them (PostgreSQL: ``LISTEN``). The
        follower clears it before it reads, so an append during the read is not missed.
        """
        ...


def check_batch(
    entries: Sequence[LedgerEntry], summary: TaskSummary, *, head_seq: int, head_hash: str
) -> None:
    """The checks every store makes before appending a batch, under its write lock.

    Args:
        entries: The batch to append.
        summary: The index row written with it.
        head_seq: The task's last stored sequence number (0 for a new task).
        head_hash: The task's last stored hash (the genesis hash for a new task).

    Raises:
        ConflictError: The first sequence number is already taken.
        StoreError: The batch is empty, mixed, not consecutive, does not link to the head, or
            disagrees with its index row.
    """
    if not entries:
        raise StoreError("an append needs at least one entry")
    task_id = entries[0].task_id
    first = entries[0].seq
    for offset, entry in enumerate(entries):
        if entry.task_id != task_id:
            raise StoreError(f"one append holds entries of tasks {task_id} and {entry.task_id}")
        if entry.seq != first + offset:
            raise StoreError(f"task {task_id}: entries are not consecutive at seq {entry.seq}")
        if offset and entry.prev_hash != entries[offset - 1].hash:
            raise StoreError(f"task {task_id}: entry {entry.seq} does not link to the one before")
    if summary.task_id != task_id or summary.event_count != entries[-1].seq:
        raise StoreError(f"task {task_id}: the index row does not match the entries appended")
    if summary.head_hash != entries[-1].hash:
        raise StoreError(f"task {task_id}: the index row's head hash is not the last entry's")
    if first < 1:
        raise StoreError(f"task {task_id}: sequence numbers start at 1, not {first}")
    if first <= head_seq:
        raise ConflictError(task_id, first)
    if first != head_seq + 1:
        raise StoreError(f"task {task_id}: appending seq {first} after {head_seq} leaves a gap")
    if entries[0].prev_hash != head_hash:
        raise StoreError(f"task {task_id}: entry {first} does not link to the stored head")


_NEWEST_SCHEMA = max(EventSchema)


def decode_entry(raw: RawEntry, *, location: str) -> LedgerEntry:
    """Decode a stored entry, of any event schema this pev knows (its seal is not checked).

    Args:
        raw: The entry as stored.
        location: Where the store keeps it, for the error of an unknown schema.

    Raises:
        SchemaVersionError: The entry's event schema is newer than this pev knows.
        LedgerCorruptError: The entry cannot be decoded (names its sequence number).
    """
    if raw.seq < 1:
        raise LedgerCorruptError(
            f"task {raw.task_id}: a stored event has no sequence number", task_id=raw.task_id, seq=0
        )
    if raw.schema > _NEWEST_SCHEMA:
        raise SchemaVersionError(
            location=f"{location} (task {raw.task_id}, event {raw.seq})",
            found=raw.schema,
            expected=int(_NEWEST_SCHEMA),
        )
    if raw.schema < EventSchema.PEV_SHA256:
        raise LedgerCorruptError(
            f"task {raw.task_id}: event {raw.seq} has no event schema ({raw.schema})",
            task_id=raw.task_id,
            seq=raw.seq,
        )
    try:
        return LedgerEntry(
            task_id=TaskId(raw.task_id),
            seq=raw.seq,
            at=codec.loads(raw.at, datetime),
            schema=raw.schema,
            event=codec.loads(raw.event, Event, jcs=raw.schema != EventSchema.PEV_SHA256),
            prev_hash=raw.prev_hash,
            hash=raw.hash,
        )
    except (CodecError, RecursionError) as exc:
        raise LedgerCorruptError(
            f"task {raw.task_id}: event {raw.seq} cannot be read: {exc}",
            task_id=raw.task_id,
            seq=raw.seq,
        ) from exc
