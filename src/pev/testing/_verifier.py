"""A verifier that returns scripted verdicts (or scripted mistakes), one per call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pev.engine._protocols import VerifyRequest
from pev.model import Verdict
from pev.testing._script import Scripted, raise_if_exception, settle

__all__ = ["ScriptedVerifier"]


class ScriptedVerifier(Scripted[object, VerifyRequest]):
    """A verifier that answers each call with the next scripted step.

    Each step is one of:

    * a :class:`~pev.model.Verdict`, returned as it is;
    * an exception instance (or class), raised: the engine records reliability ``thrown``
      (``AssertionError`` and other programming errors propagate out of the run instead);
    * a function, sync or async, called with the :class:`~pev.engine.VerifyRequest`; what it
      returns is the answer;
    * any other value (a ``dict``, a ``str``, ``None``), returned as it is, to exercise how the
      engine classifies a ``malformed`` answer.

    Args:
        *steps: The answers, in call order.
        repeat_last: Keep answering with the last step once the others are used.

    Attributes:
        requests: Every request received, in order.

    Raises:
        ValueError: ``repeat_last`` with no steps.
    """

    def __init__(self, *steps: object, repeat_last: bool = False) -> None:
        super().__init__("ScriptedVerifier", steps, repeat_last=repeat_last)

    @classmethod
    def passing(cls) -> ScriptedVerifier:
        """A verifier that always passes: ``Verdict.passed(request.contract)`` on every call."""
        return cls(lambda request: Verdict.passed(request.contract), repeat_last=True)

    @classmethod
    def failing(cls, *failed_nodes: str, feedback: str = "") -> ScriptedVerifier:
        """A verifier that always asks for a replan, blaming ``failed_nodes``.

        Every call answers ``Verdict.failed(request.contract, failed_nodes=..., feedback=...)``:
        status ``replan_required``, every criterion unsatisfied.
        """
        blamed: Iterable[str] = frozenset(failed_nodes)
        return cls(
            lambda request: Verdict.failed(
                request.contract, failed_nodes=blamed, feedback=feedback
            ),
            repeat_last=True,
        )

    # Typed Any, not Verdict: a scripted malformed answer is returned as it is, on purpose.
    async def verify(self, request: VerifyRequest) -> Any:
        """Record ``request`` and answer with the next step (usually a :class:`Verdict`).

        Raises:
            LookupError: The steps ran out (the test needs another step).
            BaseException: The step is an exception, or the step's function raised.
        """
        step = self._take(request)
        raise_if_exception(step)
        if callable(step):
            return await settle(step(request))
        return step

    def __repr__(self) -> str:
        return f"ScriptedVerifier(calls={self.calls}, remaining={self.remaining})"
