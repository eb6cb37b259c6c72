"""The status/reason table of docs/design.md §3.4: which reasons each terminal status may carry."""

from __future__ import annotations

import pytest

from pev.kernel import STATUS_REASONS, TaskStatus, TerminalReason, outcome_allowed

R = TerminalReason

STATUS_TABLE = [
    pytest.param(TaskStatus.SUCCEEDED, {R.PASSED, R.EXECUTION_SUCCEEDED}, id="succeeded"),
    pytest.param(TaskStatus.PARTIAL, {R.DEVICE_FAILURE, R.VERIFIER_UNRELIABLE}, id="partial"),
    pytest.param(
        TaskStatus.FAILED,
        {
            R.EXECUTION_FAILED,
            R.DEVICE_FAILURE,
            R.VERIFIER_UNRELIABLE,
            R.VERIFICATION_FAILED,
            R.REPLAN_BUDGET_EXHAUSTED,
            R.REPLAN_DEADLINE_EXPIRED,
            R.TASK_DEADLINE_EXPIRED,
            R.EVIDENCE_MISSING,
            R.INVALID_PLAN,
            R.PLANNER_UNAVAILABLE,
            R.REJECTED,
            R.APPROVAL_EXPIRED,
            R.CANCELLED,
            R.AGENT_UNAVAILABLE,
        },
        id="failed",
    ),
    pytest.param(TaskStatus.CANCELLED, {R.CANCELLED}, id="cancelled"),
]


@pytest.mark.parametrize(("status", "reasons"), STATUS_TABLE)
def test_status_reasons_table(status: TaskStatus, reasons: set[TerminalReason]) -> None:
    """Each status carries exactly the reasons docs/design.md §3.4 lists for it."""
    assert STATUS_REASONS[status] == reasons


@pytest.mark.parametrize(("status", "reasons"), STATUS_TABLE)
def test_outcome_allowed_follows_the_table(
    status: TaskStatus, reasons: set[TerminalReason]
) -> None:
    """outcome_allowed accepts a status's listed reasons and refuses every other reason."""
    assert {reason for reason in TerminalReason if outcome_allowed(status, reason)} == reasons


def test_every_status_has_a_row() -> None:
    """STATUS_REASONS has a row for every task status and no other."""
    assert set(STATUS_REASONS) == set(TaskStatus)


def test_terminal_reasons_are_the_documented_vocabulary() -> None:
    """TerminalReason names exactly the sixteen endings of docs/design.md §3.4."""
    assert {reason.value for reason in TerminalReason} == {
        "passed",
        "execution_succeeded",
        "execution_failed",
        "device_failure",
        "verifier_unreliable",
        "verification_failed",
        "replan_budget_exhausted",
        "replan_deadline_expired",
        "task_deadline_expired",
        "evidence_missing",
        "invalid_plan",
        "planner_unavailable",
        "rejected",
        "approval_expired",
        "cancelled",
        "agent_unavailable",
    }
