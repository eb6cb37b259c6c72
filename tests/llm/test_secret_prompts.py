"""The LLM planner is never told of a tool's secret parameters (docs/tools.md, "Secrets")."""

from __future__ import annotations

import json
from typing import Annotated

import pev
from pev.codec import encode
from pev.engine import PlanRequest
from pev.ledger import RevisionKind
from pev.llm import LLMPlanner
from pev.model import TaskId, VerificationContract
from pev.testing import ScriptedChat

ENV = "PEV_TEST_REFUND_TOKEN"


@pev.tool
def refund(order: str, api_token: Annotated[str, pev.Secret(ENV)]) -> str:
    """Refund an order."""
    return f"refunded {order}"


def test_the_planner_prompt_lists_only_the_planned_parameters() -> None:
    """The tool's line shows the planned parameters; neither the secret nor its source appear."""
    request = PlanRequest(
        kind=RevisionKind.INITIAL,
        attempt=1,
        task_id=TaskId("t1"),
        input="refund order A-17",
        contract=VerificationContract(goal="refund A-17", success_criteria=["it is refunded"]),
        tools=(refund.spec,),
    )
    chat = LLMPlanner(ScriptedChat()).chat_request(request)
    text = "\n".join(message.text for message in chat.messages) + json.dumps(encode(chat.schema))
    assert "- refund(order: string) [action]: Refund an order." in text
    assert "api_token" not in text
    assert ENV not in text
