"""The fold of execution records (docs/design.md §5.2): dispatch, progress, finish and reconcile."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.support.builders import T0, dispatched, finished, fold, record
from tests.support.phases import AWAITING_REPLAN, EXECUTING, UNKNOWN_MOVE

from pev.errors import StateError
from pev.ledger import Event, NodeDispatched, NodeFinished, NodeProgressed, RecordReconciled, apply
from pev.model import (
    DeviceFailure,
    NodeResult,
    RecordId,
    RecordStatus,
    Success,
    VerifierFailure,
    record_status_for,
)


def test_node_dispatched_adds_a_pending_record() -> None:
    """node_dispatched stores the record as given, under its id."""
    state = fold(*EXECUTING, dispatched("r6", "c"))
    assert state.records[RecordId("r6")] == record("r6", "c")
    assert list(state.records) == ["r1", "r2", "r3", "r4", "r6"]


@pytest.mark.parametrize(
    "status",
    [s for s in RecordStatus if s is not RecordStatus.PENDING],
    ids=str,
)
def test_node_dispatched_must_be_pending(status: RecordStatus) -> None:
    """A record is committed as pending before the tool is called; any other status is refused."""
    with pytest.raises(StateError, match="pending"):
        fold(*EXECUTING, NodeDispatched(record=record("r6", "c", status=status)))


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(dispatched("r1", "a"), "already exists", id="duplicate-id"),
        pytest.param(dispatched("r6", "zz"), "not in the current plan", id="unknown-node"),
        pytest.param(dispatched("r6", "c", revision=2), "names revision 2", id="wrong-revision"),
    ],
)
def test_node_dispatched_refuses_a_record_that_does_not_fit(event: Event, message: str) -> None:
    """A duplicate record id, a node outside the plan or another revision is refused."""
    with pytest.raises(StateError, match=message):
        fold(*EXECUTING, event)


def test_node_dispatched_refuses_a_record_of_another_task() -> None:
    """A record whose task id is not the task's is refused."""
    other = record("r6", "c", task_id="someone-else", tool="report", idempotency_key="k")
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
