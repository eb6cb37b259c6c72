"""Wake-ups and append signals, as the stores give them.

* :class:`Waiters`: a store that only this process writes (:class:`~pev.stores.MemoryStore`)
  signals its own waiters directly (see :class:`~pev.ledger.Wakeups` for what a signal means).
  Waiters may wait on any event loop, in any thread: a signal sets each event in its own loop.
* :class:`TaskSignals`: the followers of each task (:class:`~pev.ledger.Appends`), told once an
  append to it has committed. Every store signals its own appends through one; a store that
  hears of other processes' appends (PostgreSQL's ``LISTEN``) signals those through it too.
* :data:`UNCLAIMABLE_PHASES`: where a task cannot be claimed, so that nobody is woken for it.
* :func:`watched`: a store that learns of changes by watching (PostgreSQL's ``LISTEN``, SQLite's
  ``data_version``) runs its watch as a background task while a waiter waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any

from pev.ledger import TERMINAL_PHASES, Lease, TaskPhase, TaskSummary

__all__ = ["UNCLAIMABLE_PHASES", "TaskSignals", "Waiters", "wakes_workers", "watched"]

UNCLAIMABLE_PHASES = TERMINAL_PHASES | {TaskPhase.AWAITING_APPROVAL}
"""Phases in which no worker may claim a task: it has ended, or it waits for a person's approval
(and holds no lease while it waits). Each store's claim leaves them out, and an append written by
no driver that leaves its task in any other phase wakes the idle workers."""


def wakes_workers(summary: TaskSummary, fence: Lease | None) -> bool:
    """Whether an append wakes idle workers: written by no driver, it leaves its task claimable.

    A new task without a lease (``pev.submit``), a person's approval, rejection or cancel: a
    worker may claim the task now. (PostgreSQL's ``pev_append`` applies the same rule.)
    """
    return fence is None and summary.phase not in UNCLAIMABLE_PHASES


class Waiters:
    """The events of the workers waiting for runnable tasks, each on its own event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}

    @contextlib.asynccontextmanager
    async def watch(self, event: asyncio.Event | None = None) -> AsyncIterator[asyncio.Event]:
        """An event set by every :meth:`signal` while the block runs: ``event``, or a new one.

        A store that also watches for other processes' changes passes the event its watch sets,
        so that its waiters wait on one event for both.
        """
        event = asyncio.Event() if event is None else event
        with self._lock:
            self._events[event] = asyncio.get_running_loop()
        try:
            yield event
        finally:
            with self._lock:
                del self._events[event]

    def signal(self) -> None:
        """Set every waiting event, each in its own loop (from any thread)."""
        with self._lock:
            waiting = list(self._events.items())
        _set_all(waiting)


class TaskSignals:
    """The events of the followers of each task, each on its own event loop.

    :meth:`signal` runs after every append a store commits, mostly of tasks that nobody follows:
    for those it costs one dictionary lookup, without taking a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Task id -> its followers' events and their loops. A task leaves the dictionary with its
        # last follower, so that the lookup of an unfollowed task finds nothing.
        self._followers: dict[str, dict[asyncio.Event, asyncio.AbstractEventLoop]] = {}

    @contextlib.asynccontextmanager
    async def follow(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set by every :meth:`signal` of ``task_id`` while the block runs."""
        event = asyncio.Event()
        loop = asyncio.get_running_loop()
        with self._lock:
            self._followers.setdefault(task_id, {})[event] = loop
        try:
            yield event
        finally:
            with self._lock:
                followers = self._followers[task_id]
                del followers[event]
                if not followers:
                    del self._followers[task_id]

    def signal(self, task_id: str) -> None:
        """Set the events of the task's followers, each in its own loop (from any thread)."""
        # Read without the lock: a lookup of the dictionary is atomic, and a follower that
        # arrives just after it reads the ledger itself before it waits.
        if task_id not in self._followers:
            return
        with self._lock:
            waiting = list(self._followers.get(task_id, {}).items())
        _set_all(waiting)

    def signal_all(self) -> None:
        """Set the event of every follower of every task (signals may have been missed)."""
        with self._lock:
            waiting = [pair for followers in self._followers.values() for pair in followers.items()]
        _set_all(waiting)


def _set_all(waiting: Iterable[tuple[asyncio.Event, asyncio.AbstractEventLoop]]) -> None:
    """Set each event in its own loop: at once in the running one, else through its loop."""
    running = _running_loop()
    for event, loop in waiting:
        if loop is running:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody is waiting
                loop.call_soon_threadsafe(event.set)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread without a loop: every event is set through its own
        return None


@contextlib.asynccontextmanager
async def watched(
    watch: Callable[[asyncio.Event], Coroutine[Any, Any, None]], *, name: str
) -> AsyncIterator[asyncio.Event]:
    """While the block runs, an event that ``watch`` sets, run as a task (cancelled after it)."""
    event = asyncio.Event()
    watcher = asyncio.create_task(watch(event), name=name)
    try:
        yield event
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
