"""Execution records and node results (docs/design.md §2.2): a one-way status ladder."""

from __future__ import annotations

import functools
import itertools
from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.builders import record

from pev.errors import StateError
from pev.model import (
    TERMINAL_RECORD_STATUSES,
    DeviceFailure,
    ExecutionRecord,
    JsonObject,
    NodeResult,
    RecordStatus,
    Success,
    VerifierFailure,
    record_status_for,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

LADDER = [RecordStatus.PENDING, RecordStatus.ACCEPTED, RecordStatus.RUNNING]
TERMINAL = [
    RecordStatus.SUCCEEDED,
    RecordStatus.FAILED,
    RecordStatus.CANCELLED,
    RecordStatus.UNKNOWN,
]


# Record r1 of node grip, in the status a test asks for (pending by default).
_record = functools.partial(
    record,
    "r1",
    "grip",
    task_id="t1",
    tool="gripper",
    args_digest="0" * 64,
    idempotency_key="t1/r1",
    at=T0,
    occurrence=2,
    args=JsonObject({"force": 3}),
)


def _allowed(current: RecordStatus, target: RecordStatus) -> bool:
    """The rule, restated: forward on the ladder, or into any terminal status, never out."""
    if current in TERMINAL:
        return False
    if target in TERMINAL:
        return True
    return LADDER.index(target) > LADDER.index(current)


ALL_PAIRS = [
    pytest.param(current, target, id=f"{current}->{target}")
    for current, target in itertools.product(RecordStatus, RecordStatus)
]
ALLOWED = [p for p in ALL_PAIRS if _allowed(*p.values)]  # type: ignore[arg-type]
FORBIDDEN = [p for p in ALL_PAIRS if not _allowed(*p.values)]  # type: ignore[arg-type]


def test_terminal_statuses() -> None:
    """succeeded, failed, cancelled and unknown are the terminal statuses."""
    assert frozenset(TERMINAL) == TERMINAL_RECORD_STATUSES


def test_a_new_record_is_pending() -> None:
    """A record starts pending and not terminal."""
    record = _record()

    assert record.status is RecordStatus.PENDING
    assert not record.terminal


def test_the_table_has_both_kinds_of_move() -> None:
    """Sanity check of the table below: 3 + 2 + 1 forward ladder moves, 3 x 4 into terminal."""
    assert len(ALLOWED) == 3 + 12
    assert len(FORBIDDEN) == 49 - 15


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_forward_move_is_allowed(current: RecordStatus, target: RecordStatus) -> None:
    """A move up the ladder or into a terminal status gives a moved record."""
    later = T0 + timedelta(seconds=5)

    moved = _record(current).advance(target, at=later)

    assert moved.status is target
    assert moved.updated_at == later
    assert moved.created_at == T0


@pytest.mark.parametrize(("current", "target"), FORBIDDEN)
def test_backward_or_terminal_move_raises(current: RecordStatus, target: RecordStatus) -> None:
    """A backwards move, a repeat, or any move out of a terminal status raises StateError."""
    record = _record(current)

    with pytest.raises(StateError) as info:
        record.advance(target, at=T0)

    assert info.value.task_id == "t1"
    assert info.value.state == current


def test_advance_does_not_change_the_original() -> None:
    """advance() returns a new record; the old one keeps its status."""
    record = _record()

    record.advance(RecordStatus.RUNNING, at=T0)

    assert record.status is RecordStatus.PENDING


def test_advance_keeps_every_other_field() -> None:
    """advance() changes status, time and error only; every other field is carried over."""
    record = _record(RecordStatus.RUNNING)
    later = T0 + timedelta(seconds=3)

    moved = record.advance(RecordStatus.FAILED, at=later, error="jammed")

    assert moved == replace(record, status=RecordStatus.FAILED, updated_at=later, error="jammed")
    for field in fields(ExecutionRecord):
        if field.name not in {"status", "updated_at", "error"}:
            assert getattr(moved, field.name) == getattr(record, field.name), field.name


def test_advance_records_the_error() -> None:
    """The error given with a failing move is stored on the record."""
    failed = _record(RecordStatus.RUNNING).advance(RecordStatus.FAILED, at=T0, error="jammed")

    assert failed.error == "jammed"
    assert failed.terminal


def test_the_full_ladder_in_order() -> None:
    """pending -> accepted -> running -> succeeded is a valid life."""
    record = _record()
    for status in (RecordStatus.ACCEPTED, RecordStatus.RUNNING, RecordStatus.SUCCEEDED):
        record = record.advance(status, at=T0)

    assert record.status is RecordStatus.SUCCEEDED
    assert record.terminal


def test_record_is_frozen() -> None:
    """A record cannot be changed in place."""
    record = _record()

    with pytest.raises(FrozenInstanceError):
        record.status = RecordStatus.SUCCEEDED  # type: ignore[misc]


def test_record_ref() -> None:
    """A record's evidence reference is record:<id>."""
    assert _record().ref == "record:r1"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        pytest.param(Success({"ok": True}), RecordStatus.SUCCEEDED, id="success"),
        pytest.param(Success(), RecordStatus.SUCCEEDED, id="success-without-value"),
        pytest.param(
            DeviceFailure("n1", "timed out", is_timeout=True, outcome_unknown=True),
            RecordStatus.UNKNOWN,
            id="device-failure-outcome-unknown",
        ),
        pytest.param(
            DeviceFailure("n1", "crashed", outcome_unknown=True),
            RecordStatus.UNKNOWN,
            id="device-crash-outcome-unknown",
        ),
        pytest.param(
            DeviceFailure("n1", "timed out", is_timeout=True),
            RecordStatus.FAILED,
            id="query-timeout-known-outcome",
        ),
        pytest.param(DeviceFailure("n1", "refused"), RecordStatus.FAILED, id="device-failure"),
        pytest.param(
            VerifierFailure("n1", "grip too weak"), RecordStatus.FAILED, id="verifier-failure"
        ),
    ],
)
def test_record_status_for(result: NodeResult, expected: RecordStatus) -> None:
    """Each node result maps to the terminal status docs/design.md §2.2 gives it."""
    assert record_status_for(result) is expected


def test_success_value_is_frozen() -> None:
    """A Success holds its value as frozen JSON."""
    value = Success({"pose": [1, 2]}).value

    assert value == {"pose": [1, 2]}
    assert hash(value) == hash(Success({"pose": (1, 2)}).value)


def test_success_rejects_a_non_json_value() -> None:
    """A Success cannot hold something JSON cannot represent."""
    with pytest.raises(TypeError, match=r"value: a set is not a JSON value"):
        Success({1, 2})


def test_result_kinds() -> None:
    """Each result type carries its kind tag."""
    assert (Success.kind, DeviceFailure.kind, VerifierFailure.kind) == (
        "success",
        "device_failure",
        "verifier_failure",
    )


def test_device_failure_defaults() -> None:
    """A plain DeviceFailure is neither a timeout nor of unknown outcome."""
    failure = DeviceFailure("n1", "boom")

    assert not failure.is_timeout
    assert not failure.outcome_unknown
