"""LLMVerifier over real HTTP: each scripted reply ends in the state docs/design.md §2.5 names."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import pytest

import pev
from pev.codec import dumps
from pev.ledger import Ledger, LedgerEntry, Usage, VerdictRecorded
from pev.llm import LLMVerifier, OpenAIChat
from pev.model import Plan, PlanNode, Reliability, VerificationContract
from pev.testing import MemoryStore, ScriptedPlanner, StaticObserver

if TYPE_CHECKING:
    from conftest import ChatServer, Seen

API_KEY = "sk-test-pev-3f9c1e7d-DO-NOT-LEAK"  # the server takes any key; none may leak

FETCHED = "the forecast for Oslo was fetched"
PUBLISHED = "the forecast was published"
CONTRACT = VerificationContract("recovery", "publish the forecast for Oslo", [FETCHED, PUBLISHED])
PLAN = Plan(
    "publish the forecast for Oslo",
    (
        PlanNode("look", "fetch the forecast", tool="forecast", args={"city": "Oslo"}),
        PlanNode(
            "post",
            "publish it",
            tool="publish",
            args={"text": {"$ref": "look.summary"}},
            after=("look",),
        ),
    ),
)


@pev.tool(effect="query")
def forecast(city: str) -> dict[str, Any]:
    """The forecast for a city."""
    return {"city": city, "summary": f"{city}: sunny, 21 C"}


@pev.tool(effect="action")
def publish(text: str) -> dict[str, Any]:
    """Publish a text."""
    return {"published": text}


def verdict_text(cited: dict[str, list[str]], refs: list[str]) -> str:
    """A success verdict answering each criterion of ``cited`` with the references given."""
    return json.dumps(
        {
            "status": "success",
            "criteria": [
                {"criterion": criterion, "status": "satisfied", "evidence_refs": criterion_refs}
                for criterion, criterion_refs in cited.items()
            ],
            "failed_nodes": [],
            "feedback": "",
            "unmet_criteria": [],
            "preserved_constraints": [],
            "guidance": "",
            "evidence_refs": refs,
        }
    )


def verdict_citing_records(seen: Seen) -> str:
    """A valid verdict that cites the records the prompt lists (the model's job, done right)."""
    refs = seen.refs
    assert refs, "the prompt lists the records a verdict may cite"
    return verdict_text({FETCHED: refs[:1], PUBLISHED: refs[-1:]}, refs)


async def run_with_llm_verifier(
    server: ChatServer, *, timeout_s: float = 5.0, observer: StaticObserver | None = None
) -> tuple[pev.RunResult, tuple[LedgerEntry, ...], VerdictRecorded]:
    store = MemoryStore()
    async with OpenAIChat(
        "judge", base_url=server.url, api_key=API_KEY, timeout_s=timeout_s, max_retries=1
    ) as chat:
        result = await pev.run(
            "publish the forecast for Oslo",
            planner=ScriptedPlanner(PLAN),
            tools=[forecast, publish],
            verifier=LLMVerifier(chat),
            contract=CONTRACT,
            observer=observer,
            store=store,
        )
    entries = await Ledger(store).entries(result.task_id)
    [verdict] = [e.event for e in entries if isinstance(e.event, VerdictRecorded)]
    return result, entries, verdict


def assert_no_key(entries: tuple[LedgerEntry, ...]) -> None:
    """The key was never written: not in any encoded ledger entry."""
    assert all(API_KEY not in dumps(entry) for entry in entries)


async def test_a_valid_verdict_succeeds(chat_server: ChatServer) -> None:
    """A reply that is a valid verdict citing real records: ok, and the task succeeds."""
    chat_server.reply(verdict_citing_records)
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.problems == ()
    assert (result.status, result.reason) == ("succeeded", "passed")
    assert verdict.reliability is Reliability.OK
    assert verdict.verdict is not None
    assert verdict.verdict.evidence_refs


async def test_usage_and_model_are_recorded_and_the_key_is_not(chat_server: ChatServer) -> None:
    """The model's name and tokens reach the verdict event; the API key reaches no entry."""
    chat_server.reply(verdict_citing_records, prompt_tokens=120, completion_tokens=30)
    _, entries, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.usage == Usage(model=chat_server.model, input_tokens=120, output_tokens=30)
    [seen] = chat_server.requests
    assert seen.headers["authorization"] == f"Bearer {API_KEY}"  # it was sent, to the server
    assert_no_key(entries)


async def test_the_request_asks_for_the_verdict_schema(chat_server: ChatServer) -> None:
    """The verifier asks for JSON-schema structured output naming the contract's criteria."""
    chat_server.reply(verdict_citing_records)
    await run_with_llm_verifier(chat_server)
    [seen] = chat_server.requests
    response_format = seen.body["response_format"]
    assert response_format["type"] == "json_schema"
    schema = response_format["json_schema"]["schema"]
    criterion = schema["properties"]["criteria"]["items"]["properties"]["criterion"]
    assert criterion["enum"] == [FETCHED, PUBLISHED]
    assert seen.body["model"] == "judge"


async def test_unparsable_output_is_malformed(chat_server: ChatServer) -> None:
    """Text that is not JSON: malformed, so the task ends partial/verifier_unreliable."""
    chat_server.reply('Looks good to me! {"status": "success"')
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.MALFORMED
    assert "unparsable" in " ".join(verdict.problems)
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


async def test_schema_violating_output_is_malformed(chat_server: ChatServer) -> None:
    """JSON that is not a verdict (an unknown field): malformed."""
    chat_server.reply(json.dumps({"status": "success", "confidence": 0.9}))
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.MALFORMED
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


async def test_a_wrong_criteria_list_is_malformed(chat_server: ChatServer) -> None:
    """One criterion answered, the other paraphrased: malformed, never acted on."""
    chat_server.reply(verdict_text({FETCHED: [], "it got published": []}, refs=[]))
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.MALFORMED
    assert any("no result for contract criteria" in p for p in verdict.problems)
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


async def test_citing_unknown_evidence_is_malformed(chat_server: ChatServer) -> None:
    """A citation of a record that does not exist: malformed."""
    made_up = ["record:made-up"]
    chat_server.reply(verdict_text({FETCHED: made_up, PUBLISHED: made_up}, refs=made_up))
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.MALFORMED
    assert any("do not exist" in p for p in verdict.problems)
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


async def test_http_500_on_every_attempt_is_thrown(chat_server: ChatServer) -> None:
    """HTTP 500 on the first try and the one retry: thrown, after exactly two requests."""
    chat_server.fail(500, times=2)
    result, entries, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.THROWN
    assert len(chat_server.requests) == 2  # 1 + max_retries
    assert "HTTP 500" in verdict.problems[0]
    assert verdict.problems[0].startswith("the verifier's model could not be reached")
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")
    assert "could not be reached" in result.detail
    assert_no_key(entries)


async def test_a_transient_500_is_retried_by_the_sdk(chat_server: ChatServer) -> None:
    """One 500, then a valid answer: the bounded retry recovers, and the task succeeds."""
    chat_server.fail(500)
    chat_server.reply(verdict_citing_records)
    result, _, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.OK
    assert result.ok
    assert len(chat_server.requests) == 2


async def test_a_malformed_reply_is_not_retried(chat_server: ChatServer) -> None:
    """Content is never retried blindly: one bad answer, one request."""
    chat_server.reply("not json")
    chat_server.reply(verdict_citing_records)  # would make it pass, if anyone asked again
    result, _, _ = await run_with_llm_verifier(chat_server)
    assert len(chat_server.requests) == 1
    assert not result.ok


async def test_a_reply_slower_than_the_timeout_is_thrown(chat_server: ChatServer) -> None:
    """Every attempt answers after the client's timeout: thrown."""
    chat_server.reply(verdict_citing_records, delay_s=3.0)
    chat_server.reply(verdict_citing_records, delay_s=3.0)
    result, _, verdict = await run_with_llm_verifier(chat_server, timeout_s=0.25)
    assert verdict.reliability is Reliability.THROWN
    assert "timeout_s=0.25" in verdict.problems[0]
    assert len(chat_server.requests) == 2
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


@pytest.mark.parametrize("status", [400, 401])
async def test_a_client_error_is_thrown_without_retry(chat_server: ChatServer, status: int) -> None:
    """A 4xx answer is not a transport hiccup: no retry, and the verdict is thrown."""
    chat_server.fail(status)
    result, entries, verdict = await run_with_llm_verifier(chat_server)
    assert verdict.reliability is Reliability.THROWN
    assert f"HTTP {status}" in verdict.problems[0]
    assert len(chat_server.requests) == 1
    assert not result.ok
    assert_no_key(entries)


async def test_image_evidence_reaches_the_model_as_image_parts(chat_server: ChatServer) -> None:
    """A camera's PNG is sent as data: URL image parts, and may be cited by its reference."""
    png = b"\x89PNG\r\n\x1a\nsmall"
    chat_server.reply(verdict_citing_records)
    camera = StaticObserver("image", source="camera", artifact=png, media_type="image/png")
    result, _, verdict = await run_with_llm_verifier(chat_server, observer=camera)
    assert result.ok
    assert verdict.verdict is not None
    assert any(ref.startswith("evidence:") for ref in verdict.verdict.evidence_refs)
    [seen] = chat_server.requests
    parts = seen.body["messages"][1]["content"]
    images = [part["image_url"]["url"] for part in parts if part["type"] == "image_url"]
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert images == [url, url]  # before the first action, and after the round
