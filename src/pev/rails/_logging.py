"""A rail that writes one structured log line per phase boundary."""

from __future__ import annotations

import json
import logging
import re
from typing import TypeAlias

from pev.kernel import Finish, LocalReplan
from pev.ledger import (
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    EffectCompensated,
    EffectSuperseded,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    RecordReconciled,
    RevisionStarted,
    RoundExecuted,
    TaskCreated,
    TaskFinished,
    UnwindStarted,
    VerdictRecorded,
)
from pev.model import DeviceFailure, RecordStatus, VerifierFailure
from pev.rails._event import RailEvent, RailPhase
from pev.rails._settled import settlement

__all__ = ["LogValue", "LoggingRail", "log_fields"]

LogValue: TypeAlias = str | int | bool | list[str]
"""One field of a log line: text, a number, a flag, or a list of node ids."""

_BARE = re.compile(r"[^\s=\"\\]+")


class LoggingRail:
    """Logs every phase boundary as one line: ``pev task=<id> phase=<phase> seq=<n> ...``.

    The same fields travel as a dict in the record's ``pev`` attribute (``extra={"pev": ...}``),
    for handlers that write JSON.

    Args:
        logger: Where to log; ``logging.getLogger("pev.rails.log")`` by default.
        level: The level of every line.
    """

    def __init__(self, logger: logging.Logger | None = None, *, level: int = logging.INFO) -> None:
        self.logger = logger if logger is not None else logging.getLogger("pev.rails.log")
        self.level = level

    def on_event(self, event: RailEvent) -> None:
        """Log one line for ``event`` (nothing is formatted when the level is disabled)."""
        if not self.logger.isEnabledFor(self.level):
            return
        fields = log_fields(event)
        text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        self.logger.log(self.level, "pev %s", text, extra={"pev": fields})


def log_fields(event: RailEvent) -> dict[str, LogValue]:
    """The fields :class:`LoggingRail` logs for ``event``: task, phase, seq, then its details."""
    fields: dict[str, LogValue] = {
        "task": str(event.task_id),
        "phase": str(event.phase),
        "seq": event.seq,
    }
    details = _details(event)
    fields.update({key: value for key, value in details.items() if value is not None})
    return fields


def _details(event: RailEvent) -> dict[str, LogValue | None]:
    match event.event:
        case TaskCreated(contract=contract):
            return {"mode": str(contract.mode), "criteria": len(contract.success_criteria)}
        case RevisionStarted() as started if event.phase is RailPhase.PLANNED:
            return {
                "revision": started.number,
                "kind": str(started.revision_kind),
                "nodes": len(started.plan.nodes),
            }
        case RevisionStarted() as started:
            return {
                "revision": started.number,
                "kind": str(started.revision_kind),
                "reason": started.reason,
            }
        case NodeDispatched(record=record):
            return {
                "revision": record.revision,
                "node": record.node_id,
                "tool": record.tool,
                "record": str(record.id),
                "effect": str(record.effect),
            }
        case NodeFinished() as finished:
            return {
                **_about_record(event, str(finished.record_id)),
                "status": str(finished.status),
                **_failure(finished.result),
            }
        case RecordReconciled() as settled:
            # status is the record's own (unknown: never rewritten); reconciled what was found.
            found = settlement(settled)
            return {
                **_about_record(event, str(settled.record_id)),
                "status": str(RecordStatus.UNKNOWN),
                "reconciled": str(found.status),
                "error": found.error,
                "note": found.note or None,
                "evidence": list(found.evidence_refs) or None,
            }
        case NodeReused(revision=revision, node_id=node_id, record_id=record_id):
            # record is the effect's, sent_in the revision that sent it: this node sent nothing.
            effect = event.record
            return {
                "revision": revision,
                "node": node_id,
                "tool": effect.tool if effect is not None else None,
                "record": str(record_id),
                "sent_in": effect.revision if effect is not None else None,
            }
        case EffectSuperseded(record_id=record_id, revision=revision, reason=reason):
            return {
                **_about_record(event, str(record_id)),
                "revision": revision,
                "reason": reason or None,
            }
        case CompensationDispatched(effect=effect, record=record):
            return {**_about_record(event, str(record.id)), "effect": str(effect)}
        case EffectCompensated(effect=effect, record_id=record_id):
            return {
                **_about_record(event, str(record_id)),
                "effect": str(effect),
                "status": str(RecordStatus.SUCCEEDED),
            }
        case CompensationFailed(effect=effect, record_id=record_id) as failed:
            return {
                **_about_record(event, str(record_id)),
                "effect": str(effect),
                "status": str(failed.status),
                **_failure(failed.result),
                "settled_on_resume": failed.settled_on_resume or None,
            }
        case UnwindStarted(status=status, reason=reason, detail=detail):
            # How the task ends once its effects are undone: it has not ended yet.
            return {"ends": str(status), "reason": str(reason), "detail": detail or None}
        case RoundExecuted(revision=revision, executed_ok=ok):
            return {"revision": revision, "executed_ok": ok}
        case EvidenceCaptured(evidence=evidence):
            return {
                "revision": evidence.revision,
                "evidence": str(evidence.id),
                "evidence_kind": evidence.kind,
                "evidence_phase": str(evidence.phase),
            }
        case VerdictRecorded() as recorded:
            verdict = recorded.verdict
            return {
                "revision": recorded.revision,
                "verdict": str(verdict.status) if verdict is not None else None,
                "reliability": str(recorded.reliability) if recorded.reliability else None,
                "failed_nodes": sorted(verdict.failed_nodes) if verdict is not None else None,
                "evidence_missing": recorded.evidence_missing or None,
            }
        case Diagnosed(revision=revision, diagnosis=diagnosis):
            return {
                "revision": revision,
                "cause": str(diagnosis.cause),
                "nodes": sorted(diagnosis.nodes),
            }
        case Dispatched(revision=revision, decision=decision):
            details: dict[str, LogValue | None] = {
                "revision": revision,
                "decision": decision.kind,
            }
            if isinstance(decision, Finish):
                details["status"] = str(decision.status)
                details["reason"] = str(decision.reason)
            elif isinstance(decision, LocalReplan):
                details["nodes"] = sorted(decision.nodes)
            return details
        case TaskFinished() as ended:
            return {
                "status": str(ended.status),
                "reason": str(ended.reason),
                "outputs": sorted(ended.outputs),
                "detail": ended.detail or None,
            }
        case _:  # the bus hands rails no other event
            return {}


def _about_record(event: RailEvent, record_id: str) -> dict[str, LogValue | None]:
    record = event.record
    return {
        "node": record.node_id if record is not None else None,
        "tool": record.tool if record is not None else None,
        "record": record_id,
    }


def _failure(result: object) -> dict[str, LogValue | None]:
    """The error of a failed result; nothing for a success or no result (the status says it)."""
    match result:
        case DeviceFailure() as failure:
            return {
                "error": failure.error,
                "timeout": failure.is_timeout or None,
                "outcome_unknown": failure.outcome_unknown or None,
            }
        case VerifierFailure(reason=reason):
            return {"error": reason}
        case _:
            return {}


def _text(value: LogValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        value = ",".join(value)
    if _BARE.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False)
