"""A planner that returns scripted plans, one per call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from pev.engine._protocols import PlanRequest
from pev.model import Plan
from pev.testing._script import Scripted, is_exception, raise_if_exception, settle

__all__ = ["PlannerStep", "ScriptedPlanner"]

PlannerStep: TypeAlias = (
    Plan
    | BaseException
    | type[BaseException]
    | Callable[[PlanRequest], Plan | Awaitable[Plan | None] | None]
    | None
)
"""One scripted planner answer: a plan, ``None`` (decline), an exception, or a function."""


class ScriptedPlanner(Scripted[PlannerStep, PlanRequest]):
    """A planner that answers each call with the next scripted step.

    Each step is one of:

    * a :class:`~pev.model.Plan`, returned as it is (an invalid plan tests plan rejection);
    * ``None``: the planner declines; for a local replan the engine then appends the verdict's
      feedback to the redo nodes instead;
    * an exception instance (or class), raised: the engine treats a raising planner like a
      rejected plan;
    * a function, sync or async, called with the :class:`~pev.engine.PlanRequest`, whose
      return value is the answer (handy for plans that depend on the request).

    Args:
        *steps: The answers, in call order.
        repeat_last: Keep answering with the last step once the others are used.

    Attributes:
        requests: Every request received, in order (also those that raised).

    Raises:
        TypeError: A step is none of the above.
        ValueError: ``repeat_last`` with no steps.
    """

    def __init__(self, *steps: PlannerStep, repeat_last: bool = False) -> None:
        for index, step in enumerate(steps):
            if not (step is None or isinstance(step, Plan) or is_exception(step) or callable(step)):
                raise TypeError(
                    f"ScriptedPlanner step {index} is a {type(step).__name__}; a step is a Plan, "
                    "None, an exception, or a function of the PlanRequest"
                )
        super().__init__("ScriptedPlanner", steps, repeat_last=repeat_last)

    async def plan(self, request: PlanRequest) -> Plan | None:
        """Record ``request`` and answer with the next step.

        Raises:
            LookupError: The steps ran out (the test needs another step).
            BaseException: The step is an exception, or the step's function raised.
        """
        step = self._take(request)
        if step is None or isinstance(step, Plan):
            return step
        raise_if_exception(step)
        assert not isinstance(step, BaseException | type)  # noqa: S101 - raised just above
        return await settle(step(request))

    def __repr__(self) -> str:
        return f"ScriptedPlanner(calls={self.calls}, remaining={self.remaining})"
