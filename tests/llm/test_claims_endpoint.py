"""The claims example (examples/claims) with an LLM planner and verifier.

One test runs it through a real OpenAI-compatible endpoint when one is configured
(``PEV_LLM_BASE_URL`` and ``PEV_LLM_MODEL``, and ``PEV_LLM_API_KEY`` for a hosted API), and is
skipped with the reason otherwise (``make llm-smoke`` serves a small model for it). It checks the
client path, not the model's skill: a model that plans badly passes, so long as each planner call
was answered and recorded (an accepted plan or a rejected one, with its usage) and the task ended.
It has a timeout of its own, longer than the suite's. The other always runs, against the
loopback server playing a model that answers well, so the example's tools and contract are known
to fit the adapters.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

import pev
from pev.codec import dumps, encode
from pev.kernel import TaskStatus
from pev.ledger import Ledger, PlanRejected, RevisionStarted, VerdictRecorded
from pev.llm import LLMPlanner, LLMVerifier, OpenAIChat
from pev.model import Reliability
from pev.policy import RecoveryPolicy
from pev.testing import MemoryStore

if TYPE_CHECKING:
    from conftest import ChatServer, Seen

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SKIP_REASON = "no OpenAI-compatible endpoint configured (set PEV_LLM_BASE_URL and PEV_LLM_MODEL)"
INSTRUCTIONS = (
    "You settle insurance claims. Fetch the claim and its policy first, compute the payout from "
    "the policy's terms, check the coverage before any money moves, and pay only the approved "
    "amount."
)


def load_claims() -> ModuleType:
    """examples/claims/agent.py, imported by path under a name of its own."""
    name = "pev_example_claims_agent"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "claims" / "agent.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


claims = load_claims()
TOOLS = [
    claims.fetch_claim,
    claims.fetch_policy,
    claims.compute_payout,
    claims.check_coverage,
    claims.issue_payment,
]


async def run_claims(chat: OpenAIChat, store: MemoryStore) -> pev.RunResult:
    return await pev.run(
        {"claim_id": "CLM-1042"},
        planner=LLMPlanner(chat, instructions=INSTRUCTIONS),
        tools=TOOLS,
        verifier=LLMVerifier(chat),
        contract=claims.CONTRACT,
        policy=RecoveryPolicy(max_replans=2, task_timeout_s=900),
        store=store,
    )


# A real model on a CPU may take minutes per call, for several calls (the suite's timeout is 120 s).
@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_claims_through_a_configured_endpoint() -> None:
    """A real model plans and verifies the claims example; the run ends, its ledger holds, and
    every planner call's usage is recorded, whether its plan was accepted or rejected."""
    if not (os.environ.get("PEV_LLM_BASE_URL") and os.environ.get("PEV_LLM_MODEL")):
        pytest.skip(SKIP_REASON)
    store = MemoryStore()
    async with OpenAIChat.from_env() as chat:
        result = await run_claims(chat, store)
    assert result.status in set(TaskStatus)
    assert result.reason != "planner_unavailable", result.detail  # the client path works
    ledger = Ledger(store)
    assert (await ledger.state(result.task_id)).terminal
    assert (await ledger.verify(result.task_id)).ok
    entries = await ledger.entries(result.task_id)
    planned = [e.event for e in entries if isinstance(e.event, RevisionStarted | PlanRejected)]
    assert planned, "the planner was never answered"
    for event in planned:  # a call the server refused (an LLMError) has no usage to record
        refused = isinstance(event, PlanRejected) and "LLMError" in " ".join(event.problems)
        assert refused or (event.usage is not None and event.usage.output_tokens > 0), event
    key = os.environ.get("PEV_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
    if key:
        assert all(key not in dumps(entry) for entry in entries)


def settled_by_the_policy(seen: Seen) -> str:
    """What a good model plans: the payout from the policy's terms, checked, then paid."""
    assert "- compute_payout(claimed_amount: number" in seen.user_text
    plan = claims._settlement("CLM-1042", full=False, why="the policy's deductible and limit")
    return json.dumps(encode(plan))


def every_criterion_met(seen: Seen) -> str:
    """What a good model judges: each criterion satisfied, citing the records it read."""
    refs = seen.refs
    return json.dumps(
        {
            "status": "success",
            "criteria": [
                {"criterion": criterion, "status": "satisfied", "evidence_refs": refs}
                for criterion in claims.CONTRACT.success_criteria
            ],
            "failed_nodes": [],
            "feedback": "",
            "unmet_criteria": [],
            "preserved_constraints": [],
            "guidance": "",
            "evidence_refs": refs,
        }
    )


async def test_claims_through_the_loopback_endpoint(chat_server: ChatServer) -> None:
    """The example's tools and contract fit the adapters: the plan runs and pays 4000.00."""
    chat_server.reply(settled_by_the_policy)
    chat_server.reply(every_criterion_met)
    store = MemoryStore()
    async with OpenAIChat("claims-model", base_url=chat_server.url) as chat:
        result = await run_claims(chat, store)
    assert (result.status, result.reason) == ("succeeded", "passed")
    assert result.outputs["payment"]["amount"] == 4000.0
    ledger = Ledger(store)
    assert (await ledger.verify(result.task_id)).ok
    [verdict] = [
        e.event
        for e in await ledger.entries(result.task_id)
        if isinstance(e.event, VerdictRecorded)
    ]
    assert verdict.reliability is Reliability.OK
