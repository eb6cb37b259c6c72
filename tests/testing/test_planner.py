"""ScriptedPlanner: one scripted answer per planning call."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pev.engine import Planner, PlanRequest
from pev.ledger import RevisionKind
from pev.model import Plan, PlanNode
from pev.testing import ScriptedPlanner


async def test_returns_scripted_plans_in_order(plan: Plan, plan_request: PlanRequest) -> None:
    """Each call returns the next scripted plan."""
    other = Plan("other", (PlanNode("n1"),))
    planner = ScriptedPlanner(plan, other)
    assert await planner.plan(plan_request) is plan
    assert await planner.plan(plan_request) is other


async def test_none_declines(plan_request: PlanRequest) -> None:
    """A None step is returned as None: the planner declines."""
    assert await ScriptedPlanner(None).plan(plan_request) is None


async def test_exception_instance_is_raised(plan_request: PlanRequest) -> None:
    """An exception step is raised from plan()."""
    planner = ScriptedPlanner(RuntimeError("model overloaded"))
    with pytest.raises(RuntimeError, match="model overloaded"):
        await planner.plan(plan_request)


async def test_exception_class_is_raised(plan_request: PlanRequest) -> None:
    """An exception class step is instantiated and raised, rather than called as a function."""
    with pytest.raises(TimeoutError):
        await ScriptedPlanner(TimeoutError).plan(plan_request)


async def test_function_step_gets_the_request(plan: Plan, plan_request: PlanRequest) -> None:
    """A function step is called with the request and its return value is the answer."""
    planner = ScriptedPlanner(lambda request: replace(plan, goal=f"attempt {request.attempt}"))
    answer = await planner.plan(plan_request)
    assert answer is not None
    assert answer.goal == "attempt 1"


async def test_async_function_step_is_awaited(plan: Plan, plan_request: PlanRequest) -> None:
    """An async function step is awaited."""

    async def make(request: PlanRequest) -> Plan:
        return plan

    assert await ScriptedPlanner(make).plan(plan_request) is plan


async def test_records_every_request(plan: Plan, plan_request: PlanRequest) -> None:
    """requests holds each request in call order, and calls counts them."""
    local = replace(plan_request, kind=RevisionKind.LOCAL, attempt=2, redo_nodes=frozenset({"m"}))
    planner = ScriptedPlanner(plan, None)
    await planner.plan(plan_request)
    await planner.plan(local)
    assert planner.requests == (plan_request, local)
    assert planner.calls == 2


async def test_running_out_raises_lookup_error(plan: Plan, plan_request: PlanRequest) -> None:
    """A call past the last step raises LookupError naming the planner, the count and the fix."""
    planner = ScriptedPlanner(plan)
    await planner.plan(plan_request)
    with pytest.raises(LookupError, match="ScriptedPlanner ran out of steps after 1 calls; add"):
        await planner.plan(plan_request)


async def test_no_steps_runs_out_at_once(plan_request: PlanRequest) -> None:
    """A planner with no steps raises on its first call."""
    with pytest.raises(LookupError, match="after 0 calls"):
        await ScriptedPlanner().plan(plan_request)


async def test_repeat_last_keeps_returning_the_last_step(
    plan: Plan, plan_request: PlanRequest
) -> None:
    """With repeat_last, the last step answers every call after the others are used."""
    planner = ScriptedPlanner(None, plan, repeat_last=True)
    answers = [await planner.plan(plan_request) for _ in range(4)]
    assert answers == [None, plan, plan, plan]


def test_repeat_last_needs_a_step() -> None:
    """repeat_last with no steps is refused when the planner is built."""
    with pytest.raises(ValueError, match="at least one step"):
        ScriptedPlanner(repeat_last=True)


def test_a_step_of_the_wrong_type_is_refused() -> None:
    """A step that is not a plan, None, an exception or a function is a TypeError."""
    with pytest.raises(TypeError, match="step 1 is a list"):
        ScriptedPlanner(None, [PlanNode("n1")])  # type: ignore[arg-type]


async def test_remaining_counts_unused_steps(plan: Plan, plan_request: PlanRequest) -> None:
    """remaining falls by one per call, so a test can check every step was used."""
    planner = ScriptedPlanner(plan, plan)
    await planner.plan(plan_request)
    assert planner.remaining == 1


def test_is_a_planner() -> None:
    """It satisfies the engine's Planner protocol."""
    assert isinstance(ScriptedPlanner(), Planner)
