"""Run the claims example: ``python examples/claims/run.py [CLAIM_ID]`` (CLM-1042 by default).

Prints the task's story as its ledger tells it (each revision's plan, what ran, what was reused,
superseded and compensated, the verdict and the decision), then the result, then the claims
system's own payment ledger. Exits 0 only if the task succeeded.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The example's own agent.py, found through the path set just above.
import agent

import pev
from pev.kernel import GlobalReplan, LocalReplan
from pev.ledger import (
    ChainReport,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    EffectCompensated,
    EffectSuperseded,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    NodeSkipped,
    RevisionStarted,
    TaskFinished,
    VerdictRecorded,
)
from pev.model import (
    DeviceFailure,
    NodeResult,
    Plan,
    PlanNode,
    Success,
    VerifierFailure,
    canonical_json,
)


def story(entries: tuple[LedgerEntry, ...]) -> list[str]:
    """One line per step that matters, read from the ledger alone."""
    nodes: dict[str, str] = {}
    lines: list[str] = []
    previous: Plan | None = None
    for entry in entries:
        match entry.event:
            case RevisionStarted(number=number, revision_kind=kind, plan=plan, redo=redo):
                redone = f", redo {sorted(redo)}" if redo else ""
                lines.append(f"revision {number} ({kind}{redone})")
                for node in _changed(plan, previous):
                    lines.append(f"  plan: {node.id} = {node.tool} {canonical_json(node.args)}")
                    lines.append(f"        {_short(node.description)}")
                previous = plan
            case NodeDispatched(record=record):
                nodes[record.id] = record.node_id
            case NodeFinished(record_id=record_id, status=status, result=result):
                lines.append(f"  {nodes[record_id]}: {status}{_outcome(result)}")
            case NodeReused(node_id=node_id, record_id=record_id):
                lines.append(f"  {node_id}: reused record {record_id} (its effect happened once)")
            case EffectSuperseded(record_id=record_id, reason=reason):
                lines.append(f"  superseded: record {record_id}, as {reason}")
            case CompensationDispatched(effect=effect, record=record):
                lines.append(f"  compensating record {effect}: {record.id} sent")
            case EffectCompensated(effect=effect, result=result):
                lines.append(f"  compensated record {effect}{_outcome(result)}")
            case CompensationFailed(effect=effect, status=status, result=result):
                lines.append(f"  compensation of record {effect}: {status}{_outcome(result)}")
            case NodeSkipped(node_id=node_id, blocked_by=blocked_by):
                lines.append(f"  {node_id}: skipped (blocked by {', '.join(blocked_by)})")
            case VerdictRecorded(verdict=verdict) if verdict is not None:
                blamed = ", ".join(sorted(verdict.failed_nodes))
                lines.append(
                    f"  verdict: {verdict.status}" + (f", blames {blamed}" if blamed else "")
                )
                lines.append(f"           citing {', '.join(verdict.evidence_refs)}")
                if verdict.feedback:
                    lines.append(f"  feedback: {verdict.feedback}")
            case Diagnosed(diagnosis=diagnosis):
                nodes_at_fault = ", ".join(sorted(diagnosis.nodes))
                lines.append(
                    f"  diagnosis: {diagnosis.cause}"
                    + (f" of {nodes_at_fault}" if nodes_at_fault else "")
                )
            case Dispatched(decision=LocalReplan(nodes=blamed_nodes)):
                lines.append(f"  decision: local replan of {', '.join(sorted(blamed_nodes))}")
            case Dispatched(decision=GlobalReplan()):
                lines.append("  decision: global replan")
            case TaskFinished(status=status, reason=reason):
                lines.append(f"finished: {status} ({reason})")
            case _:
                pass
    return lines


def _changed(plan: Plan, previous: Plan | None) -> list[PlanNode]:
    """The nodes to show of a revision's plan: the payout first, then what a replan changed."""
    if previous is None:
        return [node for node in plan.nodes if node.tool == "compute_payout"]
    before = {node.id: node for node in previous.nodes}
    return [
        node for node in plan.nodes if node.id not in before or before[node.id].args != node.args
    ]


def _outcome(result: NodeResult | None) -> str:
    if isinstance(result, Success):
        return f" → {_short(canonical_json(result.value))}"
    if isinstance(result, VerifierFailure):
        return f" → {result.reason}"
    if isinstance(result, DeviceFailure):
        return f" → {_short(result.error)}"
    return ""


def _short(text: str, width: int = 96) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def main(claim_id: str = "CLM-1042") -> int:
    """Run the task in memory, print its story and result, and return the exit code."""
    store = pev.MemoryStore()
    result = pev.run_sync(
        {"claim_id": claim_id},
        planner=agent.planner,
        tools=[
            agent.fetch_claim,
            agent.fetch_policy,
            agent.compute_payout,
            agent.check_coverage,
            agent.issue_payment,
        ],
        verifier=agent.verifier,
        contract=agent.CONTRACT,
        policy=pev.RecoveryPolicy(max_replans=2),
        store=store,
    )
    entries, chain = asyncio.run(_read_ledger(pev.Ledger(store), result.task_id))
    print("\n".join(story(entries)))
    print(f"ledger: {'verified' if chain.ok else 'BROKEN'} ({len(entries)} events)")
    print(f"status: {result.status} ({result.reason}) after {result.revisions} revision(s)")
    payment = result.outputs.get("payment")
    if payment is not None:
        print(f"paid: {canonical_json(payment)}")
    print("the claims system's payment ledger:")
    print("\n".join(books(agent.PAYMENTS)) or "  (nothing paid)")
    return 0 if result.ok else 1


def books(payments: list[dict[str, Any]]) -> list[str]:
    """The claims system's own payment ledger, one line per payment or refund it made."""
    return [
        f"  paid {e['amount']:.2f} into {e['account']} ({e['payment_id']})"
        if e["entry"] == "payment"
        else f"  refunded {e['payment_id']}: {e['amount']:.2f} back from {e['account']}"
        for e in payments
    ]


async def _read_ledger(
    ledger: pev.Ledger, task_id: str
) -> tuple[tuple[LedgerEntry, ...], ChainReport]:
    return await ledger.entries(task_id), await ledger.verify(task_id)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
