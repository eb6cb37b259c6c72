"""What the viewer's pages show, as plain values: a task's state turned into rows and a graph.

Pure functions of the folded :class:`~pev.ledger.TaskState`: no I/O, no markup. The templates
escape every string these values carry (they all come from the ledger).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pev.kernel import Finish, TaskStatus
from pev.ledger import (
    Approved,
    PlanRejected,
    Revision,
    StartFailed,
    TaskPhase,
    TaskState,
    VerdictRecorded,
    known_refs,
)
from pev.ledger._queries import node_standings
from pev.model import (
    Evidence,
    ExecutionRecord,
    NodeResult,
    RefKind,
    Success,
    canonical_json,
    parse_ref,
)
from pev.rails._console import describe_decision
from pev.rails._effects import reused_words, unwind_words
from pev.rails._settled import settlement
from pev.web._effect_views import EffectView, effect_views

__all__ = [
    "IMAGE_TYPES",
    "EvidenceView",
    "NodeView",
    "ReconciledView",
    "ReusedView",
    "RevisionView",
    "TaskView",
    "status_class",
    "task_view",
]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Artifacts shown inline as images; any other (SVG among them) is only offered as a download."""

# A node's status, as the word shown and the CSS class that colours it. "kept": a local replan
# left the node's earlier result in force; "waiting": not dispatched yet.
_NODE_CLASS = {
    "succeeded": "ok",
    "failed": "bad",
    "unknown": "warn",
    "cancelled": "muted",
    "pending": "run",
    "skipped": "muted",
    "kept": "ok",
    "not dispatched": "idle",
}
_STATUS_CLASS = {
    TaskStatus.SUCCEEDED: "ok",
    TaskStatus.PARTIAL: "warn",
    TaskStatus.FAILED: "bad",
    TaskStatus.CANCELLED: "muted",
}
# A phase of a task not yet ended that has a colour of its own: one that unwinds its effects
# before it ends is no longer making progress on its goal.
_PHASE_CLASS = {TaskPhase.COMPENSATING: "undo"}


def status_class(status: TaskStatus | TaskPhase | str | None) -> str:
    """The CSS class of a task's status, or of its phase until it ends (``run`` by default)."""
    if status is None:
        return "run"
    try:
        return _STATUS_CLASS[TaskStatus(status)]
    except ValueError:
        pass
    try:
        return _PHASE_CLASS.get(TaskPhase(status), "run")
    except ValueError:
        return "run"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptView:
    """One attempt of a tool call that its retry policy made more than once."""

    number: int
    started_s: float
    duration_s: float
    error: str | None
    wait_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CitationView:
    """A reference a verdict cites, and the anchor on the page it points at (if known)."""

    ref: str
    anchor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconciledView:
    """What a reconciliation established of a node's record of unknown outcome.

    Attributes:
        words: ``unknown → reconciled: succeeded``, as every surface names it.
        note: How it was established.
        citations: The evidence it cites.
        call_error: The record's own error (the call's timeout, say), now only its history.
    """

    words: str
    note: str
    citations: tuple[CitationView, ...]
    call_error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReusedView:
    """The effect a reused node was satisfied by: nothing was sent for the node.

    Attributes:
        record_id: The effect's record.
        revision: The revision that sent it.
        words: ``reused record 1:pay (sent in revision 1)``.
        anchor: The anchor of the record's row on the page (in the revision that sent it).
    """

    record_id: str
    revision: int
    words: str
    anchor: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeView:
    """One plan node: what it calls, and what came of it in this revision.

    A record of unknown outcome that a reconciliation settled shows as settled (``status``,
    ``css``, ``error``, ``output``), with ``reconciliation`` saying so. A node satisfied by an
    effect the task already had shows as succeeded, with ``reused`` naming that effect's record
    (``record_id`` stays ``None``: the record is another revision's row).
    """

    id: str
    description: str
    tool: str
    effect: str
    after: tuple[str, ...]
    args: str
    status: str
    css: str
    record_id: str | None
    error: str | None
    output: str | None
    reconciled: str | None
    reconciliation: ReconciledView | None
    reused: ReusedView | None
    attempts: tuple[AttemptView, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CriterionView:
    """One criterion of a verdict: its status and the references it cites."""

    criterion: str
    status: str
    citations: tuple[CitationView, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class VerdictView:
    """One recorded verdict (or the note that none was asked for)."""

    status: str
    css: str
    reliability: str
    evidence_missing: bool
    problems: tuple[str, ...]
    criteria: tuple[CriterionView, ...]
    blames: tuple[str, ...]
    feedback: str
    guidance: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceView:
    """One observation: an image to show, or a payload to print."""

    id: str
    kind: str
    source: str
    phase: str
    captured_at: datetime
    media_type: str | None
    is_image: bool
    has_artifact: bool
    payload: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisionView:
    """One revision: its plan (as rows and as a graph), verdicts, diagnosis and decision."""

    number: int
    kind: str
    reason: str
    feedback: str
    lessons: tuple[str, ...]
    started_at: datetime | None
    nodes: tuple[NodeView, ...]
    graph: dict[str, Any]
    rejections: tuple[PlanRejected, ...]
    approvals: tuple[str, ...]
    verdicts: tuple[VerdictView, ...]
    diagnoses: tuple[str, ...]
    decisions: tuple[tuple[str, str, str | None], ...]
    evidence: tuple[EvidenceView, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """A whole task, as its page shows it."""

    task_id: str
    phase: str
    status: str | None
    css: str
    input: str
    mode: str
    goal: str
    criteria: tuple[str, ...]
    created_at: datetime | None
    updated_at: datetime | None
    event_count: int
    revisions: tuple[RevisionView, ...]
    trailing_rejections: tuple[PlanRejected, ...]
    effects: tuple[EffectView, ...]
    unwind: str | None
    ending: str
    detail: str
    outputs: tuple[tuple[str, str], ...]
    awaiting_revision: int | None
    terminal: bool
    cancel_requested: bool
    start_failures: tuple[StartFailed, ...] = ()


def _attempts(result: NodeResult | None) -> tuple[AttemptView, ...]:
    if result is None:
        return ()
    return tuple(
        AttemptView(
            number=a.number,
            started_s=a.started_s,
            duration_s=a.duration_s,
            error=a.error,
            wait_s=a.wait_s,
        )
        for a in result.attempts
    )


def _nodes(state: TaskState, revision: Revision, refs: frozenset[str]) -> tuple[NodeView, ...]:
    views: list[NodeView] = []
    for standing in node_standings(state, revision):
        node, record = standing.node, standing.record
        recorded = None if record is None else state.results.get(record.id)
        result = recorded
        status = standing.state.replace("_", " ")
        error = None if record is None else record.error
        reconciliation = None
        settled = None if record is None else state.reconciled.get(record.id)
        reused = _reused(record) if record is not None and standing.state == "reused" else None
        if reused is not None:
            # Satisfied by an effect an earlier revision sent: drawn as succeeded, marked reused;
            # its record's row, error and attempts are that revision's.
            status, error = "succeeded", None
            if settled is not None:  # an effect of unknown outcome, reconciled as done
                result = settled.result
        elif record is not None and settled is not None:
            # The record stays unknown in the ledger; what the reconciliation found is shown.
            found = settlement(settled)
            status, error, result = str(found.status), found.error, settled.result
            reconciliation = ReconciledView(
                words=found.words,
                note=found.note,
                citations=tuple(_citation(ref, refs) for ref in found.evidence_refs),
                call_error=record.error,
            )
        effect = record.effect if record is not None else node.effect or "tool's"
        views.append(
            NodeView(
                id=node.id,
                description=node.description,
                tool=node.tool or "",
                effect=str(effect),
                after=tuple(node.after),
                args=canonical_json(node.args),
                status=status,
                css=_NODE_CLASS.get(status, "idle"),
                record_id=None if record is None or reused is not None else str(record.id),
                error=error,
                output=canonical_json(result.value) if isinstance(result, Success) else None,
                reconciled=standing.reconciled,
                reconciliation=reconciliation,
                reused=reused,
                attempts=_attempts(recorded) if reused is None else (),
            )
        )
    return tuple(views)


def _reused(record: ExecutionRecord) -> ReusedView:
    return ReusedView(
        record_id=str(record.id),
        revision=record.revision,
        words=reused_words(str(record.id), record.revision),
        anchor=f"rec-{record.id}",
    )


def _graph(nodes: tuple[NodeView, ...]) -> dict[str, Any]:
    """The plan as a graph for the page's layout script: nodes with their status, and edges.

    A settled record of unknown outcome is drawn in its settled status, labelled as reconciled;
    a node satisfied by an effect the task already had is drawn as succeeded, labelled with the
    record it reuses (and a link to it).
    """
    known = {node.id for node in nodes}
    return {
        "nodes": [_graph_node(n) for n in nodes],
        "edges": [[before, n.id] for n in nodes for before in n.after if before in known],
    }


def _graph_node(node: NodeView) -> dict[str, Any]:
    label, title = node.status, node.status
    if node.reconciliation is not None:
        label, title = f"reconciled: {node.status}", node.reconciliation.words
    if node.reused is not None:
        label, title = f"reused {node.reused.record_id}", node.reused.words
    return {
        "id": node.id,
        "tool": node.tool,
        "status": node.status,
        "css": node.css,
        "label": label,
        "title": title,
        "reconciled": node.reconciliation is not None,
        "reused": None if node.reused is None else node.reused.anchor,
    }


def _citation(ref: str, refs: frozenset[str]) -> CitationView:
    parsed = parse_ref(ref)
    if parsed is None or ref not in refs:
        return CitationView(ref=ref, anchor=None)
    kind, ident = parsed
    prefix = "ev" if kind is RefKind.EVIDENCE else "rec"
    return CitationView(ref=ref, anchor=f"{prefix}-{ident}")


def _verdict(recorded: VerdictRecorded, refs: frozenset[str]) -> VerdictView:
    verdict = recorded.verdict
    status = str(verdict.status) if verdict else "none"
    if recorded.evidence_missing:
        status = "not asked"
    return VerdictView(
        status=status,
        css={"success": "ok", "failure": "bad"}.get(status, "warn"),
        reliability=str(recorded.reliability),
        evidence_missing=recorded.evidence_missing,
        problems=tuple(recorded.problems),
        criteria=()
        if verdict is None
        else tuple(
            CriterionView(
                criterion=c.criterion,
                status=str(c.status),
                citations=tuple(_citation(ref, refs) for ref in c.evidence_refs),
            )
            for c in verdict.criteria
        ),
        blames=() if verdict is None else tuple(sorted(verdict.failed_nodes)),
        feedback="" if verdict is None else verdict.feedback,
        guidance="" if verdict is None else verdict.guidance,
    )


def _evidence(item: Evidence) -> EvidenceView:
    return EvidenceView(
        id=str(item.id),
        kind=item.kind,
        source=item.source,
        phase=str(item.phase),
        captured_at=item.captured_at,
        media_type=item.media_type,
        is_image=item.artifact is not None and item.media_type in IMAGE_TYPES,
        has_artifact=item.artifact is not None,
        payload=None if item.payload is None else canonical_json(item.payload),
    )


def _approvals(state: TaskState, number: int) -> tuple[str, ...]:
    lines: list[str] = []
    for request in (r for r in state.approvals if r.revision == number):
        line = "approval asked"
        if request.actions:
            line += f" for actions {', '.join(request.actions)}"
        if request.deadline is not None:
            line += f", by {request.deadline:%Y-%m-%d %H:%M:%S} UTC"
        lines.append(line)
    for review in (r for r in state.reviews if r.revision == number):
        if isinstance(review, Approved):
            lines.append(f"approved by {review.by}" + (f": {review.note}" if review.note else ""))
        else:
            lines.append(f"rejected by {review.by}: {review.reason}")
    return tuple(lines)


def _decisions(state: TaskState, number: int) -> tuple[tuple[str, str, str | None], ...]:
    """Each decision as (words, CSS class, what recovery would have done: the audit's shadow)."""
    rows: list[tuple[str, str, str | None]] = []
    for dispatched in (d for d in state.decisions if d.revision == number):
        decision = dispatched.decision
        if isinstance(decision, Finish):
            shadow = None if decision.shadow is None else describe_decision(decision.shadow)
            rows.append((describe_decision(decision), status_class(decision.status), shadow))
        else:
            rows.append((describe_decision(decision), "run", None))
    return tuple(rows)


def _revision(
    state: TaskState,
    revision: Revision,
    refs: frozenset[str],
    rejections: tuple[PlanRejected, ...],
) -> RevisionView:
    number = revision.number
    nodes = _nodes(state, revision, refs)
    diagnoses = tuple(
        f"{d.diagnosis.cause}" + (f": {d.diagnosis.detail}" if d.diagnosis.detail else "")
        for d in state.diagnoses
        if d.revision == number
    )
    return RevisionView(
        number=number,
        kind=str(revision.kind),
        reason=revision.reason,
        feedback=revision.feedback,
        lessons=tuple(revision.lessons),
        started_at=revision.started_at,
        nodes=nodes,
        graph=_graph(nodes),
        rejections=rejections,
        approvals=_approvals(state, number),
        verdicts=tuple(_verdict(v, refs) for v in state.verdicts if v.revision == number),
        diagnoses=diagnoses,
        decisions=_decisions(state, number),
        evidence=tuple(_evidence(e) for e in state.evidence if e.revision == number),
    )


def task_view(state: TaskState) -> TaskView:
    """Everything a task's page shows, from its folded state."""
    refs = known_refs(state)
    rejections = list(state.rejections)
    revisions: list[RevisionView] = []
    for revision in state.revisions:
        before: list[PlanRejected] = []
        while rejections and rejections[0].attempt < revision.attempt:
            before.append(rejections.pop(0))
        revisions.append(_revision(state, revision, refs, tuple(before)))
    finished = state.finished
    contract = state.contract
    if finished is None:
        ending = f"in progress: {state.phase}"
        detail = ""
        outputs: tuple[tuple[str, str], ...] = ()
    else:
        ending = f"{finished.status}/{finished.reason}"
        detail = finished.detail
        outputs = tuple((node, canonical_json(value)) for node, value in finished.outputs.items())
    awaiting = state.awaiting
    return TaskView(
        task_id=state.task_id,
        phase=str(state.phase),
        status=None if finished is None else str(finished.status),
        css=status_class(state.phase if finished is None else finished.status),
        input=canonical_json(state.created.input),
        mode=str(contract.mode),
        goal=contract.goal or "",
        criteria=tuple(contract.success_criteria),
        created_at=state.created_at,
        updated_at=state.updated_at,
        event_count=state.event_count,
        revisions=tuple(revisions),
        trailing_rejections=tuple(rejections),
        effects=effect_views(state),
        unwind=None
        if state.unwinding is None
        else unwind_words(state.unwinding, ended=finished is not None),
        ending=ending,
        detail=detail,
        outputs=outputs,
        awaiting_revision=None if awaiting is None else awaiting.revision,
        terminal=state.terminal,
        cancel_requested=state.cancel_requested,
        start_failures=state.start_failures,
    )
