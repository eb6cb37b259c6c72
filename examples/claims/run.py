"""Run the claims example: ``python examples/claims/run.py [CLAIM_ID]`` (CLM-1042 by default).

Prints the task's story as its ledger tells it (each revision's plan, what ran, the verdict and
the decision), then the result. Exits 0 only if the task succeeded.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The example's own agent.py, found through the path set just above.
import agent

import pev
from pev.kernel import GlobalReplan, LocalReplan
from pev.ledger import (
    ChainReport,
    Diagnosed,
    Dispatched,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeSkipped,
    RevisionStarted,
    TaskFinished,
    VerdictRecorded,
)
from pev.model import Success, VerifierFailure, canonical_json


def story(entries: tuple[LedgerEntry, ...]) -> list[str]:
    """One line per step that matters, read from the ledger alone."""
    nodes: dict[str, str] = {}
    lines: list[str] = []
    for entry in entries:
        match entry.event:
            case RevisionStarted(number=number, revision_kind=kind, plan=plan, redo=redo):
                redone = f", redo {sorted(redo)}" if redo else ""
                lines.append(f"revision {number} ({kind}{redone})")
                payout = next(node for node in plan.nodes if node.tool == "compute_payout")
                lines.append(f"  plan: {payout.id} = compute_payout {canonical_json(payout.args)}")
                lines.append(f"        {_short(payout.description)}")
            case NodeDispatched(record=record):
                nodes[record.id] = record.node_id
            case NodeFinished(record_id=record_id, status=status, result=result):
                detail = ""
                if isinstance(result, Success):
                    detail = f" → {_short(canonical_json(result.value))}"
                elif isinstance(result, VerifierFailure):
                    detail = f" → {result.reason}"
                lines.append(f"  {nodes[record_id]}: {status}{detail}")
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
    return 0 if result.ok else 1


async def _read_ledger(
    ledger: pev.Ledger, task_id: str
) -> tuple[tuple[LedgerEntry, ...], ChainReport]:
    return await ledger.entries(task_id), await ledger.verify(task_id)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
