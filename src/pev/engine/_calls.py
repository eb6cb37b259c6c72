"""A planner or verifier call under the engine's guard: a time limit, the task's cancel, usage.

The engine gives up on a call that runs past its limit, or when the task is cancelled meanwhile,
and collects what the call told :func:`~pev.engine.report_usage`. What the call raised is the
caller's to judge; :data:`BUGS` lists what is a bug to propagate rather than a failure to record
(see docs/engine.md, "Verification and dispatch").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from pev._json import value_problem
from pev.engine._failures import Interrupted, carried
from pev.engine._protocols import _USAGE, merged_usage
from pev.errors import StateError, UsageError
from pev.ledger import Usage

__all__ = ["BUGS", "CancelledMeanwhile", "GuardedCall"]

T = TypeVar("T")

# What a planner or verifier call may raise that is a bug, not a failure to record: a programming
# error, or pev's own misuse errors (a bug in the caller). They propagate out of the run.
BUGS = (AssertionError, UsageError, StateError)


class CancelledMeanwhile(Exception):  # noqa: N818 - a private signal, not an error users see
    """A cancel arrived while a planner or verifier call was in flight."""


class GuardedCall:
    """One planner or verifier call; :attr:`usage` is what it reported, once it is over."""

    __slots__ = ("usage",)

    def __init__(self) -> None:
        self.usage: Usage | None = None

    async def run(self, call: Awaitable[T], *, timeout: float | None, cancel: asyncio.Event) -> T:
        """Await ``call``; give up on it past ``timeout`` or once ``cancel`` is set.

        Raises:
            TimeoutError: The call ran past ``timeout``.
            CancelledMeanwhile: A cancel arrived first (the call is cancelled).
            KeyboardInterrupt: The call raised it (``SystemExit`` likewise), here in the
                caller's task rather than in the call's own, where it would stop the loop.
        """
        reports: list[Usage] = []
        token = _USAGE.set(reports)  # the call's task copies the context: reports reach us
        try:
            work = asyncio.ensure_future(carried(call))
        finally:
            _USAGE.reset(token)
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {work, cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            cancelled.cancel()
        self.usage = _recordable(merged_usage(reports))
        if work not in done:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
        if work.done() and not work.cancelled():
            failed = work.exception()
            if isinstance(failed, Interrupted):
                raise failed.raised
            if work in done:
                return work.result()
        if cancel.is_set():
            raise CancelledMeanwhile
        raise TimeoutError


def _recordable(usage: Usage | None) -> Usage | None:
    """What a call reported of its model, if the ledger can hold it (valid text, sane counts)."""
    if usage is None:
        return None
    return None if value_problem([usage.model, usage.input_tokens, usage.output_tokens]) else usage
