"""The phase rule of the fold, as data: where each event may be folded, and where it leads.

:data:`ALLOWED_PHASES` says in which phases each event kind may be folded, :data:`LEADS_TO` the
phase it moves the task to, and :data:`PHASE_OF_STATUS` the terminal phase a finish leads to.
:func:`~pev.ledger._state.apply` checks them once per event, before the event's own checks; the
state machine's transitions (``_machine``) ask the same table before they write anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from pev.kernel import TaskStatus
from pev.ledger._events import CompensationFailed, Event, NodeFinished

__all__ = [
    "ALLOWED_PHASES",
    "COMPENSATION_SETTLED_ON_RESUME",
    "LEADS_TO",
    "PHASE_OF_STATUS",
    "REFUSALS",
    "REPLAN_DEADLINE_PHASES",
    "SETTLED_ON_RESUME",
    "TERMINAL_PHASES",
    "TaskPhase",
    "allowed",
    "needs",
    "rule_of",
]


class TaskPhase(StrEnum):
    """Where a task stands. The last four are terminal and final."""

    PLANNING = "planning"
    AWAITING_APPROVAL = "awaiting_approval"
    EXECUTING = "executing"
    VERIFYING = "verifying"
    AWAITING_REPLAN = "awaiting_replan"
    CANCELLING = "cancelling"
    COMPENSATING = "compensating"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_PHASES = frozenset(
    {TaskPhase.SUCCEEDED, TaskPhase.PARTIAL, TaskPhase.FAILED, TaskPhase.CANCELLED}
)

# Where a replan deadline holds: waiting for the replan, and planning it until a revision starts.
# Expiry and the task index (which lists overdue tasks) must agree on it.
REPLAN_DEADLINE_PHASES = (TaskPhase.AWAITING_REPLAN, TaskPhase.PLANNING)

_LIVE = frozenset(TaskPhase) - TERMINAL_PHASES
_RUNNING = frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING})

SETTLED_ON_RESUME = "node_finished (settled_on_resume)"
"""The rule key of a ``node_finished`` that settles a record a crash left unfinished."""

COMPENSATION_SETTLED_ON_RESUME = "compensation_failed (settled_on_resume)"
"""The rule key of a ``compensation_failed`` that settles a compensation a crash left unfinished."""

# Where a compensation runs: before a revision dispatches (executing), while a task unwinds
# (compensating); a cancel written meanwhile does not cut its record short.
_COMPENSATING = frozenset({TaskPhase.EXECUTING, TaskPhase.COMPENSATING, TaskPhase.CANCELLING})

# The phase rule: the phases in which each event kind may be folded. Only live phases appear (a
# terminal task accepts nothing), and task_created appears nowhere (it only starts a ledger). A
# node_finished settled on resume has its own row: a crash can leave a record unfinished in any
# live phase (and one settling a compensation likewise). cancel_requested is refused while
# cancelling, the one phase a cancel leads to (a task is asked to stop once), and while
# compensating: a task that unwinds is already ending. unwind_started replaces a task_finished.
ALLOWED_PHASES: Mapping[str, frozenset[TaskPhase]] = MappingProxyType(
    {
        "task_created": frozenset(),
        "replan_started": frozenset({TaskPhase.AWAITING_REPLAN}),
        "revision_started": frozenset({TaskPhase.PLANNING}),
        "plan_rejected": frozenset({TaskPhase.PLANNING}),
        "node_dispatched": frozenset({TaskPhase.EXECUTING}),
        "node_progressed": _RUNNING,
        "node_finished": _RUNNING,
        SETTLED_ON_RESUME: _LIVE,
        "node_skipped": _RUNNING,
        "node_reused": frozenset({TaskPhase.EXECUTING}),
        "effect_superseded": frozenset({TaskPhase.EXECUTING}),
        "compensation_dispatched": frozenset({TaskPhase.EXECUTING, TaskPhase.COMPENSATING}),
        "effect_compensated": _COMPENSATING,
        "compensation_failed": _COMPENSATING,
        COMPENSATION_SETTLED_ON_RESUME: _LIVE,
        "unwind_started": _LIVE - {TaskPhase.COMPENSATING},
        "record_reconciled": _LIVE,
        "evidence_captured": _LIVE,
        "capture_failed": _LIVE,
        "round_executed": frozenset({TaskPhase.EXECUTING}),
        "verdict_recorded": frozenset({TaskPhase.VERIFYING}),
        "diagnosed": frozenset({TaskPhase.VERIFYING}),
        "dispatched": frozenset({TaskPhase.VERIFYING}),
        "awaiting_replan": frozenset({TaskPhase.VERIFYING, TaskPhase.PLANNING}),
        "cancel_requested": _LIVE - {TaskPhase.CANCELLING, TaskPhase.COMPENSATING},
        "driver_started": _LIVE,
        "start_failed": _LIVE,
        "approval_requested": frozenset({TaskPhase.EXECUTING}),
        "approved": frozenset({TaskPhase.AWAITING_APPROVAL}),
        "rejected": frozenset({TaskPhase.AWAITING_APPROVAL}),
        "task_finished": _LIVE,
    }
)

# The phase each event leads to, where it moves the task; every other event leaves the phase as
# it was. task_finished leads to the terminal phase of its status (PHASE_OF_STATUS).
LEADS_TO: Mapping[str, TaskPhase] = MappingProxyType(
    {
        "replan_started": TaskPhase.PLANNING,
        "revision_started": TaskPhase.EXECUTING,
        "round_executed": TaskPhase.VERIFYING,
        "awaiting_replan": TaskPhase.AWAITING_REPLAN,
        "cancel_requested": TaskPhase.CANCELLING,
        "approval_requested": TaskPhase.AWAITING_APPROVAL,
        "approved": TaskPhase.EXECUTING,
        "rejected": TaskPhase.PLANNING,
        "unwind_started": TaskPhase.COMPENSATING,
    }
)

# The terminal phase task_finished leads to, by the status it ends the task with.
PHASE_OF_STATUS: Mapping[TaskStatus, TaskPhase] = MappingProxyType(
    {
        TaskStatus.SUCCEEDED: TaskPhase.SUCCEEDED,
        TaskStatus.PARTIAL: TaskPhase.PARTIAL,
        TaskStatus.FAILED: TaskPhase.FAILED,
        TaskStatus.CANCELLED: TaskPhase.CANCELLED,
    }
)


def needs(phases: frozenset[TaskPhase]) -> tuple[TaskPhase, ...]:
    """The phases given, in the enum's order (the order messages name them in)."""
    return tuple(phase for phase in TaskPhase if phase in phases)


# Why the fold refuses an event in a live phase its row leaves out: what the event needs, or,
# where the row alone cannot say it, the rule behind it.
REFUSALS: Mapping[str, str] = MappingProxyType(
    {kind: f"it needs phase {', '.join(needs(phases))}" for kind, phases in ALLOWED_PHASES.items()}
    | {
        "task_created": "a task is created once",
        "cancel_requested": "a cancel was already requested, or the task is unwinding its effects",
    }
)


def rule_of(event: Event) -> str:
    """The row of :data:`ALLOWED_PHASES` for ``event``: its kind, or a settled-on-resume row."""
    if type(event) is NodeFinished and event.settled_on_resume:
        return SETTLED_ON_RESUME
    if type(event) is CompensationFailed and event.settled_on_resume:
        return COMPENSATION_SETTLED_ON_RESUME
    return event.kind


def allowed(phase: TaskPhase, kind: str) -> bool:
    """Whether the phase rule lets an event of ``kind`` fold onto a task in ``phase``.

    ``kind`` is a row of :data:`ALLOWED_PHASES`. The event's own checks (revision numbers,
    records, the replan budget) come after, when the fold applies it.
    """
    return phase in ALLOWED_PHASES[kind]
