"""Rejected plans in a run: fed back, budgeted, and no blind repeat of unknowns.

See docs/design.md §2.1, §4.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import ENFORCE, GOAL, RECOVERY

import pev
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import NodeFinished, PlanRejected, RevisionKind
from pev.model import (
    Plan,
    PlanNode,
    RecordStatus,
    Verdict,
    VerifierFailure,
)
from pev.policy import RecoveryPolicy
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine


@pev.tool(effect="query")
def soil() -> str:
    """Read the soil sensor."""
    return "dry"


GOOD = Plan(GOAL, (PlanNode("look", "read the soil", tool="soil", effect="query"),))
CYCLE = Plan(
    GOAL,
    (
        PlanNode("x", "one", tool="soil", effect="query", after=("y",)),
        PlanNode("y", "two", tool="soil", effect="query", after=("x",)),
    ),
)
UNKNOWN_TOOL = Plan(GOAL, (PlanNode("look", "read the soil", tool="telescope", effect="query"),))


async def _rejections(engine: Engine, task_id: str) -> list[PlanRejected]:
    return [event for event in await engine.events(task_id) if isinstance(event, PlanRejected)]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [pytest.param(CYCLE, "cycle", id="cycle"), pytest.param(UNKNOWN_TOOL, "telescope", id="tool")],
)
async def test_a_rejected_plan_is_fed_back_to_the_next_planner_request(
    engine: Engine, bad: Plan, problem: str
) -> None:
    """An invalid plan never runs; the next request lists its problems and the run recovers."""
    planner = ScriptedPlanner(bad, GOOD)

    result = await engine.run(
        planner=planner, tools=[soil], verifier=ScriptedVerifier.passing(), contract=RECOVERY
    )

    assert result.ok
    assert result.revisions == 1
    [rejected] = await _rejections(engine, result.task_id)
    assert any(problem in text for text in rejected.problems)
    assert planner.requests[1].rejections == rejected.problems
    assert planner.requests[1].kind is RevisionKind.INITIAL


async def test_each_rejection_consumes_a_replan_until_the_plan_is_invalid(engine: Engine) -> None:
    """In recovery, a planner that only returns invalid plans gets budget + 1 tries."""
    planner = ScriptedPlanner(CYCLE, repeat_last=True)

    result = await engine.run(
        planner=planner,
        tools=[soil],
        verifier=ScriptedVerifier.passing(),
        contract=RECOVERY,
        policy=RecoveryPolicy(max_replans=2),
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.INVALID_PLAN)
    assert planner.calls == 3
    assert result.revisions == 0
    assert len(await _rejections(engine, result.task_id)) == 3


async def test_in_enforce_mode_the_first_rejection_ends_the_task(engine: Engine) -> None:
    """Outside recovery, a rejected plan ends failed/invalid_plan at once."""
    planner = ScriptedPlanner(CYCLE, GOOD)

    result = await engine.run(
        planner=planner, tools=[soil], verifier=ScriptedVerifier.passing(), contract=ENFORCE
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.INVALID_PLAN)
    assert planner.calls == 1


async def test_a_planner_that_raises_counts_as_a_rejected_plan(engine: Engine) -> None:
    """A raising planner is a rejection: recorded, fed back, and the next plan runs."""
    planner = ScriptedPlanner(RuntimeError("model overloaded"), GOOD)

    result = await engine.run(
        planner=planner, tools=[soil], verifier=ScriptedVerifier.passing(), contract=RECOVERY
    )

    assert result.ok
    [rejected] = await _rejections(engine, result.task_id)
    assert rejected.plan is None
    assert "RuntimeError: model overloaded" in rejected.problems[0]
    assert planner.requests[1].rejections == rejected.problems


async def test_an_assertion_in_the_planner_propagates_out_of_run(engine: Engine) -> None:
    """A planner's AssertionError is a bug, not a rejected plan."""
    with pytest.raises(AssertionError, match="planner bug"):
        await pev.run(
            GOAL,
            planner=ScriptedPlanner(AssertionError("planner bug")),
            tools=[soil],
            verifier=ScriptedVerifier.passing(),
            contract=RECOVERY,
            store=engine.store,
        )


# -- no blind repeat of an action whose outcome is unknown ------------------------------------

# look → push: push is an action that times out (its outcome unknown); the verifier then blames
# look, a plan error, so the local replan redoes look and everything downstream: push too.
SHOVE = Plan(
    GOAL,
    (
        PlanNode("look", "read the soil", tool="soil", effect="query"),
        PlanNode("push", "push the pot", tool="arm", args={"to": "sun"}, after=("look",)),
    ),
)
SHOVE_GENTLY = Plan(
    GOAL,
    (
        PlanNode("look", "read the soil again", tool="soil", effect="query"),
        PlanNode(
            "push", "push the pot", tool="arm", args={"to": "sun", "gently": True}, after=("look",)
        ),
    ),
)
BLAME_LOOK = Verdict.failed(RECOVERY, failed_nodes=["look"], feedback="look more closely")


def _arm_that_hangs_once() -> FunctionExecutor:
    hung: list[bool] = []

    async def arm(to: str, gently: bool = False) -> str:
        if not hung:
            hung.append(True)
            await asyncio.sleep(1)
        return f"pushed to {to}"

    return FunctionExecutor({"soil": lambda: "dry", "arm": arm})


async def test_a_replan_repeating_an_unknown_action_is_rejected(engine: Engine) -> None:
    """Re-sending a timed-out action with the same args is refused: observe or reconcile first."""
    executor = _arm_that_hangs_once()
    planner = ScriptedPlanner(SHOVE, SHOVE, SHOVE_GENTLY)

    result = await engine.run(
        planner=planner,
        executor=executor,
        verifier=ScriptedVerifier(BLAME_LOOK, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
        policy=RecoveryPolicy(node_timeout_s=0.05),
    )

    assert result.ok
    [rejected] = await _rejections(engine, result.task_id)
    assert "observe or reconcile it first" in rejected.problems[0]
    assert planner.requests[2].rejections == rejected.problems
    assert [record.id for record in planner.requests[1].unknown_records] == [
        record.id
        for record in (await engine.state(result.task_id)).records.values()
        if record.status is RecordStatus.UNKNOWN
    ]
    assert [args for node_id, args in executor.log if node_id == "push"] == [
        {"to": "sun"},
        {"to": "sun", "gently": True},
    ]


async def test_the_feedback_path_never_resends_an_unknown_action(engine: Engine) -> None:
    """A declined local replan would re-send the unknown action as it was: rejected too."""
    executor = _arm_that_hangs_once()

    result = await engine.run(
        planner=ScriptedPlanner(SHOVE, None),
        executor=executor,
        verifier=ScriptedVerifier(BLAME_LOOK),
        contract=RECOVERY,
        policy=RecoveryPolicy(node_timeout_s=0.05, max_replans=1),
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.INVALID_PLAN)
    [rejected] = await _rejections(engine, result.task_id)
    assert "observe or reconcile it first" in rejected.problems[0]
    assert executor.calls["push"] == 1


async def test_an_unknown_action_whose_args_come_from_refs_is_refused_at_dispatch(
    engine: Engine,
) -> None:
    """Args resolved from $refs to the same values as the unknown record: not sent again."""
    by_ref = Plan(
        GOAL,
        (
            PlanNode("look", "read the soil", tool="soil", effect="query"),
            PlanNode(
                "push", "push the pot", tool="arm", args={"to": {"$ref": "look"}}, after=("look",)
            ),
        ),
    )
    executor = _arm_that_hangs_once()

    result = await engine.run(
        planner=ScriptedPlanner(by_ref, by_ref),
        executor=executor,
        verifier=ScriptedVerifier(BLAME_LOOK, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
        policy=RecoveryPolicy(node_timeout_s=0.05),
    )

    assert executor.calls == {"look": 2, "push": 1}
    finished = [
        event.result
        for event in await engine.events(result.task_id)
        if isinstance(event, NodeFinished) and isinstance(event.result, VerifierFailure)
    ]
    assert len(finished) == 1
    assert "observe or reconcile it first" in finished[0].reason
