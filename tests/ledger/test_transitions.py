"""The fold's phase rule is data: every event kind in every phase, against the tables.

``ALLOWED_PHASES`` says where each event kind may be folded and ``LEADS_TO`` where it moves the
task; here each event is applied in each of the nine phases, and ``apply`` must accept it exactly
where its row says, move the task exactly where the tables say, and refuse it everywhere else.
The state machine's steps are checked against the same rows.
"""

from __future__ import annotations

import itertools
import typing
from datetime import UTC, datetime, timedelta

import pytest

from pev.errors import StateError
from pev.kernel import Diagnosis, Finish, LocalReplan, RootCause, TaskStatus, TerminalReason
from pev.ledger import (
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Dispatched,
    Event,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskCreated,
    TaskFinished,
    TaskPhase,
    TaskState,
    VerdictRecorded,
    begin_replan,
    dispatch,
    new_task,
    reject_plan,
    replay,
    request_cancel,
)
from pev.ledger._phases import (
    ALLOWED_PHASES,
    LEADS_TO,
    PHASE_OF_STATUS,
    SETTLED_ON_RESUME,
    TERMINAL_PHASES,
    allowed,
    rule_of,
)
from pev.ledger._state import apply
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    TaskId,
    Verdict,
    VerificationContract,
    VerificationMode,
    digest,
)
from pev.policy import RecoveryPolicy

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TASK = TaskId("task-transitions")
CONTRACT = VerificationContract(VerificationMode.RECOVERY, "stack the crates", ("crates stacked",))
PLAN = Plan(
    "stack the crates",
    (
        PlanNode("a", "count the crates", tool="count", effect=Effect.QUERY),
        PlanNode("b", "stack them", tool="stack"),
        PlanNode("c", "report", tool="report", after=("a", "b")),
    ),
)
REPLAN = LocalReplan(frozenset({"b"}))


# --- builders ---------------------------------------------------------------------------------


def created() -> TaskCreated:
    return new_task(
        TASK, input={"crates": 3}, contract=CONTRACT, policy=RecoveryPolicy(max_replans=2), now=T0
    )


def record(rid: str, node: str) -> ExecutionRecord:
    return ExecutionRecord(
        id=RecordId(rid),
        task_id=TASK,
        revision=1,
        node_id=node,
        tool=f"tool-{node}",
        args_digest=digest({}),
        effect=Effect.ACTION,
        idempotency_key=f"{TASK}:{rid}",
        created_at=T0,
        updated_at=T0,
    )


def ending(status: TaskStatus) -> TaskFinished:
    reasons = {
        TaskStatus.SUCCEEDED: TerminalReason.PASSED,
        TaskStatus.PARTIAL: TerminalReason.DEVICE_FAILURE,
        TaskStatus.FAILED: TerminalReason.EXECUTION_FAILED,
        TaskStatus.CANCELLED: TerminalReason.CANCELLED,
    }
    return TaskFinished(status=status, reason=reasons[status])


# Histories that leave the task in each phase. Each holds revision 1 of PLAN, a pending record r1
# (node a) and a record r2 (node b) whose outcome is unknown, so that an event refused below is
# refused by the phase rule, not for a missing record or revision.
EXECUTING: tuple[Event, ...] = (
    created(),
    RevisionStarted(number=1, revision_kind=RevisionKind.INITIAL, reason="first", plan=PLAN),
    NodeDispatched(record=record("r1", "a")),
    NodeDispatched(record=record("r2", "b")),
    NodeFinished(
        record_id=RecordId("r2"),
        status=RecordStatus.UNKNOWN,
        result=DeviceFailure("b", "timed out", is_timeout=True, outcome_unknown=True),
        at=T0,
    ),
)
VERIFYING = (*EXECUTING, RoundExecuted(revision=1, executed_ok=False))
AWAITING_REPLAN = (
    *VERIFYING,
    Dispatched(revision=1, decision=REPLAN),
    AwaitingReplan(action=REPLAN, deadline=T0 + timedelta(seconds=120)),
)
PLANNING = (*AWAITING_REPLAN, ReplanStarted(planning=RevisionKind.LOCAL, attempt=2))
CANCELLING = (*EXECUTING, CancelRequested(reason="operator"))

HISTORIES: dict[TaskPhase, tuple[Event, ...]] = {
    TaskPhase.PLANNING: PLANNING,
    TaskPhase.EXECUTING: EXECUTING,
    TaskPhase.VERIFYING: VERIFYING,
    TaskPhase.AWAITING_REPLAN: AWAITING_REPLAN,
    TaskPhase.CANCELLING: CANCELLING,
    TaskPhase.SUCCEEDED: (*EXECUTING, ending(TaskStatus.SUCCEEDED)),
    TaskPhase.PARTIAL: (*EXECUTING, ending(TaskStatus.PARTIAL)),
    TaskPhase.FAILED: (*EXECUTING, ending(TaskStatus.FAILED)),
    TaskPhase.CANCELLED: (*CANCELLING, ending(TaskStatus.CANCELLED)),
}


def state_in(phase: TaskPhase) -> TaskState:
    state = replay(HISTORIES[phase])
    assert state.phase is phase
    return state


# One event per row of ALLOWED_PHASES, each one that passes its own checks (revision numbers,
# records, evidence ids) in every phase of the histories above.
EVENTS: dict[str, Event] = {
    "task_created": created(),
    "replan_started": ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
    "revision_started": RevisionStarted(
        number=2,
        revision_kind=RevisionKind.LOCAL,
        reason="replan",
        plan=PLAN,
        redo=frozenset({"b"}),
    ),
    "plan_rejected": PlanRejected(
        planning=RevisionKind.LOCAL, attempt=2, problems=("node x is unknown",)
    ),
    "node_dispatched": NodeDispatched(record=record("r3", "c")),
    "node_progressed": NodeProgressed(record_id=RecordId("r1"), status=RecordStatus.RUNNING, at=T0),
    "node_finished": NodeFinished(
        record_id=RecordId("r1"), status=RecordStatus.SUCCEEDED, result=Success(3), at=T0
    ),
    SETTLED_ON_RESUME: NodeFinished(
        record_id=RecordId("r1"),
        status=RecordStatus.UNKNOWN,
        result=None,
        at=T0,
        settled_on_resume=True,
    ),
    "node_skipped": NodeSkipped(revision=1, node_id="c", blocked_by=("b",)),
    "record_reconciled": RecordReconciled(record_id=RecordId("r2"), result=Success("stacked")),
    "evidence_captured": EvidenceCaptured(
        evidence=Evidence(
            id=EvidenceId("e1"),
            phase=EvidencePhase.AFTER,
            kind="state",
            source="camera",
            captured_at=T0,
            revision=1,
        )
    ),
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
    "task_finished": ending(TaskStatus.FAILED),
}

CASES = [
    pytest.param(rule, phase, id=f"{rule}-in-{phase}")
    for rule, phase in itertools.product(ALLOWED_PHASES, TaskPhase)
]


# --- the tables -------------------------------------------------------------------------------


def test_the_tables_have_a_row_for_every_event_kind() -> None:
    """ALLOWED_PHASES has one row per member of the Event union, plus the resume row."""
    kinds = {member.kind for member in typing.get_args(Event)}
    assert set(ALLOWED_PHASES) == kinds | {SETTLED_ON_RESUME}
    assert set(EVENTS) == set(ALLOWED_PHASES)
    assert {rule_of(event) for event in EVENTS.values()} == set(ALLOWED_PHASES)


def test_a_terminal_phase_allows_nothing() -> None:
    """No row names a terminal phase, and task_created's row names no phase at all."""
    for phases in ALLOWED_PHASES.values():
        assert not phases & TERMINAL_PHASES
    assert ALLOWED_PHASES["task_created"] == frozenset()


def test_an_event_only_leads_to_a_phase_from_where_it_is_allowed() -> None:
    """Every event that moves the task has a row, and none moves it to a terminal phase."""
    assert set(LEADS_TO) <= set(ALLOWED_PHASES)
    assert not set(LEADS_TO.values()) & TERMINAL_PHASES
    assert set(PHASE_OF_STATUS) == set(TaskStatus)
    assert set(PHASE_OF_STATUS.values()) == TERMINAL_PHASES


# --- apply against the tables -----------------------------------------------------------------


@pytest.mark.parametrize(("rule", "phase"), CASES)
def test_apply_accepts_an_event_exactly_where_its_row_allows(rule: str, phase: TaskPhase) -> None:
    """Allowed: it folds and moves the task where LEADS_TO says. Elsewhere: StateError."""
    state = state_in(phase)
    event = EVENTS[rule]
    if phase in ALLOWED_PHASES[rule]:
        assert allowed(phase, rule)
        after = apply(state, event)
        if isinstance(event, TaskFinished):
            expected = PHASE_OF_STATUS[event.status]
        else:
            expected = LEADS_TO.get(rule, phase)
        assert after.phase is expected
        assert after.event_count == state.event_count + 1
    else:
        assert not allowed(phase, rule)
        with pytest.raises(StateError) as caught:
            apply(state, event)
        assert caught.value.task_id == TASK
        assert caught.value.state == phase
        assert f"not allowed in phase {phase}" in str(caught.value)


# --- the machine asks the same rows -----------------------------------------------------------


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_begin_replan_refuses_where_replan_started_is_not_allowed(phase: TaskPhase) -> None:
    """Valve one is the replan_started row: StateError, naming the phase, wherever it says no."""
    state = state_in(phase)
    if allowed(phase, ReplanStarted.kind):
        assert begin_replan(state, now=T0) == (
            ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
        )
    else:
        with pytest.raises(StateError, match=f"is {phase}, not awaiting_replan") as caught:
            begin_replan(state, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_reject_plan_refuses_where_plan_rejected_is_not_allowed(phase: TaskPhase) -> None:
    """A plan can be rejected exactly where the plan_rejected row allows it."""
    state = state_in(phase)
    if allowed(phase, PlanRejected.kind):
        events = reject_plan(state, problems=("x",), plan=None, now=T0)
        assert isinstance(events[0], PlanRejected)
    else:
        with pytest.raises(StateError, match="only a plan being made") as caught:
            reject_plan(state, problems=("x",), plan=None, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_dispatch_refuses_where_dispatched_is_not_allowed(phase: TaskPhase) -> None:
    """A decision can be dispatched exactly where the dispatched row allows it."""
    state = state_in(phase)
    decision = Finish(TaskStatus.FAILED, TerminalReason.VERIFICATION_FAILED)
    if allowed(phase, Dispatched.kind):
        assert isinstance(dispatch(state, decision, now=T0)[0], Dispatched)
    else:
        with pytest.raises(StateError, match="decisions follow verification") as caught:
            dispatch(state, decision, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_request_cancel_writes_only_where_cancel_requested_is_allowed(phase: TaskPhase) -> None:
    """Cancelling writes nothing where the cancel_requested row says no; what it writes folds."""
    state = state_in(phase)
    events = request_cancel(state, reason="stop")
    assert bool(events) is allowed(phase, CancelRequested.kind)
    for event in events:
        state = apply(state, event)
