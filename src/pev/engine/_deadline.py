"""The engine's time arithmetic: a deadline read against a clock, and the earliest of limits.

Every question a step asks about time goes through one :class:`Deadline`: how long is left,
whether it has passed, how long a call of its own limit may run within it, and what time it is.
Whether a deadline has passed follows the kernel's one rule, :func:`pev.kernel.deadline_passed`
(from its very instant on); see docs/engine.md, "Deadlines and cancellation".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pev.kernel import deadline_passed

__all__ = ["Deadline", "earliest"]


@dataclass(frozen=True, slots=True)
class Deadline:
    """A moment to end by (``None``: no bound), read against ``clock``.

    Attributes:
        at: The deadline, or ``None`` for none.
        clock: Returns the current UTC time (the engine's clock).
    """

    at: datetime | None
    clock: Callable[[], datetime]

    def now(self) -> datetime:
        """The clock's time now."""
        return self.clock()

    def remaining_s(self) -> float | None:
        """Seconds left before the deadline (never below 0), or ``None`` without one."""
        at = self.at
        if at is None:
            return None
        return max((at - self.clock()).total_seconds(), 0.0)

    def passed(self) -> bool:
        """Whether the deadline has passed (from its very instant on); never without one."""
        return deadline_passed(self.clock(), self.at)

    def within(self, seconds: float | None) -> float | None:
        """``seconds``, cut to the time left; ``None`` when neither bounds it."""
        return earliest(seconds, self.remaining_s())


def earliest(*limits: float | None) -> float | None:
    """The smallest of the limits given; ``None`` when none is."""
    present = [limit for limit in limits if limit is not None]
    return min(present) if present else None
