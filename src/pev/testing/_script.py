"""The step list behind the scripted doubles: one step per call, in order."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Generic, TypeVar, cast

__all__ = ["Script", "Scripted", "is_exception", "raise_if_exception", "settle"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


class Script(Generic[S]):
    """Hands out one step per call; optionally keeps repeating the last one.

    Args:
        owner: The double's name, for the message when the steps run out.
        steps: The steps, in call order.
        repeat_last: Keep returning the last step once the others are used.

    Raises:
        ValueError: ``repeat_last`` with no steps to repeat.
    """

    def __init__(self, owner: str, steps: Sequence[S], *, repeat_last: bool) -> None:
        if repeat_last and not steps:
            raise ValueError(f"{owner}(repeat_last=True) needs at least one step to repeat")
        self._owner = owner
        self._steps = tuple(steps)
        self._repeat_last = repeat_last
        self._used = 0

    @property
    def remaining(self) -> int:
        """Steps not used yet (a repeated last step counts once, until first used)."""
        return len(self._steps) - self._used

    def next(self) -> S:
        """The next step.

        Raises:
            LookupError: Every step is used and ``repeat_last`` is off: the test needs more.
        """
        if self._used < len(self._steps):
            self._used += 1
            return self._steps[self._used - 1]
        if self._repeat_last:
            return self._steps[-1]
        # Running out is a bug in the test, not a result for the engine to classify: the
        # message names the fix.
        raise LookupError(
            f"{self._owner} ran out of steps after {len(self._steps)} calls; add a step"
            " (or pass repeat_last=True)"
        )


class Scripted(Generic[S, R]):
    """What the scripted doubles share: their steps, and the requests they were called with."""

    def __init__(self, owner: str, steps: Sequence[S], *, repeat_last: bool) -> None:
        self._script: Script[S] = Script(owner, steps, repeat_last=repeat_last)
        self._requests: list[R] = []

    @property
    def requests(self) -> tuple[R, ...]:
        """Every request received, in call order."""
        return tuple(self._requests)

    @property
    def calls(self) -> int:
        """How many times the double was called."""
        return len(self._requests)

    @property
    def remaining(self) -> int:
        """Scripted steps not used yet."""
        return self._script.remaining

    def _take(self, request: R) -> S:
        """Record ``request`` and hand out the next step."""
        self._requests.append(request)
        return self._script.next()


def is_exception(step: object) -> bool:
    """Whether a step is an exception to raise: an instance, or a class to instantiate."""
    return isinstance(step, BaseException) or (
        isinstance(step, type) and issubclass(step, BaseException)
    )


def raise_if_exception(step: object) -> None:
    """Raise the step if it is an exception instance or class; otherwise do nothing."""
    if isinstance(step, BaseException):
        raise step
    if isinstance(step, type) and issubclass(step, BaseException):
        raise step()


async def settle(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable (an async callable's result), else return it."""
    if inspect.isawaitable(value):
        return cast("T", await value)
    return value
