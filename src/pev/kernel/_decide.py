"""The whole dispatch: mode, verdict, diagnosis, budget and deadline → decision.

See docs/design.md §3.3.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal, TypeAlias, assert_never

from pev.kernel._actions import AcceptPartial, GlobalReplan, LocalReplan, to_replan_action
from pev.kernel._diagnose import Diagnosis, RootCause
from pev.kernel._outcome import TaskStatus, TerminalReason
from pev.model import Reliability, Verdict, VerdictStatus, VerificationMode, passes

__all__ = ["Budget", "Decision", "Finish", "deadline_passed", "decide"]


# Keeps the documented positional signature
# `Budget(replans_used, max_replans=2, task_deadline=None)`.
@dataclass(frozen=True, slots=True)
class Budget:
    """Replans spent and allowed, and the whole task's deadline (UTC) if it has one."""

    replans_used: int = 0
    max_replans: int = 2
    task_deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """End the task with ``status`` for ``reason``.

    Attributes:
        status: The terminal status.
        reason: Why.
        shadow: In audit mode, what recovery mode would have decided; ``None`` otherwise.
        detail: The diagnosis detail behind the reason, when there is one.
    """

    kind: ClassVar[Literal["finish"]] = "finish"
    status: TaskStatus
    reason: TerminalReason
    shadow: Decision | None = None
    detail: str = ""


Decision: TypeAlias = Finish | LocalReplan | GlobalReplan
"""Either the task ends, or it is re-planned."""

# Enforce and recovery map a diagnosis that did not pass to the reason its failure carries.
_CAUSE_REASON = {
    RootCause.DEVICE_FAILURE: TerminalReason.DEVICE_FAILURE,
    RootCause.PERCEPTION_UNRELIABLE: TerminalReason.VERIFIER_UNRELIABLE,
    RootCause.PLAN_OR_ANSWER_ERROR: TerminalReason.VERIFICATION_FAILED,
}

_UNTRUSTED = Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), "no diagnosis")


def decide(
    mode: VerificationMode,
    *,
    executed_ok: bool,
    verdict: Verdict | None,
    reliability: Reliability | None,
    diagnosis: Diagnosis | None,
    budget: Budget,
    now: datetime,
    evidence_missing: bool = False,
    local_limit: int = 2,
) -> Decision:
    """Decide what follows an execute (and verify) round.

    | mode     | outcome                                                                     |
    |----------|-----------------------------------------------------------------------------|
    | off      | succeeded/execution_succeeded if executed_ok, else failed/execution_failed  |
    | audit    | as off, whatever the verdict; ``shadow`` holds recovery's decision          |
    | enforce  | pass → succeeded/passed; else failed with the diagnosis's reason; no replan |
    | recovery | pass → succeeded/passed; else the §3.2 action: AcceptPartial → partial;     |
    |          | a ``failure`` verdict → failed/verification_failed; a replan past the       |
    |          | budget → failed/replan_budget_exhausted; past the task deadline →           |
    |          | failed/task_deadline_expired; else the replan                               |

    In enforce and recovery, missing required evidence ends failed/evidence_missing. A verdict
    that did not pass but comes without a diagnosis is treated as untrustworthy.

    Args:
        mode: The contract's verification mode.
        executed_ok: Every node of the current plan has a succeeded record.
        verdict: The verdict, or ``None`` where no verifier ran or nothing usable came back.
        reliability: The engine's reading of the verifier's return; ``None`` where none ran.
        diagnosis: The diagnosis of a verdict that did not pass; ``None`` otherwise.
        budget: Replans used and allowed, and the task deadline.
        now: The current time (UTC); the kernel reads no clock.
        evidence_missing: Required evidence has no fresh ``after`` observation this round.
        local_limit: The most failed nodes a local replan handles.
    """
    match mode:
        case VerificationMode.OFF:
            return _execution_outcome(executed_ok)
        case VerificationMode.AUDIT:
            shadow = _recovery(
                verdict,
                reliability,
                diagnosis,
                budget=budget,
                now=now,
                evidence_missing=evidence_missing,
                local_limit=local_limit,
            )
            outcome = _execution_outcome(executed_ok)
            return Finish(outcome.status, outcome.reason, shadow)
        case VerificationMode.ENFORCE:
            if evidence_missing:
                return Finish(TaskStatus.FAILED, TerminalReason.EVIDENCE_MISSING)
            if passes(verdict, reliability):
                return Finish(TaskStatus.SUCCEEDED, TerminalReason.PASSED)
            cause = diagnosis or _UNTRUSTED
            return Finish(TaskStatus.FAILED, _CAUSE_REASON[cause.cause], detail=cause.detail)
        case VerificationMode.RECOVERY:
            return _recovery(
                verdict,
                reliability,
                diagnosis,
                budget=budget,
                now=now,
                evidence_missing=evidence_missing,
                local_limit=local_limit,
            )
        case _:
            assert_never(mode)


def deadline_passed(now: datetime, deadline: datetime | None) -> bool:
    """Whether ``deadline`` has passed: from its very instant on. Every deadline uses this rule."""
    return deadline is not None and now >= deadline


def _execution_outcome(executed_ok: bool) -> Finish:
    if executed_ok:
        return Finish(TaskStatus.SUCCEEDED, TerminalReason.EXECUTION_SUCCEEDED)
    return Finish(TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED)


def _recovery(
    verdict: Verdict | None,
    reliability: Reliability | None,
    diagnosis: Diagnosis | None,
    *,
    budget: Budget,
    now: datetime,
    evidence_missing: bool,
    local_limit: int,
) -> Decision:
    if evidence_missing:
        return Finish(TaskStatus.FAILED, TerminalReason.EVIDENCE_MISSING)
    if passes(verdict, reliability):
        return Finish(TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    cause = diagnosis or _UNTRUSTED
    blamed = verdict.failed_nodes if verdict is not None else frozenset()
    feedback = verdict.feedback if verdict is not None else ""
    action = to_replan_action(cause, blamed, feedback, local_limit=local_limit)
    match action:
        case AcceptPartial(reason=reason, detail=detail):
            return Finish(TaskStatus.PARTIAL, reason, detail=detail)
        case LocalReplan() | GlobalReplan():
            if verdict is not None and verdict.status == VerdictStatus.FAILURE:
                reason = TerminalReason.VERIFICATION_FAILED
            elif budget.replans_used >= budget.max_replans:
                reason = TerminalReason.REPLAN_BUDGET_EXHAUSTED
            elif deadline_passed(now, budget.task_deadline):
                reason = TerminalReason.TASK_DEADLINE_EXPIRED
            else:
                return action
            return Finish(TaskStatus.FAILED, reason, detail=cause.detail)
        case _:
            assert_never(action)
