"""The parcel task of the fold tests, with a history that leaves it in each phase.

See docs/design.md §5.1.

Every history holds revision 1 of ``PLAN``, a pending record r1 (node a), a record r2 (node b)
whose outcome is unknown, an effect r3 (node d) that succeeded and stands, and an effect r4
(node e) that succeeded and whose compensation r5 is pending, so that an event refused in a phase
is refused for its phase, not for a missing record or effect. ``ENDINGS`` end the task in each
terminal phase, and ``EVENTS`` holds one event per row of the phase rule, each of which passes
its own checks in every one of these histories.
"""

from __future__ import annotations

import functools
from datetime import timedelta

from tests.support import builders
from tests.support.builders import (
    T0,
    compensated,
    compensating,
    compensation_failed,
    dispatched,
    evidence,
    finished,
    ran,
    reused,
)

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
    EffectSuperseded,
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
    StartFailed,
    TaskFinished,
    TaskPhase,
    UnwindStarted,
    VerdictRecorded,
)
from pev.ledger._phases import COMPENSATION_SETTLED_ON_RESUME, SETTLED_ON_RESUME
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
        PlanNode("d", "wrap the parcel", tool="wrap"),
        PlanNode("e", "label the parcel", tool="label"),
        PlanNode("f", "wrap the parcel", tool="wrap"),
    ),
)
UNKNOWN_MOVE = DeviceFailure("b", "timed out", is_timeout=True, outcome_unknown=True)
# The task unwinds its effects before it ends (compensate_on_failure).
UNWIND = UnwindStarted(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED)

# The parcel task's task_created and revision_started events.
created = functools.partial(builders.created, contract=CONTRACT, input={"parcel": 7})
revision = functools.partial(builders.revision, plan=PLAN)

EXECUTING: tuple[Event, ...] = (
    created(),
    revision(1),
    dispatched("r1", "a"),
    dispatched("r2", "b"),
    finished("r2", UNKNOWN_MOVE),
    *ran("r3", "d", Success("wrapped"), tool="wrap"),
    *ran("r4", "e", Success("labelled"), tool="label"),
    compensating("r4", "r5", "e", tool="unlabel"),
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
COMPENSATING = (*EXECUTING, UNWIND)

HISTORIES = {
    TaskPhase.PLANNING: PLANNING,
    TaskPhase.EXECUTING: EXECUTING,
    TaskPhase.VERIFYING: VERIFYING,
    TaskPhase.AWAITING_REPLAN: AWAITING_REPLAN,
    TaskPhase.CANCELLING: CANCELLING,
    TaskPhase.AWAITING_APPROVAL: AWAITING_APPROVAL,
    TaskPhase.COMPENSATING: COMPENSATING,
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
# the event kind, or a settled-on-resume row for a node_finished or compensation_failed that
# settles a record (r1) or a compensation (r5) a crash left unfinished.
EVENTS: dict[str, Event] = {
    "task_created": created(),
    "replan_started": ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
    "revision_started": revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})),
    "plan_rejected": PlanRejected(
        planning=RevisionKind.LOCAL, attempt=2, problems=("node x is unknown",)
    ),
    "node_dispatched": dispatched("r6", "c"),
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
    # Node f calls what node d did: the effect r3 satisfies it.
    "node_reused": reused("f", "r3"),
    "effect_superseded": EffectSuperseded(record_id=RecordId("r3"), revision=1, reason="rewrap"),
    "compensation_dispatched": compensating("r3", "r7", "d", tool="unwrap"),
    "effect_compensated": compensated("r4", "r5", Success("unlabelled")),
    "compensation_failed": compensation_failed("r4", "r5", DeviceFailure("e", "label stuck")),
    COMPENSATION_SETTLED_ON_RESUME: compensation_failed(
        "r4", "r5", None, status=RecordStatus.UNKNOWN, settled_on_resume=True
    ),
    "unwind_started": UNWIND,
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
    "start_failed": StartFailed(
        owner="host:1:a", epoch=1, host="host", process=1, cause="ModuleNotFoundError: x"
    ),
    "approval_requested": ApprovalRequested(revision=1, actions=("b",)),
    "approved": Approved(revision=1, by="ada", note="looks right"),
    "rejected": Rejected(revision=1, by="ada", reason="use the other tray"),
    "task_finished": TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED),
}
