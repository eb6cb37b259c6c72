"""The attempts of a tool call that its retry policy repeated (docs/tools.md, "Retries")."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Attempt"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt of a tool call that was made more than once.

    A node's result carries the attempts of its call (``result.attempts``) when a retry policy
    made it more than once; they are written to the ledger with the result, in the
    ``node_finished`` event. Times are seconds on the executor's own clock, counted from the
    start of the first attempt (the record's ``created_at`` is about when that was), so they need
    no wall clock and are not moved by one.

    Attributes:
        number: Which attempt: 1 for the first.
        started_s: When it started, in seconds after the first attempt started.
        duration_s: How long it ran, in seconds (waiting for the tool's resource included).
        error: What it raised, on one line as a node failure is written; ``None`` for the
            attempt that succeeded. The last attempt's is the node's own failure.
        wait_s: How long pev waited before the next attempt, in seconds; 0 for the last.
    """

    number: int
    started_s: float
    duration_s: float
    error: str | None = None
    wait_s: float = 0.0
