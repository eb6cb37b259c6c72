"""Facts derived from a task's state: lineage results, outputs, references, unknown actions.

All pure functions of a :class:`TaskState`; the engine and the command line ask these questions
instead of walking the state themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.ledger._effects import EffectStatus, TaskEffect
from pev.ledger._events import NodeReused
from pev.ledger._state import Revision, TaskState
from pev.model import (
    EvidencePhase,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    PlanNode,
    Success,
    record_ref,
    record_status_for,
)

__all__ = [
    "NodeStanding",
    "effects_before",
    "executed_ok",
    "known_refs",
    "lineage_records",
    "lineage_results",
    "missing_evidence",
    "node_standings",
    "outputs",
    "reused_result",
    "unfinished_records",
    "unsettled_unknown_actions",
]


def lineage_records(state: TaskState) -> tuple[ExecutionRecord, ...]:
    """Records of the current lineage (since the last initial or global revision)."""
    revision = state.revision
    if revision is None:
        return ()
    return tuple(record for record in state.records.values() if record.revision >= revision.lineage)


def lineage_results(state: TaskState) -> dict[str, NodeResult]:
    """Node id → latest result in the current lineage; a reconciliation overrides an unknown.

    A node satisfied by an effect the task already had (``node_reused``) has that effect's
    result, in the revision that reused it.
    """
    results: dict[str, NodeResult] = {}
    # Records and reuses are each in revision order; for a node, the latest revision's wins.
    revision_of: dict[str, int] = {}
    for record in lineage_records(state):
        result = _settled_result(state, record)
        if result is not None:
            results[record.node_id] = result
            revision_of[record.node_id] = record.revision
    for reuse in state.reused:
        result = reused_result(state, reuse)
        if (
            result is not None
            and reuse.revision >= state.revisions[-1].lineage
            and reuse.revision > revision_of.get(reuse.node_id, 0)
        ):
            results[reuse.node_id] = result
    return results


def _settled_result(state: TaskState, record: ExecutionRecord) -> NodeResult | None:
    settled = state.reconciled.get(record.id)
    return settled.result if settled is not None else state.results.get(record.id)


def reused_result(state: TaskState, reuse: NodeReused) -> NodeResult | None:
    """The result a reused node takes: the one its effect's record settled with."""
    effect = state.effects.get(reuse.record_id)
    return None if effect is None else effect.result


def executed_ok(state: TaskState) -> bool:
    """True when every node of the current plan has a succeeded result in its lineage."""
    plan = state.plan
    if plan is None:
        return False
    results = lineage_results(state)
    return all(isinstance(results.get(node_id), Success) for node_id in plan.node_ids)


def outputs(state: TaskState) -> dict[str, JsonValue]:
    """Node id → value of every succeeded node of the current plan."""
    plan = state.plan
    if plan is None:
        return {}
    results = lineage_results(state)
    return {
        node_id: result.value
        for node_id in plan.node_ids
        if isinstance(result := results.get(node_id), Success)
    }


def known_refs(state: TaskState) -> frozenset[str]:
    """Every evidence reference that exists in the task: observations and records."""
    return frozenset(
        [item.ref for item in state.evidence] + [record_ref(rid) for rid in state.records]
    )


def unsettled_unknown_actions(state: TaskState) -> tuple[ExecutionRecord, ...]:
    """Action records whose outcome is unknown and that no reconciliation has settled.

    A plan may not send again the intended effect of one of these (docs/engine.md, "Effects
    happen once").
    """
    return tuple(
        state.records[effect.record_id]
        for effect in state.effects.values()
        if effect.status is EffectStatus.UNKNOWN
    )


def effects_before(state: TaskState, revision: int) -> tuple[TaskEffect, ...]:
    """The task's effects that came about before ``revision``: what its plan is matched on."""
    return tuple(effect for effect in state.effects.values() if effect.revision < revision)


def unfinished_records(state: TaskState) -> tuple[ExecutionRecord, ...]:
    """Records left ``pending``, ``accepted`` or ``running`` (by a crash, say)."""
    return tuple(record for record in state.records.values() if not record.terminal)


def missing_evidence(state: TaskState, revision: int) -> tuple[str, ...]:
    """Required evidence kinds with no ``after`` observation captured in ``revision``."""
    fresh = {
        item.kind
        for item in state.evidence
        if item.revision == revision and item.phase is EvidencePhase.AFTER
    }
    return tuple(kind for kind in state.contract.required_evidence if kind not in fresh)


@dataclass(frozen=True, slots=True)
class NodeStanding:
    """Where one node of a revision stands, as ``pev show``, its JSON and the viewer show it.

    Attributes:
        node: The plan's node.
        record: Its record in this revision, if it was dispatched.
        state: The record's status, else ``reused`` (an effect the task already had satisfied
            it: ``record`` is that effect's record, from an earlier revision), ``skipped`` (a
            failed dependency kept it from running), ``kept`` (a local replan left its earlier
            result in force) or ``not_dispatched``.
        reconciled: What a reconciliation established for its record of unknown outcome (a
            record status), if one did.
    """

    node: PlanNode
    record: ExecutionRecord | None
    state: str
    reconciled: str | None


def node_standings(state: TaskState, revision: Revision) -> tuple[NodeStanding, ...]:
    """Each node of ``revision``'s plan, in plan order, with its record and state."""
    records = {r.node_id: r for r in state.records.values() if r.revision == revision.number}
    reused = {
        reuse.node_id: state.records[reuse.record_id]
        for reuse in state.reused
        if reuse.revision == revision.number
    }
    skipped = {s.node_id for s in state.skipped if s.revision == revision.number}
    standings: list[NodeStanding] = []
    for node in revision.plan.nodes:
        record = records.get(node.id)
        reconciled = None
        if record is None and node.id in reused:
            standings.append(NodeStanding(node, reused[node.id], "reused", None))
            continue
        if record is not None:
            word = str(record.status)
            settled = state.reconciled.get(record.id)
            if settled is not None:
                reconciled = str(record_status_for(settled.result))
        elif node.id in skipped:
            word = "skipped"
        elif revision.redo and node.id not in revision.redo:
            word = "kept"
        else:
            word = "not_dispatched"
        standings.append(NodeStanding(node, record, word, reconciled))
    return tuple(standings)
