"""The task state machine's transitions as pure functions: state + input → events to append.

Each function decides which events a step writes, checking the rules of docs/design.md §4, §5.3 (the
three valves of a new revision, rejected plans and the budget, deadlines, cancellation). None of
them writes anything: the :class:`~pev.ledger.Ledger` appends what they return in one
transaction, so a step is either wholly in the ledger or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import assert_never

from pev.errors import StateError
from pev.kernel import (
    Decision,
    Finish,
    GlobalReplan,
    LocalReplan,
    TaskStatus,
    TerminalReason,
    deadline_passed,
)
from pev.ledger._effects import TaskEffect
from pev.ledger._events import (
    ApprovalRequested,
    Approved,
    AwaitingReplan,
    CancelRequested,
    Dispatched,
    Event,
    PlanRejected,
    Rejected,
    ReplanStarted,
    RevisionKind,
    TaskCreated,
    TaskFinished,
    UnwindStarted,
    Usage,
)
from pev.ledger._phases import ALLOWED_PHASES, REPLAN_DEADLINE_PHASES, TaskPhase, allowed, needs
from pev.ledger._queries import outputs, unsettled_unknown_actions
from pev.ledger._state import TaskState
from pev.model import (
    JsonValue,
    Plan,
    TaskId,
    VerificationContract,
    VerificationMode,
    freeze_json,
)
from pev.policy import Approval, RecoveryPolicy

__all__ = [
    "approval_request",
    "approve",
    "begin_replan",
    "cancel_outcome",
    "dispatch",
    "expire",
    "finish",
    "new_task",
    "reject",
    "reject_plan",
    "request_cancel",
    "to_undo",
]


def new_task(
    task_id: TaskId,
    *,
    input: JsonValue,  # noqa: A002 - the documented name for what the task is asked to do
    contract: VerificationContract,
    policy: RecoveryPolicy,
    now: datetime,
    components: Mapping[str, str] | None = None,
) -> TaskCreated:
    """The creation event of a task; its deadline is ``now + task_timeout_s`` when set."""
    deadline = (
        now + timedelta(seconds=policy.task_timeout_s)
        if policy.task_timeout_s is not None
        else None
    )
    return TaskCreated(
        task_id=task_id,
        input=freeze_json(input, path="input"),
        contract=contract,
        policy=policy,
        components=MappingProxyType(dict(components or {})),
        task_deadline=deadline,
    )


def finish(
    state: TaskState, status: TaskStatus, reason: TerminalReason, *, detail: str = ""
) -> TaskFinished | UnwindStarted:
    """How the task ends: the final event, with the outputs of every succeeded node of its plan.

    With ``compensate_on_failure``, a task that would end ``failed``, ``partial`` or
    ``cancelled`` while it has effects to undo unwinds first: the event is then
    ``unwind_started``, carrying the ending (docs/engine.md, "Compensation"), and the
    ``task_finished`` follows once its effects are undone.
    """
    if (
        state.policy.compensate_on_failure
        and status is not TaskStatus.SUCCEEDED
        and state.unwinding is None
        and to_undo(state)
    ):
        return UnwindStarted(status=status, reason=reason, detail=detail)
    return TaskFinished(
        status=status, reason=reason, outputs=MappingProxyType(outputs(state)), detail=detail
    )


def to_undo(state: TaskState) -> tuple[TaskEffect, ...]:
    """The effects a task unwinding undoes, newest first: those that took effect and stand."""
    return tuple(
        effect
        for effect in reversed(tuple(state.effects.values()))
        if effect.happened and effect.in_world and effect.compensation is None
    )


def begin_replan(state: TaskState, *, now: datetime) -> tuple[Event, ...]:
    """Pass the three valves of a new revision, in order (docs/design.md §5.3).

    1. the task is ``awaiting_replan``, else :class:`StateError` and nothing is written;
    2. ``replans_used < max_replans``, else the task ends failed/replan_budget_exhausted;
    3. the replan deadline has not passed, else it ends failed/replan_deadline_expired.

    Returns:
        ``(ReplanStarted,)`` when all three pass, else the task's end (see :func:`finish`).

    Raises:
        StateError: The task is not awaiting a replan (a terminal task stays as it is).
    """
    if not allowed(state.phase, ReplanStarted.kind):
        raise _refused(
            state,
            ReplanStarted.kind,
            "a new revision can only begin after a replan decision or a rejected plan",
        )
    policy = state.policy
    if state.replans_used >= policy.max_replans:
        return (
            finish(
                state,
                TaskStatus.FAILED,
                TerminalReason.REPLAN_BUDGET_EXHAUSTED,
                detail=f"all {policy.max_replans} replans are spent",
            ),
        )
    if deadline_passed(now, state.replan_deadline):
        return (_deadline_expired(state),)
    return (ReplanStarted(planning=_replan_kind(state), attempt=state.planner_calls + 1),)


def _refused(state: TaskState, kind: str, why: str) -> StateError:
    """A step refused before anything is written: the task's phase and the phases ``kind`` needs.

    ``kind`` is the row of :data:`~pev.ledger._phases.ALLOWED_PHASES` of the event the step would
    write; ``why`` says what the step needs, in words.
    """
    needed = " or ".join(needs(ALLOWED_PHASES[kind]))
    return StateError(
        f"task {state.task_id} is {state.phase}, not {needed}: {why}",
        task_id=state.task_id,
        state=state.phase,
    )


def _replan_kind(state: TaskState) -> RevisionKind:
    action = state.replan_action
    match action:
        case LocalReplan():
            return RevisionKind.LOCAL
        case GlobalReplan():
            return RevisionKind.GLOBAL
        case None:
            return RevisionKind.INITIAL if not state.revisions else RevisionKind.GLOBAL
        case _:
            assert_never(action)


def reject_plan(
    state: TaskState,
    *,
    problems: Sequence[str],
    plan: Plan | None,
    now: datetime,
    usage: Usage | None = None,
) -> tuple[Event, ...]:
    """Record a refused plan and what follows (docs/design.md §4).

    In recovery mode a rejection is fed back to the planner and costs one replan: the task
    awaits a replan while budget is left, else it ends failed/invalid_plan. In the other modes the
    first rejection ends failed/invalid_plan.

    Raises:
        StateError: The task is not planning.
    """
    planning = state.planning
    if planning is None or not allowed(state.phase, PlanRejected.kind):
        raise _refused(state, PlanRejected.kind, "only a plan being made can be rejected")
    rejected = PlanRejected(
        planning=planning,
        attempt=state.planner_calls,
        problems=tuple(problems),
        plan=plan,
        usage=usage,
    )
    can_retry = (
        state.contract.mode is VerificationMode.RECOVERY
        and state.replans_used < state.policy.max_replans
    )
    if can_retry:
        deadline = now + timedelta(seconds=state.policy.replan_timeout_s)
        return rejected, AwaitingReplan(action=state.replan_action, deadline=deadline)
    detail = f"plan rejected: {'; '.join(problems)}" if problems else "plan rejected"
    return rejected, finish(state, TaskStatus.FAILED, TerminalReason.INVALID_PLAN, detail=detail)


def dispatch(state: TaskState, decision: Decision, *, now: datetime) -> tuple[Event, ...]:
    """Record the kernel's decision and what follows: the task ends, or awaits a replan.

    Raises:
        StateError: The task is not verifying a revision.
    """
    revision = state.revision
    if revision is None or not allowed(state.phase, Dispatched.kind):
        raise _refused(state, Dispatched.kind, "decisions follow verification")
    dispatched = Dispatched(revision=revision.number, decision=decision)
    match decision:
        case Finish(status=status, reason=reason, detail=detail):
            return dispatched, finish(state, status, reason, detail=detail)
        case LocalReplan() | GlobalReplan():
            deadline = now + timedelta(seconds=state.policy.replan_timeout_s)
            return dispatched, AwaitingReplan(action=decision, deadline=deadline)
        case _:
            assert_never(decision)


def expire(state: TaskState, *, now: datetime) -> tuple[Event, ...]:
    """Fail a task whose replan or approval deadline has passed; ``()`` for any other task.

    A task awaiting approval also ends once its whole-task deadline passes
    (``task_deadline_expired``): no driver holds it to notice.
    """
    if state.phase in REPLAN_DEADLINE_PHASES and deadline_passed(now, state.replan_deadline):
        return (_deadline_expired(state),)
    waiting = state.awaiting
    if waiting is None:
        return ()
    # Nobody drives a task awaiting approval: its whole-task deadline is enforced here too.
    task_deadline = state.created.task_deadline
    if deadline_passed(now, task_deadline):
        detail = f"the task deadline {task_deadline.isoformat() if task_deadline else '?'} passed"
        detail += f" while revision {waiting.revision} awaited approval"
        return (
            finish(state, TaskStatus.FAILED, TerminalReason.TASK_DEADLINE_EXPIRED, detail=detail),
        )
    if deadline_passed(now, waiting.deadline):
        deadline = waiting.deadline.isoformat() if waiting.deadline else "?"
        detail = f"revision {waiting.revision} was neither approved nor rejected by {deadline}"
        return (finish(state, TaskStatus.FAILED, TerminalReason.APPROVAL_EXPIRED, detail=detail),)
    return ()


def approval_request(
    policy: RecoveryPolicy, *, revision: int, actions: Sequence[str], now: datetime
) -> ApprovalRequested | None:
    """The request for approval a new revision needs under ``policy``, or ``None``.

    Args:
        policy: The task's policy (its ``approval`` and ``approval_timeout_s``).
        revision: The revision's number.
        actions: The ids of the nodes it would dispatch that are actions.
        now: When the revision starts (the deadline counts from then).
    """
    if policy.approval is Approval.NEVER or (policy.approval is Approval.ACTIONS and not actions):
        return None
    timeout = policy.approval_timeout_s
    deadline = now + timedelta(seconds=timeout) if timeout is not None else None
    return ApprovalRequested(revision=revision, deadline=deadline, actions=tuple(actions))


def _awaited(state: TaskState, kind: str, revision: int | None) -> ApprovalRequested:
    """The request the task waits on, checked against the ``revision`` a reviewer decided on.

    Raises:
        StateError: The task is not awaiting approval, or awaits it for another revision.
    """
    waiting = state.awaiting
    if waiting is None:
        raise _refused(state, kind, "only a revision awaiting approval can be approved or rejected")
    if revision is not None and revision != waiting.revision:
        raise StateError(
            f"task {state.task_id} awaits approval of revision {waiting.revision}, not "
            f"{revision}: look at revision {waiting.revision}'s plan (pev show) and decide on it",
            task_id=state.task_id,
            state=state.phase,
        )
    return waiting


def approve(
    state: TaskState, *, by: str, note: str = "", revision: int | None = None
) -> tuple[Event, ...]:
    """Approve the revision the task awaits approval for: it is dispatched as planned.

    Raises:
        StateError: The task is not awaiting approval (of ``revision``, when given).
    """
    waiting = _awaited(state, Approved.kind, revision)
    return (Approved(revision=waiting.revision, by=by, note=note),)


def reject(
    state: TaskState,
    *,
    by: str,
    reason: str,
    now: datetime,
    revision: int | None = None,
    stop: bool = False,
) -> tuple[Event, ...]:
    """Reject the revision the task awaits approval for; the reason is fed to the planner.

    As with a rejected plan (docs/design.md §4): in recovery mode, while a replan is left, the
    task awaits a replan for the decision the rejected revision answered; otherwise it ends
    ``failed``/``rejected``. With ``stop``, the reviewer ends it so whatever is left: no replan.

    Raises:
        StateError: The task is not awaiting approval (of ``revision``, when given).
    """
    waiting = _awaited(state, Rejected.kind, revision)
    rejected = Rejected(revision=waiting.revision, by=by, reason=reason)
    can_retry = (
        not stop
        and state.contract.mode is VerificationMode.RECOVERY
        and state.replans_used < state.policy.max_replans
    )
    if can_retry:
        action = state.revisions[-1].action
        deadline = now + timedelta(seconds=state.policy.replan_timeout_s)
        return rejected, AwaitingReplan(action=action, deadline=deadline)
    if stop:
        spent = "; the reviewer stopped the task"
    elif state.contract.mode is VerificationMode.RECOVERY:
        spent = "; no replan is left"
    else:
        spent = ""
    detail = f"revision {waiting.revision} was rejected by {by}: {reason}{spent}"
    return rejected, finish(state, TaskStatus.FAILED, TerminalReason.REJECTED, detail=detail)


def request_cancel(state: TaskState, *, reason: str = "") -> tuple[Event, ...]:
    """Ask a task to stop; ``()`` for a task that has ended or is already cancelling.

    A task that waits for a replan or an approval has no work in flight, so it ends
    ``cancelled`` at once; otherwise the engine driving it stops dispatching and ends it (see
    :func:`cancel_outcome`).
    """
    if not allowed(state.phase, CancelRequested.kind):
        return ()
    requested = CancelRequested(reason=reason)
    if state.phase in (TaskPhase.AWAITING_REPLAN, TaskPhase.AWAITING_APPROVAL):
        return requested, finish(
            state, TaskStatus.CANCELLED, TerminalReason.CANCELLED, detail=reason
        )
    return (requested,)


def cancel_outcome(state: TaskState) -> TaskFinished | UnwindStarted:
    """How a cancelled task ends: ``cancelled``, or ``failed`` if an action's outcome is unknown.

    Only action records of the current revision count: they are the ones the cancel interrupted,
    and a read-only query whose outcome is unknown changed nothing.
    """
    revision = state.revision.number if state.revision else 0
    left_unknown = any(record.revision == revision for record in unsettled_unknown_actions(state))
    status = TaskStatus.FAILED if left_unknown else TaskStatus.CANCELLED
    detail = state.cancel_reason or ""
    if left_unknown:
        detail = (detail + "; " if detail else "") + "an action's outcome is unknown"
    return finish(state, status, TerminalReason.CANCELLED, detail=detail)


def _deadline_expired(state: TaskState) -> TaskFinished | UnwindStarted:
    deadline = state.replan_deadline.isoformat() if state.replan_deadline else "?"
    return finish(
        state,
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
        detail=f"no new revision began before the replan deadline {deadline}",
    )
