"""Wake-ups (see :class:`~pev.ledger.Wakeups` for what a signal means), as the stores give them.

* :class:`Waiters`: a store that only this process writes (:class:`~pev.stores.MemoryStore`)
  signals its own waiters directly. Waiters may wait on any event loop, in any thread: a signal
  sets each event in its own loop.
* :func:`watched`: a store that learns of changes by watching (PostgreSQL's ``LISTEN``, SQLite's
  ``data_version``) runs its watch as a background task while a waiter waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

__all__ = ["Waiters", "watched"]


class Waiters:
    """The events of the workers waiting for runnable tasks, each on its own event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[asyncio.Event]:
        """An event set by every :meth:`signal` while the block runs."""
        event = asyncio.Event()
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
        for event, loop in waiting:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody is waiting
                loop.call_soon_threadsafe(event.set)


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
