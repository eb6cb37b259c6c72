"""An append whose answer was lost: find out whether it landed, and send it again only if not.

A store that loses its connection in the middle of an append (a killed backend, a server
restarting, a network cut) raises :class:`~pev.errors.StoreUnavailable`: the append may have
committed, or not. Sending it again blindly could write its events twice; giving up would turn
work a driver did (a tool call that was delivered) into a record nobody ever reads. So the ledger
asks the store, on a fresh connection, what follows the head the append was sealed after:

* the very entries of the append (the same sequence numbers and hashes): it landed, and the
  write succeeded;
* nothing: it did not land, and the same sealed entries are sent again (the store's sequence
  check refuses them if another writer got there first, so nothing is doubled either way);
* other entries: another writer moved the task on, a :class:`~pev.errors.ConflictError` as any
  other writer would get.

New tries start, backing off, for :data:`PATIENCE_S` (each one bounded by the store's own
timeouts, so the whole may run that much longer); an outcome still unknown then raises
:class:`~pev.errors.StoreUnavailable`, and the ledger keeps the sealed append
(:class:`Unanswered`) so that the caller's next write of the same events settles it first
instead of writing them again (docs/ledger.md, "A lost answer").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pev.errors import ConflictError, StoreUnavailable, UnknownTaskError
from pev.ledger._events import Event, LedgerEntry
from pev.ledger._store import Store

__all__ = ["PATIENCE_S", "Unanswered", "landed", "settle"]

log = logging.getLogger("pev.ledger")

PATIENCE_S = 10.0
"""How long one write keeps starting new tries of a store that does not answer before it raises."""

# The waits between tries: the first try again is at once (the pool hands out a fresh
# connection for the one that broke), then they double up to the last.
_FIRST_WAIT_S = 0.05
_LONGEST_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A sealed append whose outcome is not known yet.

    Attributes:
        events: The events as the caller gave them (a later write of equal events is this one).
        entries: The sealed entries, with their sequence numbers and hashes.
        after: The sequence number of the head they follow (0 for a new task).
    """

    events: tuple[Event, ...]
    entries: tuple[LedgerEntry, ...]
    after: int


def landed(found: Sequence[LedgerEntry], entries: Sequence[LedgerEntry]) -> bool:
    """Whether ``found`` (the store's entries after the head) begins with ``entries`` exactly."""
    if len(found) < len(entries):
        return False
    return all(
        (mine.seq, mine.hash) == (theirs.seq, theirs.hash)
        for mine, theirs in zip(entries, found, strict=False)
    )


async def settle(
    store: Store,
    pending: Unanswered,
    send: Callable[[], Awaitable[None]] | None,
    *,
    patience_s: float | None = None,
    first: StoreUnavailable | None = None,
) -> bool:
    """Bring ``pending`` to a known outcome.

    Args:
        store: The store the append went to.
        pending: The append.
        send: Sends the sealed entries again (with the fence they were first sent with);
            ``None``: only find out whether they landed, sending nothing.
        patience_s: How long to keep trying while the store does not answer (by default
            :data:`PATIENCE_S`).
        first: The failure that left the outcome unknown, for the log (``None``: an append
            kept from an earlier write).

    Returns:
        True: the entries are stored (they had landed, or were sent again); False: they did
        not land and ``send`` was ``None``.

    Raises:
        ConflictError: Another writer moved the task on; this append did not land.
        StoreUnavailable: The store did not answer for ``patience_s``; the outcome is still
            unknown.
    """
    task_id = pending.entries[0].task_id
    until = time.monotonic() + (PATIENCE_S if patience_s is None else patience_s)
    wait = 0.0
    last = first
    if first is not None:
        log.warning(
            "pev: task %s: the store did not answer an append of events %d-%d (%s); finding out "
            "whether it landed",
            task_id,
            pending.entries[0].seq,
            pending.entries[-1].seq,
            first,
        )
    while True:
        try:
            found = await _after(store, task_id, pending.after)
            if landed(found, pending.entries):
                return True
            if found:
                raise ConflictError(task_id, pending.entries[0].seq)
            if send is None:
                return False
            return await _send_again(store, pending, send)
        except StoreUnavailable as exc:
            last = exc
        if time.monotonic() + wait > until:
            raise last
        await asyncio.sleep(wait)
        wait = min(max(wait * 2, _FIRST_WAIT_S), _LONGEST_WAIT_S)


async def _send_again(
    store: Store, pending: Unanswered, send: Callable[[], Awaitable[None]]
) -> bool:
    """Send the entries again; True once stored.

    Raises:
        ConflictError: Another writer took their sequence numbers.
        StoreUnavailable: The store did not answer.
    """
    try:
        await send()
    except ConflictError:
        # The first send may still have committed after the look-up (a server slow to notice
        # its client gone): a refusal of the sequence number is checked once more.
        found = await _after(store, pending.entries[0].task_id, pending.after)
        if landed(found, pending.entries):
            return True
        raise
    return True


async def _after(store: Store, task_id: str, after: int) -> tuple[LedgerEntry, ...]:
    """The task's stored entries after sequence number ``after`` (none for a task not stored)."""
    try:
        return await store.read(task_id, after=after)
    except UnknownTaskError:
        return ()
