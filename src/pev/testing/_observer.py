"""Observers that return scripted or fixed observations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, cast

from pev.engine._protocols import Observation, ObserveContext
from pev.model import EvidencePhase, JsonValue
from pev.testing._script import Script, is_exception, raise_if_exception, settle

__all__ = ["ObserverStep", "ScriptedObserver", "StaticObserver"]

Observed: TypeAlias = Observation | Sequence[Observation]

ObserverStep: TypeAlias = (
    Observation
    | Sequence[Observation]
    | BaseException
    | type[BaseException]
    | Callable[[EvidencePhase, ObserveContext], Observed | Awaitable[Observed]]
)
"""One scripted observer answer: observations, an exception, or a function."""


def _is_observations(step: object) -> bool:
    return isinstance(step, Observation) or (
        isinstance(step, list | tuple) and all(isinstance(item, Observation) for item in step)
    )


class _Recorder:
    """The calls an observer received."""

    def __init__(self) -> None:
        self._requests: list[tuple[EvidencePhase, ObserveContext]] = []

    @property
    def requests(self) -> tuple[tuple[EvidencePhase, ObserveContext], ...]:
        """Every ``(phase, context)`` received, in call order."""
        return tuple(self._requests)

    @property
    def calls(self) -> int:
        """How many times ``observe`` was called."""
        return len(self._requests)

    @property
    def phases(self) -> tuple[EvidencePhase, ...]:
        """The phase of each call, in order (``before``, ``after``, ...)."""
        return tuple(phase for phase, _ in self._requests)


class ScriptedObserver(_Recorder):
    """An observer that answers each call with the next scripted step.

    Each step is one :class:`~pev.engine.Observation`, a list or tuple of them, an exception
    instance (or class) to raise (the engine records ``capture_failed``), or a function, sync or
    async, called with ``(phase, context)`` whose return value is the answer.

    Args:
        *steps: The answers, in call order.
        repeat_last: Keep answering with the last step once the others are used.

    Attributes:
        requests: Every ``(phase, context)`` received, in order.

    Raises:
        TypeError: A step is none of the above.
        ValueError: ``repeat_last`` with no steps.
    """

    def __init__(self, *steps: ObserverStep, repeat_last: bool = False) -> None:
        super().__init__()
        for index, step in enumerate(steps):
            if not (_is_observations(step) or is_exception(step) or callable(step)):
                raise TypeError(
                    f"ScriptedObserver step {index} is a {type(step).__name__}; a step is an "
                    "Observation, a list of them, an exception, or a function of "
                    "(phase, context)"
                )
        self._script: Script[ObserverStep] = Script(
            "ScriptedObserver", steps, repeat_last=repeat_last
        )

    @property
    def remaining(self) -> int:
        """Scripted steps not used yet."""
        return self._script.remaining

    async def observe(self, phase: EvidencePhase, context: ObserveContext) -> Observed:
        """Record the call and answer with the next step.

        Raises:
            LookupError: The steps ran out (the test needs another step).
            BaseException: The step is an exception, or the step's function raised.
        """
        self._requests.append((phase, context))
        step = self._script.next()
        raise_if_exception(step)
        if callable(step) and not isinstance(step, type):
            return await settle(step(phase, context))
        return cast("Observed", step)

    def __repr__(self) -> str:
        return f"ScriptedObserver(calls={self.calls}, remaining={self.remaining})"


class StaticObserver(_Recorder):
    """An observer that returns the same observation on every call.

    Args:
        kind: What is observed (``state``, ``image``, ...): the kind a contract's
            ``required_evidence`` names.
        source: Who observed it.
        payload: A JSON value.
        artifact: Raw bytes such as a PNG.
        media_type: The artifact's media type.

    Attributes:
        observation: What every call returns.
        requests: Every ``(phase, context)`` received, in order.
    """

    def __init__(
        self,
        kind: str = "state",
        *,
        source: str = "observer",
        payload: JsonValue = None,
        artifact: bytes | None = None,
        media_type: str | None = None,
    ) -> None:
        super().__init__()
        self.observation = Observation(
            kind=kind, source=source, payload=payload, artifact=artifact, media_type=media_type
        )

    async def observe(self, phase: EvidencePhase, context: ObserveContext) -> Observation:
        """Record the call and return :attr:`observation`."""
        self._requests.append((phase, context))
        return self.observation

    def __repr__(self) -> str:
        return f"StaticObserver({self.observation.kind!r}, calls={self.calls})"
