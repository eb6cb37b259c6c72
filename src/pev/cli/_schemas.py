"""The JSON Schemas of what `pev ... --json` prints: the field names scripts may rely on.

Each listing or showing command prints one JSON document with ``--json``; its schema is here,
keyed by command (``JSON_SCHEMAS["tasks"]``, ...), and docs/cli.md lists the same fields. Fields
are only ever added (a minor release may add one; none is renamed or removed without a major
release), so a script should ignore fields it does not know. The schemas are JSON Schema
draft 2020-12; every object lists its fields, so the tests catch an undocumented one.

Values the ledger itself encodes (a task's input and contract, a verdict, a diagnosis, a
decision, an event) are given as the ledger encodes them (docs/ledger-format.md), and their
schemas here say only that they are JSON. Integers in them are written exactly, of any size (a
64-bit id stays ``9876543210123456``), as the ledger keeps them: a script reads them with a
parser that keeps big integers (Python's ``json``), not one that makes every number a double.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import EffectStatus
from pev.model import RecordStatus

__all__ = ["JSON_SCHEMAS"]

_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_TIME = {"type": "string", "format": "date-time", "description": "ISO 8601, with offset"}
_MAYBE_TIME = {"type": ["string", "null"], "format": "date-time"}
_TEXT = {"type": "string"}
_MAYBE_TEXT = {"type": ["string", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_ANY: dict[str, Any] = {
    "description": "any JSON value, as the ledger encodes it; integers exact, of any size"
}
_ENCODED = {
    "type": "object",
    "description": "as the ledger encodes it (docs/ledger-format.md); integers exact, of any size",
}
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


def _nullable(value: dict[str, Any]) -> dict[str, Any]:
    """``value``, or ``null`` where it does not apply."""
    return {"oneOf": [{"type": "null"}, value]}


def _array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": dict(items)}


def _document(title: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": _DIALECT, "title": title, **body}


_DRIVER = _nullable(
    _object(
        "who drives the task now (its lease); null when nobody has taken it",
        owner=_TEXT,
        epoch=_COUNT,
        expires_at=_TIME,
        live={"type": "boolean"},
    )
)

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

_RECORD_STATUS = {"enum": [str(status) for status in RecordStatus]}

_RECONCILIATION = _nullable(
    _object(
        "what a later record_reconciled event established of a record of unknown outcome",
        status={**_RECORD_STATUS, "description": "the settled status"},
        error={**_MAYBE_TEXT, "description": "the error, when settled as not done"},
        note=_TEXT,
        evidence_refs=_array(_TEXT),
    )
)

_RECORD = _nullable(
    _object(
        "the node's execution record in this revision; for a reused node, the record of "
        "the effect that satisfied it, from the revision that sent it",
        id=_TEXT,
        revision={**_COUNT, "description": "the revision that sent it"},
        status={**_TEXT, "description": "as the record ended; never rewritten"},
        error=_MAYBE_TEXT,
        created_at=_TIME,
        updated_at=_TIME,
        reconciled_as={
            **_MAYBE_TEXT,
            "description": "the status a reconciliation settled it as, if one did",
        },
        settled_status={
            **_RECORD_STATUS,
            "description": "the status that counts: reconciled_as if reconciled, else status",
        },
        reconciliation=_RECONCILIATION,
    )
)

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
        "description": "the record's status, or reused (an effect the task already had "
        "satisfied it: nothing was sent), skipped, kept, not_dispatched",
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

_COMPENSATION = _nullable(
    _object(
        "the call that undoes the effect (a compensation), once one was dispatched",
        record_id={**_TEXT, "description": "its own record: undo:<the effect's record id>"},
        state={
            "enum": ["compensating", "compensated", "failed", "unknown"],
            "description": "under way, or how it ended; failed and unknown leave the effect "
            "in place",
        },
        status=_RECORD_STATUS,
        error=_MAYBE_TEXT,
        created_at=_TIME,
        updated_at=_TIME,
        result={**_ANY, "description": "what it returned, once it ended (else null)"},
    )
)

_EFFECT = _object(
    "one effect of the task: an action that took effect, or may have (docs/engine.md)",
    record_id=_TEXT,
    node_id=_TEXT,
    revision={**_COUNT, "description": "the revision that sent it"},
    tool=_MAYBE_TEXT,
    args={**_ANY, "description": "the resolved args it was sent with; null if never recorded"},
    args_digest=_TEXT,
    occurrence={**_COUNT, "description": "which occurrence of its call (tool and args) it is"},
    key={**_TEXT, "description": "its idempotency key, the same on every dispatch of it"},
    status={"enum": [str(status) for status in EffectStatus]},
    result={**_ANY, "description": "the call's result, or what a reconciliation found"},
    superseded={
        "type": ["integer", "null"],
        "description": "the revision that replaced it, if one did",
    },
    compensated={"type": "boolean", "description": "a compensation undid it"},
    in_world={
        "type": "boolean",
        "description": "it stands (or may): not undone, not reconciled as never done",
    },
    compensation=_COMPENSATION,
)

_START_FAILED = _object(
    "a driver that took the lease but could not start the drive (its agent, an MCP server)",
    owner=_TEXT,
    epoch=_COUNT,
    host=_TEXT,
    process=_COUNT,
    cause=_TEXT,
)
_UNWIND = _nullable(
    _object(
        "the task undid its effects before ending (compensate_on_failure): how it was to end",
        status={"enum": [str(status) for status in TaskStatus]},
        reason={"enum": [str(reason) for reason in TerminalReason]},
        detail=_TEXT,
    )
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
                output=_ANY,
                cancel_reason=_MAYBE_TEXT,
                effects=_array(_EFFECT),
                start_failures=_array(_START_FAILED),
                unwind=_UNWIND,
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
