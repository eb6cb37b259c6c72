"""The ledger: the I/O shell that folds, seals and appends events through a store.

Every write goes through :meth:`Ledger.append`: the events are folded onto the task's current
state first (an event the state does not allow raises :class:`~pev.errors.StateError` and nothing
is written), then sealed into the hash chain and appended with the task's new index row,
atomically and durably (the store may commit appends issued together in one transaction). With
a ledger key (``PEV_LEDGER_KEY``) each new event is sealed with HMAC-SHA256 under it, so that
nobody without the key can reseal an edit.
"""

from __future__ import annotations

import enum
import os
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from pev.errors import (
    ConflictError,
    LeaseLost,
    StateError,
    StoreUnavailable,
    UnknownTaskError,
    UsageError,
)
from pev.ledger._chain import GENESIS_HASH, KEYED, seal
from pev.ledger._checks import ChainReport
from pev.ledger._events import Event, LedgerEntry
from pev.ledger._lease import Lease
from pev.ledger._machine import approve, expire, new_task, reject, request_cancel
from pev.ledger._phases import TaskPhase
from pev.ledger._state import TaskState, apply
from pev.ledger._store import Store
from pev.ledger._summary import TaskSummary, summarize, task_title
from pev.ledger._unanswered import Unanswered, settle
from pev.ledger._verify import verify_task
from pev.model import JsonValue, TaskId, VerificationContract, VerificationMode
from pev.policy import RecoveryPolicy

__all__ = ["LEDGER_KEY_ENV", "Ledger", "ledger_key", "new_task_id", "utc_now"]

LEDGER_KEY_ENV = "PEV_LEDGER_KEY"
"""The environment variable holding the ledger key (its UTF-8 bytes are the HMAC key)."""


class _Environment(enum.Enum):
    """The default of :class:`Ledger`'s ``key``: read :data:`LEDGER_KEY_ENV`."""

    KEY = "environment"


def ledger_key(key: str | bytes | None = None) -> bytes | None:
    """The ledger key as bytes: ``key`` when given, else :data:`LEDGER_KEY_ENV` (``None``: unset).

    A text key stands for its UTF-8 bytes; an empty key is no key.
    """
    if key is None:
        key = os.environ.get(LEDGER_KEY_ENV)
    if isinstance(key, str):
        key = key.encode("utf-8")
    return key or None


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
    keyed: bool  # the head entry is sealed with the ledger key


class _Kept(NamedTuple):
    """An append whose outcome the store never told: the append, the head it makes, its send."""

    pending: Unanswered
    made: _Head
    send: Callable[[], Awaitable[None]]


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
        key: The ledger key: new events are sealed with HMAC-SHA256 under it, and
            :meth:`verify` checks such seals with it. By default the ``PEV_LEDGER_KEY``
            environment variable (read once, here); ``None`` for no key. Without a key, new
            events are sealed with sha256, and a task whose last event is keyed is refused
            (:class:`~pev.errors.UsageError`) rather than continued without it.
    """

    HEADS = 1024
    """The most task heads one ledger keeps."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime] = utc_now,
        key: str | bytes | _Environment | None = _Environment.KEY,
    ) -> None:
        self._store = store
        self._clock = clock
        self._key = ledger_key() if key is _Environment.KEY else ledger_key(key or b"")
        self._heads: dict[str, _Head] = {}
        # Appends whose outcome the store never told, with the head each would make.
        self._unanswered: dict[str, _Kept] = {}

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

    @property
    def keyed(self) -> bool:
        """True when the ledger has a key: new events are sealed with HMAC-SHA256."""
        return self._key is not None

    async def create(
        self,
        input: JsonValue,  # noqa: A002 - the documented name for what the task is asked to do
        *,
        contract: VerificationContract | None = None,
        policy: RecoveryPolicy | None = None,
        components: Mapping[str, str] | None = None,
        task_id: str | None = None,
        lease: Lease | None = None,
        then: Sequence[Event] = (),
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
            then: Events that follow the creation in the same append (the ``driver_started``
                of the driver that holds ``lease``): one write instead of two.

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
        try:
            state, _ = await self._write(None, created.task_id, (created, *then), fence=lease)
        except LeaseLost:
            # The store checks the fence first: a task of that id, driven by another, refuses it.
            if await self._store.summary(created.task_id) is None:
                raise
            raise ConflictError(created.task_id, 1) from None
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
            last = entries[-1]
            head = _Head(state, last.seq, last.hash, title, last.schema == KEYED)
        # A write that finished while this read was in flight may have kept a newer head.
        kept = self._heads.get(task_id)
        if kept is not None and kept.seq > head.seq:
            return kept
        return self._keep(task_id, head)

    async def append(
        self, task_id: str, events: Sequence[Event], *, fence: Lease | None = None
    ) -> TaskState:
        """Append events to a task, atomically and durably, and return the new state.

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
        kept = self._unanswered.pop(task_id, None)
        if kept is not None:
            done = await self._settle_kept(task_id, events, kept)
            if done is not None:
                return done
            head = self._heads.get(task_id)
            if head is None:
                try:
                    head = await self._head(task_id)
                except UnknownTaskError:
                    head = None  # a new task's first append, which did not land
        if head is not None and head.keyed and self._key is None:
            raise UsageError(
                f"task {task_id}: its ledger is sealed with a key, and this ledger has none; set "
                f"{LEDGER_KEY_ENV} to the key it was written with to continue it"
            )
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
            key=self._key,
        )
        title = head.title if head is not None else task_title(new_state.created)
        summary = summarize(new_state, head_hash=entries[-1].hash, title=title)
        last = entries[-1]
        made = _Head(new_state, last.seq, last.hash, title, self._key is not None)

        async def send() -> None:
            await self._store.append(entries, summary, fence=fence)

        try:
            try:
                await send()
            except StoreUnavailable as exc:
                # The answer was lost: find out whether it landed before sending it again.
                pending = Unanswered(tuple(events), entries, head.seq if head is not None else 0)
                try:
                    await settle(self._store, pending, send, first=exc)
                except StoreUnavailable:
                    self._unanswered[task_id] = _Kept(pending, made, send)
                    raise
        except BaseException:
            # Another writer moved the task on (ConflictError, LeaseLost), or this append's
            # outcome is unknown (cancelled while it waited for a shared commit, a commit whose
            # answer was lost): the task's head is read from the store again when next needed.
            self._heads.pop(task_id, None)
            raise
        self._keep(task_id, made)
        return new_state, entries

    async def _settle_kept(
        self, task_id: str, events: Sequence[Event], kept: _Kept
    ) -> tuple[TaskState, tuple[LedgerEntry, ...]] | None:
        """Settle an append whose outcome was unknown, before anything else is written.

        Returns:
            The append's state and entries when ``events`` are its very events and they are
            now stored (landed at the time, or sent again with their fence); ``None`` when
            ``events`` are still to be written (after the kept append, if it landed).

        Raises:
            StoreUnavailable: The store still does not answer; the append stays kept.
            ConflictError: The kept append did not land and another writer moved the task on:
                ``events`` were decided on a head that is gone, as for any writer that lost
                the race (re-read the state and decide again).
        """
        again = tuple(events) == kept.pending.events
        try:
            stored = await settle(self._store, kept.pending, kept.send if again else None)
        except StoreUnavailable:
            self._unanswered[task_id] = kept
            raise
        except ConflictError:
            self._heads.pop(task_id, None)
            raise
        if not stored:
            self._heads.pop(task_id, None)
            return None
        self._keep(task_id, kept.made)
        return (kept.made.state, kept.pending.entries) if again else None

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
        return await self._from_outside(task_id, lambda state: request_cancel(state, reason=reason))

    async def approve(
        self, task_id: str, *, by: str, note: str = "", revision: int | None = None
    ) -> TaskState:
        """Approve the revision the task awaits approval for, from any process.

        Args:
            task_id: The task.
            by: Who approves (kept in the ledger).
            note: What they add, if anything.
            revision: The revision they looked at: refused if the task awaits another.

        Raises:
            StateError: The task is not awaiting approval (of ``revision``, when given); one
                whose deadline has passed is ended first (``approval_expired``), so a late
                decision is refused.
        """
        await self.expire(task_id)
        return await self._from_outside(
            task_id, lambda state: approve(state, by=by, note=note, revision=revision)
        )

    async def reject(
        self,
        task_id: str,
        *,
        by: str,
        reason: str,
        revision: int | None = None,
        stop: bool = False,
    ) -> TaskState:
        """Reject the revision the task awaits approval for, from any process.

        The reason is fed to the planner; with ``stop`` the task ends ``failed``/``rejected``
        instead (see :func:`pev.ledger.reject`).

        Raises:
            StateError: The task is not awaiting approval (of ``revision``, when given); one
                whose deadline has passed is ended first, as :meth:`approve` says.
        """
        await self.expire(task_id)
        return await self._from_outside(
            task_id,
            lambda state: reject(
                state, by=by, reason=reason, now=self._clock(), revision=revision, stop=stop
            ),
        )

    async def expire(self, task_id: str, *, now: datetime | None = None) -> TaskState:
        """End the task if what it waits for is overdue (see :func:`pev.ledger.expire`).

        Returns:
            Its state: ended, or as it was when nothing was overdue.
        """
        moment = now if now is not None else self._clock()
        return await self._from_outside(task_id, lambda state: expire(state, now=moment))

    async def _from_outside(
        self, task_id: str, decide: Callable[[TaskState], Sequence[Event]]
    ) -> TaskState:
        """Append what ``decide`` makes of the task's state, without a lease, as others write.

        A writer that came first (``ConflictError``) makes it read the state and decide again.

        Raises:
            ConflictError: Other writers came first every time it tried.
        """
        state = await self.state(task_id)
        for _ in range(_CONFLICT_RETRIES):
            events = decide(state)
            if not events:
                return state
            try:
                return await self.append(task_id, events)
            except ConflictError:
                state = await self.state(task_id)
        raise ConflictError(task_id, state.event_count + 1)

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
            except UsageError:
                continue  # sealed with a key this ledger lacks: left to a ledger that has it
            expired.append(task_id)
        return tuple(expired)

    async def verify(self, task_id: str, *, require_key: bool = False) -> ChainReport:
        """Check a task's stored ledger from its events, against its index row, and fold it.

        The chain is computed again from the stored texts themselves (:func:`verify_raw`): each
        event's text, its seal (HMAC-SHA256 ones with this ledger's key) and its link. Then the
        task index must agree with the events (an index row for each task with events, none
        without, the same count and head hash), and every event must decode and fold. Damage is
        reported, never raised: an event that does not parse, decode or fold is named.

        Events sealed with sha256 verify as such, as a ledger written before it had a key does:
        only one that follows an event sealed with the key is bad. A forger without the key who
        reseals a whole task with sha256 is caught with ``require_key=True``, under which every
        event must be sealed with the key (or by a head kept elsewhere: ``pev ledger anchor``).
        The report's ``keyed_events`` counts the events sealed with the key.

        Returns:
            A report; an edited, dropped (the last one too) or reordered event names the first
            bad sequence number.

        Raises:
            UnknownTaskError: Neither the task index nor the events know the task.
        """
        return await verify_task(self._store, task_id, key=self._key, require_key=require_key)

    def forget(self, task_id: str) -> None:
        """Drop the cached state of a task, so the next read folds it from the store."""
        self._heads.pop(task_id, None)


_CONFLICT_RETRIES = 5
