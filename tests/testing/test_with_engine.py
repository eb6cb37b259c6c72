"""The doubles drive the real engine: the shape of test that docs/testing.md §7 recommends."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from pev.engine import run
from pev.ledger import RevisionKind
from pev.model import Plan, Verdict, VerificationContract
from pev.testing import FakeClock, FunctionExecutor, ScriptedPlanner, ScriptedVerifier


async def test_a_blamed_node_is_redone_without_rerunning_the_kept_one(
    plan: Plan, contract: VerificationContract
) -> None:
    """A verdict blaming move leads to a local replan that moves again and keeps look."""
    # The cube fell off: moving it again is the intent, a new occurrence of the same call.
    planner = ScriptedPlanner(plan, Plan(plan.goal, (replace(plan.node("move"), repeat=True),)))
    executor = FunctionExecutor({"camera": lambda: {"red": "table"}, "arm": lambda **_: "moved"})
    verifier = ScriptedVerifier(
        Verdict.failed(contract, failed_nodes=["move"], feedback="the red cube fell off"),
        Verdict.passed(contract),
    )

    result = await run(
        "stack red on blue",
        planner=planner,
        executor=executor,
        verifier=verifier,
        contract=contract,
        clock=FakeClock(step=timedelta(seconds=1)),
    )

    assert result.ok
    assert [request.kind for request in planner.requests] == [
        RevisionKind.INITIAL,
        RevisionKind.LOCAL,
    ]
    assert planner.requests[1].redo_nodes == {"move"}
    assert executor.calls == {"look": 1, "move": 2}
    assert (planner.remaining, verifier.remaining) == (0, 0)
