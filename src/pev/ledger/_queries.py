"""Facts derived from a task's state: lineage results, outputs, references, unknown actions.

All pure functions of a :class:`TaskState`; the engine and the command line ask these questions
instead of walking the state themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.ledger._state import Revision, TaskState
from pev.model import (
    Effect,
    EvidencePhase,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    PlanNode,
    RecordStatus,
    Success,
    record_ref,
    record_status_for,
)

__all__ = [
    "NodeStanding",
    "executed_ok",
    "known_refs",
    "lineage_records",
    "lineage_results",
    "missing_evidence",
    "node_standings",
    "outputs",
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
    """Node id → latest result in the current lineage; a reconciliation overrides an unknown."""
    results: dict[str, NodeResult] = {}
    for record in lineage_records(state):
        settled = state.reconciled.get(record.id)
        result = settled.result if settled is not None else state.results.get(record.id)
        if result is not None:
            results[record.node_id] = result
    return results


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

    A plan may not dispatch an action with the same tool and args as one of these.
    """
    return tuple(
        record
        for record in state.records.values()
        if record.status is RecordStatus.UNKNOWN
        and record.effect is Effect.ACTION
        and record.id not in state.reconciled
    )


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
        state: The record's status, else ``skipped`` (a failed dependency kept it from running),
            ``kept`` (a local replan left its earlier result in force) or ``not_dispatched``.
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
    skipped = {s.node_id for s in state.skipped if s.revision == revision.number}
    standings: list[NodeStanding] = []
    for node in revision.plan.nodes:
        record = records.get(node.id)
        reconciled = None
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
