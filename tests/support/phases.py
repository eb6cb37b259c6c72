"""The parcel task of the fold tests, with a history that leaves it in each phase.

See docs/design.md §5.1.

Every history holds revision 1 of ``PLAN``, a pending record r1 (node a) and a record r2 (node b)
whose outcome is unknown, so that an event refused in a phase is refused for its phase, not for a
missing record. ``ENDINGS`` end the task in each terminal phase, and ``EVENTS`` holds one event
per row of the phase rule, each of which passes its own checks in every one of these histories.
"""

from __future__ import annotations

import functools
from datetime import timedelta

from tests.support import builders
from tests.support.builders import T0, dispatched, evidence, finished

from pev.kernel import Diagnosis, Finish, LocalReplan, RootCause, TaskStatus, TerminalReason
from pev.ledger import (
    ApprovalRequested,
    Approved,
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Dispatched,
    DriverStarted,
    Event,
    EvidenceCaptured,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    Rejected,
    ReplanStarted,
    RevisionKind,
    RoundExecuted,
    TaskFinished,
    TaskPhase,
    VerdictRecorded,
)
from pev.ledger._phases import SETTLED_ON_RESUME
from pev.model import (
    DeviceFailure,
    Effect,
    EvidencePhase,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
)

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "ship the parcel", ("parcel shipped",))
PLAN = Plan(
    "ship the parcel",
    (
        PlanNode("a", "look at the shelf", tool="look", effect=Effect.QUERY),
        PlanNode("b", "move the parcel", tool="move"),
        PlanNode("c", "report", tool="report", after=("a", "b")),
    ),
)
UNKNOWN_MOVE = DeviceFailure("b", "timed out", is_timeout=True, outcome_unknown=True)

# The parcel task's task_created and revision_started events.
created = functools.partial(builders.created, contract=CONTRACT, input={"parcel": 7})
revision = functools.partial(builders.revision, plan=PLAN)

EXECUTING: tuple[Event, ...] = (
    created(),
    revision(1),
    dispatched("r1", "a"),
    dispatched("r2", "b"),
    finished("r2", UNKNOWN_MOVE),
)
VERIFYING = (*EXECUTING, RoundExecuted(revision=1, executed_ok=False))
AWAITING_REPLAN = (
    *VERIFYING,
    Dispatched(revision=1, decision=LocalReplan(frozenset({"b"}))),
    AwaitingReplan(action=LocalReplan(frozenset({"b"})), deadline=T0 + timedelta(seconds=120)),
)
PLANNING = (*AWAITING_REPLAN, ReplanStarted(planning=RevisionKind.LOCAL, attempt=2))
CANCELLING = (*EXECUTING, CancelRequested(reason="operator"))
AWAITING_APPROVAL = (
    *EXECUTING,
    ApprovalRequested(revision=1, deadline=T0 + timedelta(seconds=600), actions=("b",)),
)

HISTORIES = {
    TaskPhase.PLANNING: PLANNING,
    TaskPhase.EXECUTING: EXECUTING,
    TaskPhase.VERIFYING: VERIFYING,
    TaskPhase.AWAITING_REPLAN: AWAITING_REPLAN,
    TaskPhase.CANCELLING: CANCELLING,
    TaskPhase.AWAITING_APPROVAL: AWAITING_APPROVAL,
}
ACTIVE = frozenset(HISTORIES)

# task_finished in each terminal phase, each with a reason its status may carry.
ENDINGS = {
    TaskPhase.SUCCEEDED: TaskFinished(status=TaskStatus.SUCCEEDED, reason=TerminalReason.PASSED),
    TaskPhase.PARTIAL: TaskFinished(
        status=TaskStatus.PARTIAL, reason=TerminalReason.DEVICE_FAILURE
    ),
    TaskPhase.FAILED: TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.INVALID_PLAN),
    TaskPhase.CANCELLED: TaskFinished(status=TaskStatus.CANCELLED, reason=TerminalReason.CANCELLED),
}

# One event per row of the phase rule (ALLOWED_PHASES in pev/ledger/_phases.py), keyed by its row:
# the event kind, or SETTLED_ON_RESUME for a node_finished that settles a record on resume.
EVENTS: dict[str, Event] = {
    "task_created": created(),
    "replan_started": ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
    "revision_started": revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})),
    "plan_rejected": PlanRejected(
        planning=RevisionKind.LOCAL, attempt=2, problems=("node x is unknown",)
    ),
    "node_dispatched": dispatched("r3", "c"),
    "node_progressed": NodeProgressed(record_id=RecordId("r1"), status=RecordStatus.RUNNING, at=T0),
    "node_finished": finished("r1", Success({"shelf": "full"})),
    SETTLED_ON_RESUME: NodeFinished(
        record_id=RecordId("r1"),
        status=RecordStatus.UNKNOWN,
        result=None,
        at=T0,
        settled_on_resume=True,
    ),
    "node_skipped": NodeSkipped(revision=1, node_id="c", blocked_by=("b",)),
    "record_reconciled": RecordReconciled(record_id=RecordId("r2"), result=Success("moved")),
    "evidence_captured": EvidenceCaptured(evidence=evidence()),
    "capture_failed": CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="camera offline"),
    "round_executed": RoundExecuted(revision=1, executed_ok=False),
    "verdict_recorded": VerdictRecorded(
        revision=1,
        verdict=Verdict.failed(CONTRACT, failed_nodes=["b"]),
        reliability=Reliability.OK,
    ),
    "diagnosed": Diagnosed(
        revision=1, diagnosis=Diagnosis(RootCause.PLAN_OR_ANSWER_ERROR, frozenset({"b"}))
    ),
    "dispatched": Dispatched(
        revision=1, decision=Finish(TaskStatus.FAILED, TerminalReason.VERIFICATION_FAILED)
    ),
    "awaiting_replan": AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
    "cancel_requested": CancelRequested(reason="stop"),
    "driver_started": DriverStarted(owner="host:1:a", epoch=1, host="host", process=1),
    "approval_requested": ApprovalRequested(revision=1, actions=("b",)),
    "approved": Approved(revision=1, by="ada", note="looks right"),
    "rejected": Rejected(revision=1, by="ada", reason="use the other tray"),
    "task_finished": TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED),
}
