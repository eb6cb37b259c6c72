"""What the engine does with what a component raised (docs/engine.md, "Failures that speak").

An ordinary exception from a tool, planner, verifier or observer is a failure to record: the
engine writes it down as one line (type, message, and the innermost frame of the component's own
code; see :mod:`pev.model._exceptions`) and logs a warning with the whole traceback through the
``pev.engine`` logger. ``KeyboardInterrupt`` and ``SystemExit`` are not failures: they leave
``run`` as themselves. asyncio stops the event loop when one escapes a task other than the one
awaiting ``run``, so each component call is made through :func:`carried`, which turns them into
:class:`Interrupted` inside the task that called the component; the step that made the call
raises the original again, in the drive's own task, once the ledger is consistent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

from pev.model._exceptions import describe_exception

__all__ = ["INTERRUPTS", "Interrupted", "carried", "log", "noted"]

T = TypeVar("T")

INTERRUPTS = (KeyboardInterrupt, SystemExit)
"""What a component may raise that stops the run, as itself, instead of being recorded."""

log = logging.getLogger("pev.engine")


class Interrupted(Exception):  # noqa: N818 - a private carrier, not an error users see
    """A ``KeyboardInterrupt`` or ``SystemExit`` from a component, on its way to the drive.

    Attributes:
        raised: The original exception, raised again (with its traceback) by the drive.
    """

    def __init__(self, raised: BaseException) -> None:
        super().__init__(f"{type(raised).__name__} raised inside a component")
        self.raised = raised


async def carried(call: Awaitable[T]) -> T:
    """Await a component's call; an interrupt it raises comes out as :class:`Interrupted`."""
    try:
        return await call
    except INTERRUPTS as exc:
        raise Interrupted(exc) from exc


def noted(exc: BaseException, *, task_id: str, who: str) -> str:
    """Log a warning with ``exc`` and its traceback; return its one-line description.

    Args:
        exc: What the component raised.
        task_id: The task it ran for.
        who: The component, as the log line names it (``tool 'book_room' of node 'n2'``).
    """
    text = describe_exception(exc)
    log.warning("task %s: %s raised %s", task_id, who, text, exc_info=exc)
    return text
