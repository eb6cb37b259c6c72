"""One watcher per store: the cancels and lease changes of every task a process drives.

A driver must notice what other processes write to its task: a ``cancel_requested`` event
(``pev cancel``), or its lease taken over by another driver. Polling each task on its own costs
one read per task per look, and with thousands of tasks in one process the looks are most of
the work. So a store keeps one :class:`TaskWatch` per event loop, which every driver of that
loop follows its task through: each look is a single query of the index for all the followed
tasks at once (:meth:`Marks.marks`: one indexed lookup by task id, no events read or folded),
and only a follower whose task changed is told. The same watch expires, now and then, the
tasks whose replan deadline passed with nobody to start the replan
(:meth:`~pev.ledger.Ledger.expire_overdue`).

A store of your own without ``marks`` is watched all the same, one index row and one lease read
per task a look (:func:`read_marks`).

A store that hears every write to its tasks, because each is made through the store object itself
(:class:`~pev.stores.MemoryStore`: :attr:`WatchedStore.hears_every_write`), tells its watches
of each new mark as it is made (:meth:`WatchedStore.tell_watches`) instead: its watch never
looks, so a process holding thousands of such stores (``pev.run`` makes one per task by default)
keeps no timer per store, and a follower hears a cancel at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol, runtime_checkable

from pev._logs import log_failure
from pev.ledger._lease import Lease
from pev.ledger._phases import TERMINAL_PHASES, TaskPhase
from pev.ledger._store import Store

__all__ = [
    "Follower",
    "Marks",
    "TaskMark",
    "TaskWatch",
    "WatchedStore",
    "read_marks",
    "watch_of",
]

log = logging.getLogger("pev.ledger")

POLL_S = 0.25
"""How often a watch looks at the tasks it follows."""

_EXPIRE_EVERY_POLLS = 20  # about every 5 s at POLL_S: overdue replans are rare and not urgent
EXPIRE_S = POLL_S * _EXPIRE_EVERY_POLLS
"""How often a watch expires overdue replans while anyone follows (a watch that never looks too)."""


class TaskMark(NamedTuple):
    """What a watch reads of one task: its phase and its current lease's owner and epoch.

    Attributes:
        task_id: The task.
        phase: Its phase in the task index.
        owner: Its lease's owner, or ``None`` if it never had a lease.
        epoch: Its lease's epoch, or ``None`` if it never had a lease.
    """

    task_id: str
    phase: TaskPhase
    owner: str | None
    epoch: int | None


@runtime_checkable
class Marks(Protocol):
    """A store that reads the marks of many tasks in one query (optional; pev's stores do)."""

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """The marks of those of ``task_ids`` that exist, in any order."""
        ...


async def read_marks(store: Store, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
    """The marks of ``task_ids``: in one query where the store has :class:`Marks`, else per task."""
    if isinstance(store, Marks):
        return await store.marks(task_ids)
    marks = []
    for task_id in task_ids:
        summary = await store.summary(task_id)
        if summary is None:
            continue
        lease = await store.lease(task_id)
        marks.append(
            TaskMark(
                task_id,
                summary.phase,
                lease.owner if lease is not None else None,
                lease.epoch if lease is not None else None,
            )
        )
    return tuple(marks)


@dataclass(eq=False, slots=True)
class Follower:
    """One driver's interest in its task.

    Attributes:
        lease: The lease the driver holds: a mark with another owner or epoch means its task
            was taken over.
        on_cancel: Called once the task is being cancelled, or ended by another writer.
        on_lost: Called once the task's lease has another owner or epoch.
    """

    lease: Lease
    on_cancel: Callable[[], object]
    on_lost: Callable[[], object]
    told_cancel: bool = False
    told_lost: bool = False

    def see(self, mark: TaskMark) -> None:
        """Tell the driver what changed since the last look, once per kind of change."""
        if not self.told_cancel and (
            mark.phase is TaskPhase.CANCELLING or mark.phase in TERMINAL_PHASES
        ):
            self.told_cancel = True
            self.on_cancel()
        lease = self.lease
        if (
            not self.told_lost
            and mark.owner is not None
            and (mark.owner, mark.epoch) != (lease.owner, lease.epoch)
        ):
            self.told_lost = True
            self.on_lost()


class TaskWatch:
    """Watches the tasks its followers drive, all in one query a look, on one event loop.

    Its look runs as one background task while anyone follows, and stops with the last
    follower. The watch of a store that hears every write never looks: the store tells it of
    each new mark (:meth:`WatchedStore.tell_watches`), and it only expires overdue replans now
    and then. Get a store's watch with :func:`watch_of`.

    Args:
        store: The store the tasks live in.
        expire: Called about every 5 s (:data:`EXPIRE_S`) while anyone follows, to expire
            overdue replans; a failure is logged.
        poll_s: How often to look.
    """

    def __init__(
        self,
        store: Store,
        *,
        expire: Callable[[], Awaitable[object]] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self._expire = expire
        self._poll_s = poll_s
        self._followers: dict[str, list[Follower]] = {}
        self._looking: asyncio.Task[None] | None = None
        self._told = isinstance(store, WatchedStore) and store.hears_every_write
        self._timer: asyncio.TimerHandle | None = None  # the next expiry of a watch that is told

    @contextlib.asynccontextmanager
    async def follow(self, follower: Follower) -> AsyncIterator[Follower]:
        """While the block runs, tell ``follower`` of its task's cancel and lease changes."""
        task_id = follower.lease.task_id
        self._followers.setdefault(task_id, []).append(follower)
        try:
            if not self._told:
                if self._looking is None:
                    self._looking = asyncio.create_task(self._look(), name="pev-task-watch")
            else:
                if self._timer is None and self._expire is not None:
                    self._timer = asyncio.get_running_loop().call_later(EXPIRE_S, self._expire_now)
                # What changed before the follower came is told as it stands now.
                for mark in await read_marks(self._store, (task_id,)):
                    self._see(mark)
            yield follower
        finally:
            followers = self._followers[task_id]
            followers.remove(follower)
            if not followers:
                del self._followers[task_id]
            if not self._followers:
                await self._stop()

    def told(self, mark: TaskMark, loop: asyncio.AbstractEventLoop) -> None:
        """Tell the followers of ``mark``'s task of it, on ``loop``, the watch's (any thread)."""
        if mark.task_id not in self._followers:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._see(mark)
            return
        with contextlib.suppress(RuntimeError):  # its loop closed: nobody follows there now
            loop.call_soon_threadsafe(self._see, mark)

    def _see(self, mark: TaskMark) -> None:
        for follower in tuple(self._followers.get(mark.task_id, ())):
            follower.see(mark)

    async def _stop(self) -> None:
        """The last follower is out: stop the look (a new follower starts another)."""
        if isinstance(self._store, WatchedStore):
            self._store.forget_watch(self)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        looking, self._looking = self._looking, None
        if looking is not None:
            looking.cancel()
            await asyncio.gather(looking, return_exceptions=True)

    def _expire_now(self) -> None:
        """The timer of a watch that is told: expire overdue replans, then set it again."""
        self._timer = None
        if self._followers and self._looking is None:
            self._looking = asyncio.create_task(self._expire_once(), name="pev-task-watch")

    async def _expire_once(self) -> None:
        try:
            await self._expire_overdue()
        finally:
            self._looking = None
            if self._followers and self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(EXPIRE_S, self._expire_now)

    async def _expire_overdue(self) -> None:
        if self._expire is None:
            return
        try:
            await self._expire()
        except Exception:  # noqa: BLE001 - logged by log_failure; the watch goes on
            log_failure(log, "pev: expiring overdue tasks failed")

    async def _look(self) -> None:
        looks = 0
        this = asyncio.current_task()
        # A cancel lost inside the store (asyncio.wait_for on Python 3.11 can drop one, and
        # psycopg_pool waits that way) must still stop the look: it is checked at each turn.
        while this is None or this.cancelling() == 0:
            await asyncio.sleep(self._poll_s)
            looks += 1
            try:
                marks = await read_marks(self._store, tuple(self._followers))
            except Exception:  # noqa: BLE001 - logged by log_failure; the watch goes on
                # A store's failure (or a damaged index row) must not end the watch of every
                # task: it is logged, and the next look tries again.
                log_failure(log, "pev: watching %d tasks failed", len(self._followers))
                continue
            for mark in marks:
                self._see(mark)
            if looks % _EXPIRE_EVERY_POLLS == 0:
                await self._expire_overdue()


class WatchedStore:
    """What a store mixes in to keep one :class:`TaskWatch` per event loop that drives tasks."""

    hears_every_write: ClassVar[bool] = False
    """Whether every write to the store's tasks is made through this very object, so that it
    can tell its watches of each change itself (:meth:`tell_watches`) and they never look."""

    def __init__(self) -> None:
        # A store may serve several event loops (threads of one process): one watch each.
        self._watches: dict[asyncio.AbstractEventLoop, TaskWatch] = {}
        self._watches_lock = threading.Lock()

    def task_watch(self, make: Callable[[], TaskWatch]) -> TaskWatch:
        """The watch of the running event loop, made with ``make`` if it has none."""
        loop = asyncio.get_running_loop()
        with self._watches_lock:
            for other in [other for other in self._watches if other.is_closed()]:
                del self._watches[other]  # a closed loop's watch has no follower left
            watch = self._watches.get(loop)
            if watch is None:
                watch = self._watches[loop] = make()
            return watch

    def forget_watch(self, watch: TaskWatch) -> None:
        """Drop ``watch``, whose last follower left (the next follower gets a new one).

        Neither keeps the other alive then: a store nobody holds any more is freed at once.
        """
        with self._watches_lock:
            for loop, kept in list(self._watches.items()):
                if kept is watch:
                    del self._watches[loop]

    def tell_watches(self, mark: TaskMark) -> None:
        """Tell the watches that follow ``mark``'s task of its new mark (from any thread).

        For a store that :attr:`hears_every_write`, after each write that may change a mark: an
        append (its phase) and a lease taken (its owner and epoch).
        """
        if not (self.hears_every_write and self._watches):
            return
        with self._watches_lock:
            watches = list(self._watches.items())
        for loop, watch in watches:
            watch.told(mark, loop)


def watch_of(store: Store, make: Callable[[], TaskWatch]) -> TaskWatch:
    """The store's shared watch for the running event loop; a store of your own gets its own."""
    if isinstance(store, WatchedStore):
        return store.task_watch(make)
    return make()
