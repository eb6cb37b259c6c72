"""Retries: a tool's own policy for calling again after a failure (docs/tools.md, "Retries").

A :class:`Retry` given to ``@tool(retry=...)`` says how often and how patiently to call the tool
again; the engine itself never retries a node. The rules (docs/design.md §6.2):

* a **query** is retried on the exceptions its policy lists (by default any ``Exception``: a
  query is safe to repeat);
* an **action** is retried only on :class:`~pev.errors.NotSent`, which its tool raises when it
  knows that nothing reached the outside world; a policy that lists anything else for an action
  tool is refused when the tool is defined;
* the node's timeout is never retried (its time is spent), nor is an unknown outcome (a tool
  that returns one raised nothing);
* the waits (exponential backoff with jitter, by tenacity) stay within the node's deadline: when
  the next wait would reach it, the call stops and keeps its last failure.

Each attempt (its error and times) is kept in an :class:`AttemptLog` and written to the ledger
with the node's result (``result.attempts``), so ``pev show`` can list them.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import tenacity

from pev.errors import NotSent, UsageError
from pev.model import Attempt, Effect
from pev.model._exceptions import describe_exception

__all__ = ["AttemptLog", "Retry", "check_retry", "retried_exceptions", "retrying"]

T = TypeVar("T")

_log = logging.getLogger("pev.engine")

ExceptionTypes = type[Exception] | tuple[type[Exception], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """How a tool's call is tried again after it raised: ``@tool(retry=Retry(...))``.

    The wait before attempt ``n + 1`` is ``min(wait_max, wait_initial * wait_exp_base **
    (n - 1) + random(0, wait_jitter))`` seconds (tenacity's ``wait_exponential_jitter``, with
    the parameters stamina names the same way).

    Attributes:
        attempts: How many times the tool may be called in all (1: never again).
        on: The exception classes to retry on: one class or a tuple of them. ``None`` (the
            default) retries a query on any ``Exception`` (a query is safe to repeat; name the
            transient ones, such as ``(httpx.TransportError,)``, to fail at once on the rest)
            and an action on :class:`~pev.errors.NotSent`. An action tool may list only
            ``NotSent`` and its subclasses.
        wait_initial: The first wait, in seconds.
        wait_max: The longest wait, in seconds.
        wait_jitter: The most random time added to each wait, in seconds (small: a tool call
            retries within its node's deadline).
        wait_exp_base: What each wait is multiplied by (1: the same wait each time).
        timeout: Seconds from the first attempt's start after which no attempt starts (it
            does not cut a running attempt short); ``None``: only the node's timeout and
            deadline bound the attempts. A call cut short by the node's timeout is never retried.

    Raises:
        UsageError: A value out of range, named by its field (``attempts`` must be a whole
            number of at least 1, the waits finite numbers of seconds not below 0, ...).
    """

    attempts: int = 3
    on: ExceptionTypes | None = None
    wait_initial: float = 0.1
    wait_max: float = 5.0
    wait_jitter: float = 0.1
    wait_exp_base: float = 2.0
    timeout: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise UsageError(f"Retry attempts must be a whole number, got {self.attempts!r}")
        if self.attempts < 1:
            raise UsageError(
                f"Retry attempts counts every call, the first included, so it must be at least 1; "
                f"got {self.attempts!r}"
            )
        if self.on is not None:
            object.__setattr__(self, "on", _exception_classes(self.on))
        for name in ("wait_initial", "wait_max", "wait_jitter"):
            _check_seconds(name, getattr(self, name), allow_zero=True)
        _check_number("wait_exp_base", self.wait_exp_base)
        if self.wait_exp_base < 1:
            raise UsageError(
                f"Retry wait_exp_base below 1 would make each wait shorter than the one before; "
                f"use 1 for equal waits, got {self.wait_exp_base!r}"
            )
        if self.timeout is not None:
            _check_seconds("timeout", self.timeout, allow_zero=False)

    def __repr__(self) -> str:
        if self.on is None:
            listed = "None"
        else:
            names = [cls.__qualname__ for cls in _as_tuple(self.on)]
            listed = f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
        return (
            f"Retry(attempts={self.attempts!r}, on={listed}, wait_initial={self.wait_initial!r}, "
            f"wait_max={self.wait_max!r}, wait_jitter={self.wait_jitter!r}, "
            f"wait_exp_base={self.wait_exp_base!r}, timeout={self.timeout!r})"
        )


def _as_tuple(on: ExceptionTypes) -> tuple[type[Exception], ...]:
    return on if isinstance(on, tuple) else (on,)


def _exception_classes(on: object) -> tuple[type[Exception], ...]:
    items = on if isinstance(on, tuple) else (on,)
    if not items:
        raise UsageError(
            "Retry on is an empty tuple, which retries nothing; list the exception classes to "
            "retry on, or leave it None for the default"
        )
    for item in items:
        if not (isinstance(item, type) and issubclass(item, Exception)):
            what = (
                f"the class {item.__qualname__}, which is not an Exception"
                if isinstance(item, type)
                else f"a {type(item).__name__} ({item!r})"
            )
            raise UsageError(
                f"Retry on must be an exception class or a tuple of them, such as "
                f"(ConnectionError,); it holds {what}"
            )
    return tuple(items)


def _check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"Retry {name} must be a finite number, got {value!r}")


def _check_seconds(name: str, value: object, *, allow_zero: bool) -> None:
    _check_number(name, value)
    assert isinstance(value, int | float)  # noqa: S101 - narrowed by _check_number
    if value < 0 or (value == 0 and not allow_zero):
        bound = "not below 0" if allow_zero else "above 0"
        raise UsageError(f"Retry {name} must be a number of seconds {bound}, got {value!r}")


def check_retry(retry: object, *, tool: str, effect: Effect) -> None:
    """Refuse a tool's retry policy that is not a :class:`Retry`, or that an action cannot have.

    Raises:
        UsageError: ``retry`` is not a ``Retry``, or the tool is an action and its policy lists
            exceptions other than :class:`~pev.errors.NotSent` (and its subclasses).
    """
    if retry is None:
        return
    if not isinstance(retry, Retry):
        raise UsageError(
            f"tool {tool!r}: retry must be a pev.Retry, such as Retry(attempts=3), "
            f"got a {type(retry).__name__}"
        )
    if effect is Effect.ACTION and retry.on is not None:
        others = [cls.__qualname__ for cls in _as_tuple(retry.on) if not issubclass(cls, NotSent)]
        if others:
            raise UsageError(
                f"tool {tool!r} is an action, so it is retried only on pev.NotSent, which it "
                f"raises when it knows nothing reached the outside world; its Retry lists "
                f"{', '.join(others)}, after which the action may have taken effect. Raise "
                f"pev.NotSent (from the error) where nothing was sent, or make it a query if it "
                f"changes nothing"
            )


def retried_exceptions(retry: Retry, *, action: bool) -> tuple[type[Exception], ...]:
    """The exceptions a call under ``retry`` is tried again on.

    An action (a node may make a query tool's call one) is retried only on the ``NotSent``
    classes its policy lists, or on ``NotSent`` itself when it lists none.
    """
    if not action:
        return (Exception,) if retry.on is None else _as_tuple(retry.on)
    listed = () if retry.on is None else _as_tuple(retry.on)
    not_sent = tuple(cls for cls in listed if issubclass(cls, NotSent))
    return not_sent or (NotSent,)


class AttemptLog:
    """The attempts of one tool call as they happen, on the event loop's clock.

    Attributes:
        count: How many attempts have started.
        waiting: The last attempt failed and the next has not started (pev is waiting).
    """

    __slots__ = ("_ended", "_first", "_started", "count", "done", "waiting")

    def __init__(self) -> None:
        """An empty log: no attempt has started."""
        self.done: list[Attempt] = []
        self.count = 0
        self.waiting = False
        self._first = 0.0
        self._started = 0.0
        self._ended = 0.0

    def start(self, now: float) -> None:
        """An attempt starts ``now``."""
        if self.count == 0:
            self._first = now
        elif self.waiting:
            self.done[-1] = _with_wait(self.done[-1], now - self._ended)
        self.count += 1
        self._started = now
        self.waiting = False

    def failed(self, now: float, error: str) -> None:
        """The running attempt failed ``now`` with ``error``, and is to be tried again."""
        self.done.append(
            Attempt(
                number=self.count,
                started_s=_seconds(self._started - self._first),
                duration_s=_seconds(now - self._started),
                error=error,
            )
        )
        self._ended = now
        self.waiting = True

    def attempts(self, now: float, error: str | None) -> tuple[Attempt, ...]:
        """Every attempt, the last one ending ``now`` with ``error``; ``()`` for a single one.

        A call cut short while waiting to try again ends with the attempt that failed last.
        """
        if self.count <= 1 and not self.done:
            return ()
        if self.waiting:
            last = _with_wait(self.done[-1], now - self._ended)
            return (*self.done[:-1], last)
        final = Attempt(
            number=self.count,
            started_s=_seconds(self._started - self._first),
            duration_s=_seconds(now - self._started),
            error=error,
        )
        return (*self.done, final)


def _seconds(value: float) -> float:
    # Microseconds are plenty, and keep the ledger's text short.
    return round(max(value, 0.0), 6)


def _with_wait(attempt: Attempt, wait: float) -> Attempt:
    return Attempt(
        number=attempt.number,
        started_s=attempt.started_s,
        duration_s=attempt.duration_s,
        error=attempt.error,
        wait_s=_seconds(wait),
    )


async def retrying(
    call: Callable[[], Awaitable[T]],
    retry: Retry,
    *,
    on: tuple[type[Exception], ...],
    never: tuple[type[Exception], ...] = (),
    deadline: float | None,
    log: AttemptLog,
    stop: Callable[[], bool],
    who: str = "a tool call",
) -> T:
    """Await ``call()`` until it returns, trying again under ``retry`` when it raises ``on``.

    tenacity makes the attempts and the waits between them. An attempt is not followed by
    another when ``stop()`` is true (the task is being cancelled), or when the next wait, as
    drawn, would reach ``deadline`` (loop time) or the policy's own ``timeout``: the last
    failure is raised then, as it is after the last attempt. Exceptions that are not ``on``
    (cancellation above all), and those that are ``never`` even when ``on`` covers them, pass
    at once. Each failed attempt that is tried again is a warning on the ``pev`` logger, naming
    ``who``.

    Raises:
        Exception: What the last attempt raised.
    """
    loop = asyncio.get_running_loop()
    until = deadline
    if retry.timeout is not None:
        own = loop.time() + retry.timeout
        until = own if until is None else min(until, own)

    def again(exc: BaseException) -> bool:
        return isinstance(exc, on) and not isinstance(exc, never) and not stop()

    def enough(state: tenacity.RetryCallState) -> bool:
        # Called once the next wait is drawn (upcoming_sleep): an attempt it would put past
        # the deadline is not made, and the failure stands.
        if state.attempt_number >= retry.attempts or stop():
            return True
        return until is not None and loop.time() + state.upcoming_sleep >= until

    def before_sleep(state: tenacity.RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome is not None else None
        error = describe_exception(failed) if failed is not None else ""
        log.failed(loop.time(), error)
        _log.warning(
            "%s: attempt %d of %d failed (%s); trying again in %.3f s",
            who,
            state.attempt_number,
            retry.attempts,
            error,
            state.upcoming_sleep,
        )

    failure: BaseException | None = None
    trace: TracebackType | None = None
    attempts = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(again),
        stop=enough,
        wait=tenacity.wait_exponential_jitter(
            multiplier=retry.wait_initial,
            max=retry.wait_max,
            exp_base=retry.wait_exp_base,
            jitter=retry.wait_jitter,
        ),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        async for attempt in attempts:
            with attempt:
                log.start(loop.time())
                try:
                    return await call()
                except BaseException as exc:
                    failure, trace = exc, exc.__traceback__
                    raise
    except BaseException as exc:
        if exc is not failure:
            raise
    if failure is None:  # pragma: no cover - tenacity either returns or raises
        raise AssertionError("tenacity ended the attempts without a result or a failure")
    # Raised again as the attempt raised it: the frames tenacity's re-raise added would be the
    # innermost third-party code in its traceback, and its recorded place would name them.
    raise failure.with_traceback(trace)
