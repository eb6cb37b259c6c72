"""Episodes: what one ended task did, drawn from its ledger (docs/design.md §8).

An episode is the part of a task's history that experience learns from: each revision's verdict,
diagnosis and decision, the actions dispatched, and how the task ended. It also keeps the task's
*specifics* (input strings, node ids, argument values): never to put them in a lesson, but to
check that no lesson carries them. Building an episode is a pure function of a
:class:`~pev.ledger.TaskState`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from pev.errors import StateError
from pev.experience._sanitize import _MIN_LITERAL
from pev.kernel import RootCause, TaskStatus, TerminalReason

# The fold's own modules, not the package: ``pev.ledger`` also holds the Ledger shell (I/O).
from pev.ledger._events import RevisionKind
from pev.ledger._state import TaskState
from pev.model import (
    Effect,
    JsonValue,
    PlanNode,
    RecordStatus,
    Reliability,
    TaskId,
    VerdictStatus,
    VerificationMode,
    canonical_json,
    digest,
)

__all__ = [
    "Episode",
    "EpisodeAction",
    "EpisodeNode",
    "EpisodeRevision",
    "build_episode",
    "task_literals",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeNode:
    """A node a diagnosis blamed: its id, tool and (effective) effect."""

    node_id: str
    tool: str | None
    effect: Effect


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeRevision:
    """One revision of an episode: how it was verified, diagnosed and decided.

    Attributes:
        number: The revision number (1, 2, ...).
        kind: ``initial``, ``local`` or ``global``.
        verdict: The verdict's status, when one was read.
        reliability: How far the verdict could be trusted; ``None`` where no verifier ran.
        evidence_missing: Required evidence was missing, so the verifier was not called.
        cause: The diagnosed root cause, when the verdict did not pass.
        blamed: The nodes the diagnosis names.
        decision: What the kernel decided: ``finish``, ``local_replan`` or ``global_replan``
            ("" when the task ended before a decision).
    """

    number: int
    kind: RevisionKind
    verdict: VerdictStatus | None = None
    reliability: Reliability | None = None
    evidence_missing: bool = False
    cause: RootCause | None = None
    blamed: tuple[EpisodeNode, ...] = ()
    decision: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeAction:
    """One dispatch of a node and where its record ended."""

    revision: int
    node_id: str
    tool: str | None
    effect: Effect
    status: RecordStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Episode:
    """What one ended task did, as experience sees it.

    Attributes:
        task_id: The task.
        input_digest: sha256 of the task's input (tasks with equal inputs are not independent).
        goal: The contract's goal (or the input's text when the contract has none).
        mode: The contract's verification mode.
        status: How the task ended.
        reason: Why.
        revisions: Each revision, in order.
        actions: Every dispatch, in order.
        rejections: How many plans were rejected before they ran.
        tools: The tools the task's plans used, sorted.
        literals: The task's specifics that no lesson may carry (see :func:`task_literals`).
        ended_at: When the task's last event was written.
    """

    task_id: TaskId
    input_digest: str
    goal: str
    mode: VerificationMode
    status: TaskStatus
    reason: TerminalReason
    revisions: tuple[EpisodeRevision, ...] = ()
    actions: tuple[EpisodeAction, ...] = ()
    rejections: int = 0
    tools: tuple[str, ...] = ()
    literals: tuple[str, ...] = ()
    ended_at: datetime | None = None


def build_episode(state: TaskState) -> Episode:
    """The episode of an ended task.

    Raises:
        StateError: The task has not ended.
    """
    if state.finished is None:
        raise StateError(
            f"task {state.task_id} has not ended (phase {state.phase}): an episode is built "
            "from an ended task",
            task_id=state.task_id,
            state=state.phase,
        )
    goal = state.contract.goal or _text_of(state.created.input)
    return Episode(
        task_id=state.task_id,
        input_digest=digest(state.created.input),
        goal=goal,
        mode=state.contract.mode,
        status=state.finished.status,
        reason=state.finished.reason,
        revisions=tuple(_revisions(state)),
        actions=tuple(
            EpisodeAction(
                revision=record.revision,
                node_id=record.node_id,
                tool=record.tool,
                effect=record.effect,
                status=record.status,
            )
            for record in state.records.values()
        ),
        rejections=len(state.rejections),
        tools=_tools(state),
        literals=task_literals(state),
        ended_at=state.updated_at,
    )


def task_literals(state: TaskState) -> tuple[str, ...]:
    """The task's specifics a lesson must never carry, sorted and distinct.

    They are the input's strings (and the input itself, as text), the goal, the success
    criteria and constraints, and every plan's node ids, node descriptions and argument values.
    Tool names are left out: a lesson is keyed by its tool and names it. Literals shorter than
    three characters are left out too: they identify nothing.
    """
    found: set[str] = set()
    found.update(_strings(state.created.input))
    found.add(_text_of(state.created.input))
    contract = state.contract
    found.update((contract.goal, *contract.success_criteria, *contract.constraints))
    plans = [revision.plan for revision in state.revisions]
    plans.extend(rejected.plan for rejected in state.rejections if rejected.plan is not None)
    for plan in plans:
        # A rejected plan may be malformed in any way: only the strings in it are read.
        for node in plan.nodes if isinstance(plan.nodes, tuple) else ():
            for part in ("id", "description", "args"):
                found.update(_strings(getattr(node, part, None)))
    tools = set(_tools(state))
    return tuple(
        sorted(
            literal
            for literal in (text.strip() for text in found)
            if len(literal) >= _MIN_LITERAL and literal not in tools
        )
    )


def _revisions(state: TaskState) -> Iterator[EpisodeRevision]:
    for revision in state.revisions:
        number = revision.number
        verdicts = [v for v in state.verdicts if v.revision == number]
        diagnoses = [d.diagnosis for d in state.diagnoses if d.revision == number]
        decisions = [d.decision for d in state.decisions if d.revision == number]
        # A crash while verifying repeats the call on resume: the last record is the one used.
        verdict = verdicts[-1] if verdicts else None
        diagnosis = diagnoses[-1] if diagnoses else None
        decision = decisions[-1] if decisions else None
        effects = {
            record.node_id: record.effect
            for record in state.records.values()
            if record.revision == number
        }
        nodes = {node.id: node for node in revision.plan.nodes}
        blamed: tuple[EpisodeNode, ...] = ()
        if diagnosis is not None:
            blamed = tuple(
                _blamed(node_id, nodes.get(node_id), effects.get(node_id))
                for node_id in sorted(diagnosis.nodes)
            )
        yield EpisodeRevision(
            number=number,
            kind=revision.kind,
            verdict=verdict.verdict.status if verdict and verdict.verdict else None,
            reliability=verdict.reliability if verdict else None,
            evidence_missing=verdict.evidence_missing if verdict else False,
            cause=diagnosis.cause if diagnosis else None,
            blamed=blamed,
            decision=decision.kind if decision is not None else "",
        )


def _blamed(node_id: str, node: PlanNode | None, recorded: Effect | None) -> EpisodeNode:
    # The record's effect is the effective one (the stricter of node and tool).
    if node is None:
        return EpisodeNode(node_id=node_id, tool=None, effect=recorded or Effect.ACTION)
    # A node never dispatched that left its effect to its tool: an action, the safe assumption.
    return EpisodeNode(
        node_id=node_id, tool=node.tool, effect=recorded or node.effect or Effect.ACTION
    )


def _tools(state: TaskState) -> tuple[str, ...]:
    tools = {
        node.tool
        for revision in state.revisions
        for node in revision.plan.nodes
        if node.tool is not None
    }
    tools.update(record.tool for record in state.records.values() if record.tool is not None)
    return tuple(sorted(tools))


def _strings(value: object) -> Iterator[str]:
    """Every string and number inside a JSON value (object keys are names, not values)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _strings(item)


def _text_of(value: JsonValue) -> str:
    return value if isinstance(value, str) else canonical_json(value)
