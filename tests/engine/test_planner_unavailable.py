"""A planner that cannot reach its model ends the task at once (docs/design.md §4.4).

An outage is not a bad plan: ``PlannerUnavailable`` (raised by the LLM planners once their own
retries are spent, and by any planner) ends the task ``failed``/``planner_unavailable`` without
spending a replan, where any other exception is a rejected plan.
"""

from __future__ import annotations

import pev
from pev.ledger import Ledger, PlanRejected
from pev.model import Effect, Plan, PlanNode
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner, ScriptedVerifier


@pev.tool(effect="query")
def look() -> str:
    """Look around."""
    return "a room"


LOOKING = Plan("look", (PlanNode("l", "look", tool="look", effect=Effect.QUERY),))


async def test_an_unreachable_planner_ends_the_task_at_once_without_spending_budget() -> None:
    """The first call raises PlannerUnavailable: failed/planner_unavailable, nothing rejected."""
    store = MemoryStore()
    planner = ScriptedPlanner(pev.PlannerUnavailable("the model server at :8080 is down"))
    result = await pev.run("look", planner=planner, tools=[look], store=store)
    assert (result.status, result.reason) == ("failed", "planner_unavailable")
    assert "the model server at :8080 is down" in result.detail
    state = await Ledger(store).state(result.task_id)
    assert (state.replans_used, state.rejections, planner.calls) == (0, (), 1)


async def test_an_outage_while_replanning_ends_the_task_too() -> None:
    """A replan's planner call that cannot reach the model ends the task, not the budget."""
    store = MemoryStore()
    planner = ScriptedPlanner(LOOKING, pev.PlannerUnavailable("503 after 2 retries"))
    result = await pev.run(
        "look",
        planner=planner,
        tools=[look],
        verifier=ScriptedVerifier.failing("l"),
        store=store,
    )
    assert (result.status, result.reason) == ("failed", "planner_unavailable")
    state = await Ledger(store).state(result.task_id)
    assert state.replans_used == 1  # the replan began; the outage spent nothing more
    assert not any(
        isinstance(entry.event, PlanRejected)
        for entry in await Ledger(store).entries(result.task_id)
    )


async def test_any_other_planner_exception_is_still_a_rejected_plan() -> None:
    """A planner that raises something else: its plan is rejected and, in recovery mode, it is
    asked again."""
    planner = ScriptedPlanner(ConnectionError("flaky"), LOOKING)
    result = await pev.run(
        "look", planner=planner, tools=[look], verifier=ScriptedVerifier.passing()
    )
    assert result.ok
    assert planner.calls == 2
