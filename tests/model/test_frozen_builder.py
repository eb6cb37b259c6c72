"""Frozen values built from their slots equal the values their ``__init__`` builds."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pev.ledger import LedgerEntry, TaskSummary
from pev.model import Effect, ExecutionRecord, JsonObject, RecordId, RecordStatus, TaskId
from pev.model._frozen import slot_builder

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_pending_record_equals_the_one_init_builds() -> None:
    """``ExecutionRecord.pending`` is ``ExecutionRecord(...)`` with its defaults, field by field."""
    fields: dict[str, Any] = {
        "id": RecordId("1:a"),
        "task_id": TaskId("t"),
        "revision": 1,
        "node_id": "a",
        "tool": "fetch",
        "args_digest": "d" * 64,
        "effect": Effect.ACTION,
        "idempotency_key": "t/1:a",
        "occurrence": 2,
        "args": JsonObject({"url": "https://example.org"}),
    }
    built = ExecutionRecord.pending(**fields, at=NOW)
    assert built == ExecutionRecord(**fields, created_at=NOW, updated_at=NOW)
    assert built.status is RecordStatus.PENDING
    later = NOW + timedelta(seconds=1)
    moved = built.advance(RecordStatus.FAILED, at=later, error="boom")
    assert moved == dataclasses.replace(
        built, status=RecordStatus.FAILED, updated_at=later, error="boom"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        moved.status = RecordStatus.SUCCEEDED  # type: ignore[misc]


@pytest.mark.parametrize("cls", [ExecutionRecord, LedgerEntry, TaskSummary])
def test_slots_are_the_fields_in_order(cls: type) -> None:
    """A builder sets slots in ``__slots__`` order: it must be the dataclass's field order."""
    names = tuple(field.name for field in dataclasses.fields(cls))
    assert cls.__slots__ == names  # type: ignore[attr-defined]
    assert not hasattr(cls, "__post_init__")


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    left: int
    right: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


def test_a_builder_takes_every_field_and_refuses_checked_classes() -> None:
    """Too few values are refused; a class that checks itself in ``__post_init__`` has none."""
    build = slot_builder(_Pair)
    assert build(1, 2) == _Pair(1, 2)
    with pytest.raises(TypeError, match="2 fields, 1 given"):
        build(1)
    with pytest.raises(TypeError, match="__post_init__"):
        slot_builder(_Checked)
