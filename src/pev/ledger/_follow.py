"""Following a task's ledger as it grows, from any process (docs/control.md).

A follower reads the task's entries from the store, in order, from where it stands: the entries
already written first, then each new batch once an append commits. The ledger is the stream: a
follower that falls behind simply reads more at its next look, so it never misses an entry and
never sees one twice, and any number of followers, in any processes, see the same entries in the
same order. A store with :class:`~pev.ledger.Appends` tells followers when a task's ledger grew
(PostgreSQL hears every process through ``LISTEN``/``NOTIFY``, SQLite watches its file's
version); the follower also reads every so often, so a signal that never came costs only
latency. A store without it is read every :data:`FOLLOW_POLL_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from pev.errors import UnknownTaskError, UsageError
from pev.ledger._events import LedgerEntry, TaskFinished
from pev.ledger._store import Appends, Store

__all__ = ["FOLLOW_POLL_S", "Tail", "follow"]

FOLLOW_POLL_S = 0.05
"""How often a follower reads a store that cannot tell it of new entries."""


class Tail:
    """Reads a task's new entries as they are written: the reader behind :func:`follow`.

    Use it as an async context manager (it listens for the store's signals while open); each
    :meth:`read` returns the entries written since the last one, waiting for some first.

    Args:
        store: Where the task lives.
        task_id: The task.
        after: The sequence number to start after (0: from the first entry).
        poll_s: How often to read even without a signal; by default the store's
            ``follow_poll_s``, else :data:`FOLLOW_POLL_S`.
        wait: Wait for a task not written yet (its first append signals as any other does)
            instead of raising :class:`~pev.errors.UnknownTaskError`.

    Raises:
        UsageError: ``after`` is negative, or ``poll_s`` is not a positive number of seconds.
    """

    def __init__(
        self,
        store: Store,
        task_id: str,
        *,
        after: int = 0,
        poll_s: float | None = None,
        wait: bool = False,
    ) -> None:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise UsageError(f"after must be a sequence number (0 or more), got {after!r}")
        if poll_s is None:
            poll_s = store.follow_poll_s if isinstance(store, Appends) else FOLLOW_POLL_S
        if not (isinstance(poll_s, int | float) and poll_s > 0):
            raise UsageError(f"poll_s must be a positive number of seconds, got {poll_s!r}")
        self._store = store
        self._task_id = task_id
        self._poll_s = float(poll_s)
        self._wait = wait
        self.seq = after
        """The sequence number of the last entry read."""
        self._signals: contextlib.AbstractAsyncContextManager[asyncio.Event | None] = (
            store.appended(task_id) if isinstance(store, Appends) else contextlib.nullcontext()
        )
        self._appended: asyncio.Event | None = None

    async def __aenter__(self) -> Tail:
        self._appended = await self._signals.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._signals.__aexit__(None, None, None)

    async def read(self, timeout: float | None = None) -> tuple[LedgerEntry, ...]:
        """The entries written since the last read, once there are some.

        Args:
            timeout: The longest to wait for one, in seconds; ``None`` waits for ever.

        Returns:
            The new entries in order; ``()`` when ``timeout`` passed first.

        Raises:
            UnknownTaskError: No task has that id (unless the tail waits for it).
        """
        loop = asyncio.get_running_loop()
        ends = None if timeout is None else loop.time() + timeout
        while True:
            appended = self._appended
            if appended is not None:
                appended.clear()  # before the read: an append during it sets it again
            try:
                entries = await self._store.read(self._task_id, after=self.seq)
            except UnknownTaskError:
                if not self._wait:
                    raise
                entries = ()  # not written yet: its first append is waited for as any other
            if entries:
                self.seq = entries[-1].seq
                return entries
            wait = self._poll_s if ends is None else min(self._poll_s, ends - loop.time())
            if wait <= 0:
                return ()
            await _signal_or_timeout(appended, wait)


async def follow(
    store: Store, task_id: str, *, after: int = 0, poll_s: float | None = None, wait: bool = False
) -> AsyncGenerator[tuple[LedgerEntry, ...], None]:
    """The task's entries after ``after``, batch by batch as they are written, to its end.

    Each batch is what one read found: one append's entries, or several appends' when the
    follower fell behind. The iteration ends with the batch holding ``task_finished``; a task
    that has ended already gives its remaining entries and ends. Close it when you stop early
    (``contextlib.aclosing``), so that it stops listening at once. The arguments are
    :class:`Tail`'s.

    Raises:
        UnknownTaskError: No task has that id (unless ``wait``: then it is waited for).
        UsageError: ``after`` is negative, or ``poll_s`` is not a positive number of seconds.
    """
    async with Tail(store, task_id, after=after, poll_s=poll_s, wait=wait) as tail:
        while True:
            entries = await tail.read()
            yield entries
            if any(isinstance(entry.event, TaskFinished) for entry in entries):
                return


async def _signal_or_timeout(event: asyncio.Event | None, timeout: float) -> None:
    """Until ``event`` is set or ``timeout`` seconds pass, whichever comes first."""
    if event is None:
        await asyncio.sleep(timeout)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
