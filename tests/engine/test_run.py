"""One round of the loop: a run's outcome from its execution and its verdict.

See docs/design.md §3, §6.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import pev
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import Ledger, VerdictRecorded
from pev.model import (
    CriterionResult,
    CriterionStatus,
    DeviceFailure,
    Plan,
    PlanNode,
    Reliability,
    Verdict,
    VerdictStatus,
    VerificationContract,
    VerificationMode,
)
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

GOAL = "water the plants"
CRITERION = "the soil is damp"
RECOVERY = VerificationContract(VerificationMode.RECOVERY, GOAL, (CRITERION,))
ONE = Plan(GOAL, (PlanNode("water", "pour water", effect="action"),))
TWO = Plan(
    GOAL,
    (
        PlanNode("look", "look at the soil", effect="query"),
        PlanNode("water", "pour water", effect="action", after=("look",)),
    ),
)


def _contract(mode: VerificationMode) -> VerificationContract:
    return VerificationContract(mode, GOAL, (CRITERION,))


async def _verdicts(engine: Engine, task_id: str) -> list[VerdictRecorded]:
    return [e for e in await engine.events(task_id) if isinstance(e, VerdictRecorded)]


async def test_a_passing_verdict_on_one_node_succeeds_with_its_output(engine: Engine) -> None:
    """One node that succeeds and a verifier that passes: succeeded/passed, outputs exact."""
    executor = FunctionExecutor({"water": lambda: {"litres": 2}})

    result = await engine.run(
        planner=ScriptedPlanner(ONE),
        executor=executor,
        verifier=ScriptedVerifier.passing(),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert dict(result.outputs) == {"water": {"litres": 2}}
    assert result.ok
    assert result.failed_nodes == frozenset()
    assert result.diagnosis is None
    assert result.revisions == 1


async def test_a_device_failure_the_verifier_blames_ends_partial_without_a_retry(
    engine: Engine,
) -> None:
    """A broken node that the verifier blames: partial/device_failure; it ran exactly once."""
    executor = FunctionExecutor({"water": lambda: DeviceFailure("water", "pump jammed")})
    planner = ScriptedPlanner(ONE)

    result = await engine.run(
        planner=planner,
        executor=executor,
        verifier=ScriptedVerifier.failing("water"),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert executor.calls == {"water": 1}
    assert planner.calls == 1
    assert result.diagnosis is not None
    assert result.diagnosis.cause is RootCause.DEVICE_FAILURE
    assert result.failed_nodes == {"water"}
    assert not result.ok


async def test_a_device_failure_the_verifier_does_not_blame_is_a_pass(engine: Engine) -> None:
    """A failed node the verifier passes anyway: the run succeeds (docs/design.md §3.1 step 3)."""
    executor = FunctionExecutor({"look": lambda: DeviceFailure("look", "camera off")})
    plan = Plan(
        GOAL,
        (
            PlanNode("look", "look at the soil", effect="query"),
            PlanNode("water", "pour water", effect="action"),
        ),
    )

    result = await engine.run(
        planner=ScriptedPlanner(plan),
        executor=executor,
        verifier=ScriptedVerifier.passing(),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert dict(result.outputs) == {"water": None}
    assert result.failed_nodes == {"look"}


async def test_a_verifier_that_raises_ends_partial_with_the_outputs_so_far(
    engine: Engine,
) -> None:
    """A verifier raising an ordinary exception: partial/verifier_unreliable, outputs kept."""
    executor = FunctionExecutor({"look": lambda: "dry", "water": lambda: "poured"})

    result = await engine.run(
        planner=ScriptedPlanner(TWO),
        executor=executor,
        verifier=ScriptedVerifier(RuntimeError("vision model down")),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )
    assert dict(result.outputs) == {"look": "dry", "water": "poured"}
    [recorded] = await _verdicts(engine, result.task_id)
    assert recorded.reliability is Reliability.THROWN
    assert "vision model down" in recorded.problems[0]


@pytest.mark.parametrize(
    "mode", [VerificationMode.RECOVERY, VerificationMode.AUDIT, VerificationMode.ENFORCE]
)
async def test_an_assertion_in_the_verifier_propagates_out_of_run(
    engine: Engine, mode: VerificationMode
) -> None:
    """An AssertionError in the verifier is a bug, not a verdict, in every mode that verifies."""
    with pytest.raises(AssertionError, match="verifier bug"):
        await pev.run(
            GOAL,
            planner=ScriptedPlanner(ONE),
            executor=FunctionExecutor(),
            verifier=ScriptedVerifier(AssertionError("verifier bug")),
            contract=_contract(mode),
            store=engine.store,
        )


async def test_a_failure_verdict_ends_failed_verification_failed(engine: Engine) -> None:
    """A verifier that judges the goal unreachable: failed/verification_failed, no replan."""
    planner = ScriptedPlanner(ONE)

    result = await engine.run(
        planner=planner,
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(
            lambda request: Verdict.failed(
                request.contract, failed_nodes=["water"], unreachable=True
            )
        ),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.VERIFICATION_FAILED,
    )
    assert planner.calls == 1


async def test_a_verdict_blaming_a_node_outside_the_plan_is_unreliable(engine: Engine) -> None:
    """Blaming a node id the plan does not have: malformed, partial/verifier_unreliable."""
    result = await engine.run(
        planner=ScriptedPlanner(ONE),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier.failing("ghost"),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )
    [recorded] = await _verdicts(engine, result.task_id)
    assert recorded.reliability is Reliability.MALFORMED


def _wrong_criteria(contract: VerificationContract) -> Verdict:
    return Verdict(
        VerdictStatus.SUCCESS,
        criteria=(CriterionResult("the pot is blue", CriterionStatus.SATISFIED),),
    )


def _unknown_evidence(contract: VerificationContract) -> Verdict:
    return Verdict.passed(contract, evidence_refs=["evidence:nowhere"])


def _success_with_unmet_criterion(contract: VerificationContract) -> Verdict:
    return Verdict(
        VerdictStatus.SUCCESS,
        criteria=(CriterionResult(CRITERION, CriterionStatus.UNSATISFIED),),
    )


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda request: _wrong_criteria(request.contract), id="wrong-criteria"),
        pytest.param(lambda request: _unknown_evidence(request.contract), id="unknown-ref"),
        pytest.param(
            lambda request: _success_with_unmet_criterion(request.contract),
            id="success-with-unmet",
        ),
        pytest.param(lambda request: {"status": "great"}, id="dict-not-a-verdict"),
        pytest.param(lambda request: "LGTM", id="str-not-a-verdict"),
        pytest.param(lambda request: None, id="nothing"),
    ],
)
async def test_a_malformed_verdict_ends_partial_verifier_unreliable(
    engine: Engine, answer: Any
) -> None:
    """A return that is not a valid verdict for this contract: partial/verifier_unreliable."""
    executor = FunctionExecutor()

    result = await engine.run(
        planner=ScriptedPlanner(ONE),
        executor=executor,
        verifier=ScriptedVerifier(answer),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )
    assert executor.calls == {"water": 1}
    [recorded] = await _verdicts(engine, result.task_id)
    assert recorded.reliability is Reliability.MALFORMED
    assert recorded.problems


async def test_an_inconclusive_verdict_ends_partial(engine: Engine) -> None:
    """An inconclusive verdict is not acted on: partial/verifier_unreliable."""
    inconclusive = Verdict(
        VerdictStatus.INCONCLUSIVE,
        criteria=(CriterionResult(CRITERION, CriterionStatus.UNKNOWN),),
    )

    result = await engine.run(
        planner=ScriptedPlanner(ONE),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(inconclusive),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )
    [recorded] = await _verdicts(engine, result.task_id)
    assert recorded.reliability is Reliability.INCONCLUSIVE


async def test_a_run_on_sqlite_is_explained_by_its_ledger(tmp_path: Path) -> None:
    """A run on the SQLite store: the stored ledger rebuilds the result and verifies."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        result = await pev.run(
            GOAL,
            planner=ScriptedPlanner(TWO, None),
            executor=FunctionExecutor({"look": lambda: "dry", "water": lambda: "poured"}),
            verifier=ScriptedVerifier(
                Verdict.failed(RECOVERY, failed_nodes=["water"], feedback="too little"),
                Verdict.passed(RECOVERY),
            ),
            contract=RECOVERY,
            store=store,
        )
        reread = Ledger(SQLiteStore(tmp_path / "ledger.db"))
        assert result.ok
        assert result.revisions == 2
        assert pev.RunResult.from_state(await reread.state(result.task_id)) == result
        assert (await reread.verify(result.task_id)).ok
    finally:
        await store.close()


# -- misuse ---------------------------------------------------------------------------------


def test_run_sync_inside_a_running_loop_raises_usage_error() -> None:
    """run_sync called from a coroutine would block its loop: UsageError."""
    import asyncio

    async def inside() -> None:
        pev.run_sync(GOAL, planner=ScriptedPlanner(ONE), executor=FunctionExecutor())

    with pytest.raises(pev.UsageError, match="running event loop"):
        asyncio.run(inside())


def test_run_sync_outside_a_loop_runs_the_task() -> None:
    """run_sync from plain code runs the task to its end."""
    result = pev.run_sync(GOAL, planner=ScriptedPlanner(ONE), executor=FunctionExecutor())

    assert (result.status, result.reason) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.EXECUTION_SUCCEEDED,
    )


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param({"tools": [], "executor": FunctionExecutor()}, id="both"),
        pytest.param({}, id="neither"),
    ],
)
async def test_tools_and_executor_are_exactly_one(parts: dict[str, Any]) -> None:
    """Both tools and an executor, or neither: ComponentError."""
    with pytest.raises(pev.ComponentError):
        await pev.run(GOAL, planner=ScriptedPlanner(ONE), **parts)


@pytest.mark.parametrize(
    "mode", [VerificationMode.AUDIT, VerificationMode.ENFORCE, VerificationMode.RECOVERY]
)
async def test_a_verifying_mode_without_a_verifier_is_a_contract_error(
    mode: VerificationMode,
) -> None:
    """A mode other than off with no verifier: ContractError, before anything is written."""
    store = pev.MemoryStore()

    with pytest.raises(pev.ContractError):
        await pev.run(
            GOAL,
            planner=ScriptedPlanner(ONE),
            executor=FunctionExecutor(),
            contract=_contract(mode),
            store=store,
        )
    assert await Ledger(store).tasks() == ()


async def test_without_a_verifier_the_default_contract_is_off(engine: Engine) -> None:
    """No verifier and no contract: mode off, execution decides."""
    result = await engine.run(planner=ScriptedPlanner(ONE), executor=FunctionExecutor())

    state = await engine.state(result.task_id)
    assert state.contract.mode is VerificationMode.OFF
    assert result.reason is TerminalReason.EXECUTION_SUCCEEDED


async def test_with_a_verifier_the_default_contract_is_recovery_on_the_input(
    engine: Engine,
) -> None:
    """A verifier but no contract: recovery, with the input as the goal."""
    verifier = ScriptedVerifier.passing()

    result = await engine.run(
        "fill the can", planner=ScriptedPlanner(ONE), executor=FunctionExecutor(), verifier=verifier
    )

    state = await engine.state(result.task_id)
    assert state.contract == pev.engine.default_contract("fill the can", verifier)
    assert state.contract.mode is VerificationMode.RECOVERY
    assert state.contract.goal == "fill the can"
    assert state.contract.success_criteria == (pev.engine.DEFAULT_CRITERION,)
    assert result.reason is TerminalReason.PASSED


async def test_a_new_task_and_its_drivers_start_are_one_append() -> None:
    """``run`` writes the task with its driver's ``driver_started`` in one append (one commit on
    a durable store), and the driver does not write its start again."""
    appends: list[list[str]] = []

    class Counted(pev.MemoryStore):
        async def append(self, entries: Any, summary: Any, *, fence: Any = None) -> None:
            appends.append([entry.event.kind for entry in entries])
            await super().append(entries, summary, fence=fence)

    plan = Plan("say hi", (PlanNode("hi", "say hi", tool="hi"),))

    @pev.tool(effect="query")
    def hi() -> str:
        return "hi"

    result = await pev.run("say hi", planner=ScriptedPlanner(plan), tools=[hi], store=Counted())
    assert result.ok
    assert appends[0] == ["task_created", "driver_started"]
    assert sum(kinds.count("driver_started") for kinds in appends) == 1
