"""What a verifier can ask its request: outputs, the records to cite, the node calling a tool."""

from __future__ import annotations

import pev
from pev.engine import VerifyRequest
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.testing import FunctionExecutor, ScriptedPlanner

CONTRACT = VerificationContract("recovery", "weather", ["the report names the city"])
PLAN = Plan(
    "weather",
    (
        PlanNode("look", "look it up", tool="lookup", effect="query"),
        PlanNode("post", "post it", tool="post", after=("look",)),
        PlanNode("fail", "a step that breaks", tool="broken", effect="query"),
    ),
)


def _broken() -> None:
    raise RuntimeError("no signal")


def test_verify_request_helpers_find_outputs_and_refs() -> None:
    """output(), record_ref() and node_calling() answer from the round's results and records."""
    seen: list[tuple[object, ...]] = []

    def verifier(request: VerifyRequest) -> Verdict:
        look = request.node_calling("lookup")
        seen.append(
            (
                look.id if look else None,
                request.output("look"),
                request.record_ref("look"),
                request.output("fail"),
                request.record_ref("fail"),
                request.node_calling("nothing"),
            )
        )
        return Verdict.passed(request.contract, evidence_refs=[request.record_ref("look") or ""])

    executor = FunctionExecutor({"lookup": lambda: {"city": "Lisbon"}, "post": lambda: "ok",
                                 "broken": _broken})  # fmt: skip
    result = pev.run_sync(
        "weather", planner=ScriptedPlanner(PLAN), executor=executor, verifier=verifier,
        contract=CONTRACT,
    )  # fmt: skip

    assert result.ok
    assert seen == [("look", {"city": "Lisbon"}, "record:1:look", None, None, None)]
