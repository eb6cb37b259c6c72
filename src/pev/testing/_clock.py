"""A clock that tests control: what ``Ledger(store, clock=...)`` and the engine read time from."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["DEFAULT_START", "FakeClock"]

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


def _duration(value: timedelta | float, what: str) -> timedelta:
    duration = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if duration < timedelta(0):
        raise ValueError(
            f"{what} must not be negative (got {duration}); a clock only moves forward, "
            "use set() to jump to an earlier time on purpose"
        )
    return duration


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"FakeClock needs a timezone-aware datetime, got the naive {moment.isoformat()}; "
            "write datetime(..., tzinfo=UTC)"
        )
    return moment.astimezone(UTC)


class FakeClock:
    """A UTC clock that moves only when told to, or by a fixed ``step`` on every read.

    Call it (``clock()``) or use :meth:`now` to read the time; pass it wherever pev takes a
    clock, such as ``Ledger(store, clock=clock)``. It is safe to read from several threads.

    Args:
        start: The first time it reads; an aware datetime, converted to UTC.
        step: How far it moves after each read (a ``timedelta`` or seconds). A non-zero step
            gives every ledger event its own distinct time.

    Raises:
        ValueError: ``start`` is naive, or ``step`` is negative.
    """

    def __init__(
        self, start: datetime = DEFAULT_START, *, step: timedelta | float = timedelta(0)
    ) -> None:
        self._now = _utc(start)
        self._step = _duration(step, "step")
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        """The current time; then the clock moves on by ``step``."""
        with self._lock:
            current = self._now
            self._now = current + self._step
            return current

    def now(self) -> datetime:
        """The current time; then the clock moves on by ``step`` (the same as calling it)."""
        return self()

    def advance(self, by: timedelta | float) -> datetime:
        """Move the clock forward by ``by`` (a ``timedelta`` or seconds) and return the new time.

        Raises:
            ValueError: ``by`` is negative.
        """
        duration = _duration(by, "advance()")
        with self._lock:
            self._now += duration
            return self._now

    def set(self, moment: datetime) -> None:
        """Jump to ``moment`` (an aware datetime, converted to UTC), backwards if need be.

        Raises:
            ValueError: ``moment`` is naive.
        """
        moment = _utc(moment)
        with self._lock:
            self._now = moment

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()}, step={self._step})"
