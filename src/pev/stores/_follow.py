"""The followers of a store's tasks in this process, told of other processes' appends too.

A store signals its own appends to the followers of their tasks at once (:class:`TaskSignals`).
Another process's append reaches them through a watch that runs while anyone follows: one per
event loop, started by the loop's first follower and stopped with its last, so that a process
nobody follows in pays nothing for it. What the watch is depends on the store:

* PostgreSQL: every committed append notifies the schema's events channel with its task's id
  (migration 6); the watch is one connection that ``LISTEN``s and routes each id to that task's
  followers. A connection that fails is logged and made again, backing off; once it listens
  again, every follower is told to read, since appends committed meanwhile went unheard.
* SQLite: no process can signal another through a file, so the watch reads the file's
  ``PRAGMA data_version`` every few milliseconds (a read of one header page, taking no lock) and
  tells every follower to read once another connection has committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pev.stores._wakeups import TaskSignals

__all__ = ["Followers"]


@dataclass(slots=True)
class _Listener:
    """The watch of one event loop, and how many followers of that loop use it."""

    task: asyncio.Task[None]
    followers: int = 0


class Followers:
    """The followers of a store's tasks, in this process.

    Args:
        watch: Runs until cancelled, telling the signals it is given of other processes'
            appends (``signal(task_id)``, or ``signal_all()`` when it cannot tell which task).
        name: The watch task's name.
        ready: Awaited before each follower starts: it raises when the store cannot be used.
    """

    def __init__(
        self,
        watch: Callable[[TaskSignals], Coroutine[Any, Any, None]],
        *,
        name: str,
        ready: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._watch = watch
        self._name = name
        self._ready = ready
        self._signals = TaskSignals()
        # One watch per event loop: a connection serves the loop it was made in. The lock
        # guards the dictionary, which followers on loops of other threads share.
        self._lock = threading.Lock()
        self._listeners: dict[asyncio.AbstractEventLoop, _Listener] = {}

    def signal(self, task_id: str) -> None:
        """Tell the task's followers that an append to it committed (from any thread)."""
        self._signals.signal(task_id)

    @contextlib.asynccontextmanager
    async def follow(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        """While the block runs, an event set once any process's append to ``task_id`` commits.

        Raises:
            StoreError: The store cannot be used (``ready`` raised).
        """
        if self._ready is not None:
            await self._ready()  # fail here, at once, as any other use of the store would
        async with self._signals.follow(task_id) as event:
            # Joined after the follower is known: the listener, once it listens, tells it to read,
            # so an append committed before that is not missed.
            listener = self._join()
            try:
                yield event
            finally:
                await self._leave(listener)

    def _join(self) -> _Listener:
        """The watch of the running loop, started if it is the first follower there."""
        loop = asyncio.get_running_loop()
        with self._lock:
            listener = self._listeners.get(loop)
            if listener is None:
                task = loop.create_task(self._watch(self._signals), name=self._name)
                listener = self._listeners[loop] = _Listener(task)
            listener.followers += 1
        return listener

    async def _leave(self, listener: _Listener) -> None:
        """Stop the loop's watch if its last follower left."""
        with self._lock:
            listener.followers -= 1
            if listener.followers:
                return
            del self._listeners[asyncio.get_running_loop()]
        listener.task.cancel()
        # Waited for, not awaited: a cancellation of the follower itself still reaches it.
        await asyncio.wait((listener.task,))
        if not listener.task.cancelled():
            listener.task.result()  # a watch that ended of a bug: raised, not lost
