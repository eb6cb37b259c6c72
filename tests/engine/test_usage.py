"""Model name and token usage reported by planners and verifiers reach the ledger."""

from __future__ import annotations

import pev
from pev.engine import PlanRequest, VerifyRequest, report_usage
from pev.ledger import Ledger, RevisionStarted, Usage, VerdictRecorded
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.testing import FunctionExecutor, MemoryStore

CONTRACT = VerificationContract("recovery", "g", ["done"])
PLAN = Plan("g", (PlanNode("n", "a step", effect="query"),))


async def test_usage_reported_by_async_planner_and_sync_verifier_is_recorded() -> None:
    """report_usage inside an async planner and a sync verifier lands in their events."""

    async def planner(request: PlanRequest) -> Plan:
        report_usage("plan-model", input_tokens=10, output_tokens=4)
        report_usage("plan-model", input_tokens=2, output_tokens=1)
        return PLAN

    def verifier(request: VerifyRequest) -> Verdict:  # runs in a thread
        report_usage("judge-model", input_tokens=7, output_tokens=3)
        return Verdict.passed(request.contract)

    store = MemoryStore()
    result = await pev.run(
        "g", planner=planner, executor=FunctionExecutor(), verifier=verifier,
        contract=CONTRACT, store=store,
    )  # fmt: skip

    events = [entry.event for entry in await Ledger(store).entries(result.task_id)]
    [revision] = [e for e in events if isinstance(e, RevisionStarted)]
    [verdict] = [e for e in events if isinstance(e, VerdictRecorded)]
    assert revision.usage == Usage(model="plan-model", input_tokens=12, output_tokens=5)
    assert verdict.usage == Usage(model="judge-model", input_tokens=7, output_tokens=3)


def test_report_usage_outside_a_call_is_ignored() -> None:
    """Calling report_usage outside a planner or verifier does nothing (and does not raise)."""
    report_usage("nobody", input_tokens=1)


async def test_a_component_without_usage_records_none() -> None:
    """Planners that report nothing leave usage empty."""
    store = MemoryStore()
    result = await pev.run(
        "g", planner=lambda request: PLAN, executor=FunctionExecutor(), store=store
    )
    events = [entry.event for entry in await Ledger(store).entries(result.task_id)]
    assert [e.usage for e in events if isinstance(e, RevisionStarted)] == [None]
