"""Verification modes in a run: off, audit, enforce against the same scenarios.

See docs/design.md §3.3.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import CRITERION, ENFORCE, GOAL, PLAN

from pev.kernel import Finish, LocalReplan, TaskStatus, TerminalReason
from pev.ledger import Dispatched
from pev.model import (
    DeviceFailure,
    Verdict,
    VerificationContract,
    VerificationMode,
)
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier, StaticObserver

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

OFF = VerificationContract(VerificationMode.OFF)
AUDIT = VerificationContract(VerificationMode.AUDIT, GOAL, (CRITERION,))


def _broken() -> FunctionExecutor:
    return FunctionExecutor({"water": lambda: DeviceFailure("water", "pump jammed")})


async def _decision(engine: Engine, task_id: str) -> Finish:
    [dispatched] = [e for e in await engine.events(task_id) if isinstance(e, Dispatched)]
    assert isinstance(dispatched.decision, Finish)
    return dispatched.decision


# -- audit ------------------------------------------------------------------------------------


async def test_audit_ignores_a_failing_verdict_when_execution_succeeded(engine: Engine) -> None:
    """Audit: a failing verdict changes nothing; succeeded/execution_succeeded, one plan."""
    planner = ScriptedPlanner(PLAN)
    verifier = ScriptedVerifier.failing("water", feedback="not enough")

    result = await engine.run(
        planner=planner, executor=FunctionExecutor(), verifier=verifier, contract=AUDIT
    )

    assert (result.status, result.reason) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.EXECUTION_SUCCEEDED,
    )
    assert planner.calls == 1
    assert verifier.calls == 1


async def test_audit_records_what_recovery_would_have_done(engine: Engine) -> None:
    """Audit: the Dispatched event's Finish carries recovery's decision as its shadow."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier.failing("water", feedback="not enough"),
        contract=AUDIT,
    )

    decision = await _decision(engine, result.task_id)
    assert decision.shadow == LocalReplan(frozenset({"water"}), "not enough")


async def test_audit_ignores_a_verifier_that_raises(engine: Engine) -> None:
    """Audit: a raising verifier changes nothing; the shadow is recovery's partial."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(RuntimeError("judge offline")),
        contract=AUDIT,
    )

    assert (result.status, result.reason) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.EXECUTION_SUCCEEDED,
    )
    shadow = (await _decision(engine, result.task_id)).shadow
    assert isinstance(shadow, Finish)
    assert (shadow.status, shadow.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )


async def test_audit_fails_a_run_whose_execution_failed_even_if_the_verdict_passes(
    engine: Engine,
) -> None:
    """Audit: the outcome follows execution; a passing verdict does not rescue a broken node."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=_broken(),
        verifier=ScriptedVerifier.passing(),
        contract=AUDIT,
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED)


async def test_audit_shadows_missing_evidence_but_still_asks_the_verifier(
    engine: Engine,
) -> None:
    """Audit with required evidence missing: the verifier runs; the shadow is evidence_missing."""
    verifier = ScriptedVerifier.failing("water")

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=verifier,
        observer=StaticObserver("image"),
        contract=replace(AUDIT, required_evidence=("state",)),
    )

    assert (result.status, result.reason) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.EXECUTION_SUCCEEDED,
    )
    assert verifier.calls == 1
    assert (await _decision(engine, result.task_id)).shadow == Finish(
        TaskStatus.FAILED, TerminalReason.EVIDENCE_MISSING
    )


# -- enforce ----------------------------------------------------------------------------------


async def test_enforce_passes_a_passing_verdict(engine: Engine) -> None:
    """Enforce: a passing verdict ends succeeded/passed."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier.passing(),
        contract=ENFORCE,
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)


async def test_enforce_fails_closed_on_a_failing_verdict_without_replanning(
    engine: Engine,
) -> None:
    """Enforce: a plan error is failed/verification_failed; the planner is called once."""
    planner = ScriptedPlanner(PLAN)

    result = await engine.run(
        planner=planner,
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier.failing("water"),
        contract=ENFORCE,
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.VERIFICATION_FAILED,
    )
    assert planner.calls == 1
    assert result.revisions == 1


async def test_enforce_fails_a_blamed_device_failure(engine: Engine) -> None:
    """Enforce: a device failure the verifier blames is failed/device_failure, not partial."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=_broken(),
        verifier=ScriptedVerifier.failing("water"),
        contract=ENFORCE,
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.DEVICE_FAILURE)


async def test_enforce_fails_an_unreliable_verifier(engine: Engine) -> None:
    """Enforce: a verifier that raises is failed/verifier_unreliable."""
    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(RuntimeError("judge offline")),
        contract=ENFORCE,
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.VERIFIER_UNRELIABLE,
    )


# -- off --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("executor", "status", "reason"),
    [
        pytest.param(
            FunctionExecutor,
            TaskStatus.SUCCEEDED,
            TerminalReason.EXECUTION_SUCCEEDED,
            id="executed",
        ),
        pytest.param(_broken, TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED, id="broken"),
    ],
)
async def test_off_never_calls_the_verifier(
    engine: Engine, executor: type[FunctionExecutor], status: TaskStatus, reason: TerminalReason
) -> None:
    """Off: the verifier is never called and execution alone decides the outcome."""
    verifier = ScriptedVerifier.passing()

    result = await engine.run(
        planner=ScriptedPlanner(PLAN), executor=executor(), verifier=verifier, contract=OFF
    )

    assert verifier.calls == 0
    assert (result.status, result.reason) == (status, reason)
    assert not [e for e in await engine.events(result.task_id) if e.kind == "verdict_recorded"]


async def test_off_with_a_failing_verifier_still_ignores_it(engine: Engine) -> None:
    """Off: even a verifier that would fail everything is not consulted."""
    verifier = ScriptedVerifier(Verdict.failed(ENFORCE, failed_nodes=["water"]))

    result = await engine.run(
        planner=ScriptedPlanner(PLAN), executor=FunctionExecutor(), verifier=verifier, contract=OFF
    )

    assert result.ok
    assert verifier.remaining == 1
