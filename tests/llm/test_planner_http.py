"""LLMPlanner over real HTTP: a reply that is not a plan is rejected and fed back.

See docs/design.md §4.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

import pev
from pev.codec import dumps
from pev.ledger import (
    Ledger,
    LedgerEntry,
    PlanRejected,
    RevisionStarted,
    Usage,
    VerdictRecorded,
)
from pev.llm import LLMPlanner, LLMVerifier, OpenAIChat
from pev.model import Reliability, Verdict, VerificationContract
from pev.testing import MemoryStore, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import ChatServer, Seen

API_KEY = "sk-test-pev-3f9c1e7d-DO-NOT-LEAK"  # the server takes any key; none may leak
FETCHED = "the forecast for Oslo was fetched"
PUBLISHED = "the forecast was published"
CONTRACT = VerificationContract(
    "recovery",
    "publish the forecast for Oslo",
    [FETCHED, PUBLISHED],
    constraints=["publish once"],
)


@pev.tool(effect="query")
def forecast(city: str) -> dict[str, Any]:
    """The forecast for a city."""
    return {"city": city, "summary": f"{city}: sunny, 21 C"}


@pev.tool(effect="action")
def publish(text: str) -> dict[str, Any]:
    """Publish a text."""
    return {"published": text}


LOOK = {
    "id": "look",
    "description": "fetch the forecast",
    "tool": "forecast",
    "args": {"city": "Oslo"},
    "after": [],
    "effect": "query",
}
POST = {
    "id": "post",
    "description": "publish it",
    "tool": "publish",
    "args": {"text": {"$ref": "look.summary"}},
    "after": ["look"],
    "effect": "action",
}
PLAN_TEXT = json.dumps({"goal": "publish the forecast for Oslo", "nodes": [LOOK, POST]})


async def run_with_llm_planner(
    server: ChatServer, *, verifier: Any = None
) -> tuple[pev.RunResult, tuple[LedgerEntry, ...]]:
    store = MemoryStore()
    async with OpenAIChat("planner", base_url=server.url, api_key=API_KEY, max_retries=1) as chat:
        result = await pev.run(
            "publish the forecast for Oslo",
            planner=LLMPlanner(chat, instructions="Keep plans short."),
            tools=[forecast, publish],
            verifier=verifier or ScriptedVerifier.passing(),
            contract=CONTRACT,
            store=store,
        )
    entries = await Ledger(store).entries(result.task_id)
    assert (await Ledger(store).verify(result.task_id)).ok
    assert all(API_KEY not in dumps(entry) for entry in entries)
    return result, entries


def events_of(entries: tuple[LedgerEntry, ...], kind: type[Any]) -> list[Any]:
    return [entry.event for entry in entries if isinstance(entry.event, kind)]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        pytest.param("First I will fetch the forecast, then publish it.", "not JSON", id="prose"),
        pytest.param(json.dumps([LOOK, POST]), "not an object", id="json-array"),
        pytest.param(json.dumps({"nodes": [LOOK, POST]}), "missing the required", id="no-goal"),
        pytest.param(
            json.dumps({"goal": "g", "nodes": [{**LOOK, "why": "because"}]}),
            "no field 'why'",
            id="unknown-field",
        ),
        pytest.param(
            json.dumps({"goal": "g", "nodes": [{**LOOK, "tool": "weather_api"}]}),
            "'weather_api' is not registered",
            id="unknown-tool",
        ),
    ],
)
async def test_a_reply_that_is_not_a_plan_is_rejected_and_fed_back(
    chat_server: ChatServer, reply: str, problem: str
) -> None:
    """The bad plan is rejected; the next request tells the model why; the good plan runs."""
    chat_server.reply(reply)
    chat_server.reply(PLAN_TEXT)
    result, entries = await run_with_llm_planner(chat_server)

    assert result.ok
    assert result.revisions == 1
    [rejected] = events_of(entries, PlanRejected)
    assert any(problem in text for text in rejected.problems)
    first, second = chat_server.requests
    assert problem not in first.user_text
    assert "were rejected" in second.user_text
    assert problem in second.user_text


async def test_usage_of_rejected_and_accepted_plans_is_recorded(chat_server: ChatServer) -> None:
    """Each planner call's model and tokens land in its plan_rejected or revision_started."""
    chat_server.reply("not a plan", prompt_tokens=50, completion_tokens=5)
    chat_server.reply(PLAN_TEXT, prompt_tokens=80, completion_tokens=40)
    _, entries = await run_with_llm_planner(chat_server)
    [rejected] = events_of(entries, PlanRejected)
    [revision] = events_of(entries, RevisionStarted)
    assert rejected.usage == Usage(model=chat_server.model, input_tokens=50, output_tokens=5)
    assert revision.usage == Usage(model=chat_server.model, input_tokens=80, output_tokens=40)


async def test_the_request_asks_for_a_plan_schema_naming_the_tools(
    chat_server: ChatServer,
) -> None:
    """Structured output: a JSON schema with one node shape per registered tool."""
    chat_server.reply(PLAN_TEXT)
    await run_with_llm_planner(chat_server)
    [seen] = chat_server.requests
    response_format = seen.body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "pev_plan"
    assert response_format["json_schema"]["strict"] is False  # optional args stay optional
    branches = response_format["json_schema"]["schema"]["properties"]["nodes"]["items"]["anyOf"]
    assert [node["properties"]["tool"]["const"] for node in branches] == ["forecast", "publish"]
    system = seen.body["messages"][0]["content"]
    assert "Keep plans short." in system
    assert "- forecast(city: string) [query]: The forecast for a city." in seen.user_text


async def test_a_planner_http_503_is_planner_unavailable(chat_server: ChatServer) -> None:
    """An outage after the SDK's retries is not a bad plan: failed/planner_unavailable at once,
    no replan spent, no further planner call."""
    chat_server.fail(503, times=2)
    chat_server.reply(PLAN_TEXT)
    result, entries = await run_with_llm_planner(chat_server)
    assert (result.status, result.reason) == ("failed", "planner_unavailable")
    assert "HTTP 503" in result.detail
    assert events_of(entries, PlanRejected) == []
    assert len(chat_server.requests) == 2  # the first try and the SDK's one retry


async def test_a_planner_http_400_is_a_rejected_plan(chat_server: ChatServer) -> None:
    """A request the server refused (not an outage) is a rejected plan; the next call runs."""
    chat_server.fail(400, times=1)
    chat_server.reply(PLAN_TEXT)
    result, entries = await run_with_llm_planner(chat_server)
    assert result.ok
    [rejected] = events_of(entries, PlanRejected)
    assert "HTTP 400" in rejected.problems[0]


async def test_rejections_past_the_budget_end_invalid_plan(chat_server: ChatServer) -> None:
    """Every reply bad: each rejection costs a replan, and the task ends failed/invalid_plan."""
    for _ in range(3):  # the initial plan and max_replans=2
        chat_server.reply("still not a plan")
    result, entries = await run_with_llm_planner(chat_server)
    assert (result.status, result.reason) == ("failed", "invalid_plan")
    assert len(events_of(entries, PlanRejected)) == 3
    assert len(chat_server.requests) == 3


async def test_a_local_replan_carries_the_verdict_and_the_kept_results(
    chat_server: ChatServer,
) -> None:
    """The local replan's prompt holds the feedback, the redo set and the kept results."""
    replacement = {**POST, "description": "publish the summary, prefixed"}
    chat_server.reply(PLAN_TEXT)
    chat_server.reply(json.dumps({"goal": "publish the forecast for Oslo", "nodes": [replacement]}))
    blame = Verdict.failed(
        CONTRACT, failed_nodes=["post"], feedback="prefix the text with FORECAST", unmet=[PUBLISHED]
    )
    result, _ = await run_with_llm_planner(
        chat_server, verifier=ScriptedVerifier(blame, Verdict.passed(CONTRACT))
    )
    assert result.ok
    assert result.revisions == 2
    replan = chat_server.requests[1].user_text
    assert "This is a local replan" in replan
    assert "prefix the text with FORECAST" in replan
    assert "## Nodes to redo" in replan
    assert "- post" in replan
    assert '"summary": "Oslo: sunny, 21 C"' in replan  # the kept result of "look"
    assert json.dumps(PUBLISHED) in replan.split("## Criteria still unmet", 1)[1]
    assert "publish once" in replan.split("## Constraints the new plan must keep", 1)[1]


def full_verdict(seen: Seen) -> str:
    refs = seen.refs
    return json.dumps(
        {
            "status": "success",
            "criteria": [
                {"criterion": FETCHED, "status": "satisfied", "evidence_refs": refs[:1]},
                {"criterion": PUBLISHED, "status": "satisfied", "evidence_refs": refs[1:]},
            ],
            "failed_nodes": [],
            "feedback": "",
            "unmet_criteria": [],
            "preserved_constraints": [],
            "guidance": "",
            "evidence_refs": refs,
        }
    )


async def test_planner_and_verifier_over_one_endpoint(chat_server: ChatServer) -> None:
    """The whole loop through the model: plan, execute, verify; both calls in the ledger."""
    chat_server.reply(PLAN_TEXT, prompt_tokens=100, completion_tokens=60)
    chat_server.reply(full_verdict, prompt_tokens=300, completion_tokens=90)
    store = MemoryStore()
    async with OpenAIChat("m", base_url=chat_server.url, api_key=API_KEY) as chat:
        result = await pev.run(
            "publish the forecast for Oslo",
            planner=LLMPlanner(chat),
            tools=[forecast, publish],
            verifier=LLMVerifier(chat),
            contract=CONTRACT,
            store=store,
        )
    assert (result.status, result.reason) == ("succeeded", "passed")
    assert result.outputs["post"] == {"published": "Oslo: sunny, 21 C"}
    entries = await Ledger(store).entries(result.task_id)
    [verdict] = events_of(entries, VerdictRecorded)
    assert verdict.reliability is Reliability.OK
    assert verdict.usage == Usage(model=chat_server.model, input_tokens=300, output_tokens=90)
    assert events_of(entries, RevisionStarted)[0].usage.input_tokens == 100
    assert all(API_KEY not in dumps(entry) for entry in entries)
