"""Facts derived from a task's state: lineage results, outputs, references, unknown actions.

All pure functions of a :class:`TaskState`; the engine and the command line ask these questions
instead of walking the state themselves.
"""

from __future__ import annotations

from pev.ledger._state import TaskState
from pev.model import (
    Effect,
    EvidencePhase,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    RecordStatus,
    Success,
    record_ref,
)

__all__ = [
    "executed_ok",
    "known_refs",
    "lineage_records",
    "lineage_results",
    "missing_evidence",
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
