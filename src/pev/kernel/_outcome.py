"""How a task can end: statuses, terminal reasons, and which reason each status may carry."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["STATUS_REASONS", "TaskStatus", "TerminalReason", "outcome_allowed"]


class TaskStatus(StrEnum):
    """The terminal status of a task."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TerminalReason(StrEnum):
    """Why a task ended; every ending has exactly one."""

    PASSED = "passed"
    EXECUTION_SUCCEEDED = "execution_succeeded"
    EXECUTION_FAILED = "execution_failed"
    DEVICE_FAILURE = "device_failure"
    VERIFIER_UNRELIABLE = "verifier_unreliable"
    VERIFICATION_FAILED = "verification_failed"
    REPLAN_BUDGET_EXHAUSTED = "replan_budget_exhausted"
    REPLAN_DEADLINE_EXPIRED = "replan_deadline_expired"
    TASK_DEADLINE_EXPIRED = "task_deadline_expired"
    EVIDENCE_MISSING = "evidence_missing"
    INVALID_PLAN = "invalid_plan"
    PLANNER_UNAVAILABLE = "planner_unavailable"
    REJECTED = "rejected"
    APPROVAL_EXPIRED = "approval_expired"
    CANCELLED = "cancelled"
    AGENT_UNAVAILABLE = "agent_unavailable"


# Which reasons each terminal status can carry (docs/design.md §3.4). A partial result is only
# ever an honest stop on a device failure or an untrustworthy verdict; `failed`/`cancelled` is a
# cancel that left an action's outcome unknown.
STATUS_REASONS: dict[TaskStatus, frozenset[TerminalReason]] = {
    TaskStatus.SUCCEEDED: frozenset({TerminalReason.PASSED, TerminalReason.EXECUTION_SUCCEEDED}),
    TaskStatus.PARTIAL: frozenset(
        {TerminalReason.DEVICE_FAILURE, TerminalReason.VERIFIER_UNRELIABLE}
    ),
    TaskStatus.FAILED: frozenset(TerminalReason)
    - {TerminalReason.PASSED, TerminalReason.EXECUTION_SUCCEEDED},
    TaskStatus.CANCELLED: frozenset({TerminalReason.CANCELLED}),
}


def outcome_allowed(status: TaskStatus, reason: TerminalReason) -> bool:
    """True when ``status`` may carry ``reason`` (the table of docs/design.md §3.4)."""
    return reason in STATUS_REASONS.get(status, frozenset())
