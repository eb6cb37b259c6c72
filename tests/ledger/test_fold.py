"""The fold (SPEC §5.1, §5.2): which event each phase allows, and what each event changes."""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from pev.errors import StateError
from pev.kernel import (
    STATUS_REASONS,
    Diagnosis,
    Finish,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
)
from pev.ledger import (
    GENESIS_HASH,
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Dispatched,
    Event,
    EvidenceCaptured,
    LedgerEntry,
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
    apply,
    lineage_results,
    new_task,
    replay,
    seal,
)
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
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
    VerifierFailure,
    digest,
    record_status_for,
)
from pev.policy import RecoveryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TASK = TaskId("task-1")
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


def created(*, max_replans: int = 2) -> TaskCreated:
    return new_task(
        TASK,
        input={"parcel": 7},
        contract=CONTRACT,
        policy=RecoveryPolicy(max_replans=max_replans),
        now=T0,
    )


def record(
    rid: str, node: str, *, revision: int = 1, status: RecordStatus = RecordStatus.PENDING
) -> ExecutionRecord:
    return ExecutionRecord(
        id=RecordId(rid),
        task_id=TASK,
        revision=revision,
        node_id=node,
        tool=f"tool-{node}",
        args_digest=digest({}),
        effect=Effect.ACTION,
        idempotency_key=f"{TASK}:{rid}",
        status=status,
        created_at=T0,
        updated_at=T0,
    )


def revision(
    number: int,
    kind: RevisionKind = RevisionKind.INITIAL,
    *,
    plan: Plan = PLAN,
    redo: frozenset[str] = frozenset(),
) -> RevisionStarted:
    return RevisionStarted(number=number, revision_kind=kind, reason="why", plan=plan, redo=redo)


def dispatched(rid: str, node: str, *, revision: int = 1) -> NodeDispatched:
    return NodeDispatched(record=record(rid, node, revision=revision))


def finished(rid: str, result: NodeResult) -> NodeFinished:
    return NodeFinished(
        record_id=RecordId(rid), status=record_status_for(result), result=result, at=T0
    )


def evidence(eid: str = "e1", *, phase: EvidencePhase = EvidencePhase.AFTER) -> Evidence:
    return Evidence(
        id=EvidenceId(eid), phase=phase, kind="state", source="cam", captured_at=T0, revision=1
    )


def fold(*events: Event) -> TaskState:
    return replay(events)


# Histories that leave the task in each non-terminal phase. Every one holds revision 1 of PLAN,
# a pending record r1 (node a) and a record r2 (node b) whose outcome is unknown, so that an event
# refused below is refused for its phase, not for a missing record.
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

HISTORIES = {
    TaskPhase.PLANNING: PLANNING,
    TaskPhase.EXECUTING: EXECUTING,
    TaskPhase.VERIFYING: VERIFYING,
    TaskPhase.AWAITING_REPLAN: AWAITING_REPLAN,
    TaskPhase.CANCELLING: CANCELLING,
}
ACTIVE = frozenset(HISTORIES)


@dataclass(frozen=True)
class Row:
    """One event, the phases that allow it, and the phase it moves the task to."""

    event: Event
    allowed: frozenset[TaskPhase]
    moves_to: TaskPhase | None = None  # None: the phase stays as it was


# The transition table of the fold, one row per event kind (NodeFinished twice: live and resume).
TABLE = {
    "task_created": Row(created(), frozenset()),
    "replan_started": Row(
        ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
        frozenset({TaskPhase.AWAITING_REPLAN}),
        TaskPhase.PLANNING,
    ),
    "revision_started": Row(
        revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})),
        frozenset({TaskPhase.PLANNING}),
        TaskPhase.EXECUTING,
    ),
    "plan_rejected": Row(
        PlanRejected(planning=RevisionKind.LOCAL, attempt=2, problems=("node x is unknown",)),
        frozenset({TaskPhase.PLANNING}),
    ),
    "node_dispatched": Row(dispatched("r3", "c"), frozenset({TaskPhase.EXECUTING})),
    "node_progressed": Row(
        NodeProgressed(record_id=RecordId("r1"), status=RecordStatus.RUNNING, at=T0),
        frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING}),
    ),
    "node_finished": Row(
        finished("r1", Success({"shelf": "full"})),
        frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING}),
    ),
    "node_finished_on_resume": Row(
        NodeFinished(
            record_id=RecordId("r1"),
            status=RecordStatus.UNKNOWN,
            result=None,
            at=T0,
            settled_on_resume=True,
        ),
        ACTIVE,
    ),
    "node_skipped": Row(
        NodeSkipped(revision=1, node_id="c", blocked_by=("b",)),
        frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING}),
    ),
    "record_reconciled": Row(
        RecordReconciled(record_id=RecordId("r2"), result=Success("moved")), ACTIVE
    ),
    "evidence_captured": Row(EvidenceCaptured(evidence=evidence()), ACTIVE),
    "capture_failed": Row(
        CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="camera offline"), ACTIVE
    ),
    "round_executed": Row(
        RoundExecuted(revision=1, executed_ok=False),
        frozenset({TaskPhase.EXECUTING}),
        TaskPhase.VERIFYING,
    ),
    "verdict_recorded": Row(
        VerdictRecorded(
            revision=1,
            verdict=Verdict.failed(CONTRACT, failed_nodes=["b"]),
            reliability=Reliability.OK,
        ),
        frozenset({TaskPhase.VERIFYING}),
    ),
    "diagnosed": Row(
        Diagnosed(
            revision=1, diagnosis=Diagnosis(RootCause.PLAN_OR_ANSWER_ERROR, frozenset({"b"}))
        ),
        frozenset({TaskPhase.VERIFYING}),
    ),
    "dispatched": Row(
        Dispatched(
            revision=1, decision=Finish(TaskStatus.FAILED, TerminalReason.VERIFICATION_FAILED)
        ),
        frozenset({TaskPhase.VERIFYING}),
    ),
    "awaiting_replan": Row(
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
        frozenset({TaskPhase.VERIFYING, TaskPhase.PLANNING}),
        TaskPhase.AWAITING_REPLAN,
    ),
    "cancel_requested": Row(
        CancelRequested(reason="stop"), ACTIVE - {TaskPhase.CANCELLING}, TaskPhase.CANCELLING
    ),
    "task_finished": Row(
        TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED),
        ACTIVE,
        TaskPhase.FAILED,
    ),
}

CASES = [
    pytest.param(name, phase, id=f"{name}-in-{phase}")
    for name, phase in itertools.product(TABLE, HISTORIES)
]


def test_table_covers_every_event_kind() -> None:
    """The transition table has a row for every member of the Event union."""
    kinds = {row.event.kind for row in TABLE.values()}
    assert kinds == {member.kind for member in typing.get_args(Event)}


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_event_is_allowed_only_in_its_phases(name: str, phase: TaskPhase) -> None:
    """An event folds in the phases its row allows and is a StateError in every other."""
    row = TABLE[name]
    state = fold(*HISTORIES[phase])
    assert state.phase is phase
    if phase in row.allowed:
        after = apply(state, row.event)
        assert after.phase is (row.moves_to or phase)
        assert after.event_count == state.event_count + 1
    else:
        with pytest.raises(StateError) as caught:
            apply(state, row.event)
        assert caught.value.task_id == TASK
        assert caught.value.state == phase


TERMINAL_ENDINGS = {
    TaskPhase.SUCCEEDED: TaskFinished(status=TaskStatus.SUCCEEDED, reason=TerminalReason.PASSED),
    TaskPhase.PARTIAL: TaskFinished(
        status=TaskStatus.PARTIAL, reason=TerminalReason.DEVICE_FAILURE
    ),
    TaskPhase.FAILED: TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.INVALID_PLAN),
    TaskPhase.CANCELLED: TaskFinished(status=TaskStatus.CANCELLED, reason=TerminalReason.CANCELLED),
}


@pytest.mark.parametrize("name", TABLE)
@pytest.mark.parametrize("terminal", TERMINAL_ENDINGS)
def test_terminal_state_is_final(name: str, terminal: TaskPhase) -> None:
    """Any event after task_finished is a StateError, whatever the ending."""
    state = fold(*EXECUTING, TERMINAL_ENDINGS[terminal])
    assert state.phase is terminal
    assert state.terminal
    with pytest.raises(StateError, match="has ended"):
        apply(state, TABLE[name].event)


def test_refused_event_leaves_the_state_untouched() -> None:
    """A refused event raises and the state it was applied to is unchanged (values are frozen)."""
    state = fold(*EXECUTING)
    before = fold(*EXECUTING)
    with pytest.raises(StateError):
        apply(state, RoundExecuted(revision=2, executed_ok=True))
    assert state == before


def test_ledger_starts_with_task_created() -> None:
    """A first event other than task_created is a StateError."""
    with pytest.raises(StateError, match="must start with task_created"):
        apply(None, revision(1))


def test_empty_ledger_has_no_task() -> None:
    """Replaying no events is a StateError, not an empty state."""
    with pytest.raises(StateError, match="empty ledger"):
        replay([])


def test_task_is_created_once() -> None:
    """A second task_created is refused."""
    with pytest.raises(StateError, match="created once"):
        fold(created(), created())


def test_created_task_is_planning_its_initial_plan() -> None:
    """task_created starts the task planning an initial plan, with nothing spent."""
    state = fold(created())
    assert (state.phase, state.planning, state.planner_calls, state.replans_used) == (
        TaskPhase.PLANNING,
        RevisionKind.INITIAL,
        1,
        0,
    )
    assert state.contract == CONTRACT
    assert state.revision is None


def test_entry_times_stamp_the_state() -> None:
    """Folding stored entries records the creation time and the time of the last event."""
    events = (created(), revision(1))
    first = seal(TASK, events[:1], after_seq=0, prev_hash=GENESIS_HASH, at=T0)
    later = T0 + timedelta(seconds=5)
    second = seal(TASK, events[1:], after_seq=1, prev_hash=first[-1].hash, at=later)
    entries: tuple[LedgerEntry, ...] = (*first, *second)
    state = replay(entries)
    assert (state.created_at, state.updated_at) == (T0, later)


def test_revision_starts_at_its_own_entry_time() -> None:
    """A revision's started_at is the time of its revision_started entry, not the one before."""
    later = T0 + timedelta(seconds=5)
    state = apply(apply(None, created(), at=T0), revision(1), at=later)
    assert state.revision is not None
    assert state.revision.started_at == later


# --- task_finished ----------------------------------------------------------------------------

ALL_OUTCOMES = list(itertools.product(TaskStatus, TerminalReason))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(status, reason, id=f"{status}-{reason}")
        for status, reason in ALL_OUTCOMES
        if reason not in STATUS_REASONS[status]
    ],
)
def test_task_finished_refuses_a_status_reason_pair_the_kernel_forbids(
    status: TaskStatus, reason: TerminalReason
) -> None:
    """task_finished with a (status, reason) pair outside STATUS_REASONS is a StateError."""
    with pytest.raises(StateError, match="cannot carry reason"):
        fold(*EXECUTING, TaskFinished(status=status, reason=reason))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(status, reason, id=f"{status}-{reason}")
        for status, reason in ALL_OUTCOMES
        if reason in STATUS_REASONS[status]
    ],
)
def test_task_finished_ends_in_the_phase_of_its_status(
    status: TaskStatus, reason: TerminalReason
) -> None:
    """An allowed task_finished ends the task in the phase named like its status."""
    ending = TaskFinished(status=status, reason=reason)
    state = fold(*EXECUTING, ending)
    assert state.phase == TaskPhase(status.value)
    assert state.finished == ending
    assert state.planning is None


# --- revisions --------------------------------------------------------------------------------


def test_first_revision_is_number_one() -> None:
    """The first revision must be number 1."""
    with pytest.raises(StateError, match="next revision is number 1"):
        fold(created(), revision(2))


@pytest.mark.parametrize("number", [1, 3, 4], ids=["repeat", "gap", "far"])
def test_revision_numbers_grow_by_one(number: int) -> None:
    """After revision 1, only number 2 may start; a repeat or a gap is refused."""
    with pytest.raises(StateError, match="next revision is number 2"):
        fold(*PLANNING, revision(number, RevisionKind.LOCAL))


def test_revision_kind_must_be_what_the_planner_was_asked_for() -> None:
    """A global revision while a local one was asked for is refused."""
    with pytest.raises(StateError, match="asked for a local plan"):
        fold(*PLANNING, revision(2, RevisionKind.GLOBAL))


def test_local_revision_needs_an_earlier_revision() -> None:
    """A local revision cannot be the first, even when a local replan was asked for."""
    history = (
        created(),
        PlanRejected(planning=RevisionKind.INITIAL, attempt=1, problems=("no nodes",)),
        AwaitingReplan(action=LocalReplan(frozenset({"b"})), deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
    )
    with pytest.raises(StateError, match="needs an earlier revision"):
        fold(*history, revision(1, RevisionKind.LOCAL))


def test_local_revision_redo_must_name_plan_nodes() -> None:
    """A local revision whose redo set names nodes outside its plan is refused."""
    with pytest.raises(StateError, match="not in the plan"):
        fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"zz"})))


def test_revision_clears_the_replan_it_answers() -> None:
    """A started revision clears the planning kind, the replan action and its deadline."""
    state = fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})))
    assert (state.planning, state.replan_action, state.replan_deadline) == (None, None, None)
    assert [r.number for r in state.revisions] == [1, 2]
    assert state.plan == PLAN


def test_local_revision_keeps_the_lineage() -> None:
    """A local revision belongs to the lineage of the revision before it."""
    state = fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})))
    assert [r.lineage for r in state.revisions] == [1, 1]


def test_global_revision_starts_a_fresh_lineage() -> None:
    """A global revision's lineage starts at its own number."""
    global_planning = (
        *VERIFYING,
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=RevisionKind.GLOBAL, attempt=2),
    )
    state = fold(*global_planning, revision(2, RevisionKind.GLOBAL))
    assert [r.lineage for r in state.revisions] == [1, 2]


def _failed_then_replanned(action: LocalReplan | None, kind: RevisionKind) -> TaskState:
    """Node b fails in revision 1; revision 2 is planned but b is not dispatched again yet."""
    return fold(
        created(),
        revision(1),
        dispatched("r1", "b"),
        finished("r1", VerifierFailure("b", "wrong shelf")),
        RoundExecuted(revision=1, executed_ok=False),
        AwaitingReplan(action=action, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=kind, attempt=2),
        revision(2, kind, redo=frozenset({"b"}) if action else frozenset()),
    )


def test_global_replan_forgets_old_failures_of_reused_node_ids() -> None:
    """After a global revision, lineage_results no longer holds the old failure of node b."""
    state = _failed_then_replanned(None, RevisionKind.GLOBAL)
    assert "b" not in lineage_results(state)


def test_local_replan_remembers_failures_until_the_node_is_redone() -> None:
    """After a local revision, lineage_results still holds node b's failure from revision 1."""
    state = _failed_then_replanned(LocalReplan(frozenset({"b"})), RevisionKind.LOCAL)
    assert lineage_results(state)["b"] == VerifierFailure("b", "wrong shelf")


# --- records ----------------------------------------------------------------------------------


def test_node_dispatched_adds_a_pending_record() -> None:
    """node_dispatched stores the record as given, under its id."""
    state = fold(*EXECUTING, dispatched("r3", "c"))
    assert state.records[RecordId("r3")] == record("r3", "c")
    assert list(state.records) == ["r1", "r2", "r3"]


@pytest.mark.parametrize(
    "status",
    [s for s in RecordStatus if s is not RecordStatus.PENDING],
    ids=str,
)
def test_node_dispatched_must_be_pending(status: RecordStatus) -> None:
    """A record is committed as pending before the tool is called; any other status is refused."""
    with pytest.raises(StateError, match="pending"):
        fold(*EXECUTING, NodeDispatched(record=record("r3", "c", status=status)))


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(dispatched("r1", "a"), "already exists", id="duplicate-id"),
        pytest.param(dispatched("r3", "zz"), "not in the current plan", id="unknown-node"),
        pytest.param(dispatched("r3", "c", revision=2), "names revision 2", id="wrong-revision"),
    ],
)
def test_node_dispatched_refuses_a_record_that_does_not_fit(event: Event, message: str) -> None:
    """A duplicate record id, a node outside the plan or another revision is refused."""
    with pytest.raises(StateError, match=message):
        fold(*EXECUTING, event)


def test_node_dispatched_refuses_a_record_of_another_task() -> None:
    """A record whose task id is not the task's is refused."""
    other = ExecutionRecord(
        id=RecordId("r3"),
        task_id=TaskId("someone-else"),
        revision=1,
        node_id="c",
        tool="report",
        args_digest=digest({}),
        effect=Effect.ACTION,
        idempotency_key="k",
        created_at=T0,
        updated_at=T0,
    )
    with pytest.raises(StateError, match="belongs to task"):
        fold(*EXECUTING, NodeDispatched(record=other))


def _progress(status: RecordStatus, rid: str = "r1") -> NodeProgressed:
    return NodeProgressed(record_id=RecordId(rid), status=status, at=T0 + timedelta(seconds=1))


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param((RecordStatus.ACCEPTED,), id="accepted"),
        pytest.param((RecordStatus.RUNNING,), id="running"),
        pytest.param((RecordStatus.ACCEPTED, RecordStatus.RUNNING), id="accepted-running"),
    ],
)
def test_node_progressed_moves_forward(steps: tuple[RecordStatus, ...]) -> None:
    """Progress moves a record forward along pending → accepted → running."""
    state = fold(*EXECUTING, *(_progress(step) for step in steps))
    moved = state.records[RecordId("r1")]
    assert moved.status is steps[-1]
    assert moved.updated_at == T0 + timedelta(seconds=1)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param((RecordStatus.RUNNING, RecordStatus.ACCEPTED), id="running-to-accepted"),
        pytest.param((RecordStatus.ACCEPTED, RecordStatus.ACCEPTED), id="accepted-twice"),
    ],
)
def test_node_progressed_never_moves_back(steps: tuple[RecordStatus, ...]) -> None:
    """Progress to the same or an earlier status is a StateError."""
    with pytest.raises(StateError, match="only move forward"):
        fold(*EXECUTING, *(_progress(step) for step in steps))


@pytest.mark.parametrize(
    "status",
    [RecordStatus.PENDING, RecordStatus.SUCCEEDED, RecordStatus.UNKNOWN],
    ids=str,
)
def test_node_progressed_reports_only_accepted_or_running(status: RecordStatus) -> None:
    """Progress is accepted or running; finishing goes through node_finished."""
    with pytest.raises(StateError, match="accepted or running"):
        fold(*EXECUTING, _progress(status))


def test_node_progressed_needs_an_existing_record() -> None:
    """Progress on a record id that was never dispatched is refused."""
    with pytest.raises(StateError, match="no record"):
        fold(*EXECUTING, _progress(RecordStatus.RUNNING, rid="r9"))


RESULTS: list[NodeResult] = [
    Success({"n": 1}),
    DeviceFailure("a", "offline"),
    DeviceFailure("a", "timed out", is_timeout=True, outcome_unknown=True),
    VerifierFailure("a", "bad output"),
]


@pytest.mark.parametrize("result", RESULTS, ids=lambda r: record_status_for(r).value)
def test_node_finished_records_status_and_result(result: NodeResult) -> None:
    """node_finished moves the record to the status its result gives and keeps the result."""
    state = fold(*EXECUTING, finished("r1", result))
    rec = state.records[RecordId("r1")]
    assert rec.status is record_status_for(result)
    assert state.results[RecordId("r1")] == result
    assert (rec.error is None) == isinstance(result, Success)


@pytest.mark.parametrize(
    ("result", "status"),
    [
        pytest.param(result, status, id=f"{record_status_for(result)}-as-{status}")
        for result in RESULTS
        for status in (
            RecordStatus.SUCCEEDED,
            RecordStatus.FAILED,
            RecordStatus.UNKNOWN,
            RecordStatus.CANCELLED,
        )
        if status is not record_status_for(result)
    ],
)
def test_node_finished_status_must_match_its_result(
    result: NodeResult, status: RecordStatus
) -> None:
    """node_finished whose status differs from record_status_for(result) is a StateError."""
    event = NodeFinished(record_id=RecordId("r1"), status=status, result=result, at=T0)
    with pytest.raises(StateError, match="gives status"):
        fold(*EXECUTING, event)


@pytest.mark.parametrize("status", [RecordStatus.CANCELLED, RecordStatus.UNKNOWN], ids=str)
def test_node_finished_without_result_only_cancelled_or_unknown(status: RecordStatus) -> None:
    """A record may end without a result only as cancelled or unknown; no result is stored."""
    event = NodeFinished(record_id=RecordId("r1"), status=status, result=None, at=T0)
    state = fold(*EXECUTING, event)
    assert state.records[RecordId("r1")].status is status
    assert RecordId("r1") not in state.results


@pytest.mark.parametrize("status", [RecordStatus.SUCCEEDED, RecordStatus.FAILED], ids=str)
def test_node_finished_without_result_refused_for_succeeded_or_failed(
    status: RecordStatus,
) -> None:
    """A succeeded or failed record needs the node's result."""
    event = NodeFinished(record_id=RecordId("r1"), status=status, result=None, at=T0)
    with pytest.raises(StateError, match="needs the node's result"):
        fold(*EXECUTING, event)


@pytest.mark.parametrize(
    "status", [RecordStatus.PENDING, RecordStatus.ACCEPTED, RecordStatus.RUNNING], ids=str
)
def test_node_finished_needs_a_terminal_status(status: RecordStatus) -> None:
    """node_finished with a non-terminal status is refused."""
    event = NodeFinished(record_id=RecordId("r1"), status=status, result=None, at=T0)
    with pytest.raises(StateError, match="not a terminal record status"):
        fold(*EXECUTING, event)


@pytest.mark.parametrize(
    "later",
    [
        pytest.param(finished("r2", Success("moved")), id="finished-again"),
        pytest.param(_progress(RecordStatus.RUNNING, rid="r2"), id="progressed"),
    ],
)
def test_terminal_record_never_changes(later: Event) -> None:
    """Once a record is terminal (r2 ended unknown), no event moves it again."""
    state = fold(*EXECUTING)
    assert state.records[RecordId("r2")].status is RecordStatus.UNKNOWN
    with pytest.raises(StateError, match="terminal record never changes"):
        apply(state, later)


def test_record_reconciled_settles_an_unknown_record() -> None:
    """record_reconciled keeps the settlement beside the record, which is not rewritten."""
    event = RecordReconciled(
        record_id=RecordId("r2"), result=Success("moved"), evidence_refs=("evidence:e1",)
    )
    state = fold(*AWAITING_REPLAN, event)
    assert state.reconciled[RecordId("r2")] == event
    assert state.records[RecordId("r2")].status is RecordStatus.UNKNOWN
    assert state.results[RecordId("r2")] == UNKNOWN_MOVE


def test_record_reconciled_only_once() -> None:
    """A second reconciliation of the same record is refused."""
    event = RecordReconciled(record_id=RecordId("r2"), result=Success("moved"))
    with pytest.raises(StateError, match="not an unsettled unknown record"):
        fold(*AWAITING_REPLAN, event, event)


@pytest.mark.parametrize(
    "history",
    [
        pytest.param((*EXECUTING, finished("r1", Success(1))), id="succeeded"),
        pytest.param((*EXECUTING, finished("r1", DeviceFailure("a", "x"))), id="failed"),
        pytest.param(EXECUTING, id="pending"),
    ],
)
def test_record_reconciled_only_on_an_unknown_record(history: tuple[Event, ...]) -> None:
    """Reconciling a record that is not unknown is refused."""
    with pytest.raises(StateError, match="not an unsettled unknown record"):
        fold(*history, RecordReconciled(record_id=RecordId("r1"), result=Success(1)))


def test_record_reconciled_needs_an_existing_record() -> None:
    """Reconciling a record id that does not exist is refused."""
    with pytest.raises(StateError, match="no record"):
        fold(*EXECUTING, RecordReconciled(record_id=RecordId("r9"), result=Success(1)))


# --- what the other events record -------------------------------------------------------------

RECORDED: list[tuple[str, Callable[[TaskState], tuple[object, ...]]]] = [
    ("plan_rejected", lambda s: s.rejections),
    ("node_skipped", lambda s: s.skipped),
    ("capture_failed", lambda s: s.capture_failures),
    ("round_executed", lambda s: s.rounds),
    ("verdict_recorded", lambda s: s.verdicts),
    ("diagnosed", lambda s: s.diagnoses),
    ("dispatched", lambda s: s.decisions),
]


@pytest.mark.parametrize(("name", "field"), RECORDED, ids=[name for name, _ in RECORDED])
def test_event_is_appended_to_its_history(
    name: str, field: Callable[[TaskState], tuple[object, ...]]
) -> None:
    """Each of these events is kept, as given, at the end of its history in the state."""
    row = TABLE[name]
    phase = next(iter(sorted(row.allowed)))
    state = apply(fold(*HISTORIES[phase]), row.event)
    assert field(state)[-1] == row.event


def test_evidence_captured_keeps_the_observation() -> None:
    """evidence_captured appends the observation itself."""
    state = fold(*EXECUTING, EvidenceCaptured(evidence=evidence()))
    assert state.evidence == (evidence(),)


def test_evidence_ids_are_unique() -> None:
    """Capturing the same evidence id twice is refused."""
    again = EvidenceCaptured(evidence=evidence())
    with pytest.raises(StateError, match="already captured"):
        fold(*EXECUTING, again, again)


def test_awaiting_replan_keeps_action_and_deadline() -> None:
    """awaiting_replan records the replan waited for and its deadline, and stops planning."""
    state = fold(*AWAITING_REPLAN)
    assert state.replan_action == LocalReplan(frozenset({"b"}))
    assert state.replan_deadline == T0 + timedelta(seconds=120)
    assert state.planning is None


def test_cancel_requested_is_recorded_once() -> None:
    """cancel_requested keeps its reason; a second request is refused."""
    state = fold(*CANCELLING)
    assert (state.cancel_requested, state.cancel_reason) == (True, "operator")
    with pytest.raises(StateError, match="already requested"):
        apply(state, CancelRequested())


# --- the replan budget ------------------------------------------------------------------------


def _rejected(attempt: int, planning: RevisionKind = RevisionKind.INITIAL) -> tuple[Event, ...]:
    return (
        PlanRejected(planning=planning, attempt=attempt, problems=("no nodes",)),
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
    )


def test_replan_started_counts_replans_and_planner_calls() -> None:
    """Each replan_started spends one replan and starts one more planner call."""
    state = fold(
        created(),
        *_rejected(1),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=2),
        *_rejected(2),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=3),
    )
    assert (state.replans_used, state.planner_calls) == (2, 3)
    assert (state.phase, state.planning) == (TaskPhase.PLANNING, RevisionKind.INITIAL)
    assert len(state.rejections) == 2


def test_plan_rejected_spends_nothing_by_itself() -> None:
    """A rejection alone does not spend a replan; the replan_started after it does."""
    state = fold(created(), *_rejected(1))
    assert (state.replans_used, state.phase) == (0, TaskPhase.AWAITING_REPLAN)


def test_fold_refuses_a_replan_beyond_the_budget() -> None:
    """With max_replans=1 a second replan_started is a StateError."""
    history = (
        created(max_replans=1),
        *_rejected(1),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=2),
        *_rejected(2),
    )
    state = fold(*history)
    with pytest.raises(StateError, match="replans are spent"):
        apply(state, ReplanStarted(planning=RevisionKind.INITIAL, attempt=3))


def test_zero_budget_allows_no_replan() -> None:
    """With max_replans=0 even the first replan_started is refused."""
    state = fold(created(max_replans=0), *_rejected(1))
    with pytest.raises(StateError, match="all 0 replans are spent"):
        apply(state, ReplanStarted(planning=RevisionKind.INITIAL, attempt=2))
