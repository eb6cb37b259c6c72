"""Outlasting a store that does not answer: a drive waits for it and goes on under its lease.

A write the store did not answer is settled by the ledger itself, on fresh connections, for a
few seconds (:mod:`pev.ledger._unanswered`: a write that landed is recognised, never doubled).
A store that stays away longer (a database restarting, a network cut) must not end the drive
either: the drive did work that only its own writes can record (a tool call delivered, a verdict
paid for), and a driver that gave up would leave it to a takeover that can only call it
``unknown``. So the drive waits, trying again with a growing pause, and logs when the store went
and when it came back. Its lease may run out meanwhile; when the store answers again, either
nobody took the task over (the same epoch still holds, and the drive goes on as if nothing
happened) or another driver did, and the first write is refused with
:class:`~pev.errors.LeaseLost`: the drive stops, as any stale driver does. A cancel (Ctrl-C)
ends the wait, and so does a worker's drain (SIGTERM): the drive then stops with the store's
:class:`~pev.errors.StoreUnavailable`, its lease held until it expires, for any worker to go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pev.errors import StoreUnavailable

__all__ = ["Outage"]

T = TypeVar("T")
log = logging.getLogger("pev.engine")

# The pause before each new try, doubling from the first to the last.
_FIRST_PAUSE_S = 0.25
_LONGEST_PAUSE_S = 5.0


class Outage:
    """Tries a store call until the store answers, for one drive.

    Args:
        task_id: The task the drive drives, for the log.
        give_up: Once set (a worker draining), a store that does not answer ends the wait.
    """

    def __init__(self, task_id: str, *, give_up: asyncio.Event | None = None) -> None:
        self._task_id = task_id
        self._give_up = give_up
        self._since: float | None = None

    async def outlast(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s answer, calling it again while it raises StoreUnavailable.

        Raises:
            asyncio.CancelledError: The drive was cancelled while it waited.
            StoreUnavailable: The store did not answer, and ``give_up`` is set.
            Exception: Whatever else ``call`` raises.
        """
        pause = _FIRST_PAUSE_S
        while True:
            try:
                answer = await call()
            except StoreUnavailable as exc:
                if self._since is None:
                    self._since = time.monotonic()
                    log.warning(
                        "pev: task %s: the store does not answer (%s); the drive waits for it "
                        "and goes on under its lease when it is back",
                        self._task_id,
                        exc,
                    )
                if not await self._paused(pause):
                    raise
                pause = min(pause * 2, _LONGEST_PAUSE_S)
                continue
            if self._since is not None:
                log.warning(
                    "pev: task %s: the store answers again after %.1f s",
                    self._task_id,
                    time.monotonic() - self._since,
                )
                self._since = None
            return answer

    async def _paused(self, pause_s: float) -> bool:
        """Wait ``pause_s`` before the next try; False when ``give_up`` is (or gets) set."""
        if self._give_up is None:
            await asyncio.sleep(pause_s)
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause_s):
                await self._give_up.wait()
        return not self._give_up.is_set()
