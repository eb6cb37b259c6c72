"""Evidence in a run: observations, required evidence, what the verifier sees.

See docs/design.md §2.3, §2.4.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import CRITERION, GOAL, PLAN

import pev
from pev.engine import Observation, VerifyRequest
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import VerdictRecorded
from pev.model import EvidencePhase, Verdict, VerificationContract, VerificationMode
from pev.testing import (
    FunctionExecutor,
    ScriptedObserver,
    ScriptedPlanner,
    ScriptedVerifier,
    StaticObserver,
)

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

NEEDS_STATE = VerificationContract(
    VerificationMode.RECOVERY, GOAL, (CRITERION,), required_evidence=("state",)
)


@pytest.mark.parametrize("mode", [VerificationMode.RECOVERY, VerificationMode.ENFORCE])
async def test_missing_required_evidence_fails_without_calling_the_verifier(
    engine: Engine, mode: VerificationMode
) -> None:
    """No fresh 'state' observation after the round: failed/evidence_missing, verifier unasked."""
    verifier = ScriptedVerifier.passing()
    observer = ScriptedObserver(Observation(kind="state"), Observation(kind="image"))

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=verifier,
        observer=observer,
        contract=replace(NEEDS_STATE, mode=mode),
    )

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.EVIDENCE_MISSING)
    assert verifier.calls == 0
    assert observer.phases == (EvidencePhase.BEFORE, EvidencePhase.AFTER)
    [recorded] = [e for e in await engine.events(result.task_id) if isinstance(e, VerdictRecorded)]
    assert recorded.evidence_missing


async def test_a_failed_capture_counts_as_missing_evidence(engine: Engine) -> None:
    """An observer that raises after the round leaves the evidence missing."""
    verifier = ScriptedVerifier.passing()

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=verifier,
        observer=ScriptedObserver(Observation(kind="state"), OSError("camera unplugged")),
        contract=NEEDS_STATE,
    )

    assert result.reason is TerminalReason.EVIDENCE_MISSING
    assert verifier.calls == 0
    kinds = await engine.kinds(result.task_id)
    assert "capture_failed" in kinds


async def test_the_verifier_sees_the_required_evidence(engine: Engine) -> None:
    """With the 'state' observation captured, the verifier runs and finds it in its request."""
    verifier = ScriptedVerifier.passing()

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=verifier,
        observer=StaticObserver("state", payload={"soil": "damp"}),
        contract=NEEDS_STATE,
    )

    assert result.ok
    [request] = verifier.requests
    after = [e for e in request.evidence if e.phase is EvidencePhase.AFTER]
    assert [(e.kind, e.payload) for e in after] == [("state", {"soil": "damp"})]
    assert [e.phase for e in request.evidence] == [EvidencePhase.BEFORE, EvidencePhase.AFTER]


async def test_a_verdict_may_cite_captured_evidence(engine: Engine) -> None:
    """A verdict citing an evidence reference that exists in the task is trusted."""

    def cite(request: VerifyRequest) -> Verdict:
        return Verdict.passed(request.contract, evidence_refs=request.evidence_refs)

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(cite),
        observer=StaticObserver("state"),
        contract=NEEDS_STATE,
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)


async def test_requiring_evidence_without_an_observer_is_a_contract_error() -> None:
    """required_evidence with no observer: ContractError from run, before anything runs."""
    executor = FunctionExecutor()

    with pytest.raises(pev.ContractError):
        await pev.run(
            GOAL,
            planner=ScriptedPlanner(PLAN),
            executor=executor,
            verifier=ScriptedVerifier.passing(),
            contract=NEEDS_STATE,
        )
    assert executor.calls == {}
