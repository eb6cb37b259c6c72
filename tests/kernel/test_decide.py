"""The dispatch table of docs/design.md §3.3: every verification mode, budget and deadline row."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from pev.kernel import (
    Budget,
    Decision,
    Diagnosis,
    Finish,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
    decide,
)
from pev.model import Reliability, Verdict, VerdictStatus, VerificationMode

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
FEEDBACK = "the box is still on the table"

OFF = VerificationMode.OFF
AUDIT = VerificationMode.AUDIT
ENFORCE = VerificationMode.ENFORCE
RECOVERY = VerificationMode.RECOVERY

Outcome = tuple[TaskStatus, TerminalReason]
DEFAULT_BUDGET = Budget()

EXECUTION_SUCCEEDED = (TaskStatus.SUCCEEDED, TerminalReason.EXECUTION_SUCCEEDED)
EXECUTION_FAILED = (TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED)
PASSED = (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
FAILED_DEVICE = (TaskStatus.FAILED, TerminalReason.DEVICE_FAILURE)
FAILED_UNRELIABLE = (TaskStatus.FAILED, TerminalReason.VERIFIER_UNRELIABLE)
FAILED_VERIFICATION = (TaskStatus.FAILED, TerminalReason.VERIFICATION_FAILED)
PARTIAL_DEVICE = (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
PARTIAL_UNRELIABLE = (TaskStatus.PARTIAL, TerminalReason.VERIFIER_UNRELIABLE)
BUDGET_EXHAUSTED = (TaskStatus.FAILED, TerminalReason.REPLAN_BUDGET_EXHAUSTED)
DEADLINE_EXPIRED = (TaskStatus.FAILED, TerminalReason.TASK_DEADLINE_EXPIRED)
EVIDENCE_MISSING = (TaskStatus.FAILED, TerminalReason.EVIDENCE_MISSING)


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """Everything one execute/verify round hands to ``decide``."""

    executed_ok: bool = True
    verdict: Verdict | None = None
    reliability: Reliability | None = None
    diagnosis: Diagnosis | None = None
    budget: Budget = DEFAULT_BUDGET
    now: datetime = NOW
    evidence_missing: bool = False
    local_limit: int = 2

    def but(self, **changes: object) -> Round:
        return replace(self, **changes)  # type: ignore[arg-type]


def _decide(mode: VerificationMode, round_: Round) -> Decision:
    return decide(
        mode,
        executed_ok=round_.executed_ok,
        verdict=round_.verdict,
        reliability=round_.reliability,
        diagnosis=round_.diagnosis,
        budget=round_.budget,
        now=round_.now,
        evidence_missing=round_.evidence_missing,
        local_limit=round_.local_limit,
    )


def _outcome(decision: Decision | None) -> Outcome | Decision | None:
    """A Finish as its (status, reason) pair; a replan action as itself."""
    if isinstance(decision, Finish):
        return (decision.status, decision.reason)
    return decision


def _plan_error(*nodes: str, status: VerdictStatus = VerdictStatus.REPLAN_REQUIRED) -> Round:
    blamed = frozenset(nodes)
    return Round(
        verdict=Verdict(status, failed_nodes=blamed, feedback=FEEDBACK),
        reliability=Reliability.OK,
        diagnosis=Diagnosis(RootCause.PLAN_OR_ANSWER_ERROR, blamed, "verifier blamed nodes"),
    )


NOT_VERIFIED = Round()
PASS = Round(verdict=Verdict(VerdictStatus.SUCCESS), reliability=Reliability.OK)
PLAN_ERROR = _plan_error("n1")
UNREACHABLE = _plan_error("n1", status=VerdictStatus.FAILURE)
DEVICE = Round(
    executed_ok=False,
    verdict=Verdict(VerdictStatus.REPLAN_REQUIRED, failed_nodes=frozenset({"n1"})),
    reliability=Reliability.OK,
    diagnosis=Diagnosis(RootCause.DEVICE_FAILURE, frozenset({"n1"}), "device failure on n1"),
)
THROWN = Round(
    reliability=Reliability.THROWN,
    diagnosis=Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), "thrown"),
)
MALFORMED = Round(
    reliability=Reliability.MALFORMED,
    diagnosis=Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), "malformed"),
)
INCONCLUSIVE = Round(
    verdict=Verdict(VerdictStatus.INCONCLUSIVE),
    reliability=Reliability.INCONCLUSIVE,
    diagnosis=Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), "inconclusive"),
)
MALFORMED_SUCCESS = MALFORMED.but(verdict=Verdict(VerdictStatus.SUCCESS))
SPENT = Budget(replans_used=2, max_replans=2)
OVERDUE = Budget(task_deadline=NOW - timedelta(seconds=1))


OFF_TABLE = [
    pytest.param(NOT_VERIFIED, EXECUTION_SUCCEEDED, id="executed-ok"),
    pytest.param(NOT_VERIFIED.but(executed_ok=False), EXECUTION_FAILED, id="execution-failed"),
    pytest.param(PLAN_ERROR, EXECUTION_SUCCEEDED, id="failing-verdict-ignored"),
    pytest.param(PASS.but(executed_ok=False), EXECUTION_FAILED, id="passing-verdict-ignored"),
    pytest.param(THROWN, EXECUTION_SUCCEEDED, id="thrown-ignored"),
    pytest.param(
        NOT_VERIFIED.but(evidence_missing=True), EXECUTION_SUCCEEDED, id="evidence-ignored"
    ),
    pytest.param(
        NOT_VERIFIED.but(executed_ok=False, budget=SPENT), EXECUTION_FAILED, id="budget-ignored"
    ),
]


@pytest.mark.parametrize(("round_", "expected"), OFF_TABLE)
def test_off_table(round_: Round, expected: Outcome) -> None:
    """In off mode the outcome is the execution's, whatever else is passed in."""
    assert _outcome(_decide(OFF, round_)) == expected


AUDIT_TABLE = [
    pytest.param(PASS, EXECUTION_SUCCEEDED, id="pass-executed-ok"),
    pytest.param(PASS.but(executed_ok=False), EXECUTION_FAILED, id="pass-execution-failed"),
    pytest.param(PLAN_ERROR, EXECUTION_SUCCEEDED, id="plan-error-executed-ok"),
    pytest.param(UNREACHABLE, EXECUTION_SUCCEEDED, id="failure-verdict-executed-ok"),
    pytest.param(DEVICE, EXECUTION_FAILED, id="device-failure"),
    pytest.param(DEVICE.but(executed_ok=True), EXECUTION_SUCCEEDED, id="device-executed-ok"),
    pytest.param(THROWN, EXECUTION_SUCCEEDED, id="thrown-changes-nothing"),
    pytest.param(MALFORMED, EXECUTION_SUCCEEDED, id="malformed-changes-nothing"),
    pytest.param(INCONCLUSIVE.but(executed_ok=False), EXECUTION_FAILED, id="inconclusive"),
    pytest.param(PLAN_ERROR.but(budget=SPENT), EXECUTION_SUCCEEDED, id="budget-spent"),
    pytest.param(PLAN_ERROR.but(budget=OVERDUE), EXECUTION_SUCCEEDED, id="deadline-passed"),
    pytest.param(PASS.but(evidence_missing=True), EXECUTION_SUCCEEDED, id="evidence-missing"),
]


@pytest.mark.parametrize(("round_", "expected"), AUDIT_TABLE)
def test_audit_table(round_: Round, expected: Outcome) -> None:
    """In audit mode the outcome is off mode's, whatever the verdict."""
    assert _outcome(_decide(AUDIT, round_)) == expected


AUDIT_SHADOW_TABLE = [
    pytest.param(PASS, PASSED, id="pass"),
    pytest.param(PLAN_ERROR, LocalReplan(frozenset({"n1"}), FEEDBACK), id="local-replan"),
    pytest.param(_plan_error(), GlobalReplan(FEEDBACK), id="global-replan"),
    pytest.param(DEVICE, PARTIAL_DEVICE, id="device-partial"),
    pytest.param(THROWN, PARTIAL_UNRELIABLE, id="thrown-partial"),
    pytest.param(UNREACHABLE, FAILED_VERIFICATION, id="failure-verdict"),
    pytest.param(PLAN_ERROR.but(budget=SPENT), BUDGET_EXHAUSTED, id="budget-spent"),
    pytest.param(PLAN_ERROR.but(budget=OVERDUE), DEADLINE_EXPIRED, id="deadline-passed"),
    pytest.param(PASS.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing"),
]


@pytest.mark.parametrize(("round_", "expected"), AUDIT_SHADOW_TABLE)
def test_audit_shadow_table(round_: Round, expected: Outcome | Decision) -> None:
    """In audit mode ``shadow`` holds what recovery mode would have decided."""
    decision = _decide(AUDIT, round_)

    assert isinstance(decision, Finish)
    assert _outcome(decision.shadow) == expected


@pytest.mark.parametrize(
    ("mode", "round_"),
    [
        pytest.param(OFF, PLAN_ERROR, id="off"),
        pytest.param(ENFORCE, PLAN_ERROR, id="enforce"),
        pytest.param(RECOVERY, PLAN_ERROR.but(budget=SPENT), id="recovery"),
    ],
)
def test_only_audit_records_a_shadow(mode: VerificationMode, round_: Round) -> None:
    """A Finish outside audit mode carries no shadow decision."""
    decision = _decide(mode, round_)

    assert isinstance(decision, Finish)
    assert decision.shadow is None


ENFORCE_TABLE = [
    pytest.param(PASS, PASSED, id="pass"),
    pytest.param(PASS.but(executed_ok=False), PASSED, id="pass-despite-failed-node"),
    pytest.param(DEVICE, FAILED_DEVICE, id="device-failure"),
    pytest.param(THROWN, FAILED_UNRELIABLE, id="thrown"),
    pytest.param(MALFORMED, FAILED_UNRELIABLE, id="malformed"),
    pytest.param(INCONCLUSIVE, FAILED_UNRELIABLE, id="inconclusive"),
    pytest.param(MALFORMED_SUCCESS, FAILED_UNRELIABLE, id="malformed-success-does-not-pass"),
    pytest.param(PLAN_ERROR, FAILED_VERIFICATION, id="plan-error-never-replans"),
    pytest.param(_plan_error(), FAILED_VERIFICATION, id="plan-error-no-nodes-never-replans"),
    pytest.param(UNREACHABLE, FAILED_VERIFICATION, id="failure-verdict"),
    pytest.param(PLAN_ERROR.but(diagnosis=None), FAILED_UNRELIABLE, id="undiagnosed-failure"),
    pytest.param(PASS.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-pass"),
    pytest.param(
        PLAN_ERROR.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-plan-error"
    ),
    pytest.param(
        NOT_VERIFIED.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-no-verdict"
    ),
]


@pytest.mark.parametrize(("round_", "expected"), ENFORCE_TABLE)
def test_enforce_table(round_: Round, expected: Outcome) -> None:
    """In enforce mode a pass succeeds and anything else fails closed with its reason."""
    assert _outcome(_decide(ENFORCE, round_)) == expected


RECOVERY_TABLE = [
    pytest.param(PASS, PASSED, id="pass"),
    pytest.param(PASS.but(executed_ok=False), PASSED, id="pass-despite-failed-node"),
    pytest.param(PASS.but(budget=SPENT), PASSED, id="pass-with-budget-spent"),
    pytest.param(DEVICE, PARTIAL_DEVICE, id="device-failure-partial"),
    pytest.param(DEVICE.but(budget=SPENT), PARTIAL_DEVICE, id="device-failure-budget-exempt"),
    pytest.param(DEVICE.but(budget=OVERDUE), PARTIAL_DEVICE, id="device-failure-past-deadline"),
    pytest.param(
        DEVICE.but(verdict=UNREACHABLE.verdict),
        PARTIAL_DEVICE,
        id="device-failure-with-failure-verdict",
    ),
    pytest.param(THROWN, PARTIAL_UNRELIABLE, id="thrown-partial"),
    pytest.param(MALFORMED, PARTIAL_UNRELIABLE, id="malformed-partial"),
    pytest.param(INCONCLUSIVE, PARTIAL_UNRELIABLE, id="inconclusive-partial"),
    pytest.param(MALFORMED_SUCCESS, PARTIAL_UNRELIABLE, id="malformed-success-does-not-pass"),
    pytest.param(THROWN.but(budget=SPENT), PARTIAL_UNRELIABLE, id="unreliable-budget-exempt"),
    pytest.param(PLAN_ERROR.but(diagnosis=None), PARTIAL_UNRELIABLE, id="undiagnosed-failure"),
    pytest.param(UNREACHABLE, FAILED_VERIFICATION, id="failure-verdict-plan-error"),
    pytest.param(
        UNREACHABLE.but(budget=SPENT), FAILED_VERIFICATION, id="failure-verdict-before-budget"
    ),
    pytest.param(PLAN_ERROR, LocalReplan(frozenset({"n1"}), FEEDBACK), id="local-replan-one"),
    pytest.param(
        _plan_error("n1", "n2"),
        LocalReplan(frozenset({"n1", "n2"}), FEEDBACK),
        id="local-replan-at-limit",
    ),
    pytest.param(_plan_error("n1", "n2", "n3"), GlobalReplan(FEEDBACK), id="global-over-limit"),
    pytest.param(_plan_error(), GlobalReplan(FEEDBACK), id="global-no-nodes"),
    pytest.param(PLAN_ERROR.but(local_limit=0), GlobalReplan(FEEDBACK), id="local-limit-0"),
    pytest.param(
        _plan_error("n1", "n2", "n3").but(local_limit=3),
        LocalReplan(frozenset({"n1", "n2", "n3"}), FEEDBACK),
        id="local-limit-3",
    ),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(replans_used=1, max_replans=2)),
        LocalReplan(frozenset({"n1"}), FEEDBACK),
        id="last-replan-in-budget",
    ),
    pytest.param(PLAN_ERROR.but(budget=SPENT), BUDGET_EXHAUSTED, id="budget-used-equals-max"),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(replans_used=3, max_replans=2)),
        BUDGET_EXHAUSTED,
        id="budget-used-over-max",
    ),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(replans_used=0, max_replans=0)),
        BUDGET_EXHAUSTED,
        id="no-replans-allowed",
    ),
    pytest.param(
        _plan_error().but(budget=SPENT), BUDGET_EXHAUSTED, id="global-replan-budget-spent"
    ),
    pytest.param(PLAN_ERROR.but(budget=OVERDUE), DEADLINE_EXPIRED, id="past-task-deadline"),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(task_deadline=NOW)), DEADLINE_EXPIRED, id="at-task-deadline"
    ),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(task_deadline=NOW + timedelta(seconds=1))),
        LocalReplan(frozenset({"n1"}), FEEDBACK),
        id="before-task-deadline",
    ),
    pytest.param(
        PLAN_ERROR.but(budget=Budget(replans_used=2, task_deadline=NOW - timedelta(hours=1))),
        BUDGET_EXHAUSTED,
        id="budget-checked-before-deadline",
    ),
    pytest.param(PASS.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-pass"),
    pytest.param(
        PLAN_ERROR.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-plan-error"
    ),
    pytest.param(DEVICE.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-device"),
    pytest.param(
        NOT_VERIFIED.but(evidence_missing=True), EVIDENCE_MISSING, id="evidence-missing-no-verdict"
    ),
]


@pytest.mark.parametrize(("round_", "expected"), RECOVERY_TABLE)
def test_recovery_table(round_: Round, expected: Outcome | Decision) -> None:
    """In recovery mode each row ends, accepts partial or re-plans as docs/design.md §3.3 says."""
    assert _outcome(_decide(RECOVERY, round_)) == expected


def test_time_is_an_input() -> None:
    """The same round re-plans before the task deadline and expires after it."""
    deadline = Budget(task_deadline=NOW)
    before = _decide(RECOVERY, PLAN_ERROR.but(budget=deadline, now=NOW - timedelta(minutes=1)))
    after = _decide(RECOVERY, PLAN_ERROR.but(budget=deadline, now=NOW + timedelta(minutes=1)))

    assert (_outcome(before), _outcome(after)) == (
        LocalReplan(frozenset({"n1"}), FEEDBACK),
        DEADLINE_EXPIRED,
    )


def test_budget_defaults_allow_two_replans() -> None:
    """A default Budget allows two replans: the third is refused (at most three rounds)."""
    second = _decide(RECOVERY, PLAN_ERROR.but(budget=Budget(replans_used=1)))
    third = _decide(RECOVERY, PLAN_ERROR.but(budget=Budget(replans_used=2)))

    assert (type(second), _outcome(third)) == (LocalReplan, BUDGET_EXHAUSTED)
