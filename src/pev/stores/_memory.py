"""The in-memory store: the store contract without durability, for tests and short runs.

It also keeps episodes and lessons (:class:`~pev.experience.LessonStore`); its lesson search is
a plain term match, where the SQLite store uses FTS5.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import datetime

from pev.errors import CodecError, StoreError, UnknownTaskError
from pev.experience import Episode, Lesson, LessonStatus, lesson_terms, search_terms
from pev.kernel import deadline_passed
from pev.ledger import (
    GENESIS_HASH,
    EventSchema,
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
from pev.ledger._chain import raw_entry
from pev.ledger._lease import is_free
from pev.ledger._watch import TaskMark, WatchedStore
from pev.model import TaskId
from pev.stores._wakeups import UNCLAIMABLE_PHASES, TaskSignals, Waiters, wakes_workers

__all__ = ["MemoryStore"]


class MemoryStore(WatchedStore):
    """Keeps ledgers in this process's memory; they are gone when it exits.

    Safe to share between the threads and tasks of one process. Every write is made through it,
    so it tells the drivers that follow a task of a cancel or a takeover as it is written
    (:attr:`~pev.ledger._watch.WatchedStore.hears_every_write`): nothing polls it.
    """

    hears_every_write = True

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._entries: dict[str, list[LedgerEntry]] = {}
        self._summaries: dict[str, TaskSummary] = {}
        # Tasks waiting for a replan, with its deadline: what `overdue` looks through, so that
        # it does not walk every task (the engine asks whenever a run starts).
        self._waiting: dict[str, datetime] = {}
        self._episodes: dict[str, Episode] = {}
        self._support: dict[str, dict[str, None]] = {}  # lesson id -> task ids, in save order
        self._lessons: dict[str, Lesson] = {}
        self._leases: dict[str, Lease] = {}
        self._waiters = Waiters()
        self._appended = TaskSignals()
        self._closed = False

    @property
    def follow_poll_s(self) -> float:
        """How often a follower reads anyway: 1 s, since every append is made here and heard."""
        return 1.0

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append a batch and its index row atomically (see :class:`pev.ledger.Store`)."""
        with self._lock:
            self._check_open()
            task_id = entries[0].task_id if entries else ""
            stored = self._entries.get(task_id, [])
            head_seq = stored[-1].seq if stored else 0
            head_hash = stored[-1].hash if stored else GENESIS_HASH
            first = None
            if fence is not None:
                first = fenced(self._leases.get(task_id), fence, new_task=not stored)
            check_batch(entries, summary, head_seq=head_seq, head_hash=head_hash)
            if first is not None:
                self._leases[task_id] = first
            # In place: reads hand out copies, and a checked batch cannot fail half-way.
            self._entries.setdefault(task_id, stored).extend(entries)
            self._summaries[task_id] = summary
            if summary.replan_deadline is None:
                self._waiting.pop(task_id, None)
            else:
                self._waiting[task_id] = summary.replan_deadline
            mark = self._mark(task_id, summary)
        self.tell_watches(mark)
        if wakes_workers(summary, fence):
            self._waiters.signal()
        self._appended.signal(task_id)

    async def acquire_lease(
        self, task_id: str, owner: str, *, now: datetime, lease_s: float
    ) -> Lease:
        """Take the task's lease for ``owner`` (see :class:`pev.ledger.Store`)."""
        with self._lock:
            self._check_open()
            if task_id not in self._entries:
                raise UnknownTaskError(task_id)
            lease = acquired(self._leases.get(task_id), task_id, owner, now=now, lease_s=lease_s)
            self._leases[task_id] = lease
            mark = self._mark(task_id, self._summaries[task_id])
        self.tell_watches(mark)
        return lease

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        """Take the leases of up to ``limit`` runnable tasks, oldest first, under the lock."""
        if limit <= 0:
            return ()
        with self._lock:
            self._check_open()
            runnable = sorted(
                (s.created_at, s.task_id)
                for s in self._summaries.values()
                if s.phase not in UNCLAIMABLE_PHASES and is_free(self._leases.get(s.task_id), now)
            )
            taken: list[Lease] = []
            for _, task_id in runnable[:limit]:
                lease = acquired(
                    self._leases.get(task_id), task_id, owner, now=now, lease_s=lease_s
                )
                self._leases[task_id] = lease
                taken.append(lease)
            marks = [self._mark(lease.task_id, self._summaries[lease.task_id]) for lease in taken]
        for mark in marks:
            self.tell_watches(mark)
        return tuple(taken)

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Extend the lease while it is the task's current one."""
        with self._lock:
            self._check_open()
            longer = renewed(self._leases.get(lease.task_id), lease, now=now, lease_s=lease_s)
            self._leases[lease.task_id] = longer
            return longer

    async def release_lease(self, lease: Lease, *, now: datetime) -> None:
        """Free the lease from ``now``, unless it was taken over."""
        with self._lock:
            self._check_open()
            freed = released(self._leases.get(lease.task_id), lease, now=now)
            if freed is not None:
                self._leases[lease.task_id] = freed
                if self._summaries[lease.task_id].phase not in UNCLAIMABLE_PHASES:
                    self._waiters.signal()  # left unfinished: a worker may go on with it

    def wakeups(self) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set when a task may have become runnable (see :class:`pev.ledger.Wakeups`)."""
        return self._waiters.watch()

    def appended(self, task_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set once an append to ``task_id`` is made (see :class:`pev.ledger.Appends`)."""
        return self._appended.follow(task_id)

    async def lease(self, task_id: str) -> Lease | None:
        """The task's current lease, or ``None``."""
        with self._lock:
            self._check_open()
            return self._leases.get(task_id)

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries after ``after`` (see :class:`pev.ledger.Store`)."""
        with self._lock:
            self._check_open()
            stored = self._entries.get(task_id)
            if stored is None:
                raise UnknownTaskError(task_id)
            return tuple(stored[max(after, 0) :])  # entry seq n sits at index n - 1

    async def read_raw(self, task_id: str) -> tuple[RawEntry, ...]:
        """The task's entries as a store of texts would hold them (see :class:`pev.ledger.Store`).

        This store keeps the entries themselves, so their texts are written again here, each in
        its schema's form: the same texts their seals were computed over.
        """
        stored = await self.read(task_id)
        return tuple(_raw(entry) for entry in stored)

    async def ledger_task_ids(self) -> tuple[str, ...]:
        """Every task that has events, sorted."""
        with self._lock:
            self._check_open()
            return tuple(sorted(task_id for task_id, stored in self._entries.items() if stored))

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None``."""
        with self._lock:
            self._check_open()
            return self._summaries.get(task_id)

    async def list_tasks(
        self,
        *,
        phases: Collection[TaskPhase] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[TaskSummary, ...]:
        """Index rows, newest first, optionally only those in ``phases``."""
        with self._lock:
            self._check_open()
            rows = [s for s in self._summaries.values() if phases is None or s.phase in phases]
        rows.sort(key=lambda s: (s.created_at, s.task_id), reverse=True)
        return tuple(rows[offset : offset + limit])

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting (for a replan or an approval) whose deadline is at or before ``now``.

        Earliest deadline first: the index row's ``replan_deadline``, which holds the deadline of
        whatever the task waits for.
        """
        with self._lock:
            self._check_open()
            due = [(at, t) for t, at in self._waiting.items() if deadline_passed(now, at)]
        return tuple(TaskId(task_id) for _, task_id in sorted(due))

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """The phase and lease of each of ``task_ids`` that exists."""
        with self._lock:
            return tuple(
                self._mark(task_id, summary)
                for task_id in task_ids
                if (summary := self._summaries.get(task_id)) is not None
            )

    def _mark(self, task_id: str, summary: TaskSummary) -> TaskMark:
        """The task's phase and lease (under the lock)."""
        lease = self._leases.get(task_id)
        owner, epoch = (lease.owner, lease.epoch) if lease is not None else (None, None)
        return TaskMark(task_id, summary.phase, owner, epoch)

    async def save_episode(self, episode: Episode, *, supports: Collection[str] = ()) -> None:
        """Keep an episode once, with the lessons it supports (see ``LessonStore``)."""
        with self._lock:
            self._check_open()
            if episode.task_id in self._episodes:
                return
            self._episodes[episode.task_id] = episode
            for lesson_id in supports:
                self._support.setdefault(lesson_id, {})[episode.task_id] = None

    async def episode(self, task_id: str) -> Episode | None:
        """The episode of a task, or ``None``."""
        with self._lock:
            self._check_open()
            return self._episodes.get(task_id)

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes supporting a lesson, in save order."""
        with self._lock:
            self._check_open()
            return tuple(self._episodes[t] for t in self._support.get(lesson_id, {}))

    async def save_lesson(self, lesson: Lesson) -> None:
        """Insert or replace a lesson by id."""
        with self._lock:
            self._check_open()
            self._lessons[lesson.id] = lesson

    async def lesson(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        with self._lock:
            self._check_open()
            return self._lessons.get(lesson_id)

    async def lessons(self, *, status: LessonStatus | None = None) -> tuple[Lesson, ...]:
        """Every lesson (or those with ``status``), most independent support first."""
        with self._lock:
            self._check_open()
            found = [
                lesson
                for lesson in self._lessons.values()
                if status is None or lesson.status is status
            ]
        return _by_support(found)

    async def search_lessons(
        self, query: str, *, limit: int = 5, status: LessonStatus | None = None
    ) -> tuple[Lesson, ...]:
        """Lessons holding any of the query's terms: most terms held first, then support."""
        terms = search_terms(query)
        if not terms:
            return ()
        return rank_by_terms(await self.lessons(status=status), terms, limit=limit)

    async def close(self) -> None:
        """Drop everything; the store is unusable afterwards."""
        with self._lock:
            self._closed = True
            self._entries.clear()
            self._summaries.clear()
            self._waiting.clear()
            self._episodes.clear()
            self._support.clear()
            self._lessons.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this MemoryStore is closed")


def _raw(entry: LedgerEntry) -> RawEntry:
    try:
        return raw_entry(entry)
    except (CodecError, ValueError):
        # An entry its schema cannot write (only one put here behind the store's back): its
        # text in pev's own form, which the check then finds is not its schema's.
        return replace(
            raw_entry(replace(entry, schema=EventSchema.PEV_SHA256)), schema=entry.schema
        )


def rank_by_terms(
    lessons: Iterable[Lesson], terms: Sequence[str], *, limit: int
) -> tuple[Lesson, ...]:
    """The first ``limit`` lessons holding any of ``terms``, most held first, ties kept in order.

    The term match of the memory store, and of the SQLite store where it has no FTS5.
    """
    scored: list[tuple[int, Lesson]] = []
    for lesson in lessons:
        held = set(lesson_terms(lesson))
        score = sum(term in held for term in terms)
        if score:
            scored.append((score, lesson))
    scored.sort(key=lambda pair: -pair[0])  # stable: ties keep the order given
    return tuple(lesson for _, lesson in scored[:limit])


def _by_support(lessons: Iterable[Lesson]) -> tuple[Lesson, ...]:
    """Active first, then most independent support, then id: the order lessons are listed in."""
    return tuple(
        sorted(lessons, key=lambda x: (not x.active, -x.independent, -len(x.support), x.id))
    )
