"""The JSON Schemas of what `pev ... --json` prints: the field names scripts may rely on.

Each listing or showing command prints one JSON document with ``--json``; its schema is here,
keyed by command (``JSON_SCHEMAS["tasks"]``, ...), and docs/cli.md lists the same fields. Fields
are only ever added (a minor release may add one; none is renamed or removed without a major
release), so a script should ignore fields it does not know. The schemas are JSON Schema
draft 2020-12; every object lists its fields, so the tests catch an undocumented one.

Values the ledger itself encodes (a task's input and contract, a verdict, a diagnosis, a
decision, an event) are given as the ledger encodes them (docs/ledger-format.md), and their
schemas here say only that they are JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["JSON_SCHEMAS"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_TIME = {"type": "string", "format": "date-time", "description": "ISO 8601, with offset"}
_MAYBE_TIME = {"type": ["string", "null"], "format": "date-time"}
_TEXT = {"type": "string"}
_MAYBE_TEXT = {"type": ["string", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_ANY: dict[str, Any] = {"description": "any JSON value, as the ledger encodes it"}
_ENCODED = {"type": "object", "description": "as the ledger encodes it (docs/ledger-format.md)"}
_STATUS = {"enum": ["succeeded", "partial", "failed", "cancelled", None]}


def _object(about: str, /, **fields: Any) -> dict[str, Any]:
    """An object with exactly ``fields``, all required (a field that may be absent is null)."""
    return {
        "type": "object",
        "description": about,
        "properties": fields,
        "required": sorted(fields),
        "additionalProperties": False,
    }


def _array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": dict(items)}


def _document(title: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": _DIALECT, "title": title, **body}


_DRIVER = {
    "oneOf": [
        {"type": "null"},
        _object(
            "who drives the task now (its lease); null when nobody has taken it",
            owner=_TEXT,
            epoch=_COUNT,
            expires_at=_TIME,
            live={"type": "boolean"},
        ),
    ]
}

_TASK_ROW = _object(
    "one task in the index",
    task_id=_TEXT,
    title=_TEXT,
    phase=_TEXT,
    status=_STATUS,
    reason=_MAYBE_TEXT,
    created_at=_TIME,
    updated_at=_TIME,
    event_count=_COUNT,
    head_hash=_TEXT,
    deadline=_MAYBE_TIME,
    driver={"type": ["string", "null"], "description": "the live lease's owner, if any"},
)

_RECORD = {
    "oneOf": [
        {"type": "null"},
        _object(
            "the node's execution record in this revision",
            id=_TEXT,
            status=_TEXT,
            error=_MAYBE_TEXT,
            created_at=_TIME,
            updated_at=_TIME,
            reconciled_as=_MAYBE_TEXT,
        ),
    ]
}

_NODE = _object(
    "one node of a revision's plan, and what became of it",
    id=_TEXT,
    description=_TEXT,
    tool=_MAYBE_TEXT,
    effect=_TEXT,
    after=_array(_TEXT),
    args=_ANY,
    state={
        "type": "string",
        "description": "the record's status, or skipped, kept, not_dispatched",
    },
    record=_RECORD,
)

_REVISION = _object(
    "one revision of the task's plan",
    number=_COUNT,
    kind=_TEXT,
    reason=_TEXT,
    goal=_TEXT,
    started_at=_TIME,
    nodes=_array(_NODE),
    approvals=_array(_ENCODED),
    reviews=_array(_ENCODED),
    verdicts=_array(_ENCODED),
    diagnoses=_array(_ENCODED),
    decisions=_array(_ENCODED),
)

_CHAIN = _object(
    "one task's chain, checked",
    task_id=_TEXT,
    ok={"type": "boolean"},
    events=_COUNT,
    keyed_events=_COUNT,
    first_bad_seq={"type": ["integer", "null"]},
    problem=_TEXT,
    needs_key={"type": "boolean"},
)

_ANCHOR = _object(
    "one anchor, checked",
    task_id=_TEXT,
    seq=_COUNT,
    hash=_TEXT,
    ok={"type": "boolean"},
    problem=_TEXT,
)

_EVENT = _object(
    "one ledger entry",
    task_id=_TEXT,
    seq=_COUNT,
    at=_TIME,
    kind=_TEXT,
    event=_ENCODED,
    hash=_TEXT,
)

_LESSON = _object(
    "one lesson",
    id=_TEXT,
    status={"enum": ["candidate", "active"]},
    cause=_TEXT,
    tool=_MAYBE_TEXT,
    effect=_MAYBE_TEXT,
    text=_TEXT,
    drafted={"type": "boolean"},
    support=_array(_TEXT),
    independent=_COUNT,
)

_EPISODE = _object(
    "one ended task behind a lesson",
    task_id=_TEXT,
    **{"class": {"enum": ["success", "mixed", "failure", "ignored"]}},
    status=_TEXT,
    reason=_TEXT,
    revisions=_COUNT,
    ended_at=_MAYBE_TIME,
)

JSON_SCHEMAS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "tasks": _document(
            "pev tasks --json",
            _object("the tasks listed, newest first", ledger=_TEXT, tasks=_array(_TASK_ROW)),
        ),
        "show": _document(
            "pev show --json",
            _object(
                "one task, revision by revision",
                task_id=_TEXT,
                phase=_TEXT,
                status=_STATUS,
                reason=_MAYBE_TEXT,
                detail=_TEXT,
                input=_ANY,
                contract=_ENCODED,
                created_at=_MAYBE_TIME,
                updated_at=_MAYBE_TIME,
                event_count=_COUNT,
                driver=_DRIVER,
                revisions=_array(_REVISION),
                rejections=_array(_ENCODED),
                outputs={"type": "object"},
                cancel_reason=_MAYBE_TEXT,
            ),
        ),
        "events": _document(
            "pev events --json",
            _object("a task's events, oldest first", task_id=_TEXT, events=_array(_EVENT)),
        ),
        "events --follow": _document("pev events --follow --json (each line)", _EVENT),
        "lessons": _document(
            "pev lessons --json", _object("the lessons listed", lessons=_array(_LESSON))
        ),
        "lessons LESSON": _document(
            "pev lessons LESSON --json",
            _object(
                "one lesson and the episodes behind it",
                lesson=_LESSON,
                episodes=_array(_EPISODE),
            ),
        ),
        "ledger verify": _document(
            "pev ledger verify --json",
            _object(
                "each task's chain and each anchor, checked",
                ok={"type": "boolean"},
                tasks=_array(_CHAIN),
                anchors=_array(_ANCHOR),
            ),
        ),
    }
)
"""The JSON Schema of each command's ``--json`` document, by command."""
