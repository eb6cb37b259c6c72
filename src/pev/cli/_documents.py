"""What `pev ... --json` prints: one JSON document per command, built from the ledger's values.

The field names are those of :data:`pev.cli.JSON_SCHEMAS` (and docs/cli.md); times are ISO 8601
with their UTC offset; values the ledger encodes are given as it encodes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pev import codec
from pev.experience import Episode, Lesson, classify
from pev.ledger import (
    ChainReport,
    Lease,
    LedgerEntry,
    RecordReconciled,
    Revision,
    TaskEffect,
    TaskState,
    TaskSummary,
)
from pev.ledger._queries import node_standings
from pev.rails._effects import undoing
from pev.rails._settled import settlement

__all__ = [
    "anchor_document",
    "chain_document",
    "entry_document",
    "episode_document",
    "lesson_document",
    "task_document",
    "task_row",
]


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def task_row(summary: TaskSummary, driver: str | None) -> dict[str, Any]:
    """One task of `pev tasks --json`."""
    return {
        "task_id": summary.task_id,
        "title": summary.title,
        "phase": str(summary.phase),
        "status": None if summary.status is None else str(summary.status),
        "reason": None if summary.reason is None else str(summary.reason),
        "created_at": _time(summary.created_at),
        "updated_at": _time(summary.updated_at),
        "event_count": summary.event_count,
        "head_hash": summary.head_hash,
        "deadline": _time(summary.replan_deadline),
        "driver": driver,
    }


def task_document(state: TaskState, lease: Lease | None, now: datetime) -> dict[str, Any]:
    """`pev show --json`: one task, revision by revision."""
    finished = state.finished
    return {
        "task_id": state.task_id,
        "phase": str(state.phase),
        "status": None if finished is None else str(finished.status),
        "reason": None if finished is None else str(finished.reason),
        "detail": "" if finished is None else finished.detail,
        "input": codec.encode(state.created.input),
        "contract": codec.encode(state.contract),
        "created_at": _time(state.created_at),
        "updated_at": _time(state.updated_at),
        "event_count": state.event_count,
        "driver": None
        if lease is None or state.terminal
        else {
            "owner": lease.owner,
            "epoch": lease.epoch,
            "expires_at": _time(lease.expires_at),
            "live": lease.live(now),
        },
        "revisions": [_revision(state, revision) for revision in state.revisions],
        "rejections": [codec.encode(rejected) for rejected in state.rejections],
        "outputs": {} if finished is None else codec.encode(finished.outputs),
        "output": None if finished is None else codec.encode(finished.output),
        "cancel_reason": state.cancel_reason,
        "effects": [_effect(effect) for effect in state.effects.values()],
        "start_failures": [
            {
                "owner": failed.owner,
                "epoch": failed.epoch,
                "host": failed.host,
                "process": failed.process,
                "cause": failed.cause,
            }
            for failed in state.start_failures
        ],
        "unwind": None
        if state.unwinding is None
        else {
            "status": str(state.unwinding.status),
            "reason": str(state.unwinding.reason),
            "detail": state.unwinding.detail,
        },
    }


def _effect(effect: TaskEffect) -> dict[str, Any]:
    """One effect of the task, and what became of it."""
    record = effect.compensation
    undone = undoing(effect)
    return {
        "record_id": effect.record_id,
        "node_id": effect.node_id,
        "revision": effect.revision,
        "tool": effect.tool,
        "args": None if effect.args is None else codec.encode(effect.args),
        "args_digest": effect.args_digest,
        "occurrence": effect.occurrence,
        "key": effect.key,
        "status": str(effect.status),
        "result": None if effect.result is None else codec.encode(effect.result),
        "superseded": effect.superseded,
        "compensated": effect.compensated,
        "in_world": effect.in_world,
        "compensation": None
        if record is None or undone is None
        else {
            "record_id": record.id,
            "state": undone.state,
            "status": str(record.status),
            "error": undone.error,
            "created_at": _time(record.created_at),
            "updated_at": _time(record.updated_at),
            "result": None
            if effect.compensation_result is None
            else codec.encode(effect.compensation_result),
        },
    }


def _revision(state: TaskState, revision: Revision) -> dict[str, Any]:
    number = revision.number
    nodes = []
    for standing in node_standings(state, revision):
        node, record = standing.node, standing.record
        shown: dict[str, Any] | None = None
        if record is not None:
            shown = {
                "id": record.id,
                "revision": record.revision,
                "status": str(record.status),
                "error": record.error,
                "created_at": _time(record.created_at),
                "updated_at": _time(record.updated_at),
                "reconciled_as": standing.reconciled,
                "settled_status": standing.reconciled or str(record.status),
                "reconciliation": _reconciliation(state.reconciled.get(record.id)),
            }
        effect = record.effect if record is not None else node.effect or "tool's"
        nodes.append(
            {
                "id": node.id,
                "description": node.description,
                "tool": node.tool,
                "effect": str(effect),
                "after": list(node.after),
                "args": codec.encode(node.args),
                "state": standing.state,
                "record": shown,
            }
        )

    def of_revision(values: Sequence[Any]) -> list[object]:
        return [codec.encode(value) for value in values if value.revision == number]

    return {
        "number": number,
        "kind": str(revision.kind),
        "reason": revision.reason,
        "goal": revision.plan.goal,
        "started_at": _time(revision.started_at),
        "nodes": nodes,
        "approvals": of_revision(state.approvals),
        "reviews": of_revision(state.reviews),
        "verdicts": of_revision(state.verdicts),
        "diagnoses": of_revision(state.diagnoses),
        "decisions": of_revision(state.decisions),
    }


def _reconciliation(settled: RecordReconciled | None) -> dict[str, Any] | None:
    """What a reconciliation established of a record of unknown outcome, if one did."""
    if settled is None:
        return None
    found = settlement(settled)
    return {
        "status": str(found.status),
        "error": found.error,
        "note": found.note,
        "evidence_refs": list(found.evidence_refs),
    }


def entry_document(entry: LedgerEntry) -> dict[str, Any]:
    """One event of `pev events --json`."""
    return {
        "task_id": entry.task_id,
        "seq": entry.seq,
        "at": _time(entry.at),
        "kind": entry.event.kind,
        "event": codec.encode(entry.event),
        "hash": entry.hash,
    }


def lesson_document(lesson: Lesson) -> dict[str, Any]:
    """One lesson of `pev lessons --json`."""
    return {
        "id": lesson.id,
        "status": str(lesson.status),
        "cause": str(lesson.key.cause),
        "tool": lesson.key.tool,
        "effect": None if lesson.key.effect is None else str(lesson.key.effect),
        "text": lesson.text,
        "drafted": lesson.drafted,
        "support": list(lesson.support),
        "independent": lesson.independent,
    }


def episode_document(episode: Episode) -> dict[str, Any]:
    """One episode behind a lesson, in `pev lessons LESSON --json`."""
    return {
        "task_id": episode.task_id,
        "class": str(classify(episode)),
        "status": str(episode.status),
        "reason": str(episode.reason),
        "revisions": len(episode.revisions),
        "ended_at": _time(episode.ended_at),
    }


def chain_document(report: ChainReport) -> dict[str, Any]:
    """One task's chain in `pev ledger verify --json`."""
    return {
        "task_id": report.task_id,
        "ok": report.ok,
        "events": report.events,
        "keyed_events": report.keyed_events,
        "first_bad_seq": report.first_bad_seq,
        "problem": report.problem,
        "needs_key": report.needs_key,
    }


def anchor_document(task_id: str, seq: int, hash_: str, problem: str) -> Mapping[str, Any]:
    """One anchor in `pev ledger verify --anchors FILE --json`."""
    return {"task_id": task_id, "seq": seq, "hash": hash_, "ok": not problem, "problem": problem}
