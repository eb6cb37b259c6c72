"""Followers of a PostgreSQL store's tasks, told of every process's appends (``LISTEN``).

Every append the schema's function commits notifies the schema's events channel with its task's
id (migration 6). While anyone in this process follows a task, one connection per event loop
``LISTEN``s on that channel and routes each id to the followers of that task: started by the
first follower of the loop, stopped with its last, so that a process nobody follows in holds no
connection for it. Appends made through the store object itself are signalled at once, without
waiting for their notification.

A listening connection that fails is logged and made again, backing off; once it listens again,
every follower is told to read, since appends committed meanwhile went unheard.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pev.stores._postgres_db import Database
from pev.stores._wakeups import TaskSignals

__all__ = ["Followers"]


@dataclass(slots=True)
class _Listener:
    """The listening task of one event loop, and how many followers of that loop use it."""

    task: asyncio.Task[None]
    followers: int = 0


class Followers:
    """The followers of the tasks of one pev schema, in this process.

    Args:
        db: The schema's database.
        channel: The schema's events channel, which every committed append notifies.
    """

    def __init__(self, db: Database, channel: str) -> None:
        self._db = db
        self._channel = channel
        self._signals = TaskSignals()
        # One listener per event loop: a connection serves the loop it was made in. The lock
        # guards the dictionary, which followers on loops of other threads share.
        self._lock = threading.Lock()
        self._listeners: dict[asyncio.AbstractEventLoop, _Listener] = {}

    @property
    def channel(self) -> str:
        """The schema's events channel."""
        return self._channel

    def signal(self, task_id: str) -> None:
        """Tell the task's followers that an append to it committed (from any thread)."""
        self._signals.signal(task_id)

    @contextlib.asynccontextmanager
    async def follow(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        """While the block runs, an event set once any process's append to ``task_id`` commits.

        Raises:
            StoreError: The database cannot be reached, or is not a pev schema of this version.
        """
        await self._db.connect()  # fail here, at once, as any other use of the store would
        async with self._signals.follow(task_id) as event:
            # Joined after the follower is known: the listener, once it listens, tells it to read,
            # so an append committed before that is not missed.
            listener = self._join()
            try:
                yield event
            finally:
                await self._leave(listener)

    def _join(self) -> _Listener:
        """The listener of the running loop, started if it is the first follower there."""
        loop = asyncio.get_running_loop()
        with self._lock:
            listener = self._listeners.get(loop)
            if listener is None:
                task = loop.create_task(self._listen(), name=f"pev-listen-{self._channel}")
                listener = self._listeners[loop] = _Listener(task)
            listener.followers += 1
        return listener

    async def _leave(self, listener: _Listener) -> None:
        """Stop ``listener`` if its last follower left."""
        with self._lock:
            listener.followers -= 1
            if listener.followers:
                return
            del self._listeners[asyncio.get_running_loop()]
        listener.task.cancel()
        # Waited for, not awaited: a cancellation of the follower itself still reaches it.
        await asyncio.wait((listener.task,))
        if not listener.task.cancelled():
            listener.task.result()  # a listener that ended of a bug: raised, not lost

    async def _listen(self) -> None:
        await self._db.listen(
            self._channel,
            what="appends",
            listening=self._signals.signal_all,
            heard=self._signals.signal,
        )
