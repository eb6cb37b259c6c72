"""OpenAIChat negotiates structured output, limits output tokens and bounds each call by time.

Against the loopback server, playing servers that refuse a ``response_format`` the way real ones
do: llama-cpp-python answers ``{"type": "json_schema"}`` with HTTP 500 and a pydantic error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest

import pev
from pev.ledger import Ledger, PlanRejected, VerdictRecorded
from pev.llm import ChatMessage, ChatRequest, LLMError, LLMPlanner, LLMVerifier, OpenAIChat
from pev.llm.openai import DEFAULT_MAX_TOKENS
from pev.model import Reliability, VerificationContract
from pev.testing import MemoryStore, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import ChatServer, Seen

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
# What llama-cpp-python's server (0.3) answers to {"type": "json_schema"}, as seen with SmolLM2:
# its ResponseFormat's type is a Literal of these two; a traceback's line follows the message.
LLAMA_CPP_PYTHON_REFUSAL = {
    "error": {
        "message": (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
            "'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"/site-packages/"
            'llama_cpp/server/app.py", line 376, in create_chat_completion\n    POST '
            "/v1/chat/completions"
        ),
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
CHECKED = "the room was looked at"
CONTRACT = VerificationContract("recovery", "look at the room", [CHECKED])


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "PEV_LLM_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def ask(schema: dict[str, Any] | None = SCHEMA) -> ChatRequest:
    return ChatRequest(
        messages=(
            ChatMessage(role="system", text="Be brief."),
            ChatMessage(role="user", text="Is it done?"),
        ),
        schema=schema,
        schema_name="answer",
    )


def format_of(seen: Seen) -> str | None:
    """The response_format type a request asked for (None: no response_format)."""
    response_format = seen.body.get("response_format")
    return None if response_format is None else response_format["type"]


def refuse(
    server: ChatServer, *types: str, status: int = 500, error: object = LLAMA_CPP_PYTHON_REFUSAL
) -> None:
    """Make ``server`` refuse every request whose response_format is of one of ``types``."""
    server.refuse_when(lambda seen: format_of(seen) in types, status=status, error=error)


async def test_llama_cpp_python_is_asked_in_its_own_form_after_one_refusal(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """json_schema refused with llama-cpp-python's 500: one refused request (not retried by the
    SDK), then {"type": "json_object", "schema": ...}, remembered for the next call."""
    refuse(chat_server, "json_schema")
    chat_server.reply('{"ok": true}')
    chat_server.reply('{"ok": false}')
    caplog.set_level(logging.INFO, logger="pev.llm.openai")
    async with OpenAIChat("smol", base_url=chat_server.url, max_retries=2) as chat:
        assert (await chat.complete(ask())).text == '{"ok": true}'
        assert (await chat.complete(ask())).text == '{"ok": false}'
        assert chat.active_structured_output == "json_object_schema"
    refused, first, second = chat_server.requests
    assert format_of(refused) == "json_schema"
    for seen in (first, second):
        assert seen.body["response_format"] == {"type": "json_object", "schema": SCHEMA}
        assert seen.body["messages"][0] == {"role": "system", "content": "Be brief."}
    [step] = [r.getMessage() for r in caplog.records if "refused structured output" in r.message]
    assert "HTTP 500" in step
    assert "llama-cpp-python's form" in step.split("asking with", 1)[1]
    assert "\n" not in step


def test_the_negotiated_form_is_kept_by_the_client(chat_server: ChatServer) -> None:
    """One OpenAIChat is one endpoint: it keeps its negotiated form across event loops (each
    run_sync has its own); a new client asks afresh."""
    refuse(chat_server, "json_schema")
    for _ in range(4):
        chat_server.reply('{"ok": true}')
    chat = OpenAIChat("smol", base_url=chat_server.url)
    asyncio.run(chat.complete(ask()))
    asyncio.run(chat.complete(ask()))
    asyncio.run(chat.aclose())
    fresh = OpenAIChat("smol", base_url=chat_server.url)
    assert fresh.active_structured_output == "json_schema"
    asyncio.run(fresh.complete(ask()))
    asyncio.run(fresh.aclose())
    assert [format_of(seen) for seen in chat_server.requests] == [
        "json_schema", "json_object", "json_object",  # refused once, then its own form
        "json_schema", "json_object",  # the new client: refused once too
    ]  # fmt: skip


async def test_another_server_that_refuses_json_schema_gets_the_schema_in_the_prompt(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal that does not come from llama-cpp-python: {"type": "json_object"} and the
    schema as text in the system message (a schema field the server may not know is not sent)."""
    error = {"error": {"message": "response_format 'json_schema' is not supported"}}
    refuse(chat_server, "json_schema", status=400, error=error)
    chat_server.reply('{"ok": true}')
    caplog.set_level(logging.INFO, logger="pev.llm.openai")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask())
        assert chat.active_structured_output == "json_object"
    _, accepted = chat_server.requests
    assert accepted.body["response_format"] == {"type": "json_object"}
    system = accepted.body["messages"][0]["content"]
    assert system.startswith("Be brief.\n\nReply with one JSON object")
    assert json.dumps(SCHEMA) in system
    assert any("the schema in the prompt from now on" in r.getMessage() for r in caplog.records)


async def test_a_server_that_refuses_every_format_gets_none(chat_server: ChatServer) -> None:
    """json_schema, json_object+schema and json_object all refused: no response_format at all,
    the schema in the prompt; each form refused once."""
    refuse(chat_server, "json_schema", "json_object")
    chat_server.reply('{"ok": true}')
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask())
        assert chat.active_structured_output == "prompt"
    assert [format_of(seen) for seen in chat_server.requests] == [
        "json_schema", "json_object", "json_object", None,
    ]  # fmt: skip
    assert "response_format" not in chat_server.requests[-1].body
    assert "follows this JSON schema" in chat_server.requests[-1].body["messages"][0]["content"]


async def test_json_object_mode_starts_lower_and_never_steps_up(chat_server: ChatServer) -> None:
    """structured_output="json_object" pins the server to JSON objects from the first call."""
    chat_server.reply('{"ok": true}')
    async with OpenAIChat("m", base_url=chat_server.url, structured_output="json_object") as chat:
        await chat.complete(ask())
    [seen] = chat_server.requests
    assert seen.body["response_format"] == {"type": "json_object"}


async def test_a_500_that_is_not_a_format_refusal_is_an_outage(chat_server: ChatServer) -> None:
    """A generic 500 is retried by the SDK and ends as an unreachable LLMError; the format
    stays as it was."""
    chat_server.fail(500, times=2)
    async with OpenAIChat("m", base_url=chat_server.url, max_retries=1) as chat:
        with pytest.raises(LLMError) as caught:
            await chat.complete(ask())
        assert chat.active_structured_output == "json_schema"
    assert caught.value.unreachable
    assert [format_of(seen) for seen in chat_server.requests] == ["json_schema"] * 2


async def test_a_request_without_schema_is_never_negotiated(chat_server: ChatServer) -> None:
    """Nothing to negotiate: a 500 that names json_object is an outage like any other."""
    chat_server.fail(500, error=LLAMA_CPP_PYTHON_REFUSAL)
    async with OpenAIChat("m", base_url=chat_server.url, max_retries=0) as chat:
        with pytest.raises(LLMError) as caught:
            await chat.complete(ask(None))
    assert caught.value.unreachable
    assert len(chat_server.requests) == 1


async def test_the_error_keeps_one_line_of_the_servers_text(chat_server: ChatServer) -> None:
    """A long, many-line error body becomes one short line in the LLMError."""
    noise = "\n".join(f"line {number}: {'x' * 80}" for number in range(50))
    chat_server.fail(400, error={"error": {"message": f"bad request\n{noise}"}})
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        with pytest.raises(LLMError) as caught:
            await chat.complete(ask(None))
    text = str(caught.value)
    assert "\n" not in text
    assert "HTTP 400: bad request line 0:" in text
    assert len(text) < 400


async def test_the_next_prompt_holds_one_line_of_a_refusal(chat_server: ChatServer) -> None:
    """A server error that rejects a plan reaches the next planner prompt on one line."""
    noise = "\n".join(f"detail {number} " + "y" * 100 for number in range(40))
    chat_server.fail(400, error={"detail": [{"msg": f"context too long\n{noise}"}]})
    chat_server.reply(json.dumps({"goal": "look", "nodes": [LOOK_NODE]}))
    store = MemoryStore()
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        result = await pev.run(
            "look at the room",
            planner=LLMPlanner(chat),
            tools=[look],
            verifier=ScriptedVerifier.passing(),
            contract=CONTRACT,
            store=store,
        )
    assert result.ok
    [rejected] = [
        e.event
        for e in await Ledger(store).entries(result.task_id)
        if isinstance(e.event, PlanRejected)
    ]
    assert "context too long" in rejected.problems[0]
    second = chat_server.requests[1].user_text
    listed = second.split("were rejected", 1)[1].split("\n## ", 1)[0]
    [line] = [text for text in listed.splitlines() if "context too long" in text]
    assert "detail 0" in line
    assert "detail 39" not in second
    assert len(line) < 600


@pev.tool(effect="query")
def look() -> str:
    """Look around the room."""
    return "a table and a cup"


LOOK_NODE = {
    "id": "l",
    "description": "look",
    "tool": "look",
    "args": {},
    "after": [],
    "effect": "query",
}


async def test_every_call_has_a_default_output_token_limit(chat_server: ChatServer) -> None:
    """max_tokens is sent by default; it may be set, or turned off with None."""
    for _ in range(3):
        chat_server.reply("x")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask())
    async with OpenAIChat("m", base_url=chat_server.url, max_tokens=300) as chat:
        await chat.complete(ask())
    async with OpenAIChat("m", base_url=chat_server.url, max_tokens=None) as chat:
        await chat.complete(ask())
    sent = [seen.body.get("max_tokens") for seen in chat_server.requests]
    assert sent == [DEFAULT_MAX_TOKENS, 300, None]
    assert all("max_completion_tokens" not in seen.body for seen in chat_server.requests)


def test_the_hosted_api_gets_max_completion_tokens() -> None:
    """OpenAI's own API is sent the newer name, which its reasoning models require."""
    hosted = OpenAIChat("gpt-4o-mini", api_key="sk-test")._token_limit_name
    local = OpenAIChat("m", base_url="http://localhost:8080/v1")._token_limit_name
    assert (hosted, local) == ("max_completion_tokens", "max_tokens")


def test_from_env_reads_the_limits() -> None:
    """PEV_LLM_MAX_TOKENS (0: none) and PEV_LLM_CALL_TIMEOUT_S."""
    env = {"PEV_LLM_BASE_URL": "http://localhost:8080/v1", "PEV_LLM_MODEL": "smol"}
    default = OpenAIChat.from_env(env)
    assert (default.max_tokens, default.call_timeout_s) == (DEFAULT_MAX_TOKENS, 181.5)
    tuned = OpenAIChat.from_env(
        {
            **env,
            "PEV_LLM_MAX_TOKENS": "512",
            "PEV_LLM_CALL_TIMEOUT_S": "45",
            "PEV_LLM_STRUCTURED_OUTPUT": "json_object_schema",
        }
    )
    assert (tuned.max_tokens, tuned.call_timeout_s) == (512, 45.0)
    assert tuned.structured_output == "json_object_schema"
    assert OpenAIChat.from_env({**env, "PEV_LLM_MAX_TOKENS": "0"}).max_tokens is None


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"max_tokens": 0}, id="max-tokens-zero"),
        pytest.param({"max_tokens": 1.5}, id="max-tokens-float"),
        pytest.param({"call_timeout_s": 0}, id="call-timeout"),
    ],
)
def test_bad_limits_are_usage_errors(options: dict[str, object]) -> None:
    """Limits out of range are refused at construction."""
    with pytest.raises(pev.UsageError):
        OpenAIChat("m", base_url="http://localhost:8000/v1", **options)  # type: ignore[arg-type]


async def test_a_server_that_never_answers_is_bounded(chat_server: ChatServer) -> None:
    """A call past call_timeout_s ends as an unreachable LLMError, whatever timeout_s says."""
    chat_server.reply("late", delay_s=60)
    async with OpenAIChat(
        "m", base_url=chat_server.url, timeout_s=60, max_retries=0, call_timeout_s=0.3
    ) as chat:
        with pytest.raises(LLMError, match=r"call_timeout_s=0\.3") as caught:
            await chat.complete(ask())
    assert caught.value.unreachable


async def test_a_planner_that_never_hears_back_is_unavailable(chat_server: ChatServer) -> None:
    """The planner's bounded call is an outage: failed/planner_unavailable, no replan spent."""
    chat_server.reply("late", delay_s=60)
    async with OpenAIChat("m", base_url=chat_server.url, call_timeout_s=0.3) as chat:
        result = await pev.run("look at the room", planner=LLMPlanner(chat), tools=[look])
    assert (result.status, result.reason) == ("failed", "planner_unavailable")
    assert "call_timeout_s=0.3" in result.detail


async def test_a_verifier_that_never_hears_back_is_thrown(chat_server: ChatServer) -> None:
    """The verifier's bounded call is a thrown verdict."""
    chat_server.reply("late", delay_s=60)
    store = MemoryStore()
    plan = pev.Plan("look", (pev.PlanNode("l", "look", tool="look"),))
    async with OpenAIChat("m", base_url=chat_server.url, call_timeout_s=0.3) as chat:
        result = await pev.run(
            "look at the room",
            planner=ScriptedPlanner(plan),
            tools=[look],
            verifier=LLMVerifier(chat),
            contract=CONTRACT,
            store=store,
        )
    [verdict] = [
        e.event
        for e in await Ledger(store).entries(result.task_id)
        if isinstance(e.event, VerdictRecorded)
    ]
    assert verdict.reliability is Reliability.THROWN
    assert "call_timeout_s=0.3" in verdict.problems[0]
    assert not result.ok


async def test_the_working_form_is_logged_once(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The first answer on an endpoint says, once, how its structured output is asked for."""
    chat_server.reply('{"ok": true}')
    chat_server.reply('{"ok": true}')
    caplog.set_level(logging.INFO, logger="pev.llm.openai")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask())
        await chat.complete(ask())
    said = [r.getMessage() for r in caplog.records if "structured output as" in r.getMessage()]
    assert len(said) == 1
    assert 'response_format {"type": "json_schema"}' in said[0]
