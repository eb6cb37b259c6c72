"""Wake-ups within one process: the events of the workers waiting on one store.

A store that only this process writes (:class:`~pev.stores.MemoryStore`) signals its own
waiters directly; see :class:`~pev.ledger.Wakeups` for what a signal means. Waiters may wait on
any event loop, in any thread: a signal sets each event in its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

__all__ = ["Waiters"]


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
