"""Replanning in a run: local and global replans, the budget, and the replan deadline.

See docs/design.md §4.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from tests.support.watering import CRITERION, GOAL, RECOVERY

import pev
from pev.engine import PlanRequest
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import Ledger, RevisionKind, TaskPhase, reject_plan
from pev.model import (
    DeviceFailure,
    Plan,
    PlanNode,
    Verdict,
)
from pev.policy import RecoveryPolicy
from pev.testing import FakeClock, FunctionExecutor, MemoryStore, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine


# a → b → c, and d on its own.
CHAIN = Plan(
    GOAL,
    (
        PlanNode("a", "fetch the can", effect="query"),
        PlanNode("b", "fill the can", after=("a",), args={"litres": 1}),
        PlanNode("c", "pour", after=("b",), args={"water": {"$ref": "b"}}),
        PlanNode("d", "open the window", effect="query"),
    ),
)
BLAME_B = Verdict.failed(RECOVERY, failed_nodes=["b"], feedback="fill it more")


def _chain_executor() -> FunctionExecutor:
    return FunctionExecutor(
        {
            "a": lambda: "can",
            "b": lambda litres: litres,
            "c": lambda water: "poured",
            "d": lambda: "open",
        }
    )


# -- local replan -----------------------------------------------------------------------------


async def test_a_local_replan_redoes_the_blamed_node_and_its_dependents_only(
    engine: Engine,
) -> None:
    """Blaming b in a→b→c (+ d): only b and c run again; a and d ran once."""
    replacements = Plan(
        GOAL,
        (
            PlanNode("b", "fill the can to the brim", after=("a",), args={"litres": 3}),
            PlanNode("c", "pour", after=("b",), args={"water": {"$ref": "b"}}),
        ),
    )
    executor = _chain_executor()

    result = await engine.run(
        planner=ScriptedPlanner(CHAIN, replacements),
        executor=executor,
        verifier=ScriptedVerifier(BLAME_B, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert executor.calls == {"a": 1, "b": 2, "c": 2, "d": 1}
    assert dict(result.outputs) == {"a": "can", "b": 3, "c": "poured", "d": "open"}


async def test_the_local_revision_holds_the_full_plan_and_its_redo_set(engine: Engine) -> None:
    """The second revision's plan is the whole plan (kept + replaced), its redo set is {b, c}."""
    replacement_b = PlanNode("b", "fill the can to the brim", after=("a",), args={"litres": 3})
    replacement_c = PlanNode("c", "pour", after=("b",), args={"water": {"$ref": "b"}})
    replacements = Plan(GOAL, (replacement_b, replacement_c))

    result = await engine.run(
        planner=ScriptedPlanner(CHAIN, replacements),
        executor=_chain_executor(),
        verifier=ScriptedVerifier(BLAME_B, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    second = (await engine.state(result.task_id)).revisions[1]
    assert second.kind is RevisionKind.LOCAL
    assert second.plan.node_ids == ("a", "b", "c", "d")
    assert second.plan.node("b") == replacement_b
    assert second.plan.node("a") == CHAIN.node("a")
    assert second.redo == {"b", "c"}


async def test_the_local_replan_request_names_the_redo_set_and_kept_results(
    engine: Engine,
) -> None:
    """The planner is asked for a local replan of {b, c}, told the feedback and kept outputs."""
    planner = ScriptedPlanner(CHAIN, None)

    await engine.run(
        planner=planner,
        executor=_chain_executor(),
        verifier=ScriptedVerifier(BLAME_B, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    request = planner.requests[1]
    assert request.kind is RevisionKind.LOCAL
    assert request.redo_nodes == {"b", "c"}
    assert request.feedback == "fill it more"
    assert dict(request.kept_results) == {"a": "can", "d": "open"}
    assert request.previous_plan == CHAIN


async def test_a_declined_local_replan_appends_the_feedback_to_the_redo_nodes(
    engine: Engine,
) -> None:
    """A planner returning None: b and c carry the feedback; their calls, unchanged, are reused."""
    executor = _chain_executor()

    result = await engine.run(
        planner=ScriptedPlanner(CHAIN, None),
        executor=executor,
        verifier=ScriptedVerifier(BLAME_B, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    assert result.ok
    assert executor.calls == {"a": 1, "b": 1, "c": 1, "d": 1}
    state = await engine.state(result.task_id)
    assert [(reuse.node_id, reuse.record_id) for reuse in state.reused] == [
        ("b", "1:b"),
        ("c", "1:c"),
    ]
    second = (await engine.state(result.task_id)).revisions[1]
    assert second.redo == {"b", "c"}
    assert "fill it more" in second.plan.node("b").description
    assert "fill it more" in second.plan.node("c").description
    assert second.plan.node("a") == CHAIN.node("a")
    assert second.plan.node("d") == CHAIN.node("d")


# -- budget -----------------------------------------------------------------------------------


async def test_a_verifier_that_always_fails_gets_three_rounds_then_the_budget_ends(
    engine: Engine,
) -> None:
    """max_replans=2: exactly 3 revisions and 3 verifications, then replan_budget_exhausted."""
    verifier = ScriptedVerifier.failing("a", "b")
    planner = ScriptedPlanner(CHAIN, repeat_last=True)

    result = await engine.run(
        planner=planner,
        executor=_chain_executor(),
        verifier=verifier,
        contract=RECOVERY,
        policy=RecoveryPolicy(max_replans=2),
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
    )
    assert result.revisions == 3
    assert verifier.calls == 3
    assert planner.calls == 3


# -- global replan ----------------------------------------------------------------------------


async def test_more_failed_nodes_than_the_local_limit_asks_for_a_global_replan(
    engine: Engine,
) -> None:
    """Three blamed nodes with local_limit=2: a global request with verdict and previous plan."""
    blame_three = Verdict.failed(RECOVERY, failed_nodes=["a", "b", "c"], feedback="start over")
    planner = ScriptedPlanner(CHAIN, CHAIN)

    result = await engine.run(
        planner=planner,
        executor=_chain_executor(),
        verifier=ScriptedVerifier(blame_three, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    assert result.ok
    request = planner.requests[1]
    assert request.kind is RevisionKind.GLOBAL
    assert request.feedback == "start over"
    assert request.verdict == blame_three
    assert request.unmet_criteria == (CRITERION,)
    assert request.previous_plan == CHAIN
    assert request.input == GOAL
    assert request.deadline is not None


async def test_a_global_replan_starts_a_fresh_lineage_that_runs_every_node_again(
    engine: Engine,
) -> None:
    """A global plan of the same nodes runs its queries again; its actions reuse their effects."""
    blame_three = Verdict.failed(RECOVERY, failed_nodes=["a", "b", "c"])
    executor = _chain_executor()

    result = await engine.run(
        planner=ScriptedPlanner(CHAIN, CHAIN),
        executor=executor,
        verifier=ScriptedVerifier(blame_three, Verdict.passed(RECOVERY)),
        contract=RECOVERY,
    )

    state = await engine.state(result.task_id)
    assert executor.calls == {"a": 2, "b": 1, "c": 1, "d": 2}
    assert [reuse.node_id for reuse in state.reused] == ["b", "c"]
    assert [revision.kind for revision in state.revisions] == [
        RevisionKind.INITIAL,
        RevisionKind.GLOBAL,
    ]
    assert state.revisions[1].lineage == 2


async def test_a_reused_node_id_does_not_inherit_a_failure_from_the_old_lineage(
    engine: Engine,
) -> None:
    """After a global replan, blaming a node that did not run is a plan error, not a device one."""
    first = Plan(GOAL, (PlanNode("a", "fetch the can", effect="query"),))
    second = Plan(
        GOAL,
        (
            PlanNode("z", "find the tap", effect="query"),
            PlanNode("a", "fetch the can", effect="query", after=("z",)),
        ),
    )
    executor = FunctionExecutor(
        {
            "a": lambda: DeviceFailure("a", "can stuck"),
            "z": lambda: DeviceFailure("z", "no tap"),
        }
    )

    result = await engine.run(
        planner=ScriptedPlanner(first, second),
        executor=executor,
        verifier=ScriptedVerifier(
            Verdict.failed(RECOVERY, feedback="rethink"),
            Verdict.failed(RECOVERY, failed_nodes=["a"]),
        ),
        contract=RECOVERY,
        policy=RecoveryPolicy(max_replans=1),
    )

    assert executor.calls == {"a": 1, "z": 1}
    assert result.diagnosis is not None
    assert result.diagnosis.cause is RootCause.PLAN_OR_ANSWER_ERROR
    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
    )


# -- replan deadline --------------------------------------------------------------------------


async def test_a_planner_slower_than_the_replan_timeout_ends_the_task(engine: Engine) -> None:
    """A replan that takes longer than replan_timeout_s: failed/replan_deadline_expired."""

    async def slow_replan(request: PlanRequest) -> Plan:
        await asyncio.sleep(1)
        return CHAIN

    result = await engine.run(
        planner=ScriptedPlanner(CHAIN, slow_replan),
        executor=_chain_executor(),
        verifier=ScriptedVerifier(BLAME_B),
        contract=RECOVERY,
        policy=RecoveryPolicy(replan_timeout_s=0.05),
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    assert result.revisions == 1


async def _left_awaiting_replan(store: MemoryStore, clock: FakeClock) -> pev.TaskState:
    """A task whose initial plan was rejected and that nobody drives any more."""
    ledger = Ledger(store, clock=clock)
    state = await ledger.create(
        GOAL, contract=RECOVERY, policy=RecoveryPolicy(replan_timeout_s=60), task_id="orphan"
    )
    state = await ledger.append(
        state.task_id, reject_plan(state, problems=["a cycle"], plan=None, now=clock())
    )
    assert state.phase is TaskPhase.AWAITING_REPLAN
    return state


async def test_expire_overdue_ends_a_task_nobody_drives(engine: Engine) -> None:
    """A task left awaiting a replan past its deadline ends without anyone calling it."""
    clock = FakeClock()
    waiting = await _left_awaiting_replan(engine.store, clock)
    assert waiting.replan_deadline is not None

    expired = await Ledger(engine.store).expire_overdue(
        waiting.replan_deadline + timedelta(seconds=1)
    )

    assert expired == ("orphan",)
    result = pev.RunResult.from_state(await engine.state("orphan"))
    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    await engine.check(result)


async def test_expire_overdue_leaves_a_task_within_its_deadline(engine: Engine) -> None:
    """Before the replan deadline, the waiting task stays as it is."""
    clock = FakeClock()
    waiting = await _left_awaiting_replan(engine.store, clock)

    expired = await Ledger(engine.store).expire_overdue(clock() + timedelta(seconds=30))

    assert expired == ()
    assert (await engine.state(waiting.task_id)).phase is TaskPhase.AWAITING_REPLAN


async def test_a_run_expires_overdue_tasks_of_its_store_when_it_starts(engine: Engine) -> None:
    """pev.run on another task in the same store ends the overdue one first."""
    clock = FakeClock()
    waiting = await _left_awaiting_replan(engine.store, clock)
    clock.advance(61)

    await engine.run(planner=ScriptedPlanner(CHAIN), executor=_chain_executor(), clock=clock)

    state = await engine.state(waiting.task_id)
    assert state.finished is not None
    assert state.finished.reason is TerminalReason.REPLAN_DEADLINE_EXPIRED
