"""The names and attributes of the spans :class:`~pev.otel.OTelRail` writes, from ledger events.

Pure functions of frozen values: no tracer, clock or I/O here. pev's own ids and outcomes are
``pev.*`` attributes; where a pev call is what the OpenTelemetry GenAI semantic conventions
describe, their names are used too: a planner or verifier call is an agent invocation
(``invoke_agent``, with the model and token usage the call reported), a node is a tool execution
(``execute_tool``, with the tool's name and the record id as the call id).
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.kernel import Decision, Diagnosis, Finish, LocalReplan, TaskStatus
from pev.ledger import (
    EffectSuperseded,
    NodeReused,
    PlanRejected,
    RecordReconciled,
    RevisionStarted,
    TaskFinished,
    UnwindStarted,
    Usage,
    VerdictRecorded,
)
from pev.model import (
    DeviceFailure,
    Evidence,
    ExecutionRecord,
    RecordStatus,
    Reliability,
    Success,
    VerificationContract,
    VerifierFailure,
)
from pev.rails._settled import settlement

__all__ = [
    "PLANNER",
    "REVISION_SPAN",
    "TASK_SPAN",
    "VERIFIER",
    "Attributes",
    "Failure",
    "agent_call",
    "compensation_attributes",
    "decision_attributes",
    "diagnosis_attributes",
    "evidence_attributes",
    "finish_attributes",
    "finish_failure",
    "node_attributes",
    "node_outcome",
    "node_span_name",
    "plan_rejection",
    "reconciliation",
    "reused_attributes",
    "revision_attributes",
    "superseded_attributes",
    "task_attributes",
    "unwind_attributes",
    "verdict_attributes",
    "verdict_failure",
]

Attributes = dict[str, str | bool | int | float | list[str]]
"""Span or event attributes, as the OpenTelemetry API takes them (no ``None`` values)."""

TASK_SPAN = "pev.task"
REVISION_SPAN = "pev.revision"

# The GenAI conventions' agent names for pev's two model-backed roles: their spans are named
# ``invoke_agent planner`` and ``invoke_agent verifier``.
PLANNER = "planner"
VERIFIER = "verifier"

# GenAI semantic conventions (gen_ai.*) and the general error.type.
_OPERATION = "gen_ai.operation.name"
_AGENT_NAME = "gen_ai.agent.name"
_REQUEST_MODEL = "gen_ai.request.model"
_RESPONSE_MODEL = "gen_ai.response.model"
_INPUT_TOKENS = "gen_ai.usage.input_tokens"
_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
_TOOL_NAME = "gen_ai.tool.name"
_TOOL_CALL_ID = "gen_ai.tool.call.id"
_ERROR_TYPE = "error.type"

# A reason, problem list or feedback text is cut to this many characters: an attribute is for
# finding a span, the ledger keeps the whole text.
_TEXT_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a span ends with status ERROR: its ``error.type`` and a description."""

    error_type: str
    description: str


def task_attributes(task_id: str, contract: VerificationContract) -> Attributes:
    """The attributes a task span starts with."""
    return {
        "pev.task_id": task_id,
        "pev.verification_mode": str(contract.mode),
        "pev.criteria": len(contract.success_criteria),
    }


def finish_attributes(finished: TaskFinished) -> Attributes:
    """What a task span learns when the task ends: its status, reason and output nodes."""
    attributes: Attributes = {
        "pev.status": str(finished.status),
        "pev.reason": str(finished.reason),
        "pev.outputs": sorted(finished.outputs),
    }
    if finished.detail:
        attributes["pev.detail"] = _cut(finished.detail)
    return attributes


def finish_failure(finished: TaskFinished) -> Failure | None:
    """The error of a task that ended ``failed``; ``None`` for any other ending."""
    if finished.status is not TaskStatus.FAILED:
        return None
    return Failure(str(finished.reason), _cut(finished.detail or str(finished.reason)))


def revision_attributes(task_id: str, started: RevisionStarted | int) -> Attributes:
    """The attributes of a revision span: the revision's number, and what started it if known."""
    if isinstance(started, int):
        return {"pev.task_id": task_id, "pev.revision": started}
    attributes: Attributes = {
        "pev.task_id": task_id,
        "pev.revision": started.number,
        "pev.revision_kind": str(started.revision_kind),
        "pev.revision_reason": _cut(started.reason),
        "pev.plan.nodes": len(started.plan.nodes),
    }
    if started.redo:
        attributes["pev.redo"] = sorted(started.redo)
    return attributes


def agent_call(agent: str, task_id: str, usage: Usage | None) -> tuple[str, Attributes]:
    """The name and attributes of a planner or verifier call, with the usage it reported."""
    attributes: Attributes = {
        _OPERATION: "invoke_agent",
        _AGENT_NAME: agent,
        "pev.task_id": task_id,
    }
    if usage is not None:
        attributes[_REQUEST_MODEL] = usage.model
        attributes[_RESPONSE_MODEL] = usage.model
        attributes[_INPUT_TOKENS] = usage.input_tokens
        attributes[_OUTPUT_TOKENS] = usage.output_tokens
    return f"invoke_agent {agent}", attributes


def plan_rejection(rejected: PlanRejected) -> tuple[Attributes, Failure]:
    """The attributes and error of a planner call whose plan was refused."""
    attributes: Attributes = {
        "pev.planning": str(rejected.planning),
        "pev.attempt": rejected.attempt,
        "pev.plan.accepted": False,
        "pev.problems": [_cut(problem) for problem in rejected.problems],
    }
    return attributes, Failure("plan_rejected", _cut("; ".join(rejected.problems)))


def node_span_name(record: ExecutionRecord) -> str:
    """``execute_tool <tool>``, or ``execute_tool`` for a node that names no tool."""
    return "execute_tool" if record.tool is None else f"execute_tool {record.tool}"


def node_attributes(record: ExecutionRecord) -> Attributes:
    """The attributes a node span starts with: pev's ids, the tool and its call id."""
    attributes: Attributes = {
        _OPERATION: "execute_tool",
        _TOOL_CALL_ID: str(record.id),
        "pev.task_id": str(record.task_id),
        "pev.revision": record.revision,
        "pev.node_id": record.node_id,
        "pev.record_id": str(record.id),
        "pev.effect": str(record.effect),
    }
    if record.tool is not None:
        attributes[_TOOL_NAME] = record.tool
    return attributes


def reused_attributes(
    reused: NodeReused, record: ExecutionRecord | None, task_id: str
) -> Attributes:
    """The attributes of the short span of a node satisfied by an effect the task already had.

    It is the node of this revision (``pev.revision``, ``pev.node_id``), and it sent nothing:
    ``pev.node.reused_from`` names the effect's record, whose own span (in the revision that sent
    it) is the call; ``gen_ai.tool.call.id`` is that call's id too.
    """
    attributes: Attributes = {
        _OPERATION: "execute_tool",
        _TOOL_CALL_ID: str(reused.record_id),
        "pev.task_id": task_id,
        "pev.revision": reused.revision,
        "pev.node_id": reused.node_id,
        "pev.node.reused_from": str(reused.record_id),
    }
    if record is not None:
        attributes["pev.effect"] = str(record.effect)
        if record.tool is not None:
            attributes[_TOOL_NAME] = record.tool
    return attributes


def compensation_attributes(record: ExecutionRecord, effect: str) -> Attributes:
    """The attributes a compensation's span starts with: its record's, and the effect it undoes."""
    return node_attributes(record) | {"pev.compensation.of": effect}


def superseded_attributes(superseded: EffectSuperseded) -> Attributes:
    """The ``pev.effect_superseded`` event: the effect a revision replaces, and why."""
    attributes: Attributes = {
        "pev.record_id": str(superseded.record_id),
        "pev.revision": superseded.revision,
    }
    if superseded.reason:
        attributes["pev.reason"] = _cut(superseded.reason)
    return attributes


def unwind_attributes(unwind: UnwindStarted) -> Attributes:
    """The ``pev.unwind_started`` event: how the task will end once its effects are undone."""
    attributes: Attributes = {"pev.status": str(unwind.status), "pev.reason": str(unwind.reason)}
    if unwind.detail:
        attributes["pev.detail"] = _cut(unwind.detail)
    return attributes


def node_outcome(
    status: RecordStatus, result: object, *, settled_on_resume: bool = False
) -> tuple[Attributes, Failure | None]:
    """What a node span learns when its record ends, and its error when it did not succeed.

    ``result`` is the node's result (a ``NodeResult``, or ``None`` when there is none).
    """
    attributes: Attributes = {"pev.status": str(status)}
    if settled_on_resume:
        attributes["pev.settled_on_resume"] = True
    error: str | None = None
    match result:
        case Success(attempts=attempts) if attempts:
            attributes["pev.attempts"] = len(attempts)
        case DeviceFailure() as failure:
            error = failure.error
            attributes["pev.timeout"] = failure.is_timeout
            attributes["pev.outcome_unknown"] = failure.outcome_unknown
            if failure.attempts:
                attributes["pev.attempts"] = len(failure.attempts)
        case VerifierFailure(reason=reason):
            error = reason
        case _:  # a success without retries, or no result: the status says it all
            pass
    if status in (RecordStatus.SUCCEEDED, RecordStatus.CANCELLED):
        return attributes, None
    match result:
        case DeviceFailure(is_timeout=True):
            kind = "timeout"
        case DeviceFailure() | VerifierFailure():
            kind = result.kind
        case _:
            kind = str(status)
    return attributes, Failure(kind, _cut(error or f"the node ended {status}"))


def reconciliation(
    settled: RecordReconciled, record: ExecutionRecord | None
) -> tuple[Attributes, Attributes, Failure | None]:
    """What a reconciliation tells a node span of unknown outcome, as attributes and an event.

    Returns the span's new attributes (``pev.record.reconciled``: the settled status; its
    ``pev.status`` stays ``unknown``, as the record does), the ``pev.record_reconciled`` event's
    attributes, and the span's error: none when it was settled as done, the failure found
    when settled as not done.
    """
    found = settlement(settled)
    event: Attributes = {
        "pev.record_id": str(settled.record_id),
        "pev.record.reconciled": str(found.status),
    }
    if record is not None:
        event["pev.node_id"] = record.node_id
    if found.note:
        event["pev.note"] = _cut(found.note)
    if found.evidence_refs:
        event["pev.evidence_refs"] = list(found.evidence_refs)
    if found.error is not None:
        event["pev.error"] = _cut(found.error)
    _, failure = node_outcome(found.status, settled.result)
    return {"pev.record.reconciled": str(found.status)}, event, failure


def verdict_attributes(recorded: VerdictRecorded) -> Attributes:
    """What a verdict says, for the verifier call's span and its revision's."""
    attributes: Attributes = {}
    if recorded.verdict is not None:
        attributes["pev.verdict"] = str(recorded.verdict.status)
        if recorded.verdict.failed_nodes:
            attributes["pev.failed_nodes"] = sorted(recorded.verdict.failed_nodes)
    if recorded.reliability is not None:
        attributes["pev.reliability"] = str(recorded.reliability)
    if recorded.evidence_missing:
        attributes["pev.evidence_missing"] = True
    return attributes


def verdict_failure(recorded: VerdictRecorded) -> Failure | None:
    """The error of a verifier call that raised or returned something unreadable."""
    if recorded.reliability not in (Reliability.THROWN, Reliability.MALFORMED):
        return None
    problems = "; ".join(recorded.problems) or f"the verdict was {recorded.reliability}"
    return Failure(str(recorded.reliability), _cut(problems))


def evidence_attributes(evidence: Evidence) -> Attributes:
    """An observation, as an event of its revision's span (never its payload)."""
    return {
        "pev.evidence_id": str(evidence.id),
        "pev.evidence_kind": evidence.kind,
        "pev.evidence_phase": str(evidence.phase),
        "pev.evidence_source": evidence.source,
    }


def diagnosis_attributes(diagnosis: Diagnosis) -> Attributes:
    """A diagnosis, as an event of its revision's span."""
    attributes: Attributes = {
        "pev.cause": str(diagnosis.cause),
        "pev.nodes": sorted(diagnosis.nodes),
    }
    if diagnosis.detail:
        attributes["pev.detail"] = _cut(diagnosis.detail)
    return attributes


def decision_attributes(decision: Decision) -> Attributes:
    """The kernel's decision, as an event of its revision's span."""
    attributes: Attributes = {"pev.decision": decision.kind}
    if isinstance(decision, Finish):
        attributes["pev.status"] = str(decision.status)
        attributes["pev.reason"] = str(decision.reason)
        if decision.shadow is not None:
            attributes["pev.shadow_decision"] = decision.shadow.kind
    elif isinstance(decision, LocalReplan):
        attributes["pev.nodes"] = sorted(decision.nodes)
    return attributes


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"
