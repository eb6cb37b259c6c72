"""The ledger: the I/O shell that folds, seals and appends events through a store.

Every write goes through :meth:`Ledger.append`: the events are folded onto the task's current
state first (an event the state does not allow raises :class:`~pev.errors.StateError` and nothing
is written), then sealed into the hash chain and appended in one durable transaction with the
task's new index row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from pev.errors import (
    ConflictError,
    LeaseLost,
    LedgerCorruptError,
    SchemaVersionError,
    StateError,
    UnknownTaskError,
)
from pev.ledger._chain import GENESIS_HASH, ChainReport, seal, verify_chain
from pev.ledger._events import Event, LedgerEntry
from pev.ledger._lease import Lease
from pev.ledger._machine import expire, new_task, request_cancel
from pev.ledger._phases import TaskPhase
from pev.ledger._state import TaskState, apply
from pev.ledger._store import Store
from pev.ledger._summary import TaskSummary, summarize, task_title
from pev.model import JsonValue, TaskId, VerificationContract, VerificationMode
from pev.policy import RecoveryPolicy

__all__ = ["Ledger", "new_task_id", "utc_now"]


def utc_now() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)


def new_task_id() -> TaskId:
    """A fresh task id: a random UUID, as text."""
    return TaskId(str(uuid.uuid4()))


class _Head(NamedTuple):
    """A task's folded state, the head of its chain, and its index title (one made per write)."""

    state: TaskState
    seq: int
    hash: str
    title: str


class Ledger:
    """Append-only task ledgers over a :class:`Store`.

    A ledger keeps the head of each task it reads or writes: the folded state, the chain's last
    sequence number and hash, and the title of the task's index row (which never changes). So a
    write folds only its new events and a read folds only what other writers added since. The
    heads belong to this ledger alone (nothing is shared between ledgers through module state);
    at most :attr:`HEADS` tasks are kept, the least recently used going first, and a task whose
    head went is folded from its store again when next read or written.

    Args:
        store: Where the events are kept.
        clock: Returns the current UTC time; injected so tests and replays control time.
    """

    HEADS = 1024
    """The most task heads one ledger keeps."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._store = store
        self._clock = clock
        self._heads: dict[str, _Head] = {}

    def _keep(self, task_id: str, head: _Head) -> _Head:
        """Remember ``head`` as the task's latest, dropping the least recently kept past HEADS."""
        heads = self._heads
        heads.pop(task_id, None)  # re-inserted last: the dict's order is the order of use
        heads[task_id] = head
        if len(heads) > self.HEADS:
            del heads[next(iter(heads))]
        return head

    @property
    def store(self) -> Store:
        """The store the ledger writes to."""
        return self._store

    async def create(
        self,
        input: JsonValue,  # noqa: A002 - the documented name for what the task is asked to do
        *,
        contract: VerificationContract | None = None,
        policy: RecoveryPolicy | None = None,
        components: Mapping[str, str] | None = None,
        task_id: str | None = None,
        lease: Lease | None = None,
    ) -> TaskState:
        """Create a task and write its ``task_created`` event.

        Args:
            input: What the task is asked to do (JSON).
            contract: Its verification contract; by default verification is ``off``.
            policy: Its recovery policy.
            components: Import paths of its planner, executor, verifier and observer.
            task_id: Its id; a fresh UUID by default (the lease's task, when a lease is given).
            lease: The first lease (epoch 1) of a driver about to drive the task: the store
                takes it with the task, in the same transaction, so no worker claims the task
                before that driver holds it.

        Raises:
            ConflictError: A task with that id already exists.
            ValueError: The lease is of another task, or not a first lease.
        """
        if lease is not None:
            if task_id is None:
                task_id = lease.task_id
            if (lease.task_id, lease.epoch) != (task_id, 1):
                raise ValueError(f"task {task_id}: a new task's lease is its own, epoch 1")
        created = new_task(
            TaskId(task_id) if task_id is not None else new_task_id(),
            input=input,
            contract=contract or VerificationContract(VerificationMode.OFF),
            policy=policy or RecoveryPolicy(),
            now=self._clock(),
            components=components,
        )
        state, _ = await self._write(None, created.task_id, (created,), fence=lease)
        return state

    async def state(self, task_id: str) -> TaskState:
        """The task's current state, read through (new events are folded onto a cached state).

        Raises:
            UnknownTaskError: No task has that id.
        """
        return (await self._head(task_id)).state

    async def _head(self, task_id: str) -> _Head:
        head = self._heads.get(task_id)
        entries = await self._store.read(task_id, after=head.seq if head else 0)
        state = head.state if head else None
        for entry in entries:
            state = apply(state, entry.event, at=entry.at)
        if state is None:
            raise UnknownTaskError(task_id)
        if head is None or entries:
            title = head.title if head else task_title(state.created)
            head = _Head(state, entries[-1].seq, entries[-1].hash, title)
        # A write that finished while this read was in flight may have kept a newer head.
        kept = self._heads.get(task_id)
        if kept is not None and kept.seq > head.seq:
            return kept
        return self._keep(task_id, head)

    async def append(
        self, task_id: str, events: Sequence[Event], *, fence: Lease | None = None
    ) -> TaskState:
        """Append events to a task in one durable transaction, and return the new state.

        Args:
            task_id: The task.
            events: What to append, in order.
            fence: The writer's lease: the store refuses the append unless it is the task's
                current lease (see :mod:`pev.ledger._lease`).

        Raises:
            StateError: An event is not allowed where the task stands; nothing was written.
            ConflictError: Another writer appended first; re-read the state and decide again.
            LeaseLost: ``fence`` is no longer the task's lease; nothing was written.
        """
        state, _ = await self.write(task_id, events, fence=fence)
        return state

    async def write(
        self, task_id: str, events: Sequence[Event], *, fence: Lease | None = None
    ) -> tuple[TaskState, tuple[LedgerEntry, ...]]:
        """Like :meth:`append`, also returning the entries written (for observers of the log).

        Raises:
            StateError: An event is not allowed where the task stands; nothing was written.
            ConflictError: Another writer appended first; re-read the state and decide again.
            LeaseLost: ``fence`` is no longer the task's lease; nothing was written.
        """
        # The cached head is enough: if another writer moved the task on, the store refuses the
        # stale sequence number with ConflictError and the cache is dropped.
        head = self._heads.get(task_id) or await self._head(task_id)
        return await self._write(head, task_id, events, fence=fence)

    async def acquire(self, task_id: str, owner: str, *, lease_s: float) -> Lease:
        """Take the task's lease for ``owner`` until now + ``lease_s`` (the ledger's clock).

        Raises:
            UnknownTaskError: No task has that id.
            LeaseHeld: Another owner holds a live lease.
        """
        return await self._store.acquire_lease(task_id, owner, now=self._clock(), lease_s=lease_s)

    async def renew(self, lease: Lease, *, lease_s: float) -> Lease:
        """Extend ``lease`` to now + ``lease_s`` while it is the task's current lease.

        Raises:
            LeaseLost: It was taken over.
        """
        return await self._store.renew_lease(lease, now=self._clock(), lease_s=lease_s)

    async def release(self, lease: Lease) -> None:
        """Free ``lease`` now (a lease taken over meanwhile is left as it is)."""
        await self._store.release_lease(lease, now=self._clock())

    async def _write(
        self,
        head: _Head | None,
        task_id: str,
        events: Sequence[Event],
        *,
        fence: Lease | None = None,
    ) -> tuple[TaskState, tuple[LedgerEntry, ...]]:
        """Fold, seal and append ``events`` after ``head`` (``None``: a new task's first)."""
        if not events and head is not None:
            return head.state, ()
        at = self._clock()
        new_state = head.state if head is not None else None
        for event in events:
            new_state = apply(new_state, event, at=at)
        if new_state is None:
            raise StateError("nothing to write", task_id=task_id, state="none")
        # The sealed entries carry the texts they were hashed from, so a store that keeps texts
        # does not encode the events again.
        entries = seal(
            new_state.task_id,
            events,
            after_seq=head.seq if head is not None else 0,
            prev_hash=head.hash if head is not None else GENESIS_HASH,
            at=at,
        )
        title = head.title if head is not None else task_title(new_state.created)
        summary = summarize(new_state, head_hash=entries[-1].hash, title=title)
        try:
            await self._store.append(entries, summary, fence=fence)
        except (ConflictError, LeaseLost):
            self._heads.pop(task_id, None)
            raise
        self._keep(task_id, _Head(new_state, entries[-1].seq, entries[-1].hash, title))
        return new_state, entries

    async def entries(self, task_id: str) -> tuple[LedgerEntry, ...]:
        """Every stored entry of the task, in order.

        Raises:
            UnknownTaskError: No task has that id.
        """
        return await self._store.read(task_id)

    async def tasks(
        self, *, phases: Collection[TaskPhase] | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[TaskSummary, ...]:
        """Index rows of tasks, newest first, optionally only those in ``phases``."""
        return await self._store.list_tasks(phases=phases, limit=limit, offset=offset)

    async def cancel(self, task_id: str, *, reason: str = "") -> TaskState:
        """Ask a task to stop; a task that has ended is returned unchanged.

        Works from any process: it writes a ``cancel_requested`` event that the engine driving
        the task sees.
        """
        for _ in range(_CONFLICT_RETRIES):
            state = await self.state(task_id)
            events = request_cancel(state, reason=reason)
            if not events:
                return state
            try:
                return await self.append(task_id, events)
            except ConflictError:
                continue
        return await self.state(task_id)

    async def expire_overdue(self, now: datetime | None = None) -> tuple[TaskId, ...]:
        """End ``failed``/``replan_deadline_expired`` every task whose replan deadline passed.

        Returns:
            The ids of the tasks it ended.
        """
        moment = now if now is not None else self._clock()
        expired: list[TaskId] = []
        for task_id in await self._store.overdue(moment):
            state = await self.state(task_id)
            events = expire(state, now=moment)
            if not events:
                continue
            try:
                await self.append(task_id, events)
            except (ConflictError, StateError):
                continue  # another writer moved the task on; its own rules apply
            expired.append(task_id)
        return tuple(expired)

    async def verify(self, task_id: str) -> ChainReport:
        """Check a task's stored ledger: hash chain, index head, and that every event folds.

        Returns:
            A report; an edited, dropped (the last one too) or reordered event names the first
            bad sequence number.

        Raises:
            UnknownTaskError: No task has that id.
        """
        summary = await self._store.summary(task_id)
        try:
            entries = await self._store.read(task_id)
        except (LedgerCorruptError, SchemaVersionError) as exc:
            return ChainReport(
                task_id=task_id,
                ok=False,
                events=summary.event_count if summary else 0,
                first_bad_seq=exc.seq if isinstance(exc, LedgerCorruptError) else None,
                problem=str(exc),
            )
        report = verify_chain(
            task_id,
            entries,
            head_count=summary.event_count if summary else None,
            head_hash=summary.head_hash if summary else None,
        )
        if not report.ok:
            return report
        state: TaskState | None = None
        for entry in entries:
            try:
                state = apply(state, entry.event, at=entry.at)
            except StateError as exc:
                return ChainReport(
                    task_id=task_id,
                    ok=False,
                    events=len(entries),
                    first_bad_seq=entry.seq,
                    problem=f"event {entry.seq} does not fit the task's history: {exc}",
                )
        return report

    def forget(self, task_id: str) -> None:
        """Drop the cached state of a task, so the next read folds it from the store."""
        self._heads.pop(task_id, None)


_CONFLICT_RETRIES = 5
