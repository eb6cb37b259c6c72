"""OpenAIChat: configuration, what it sends, and where the openai SDK may be imported."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pev.errors import UsageError
from pev.llm import ChatMessage, ChatModel, ChatRequest, LLMError, OpenAIChat

if TYPE_CHECKING:
    from conftest import ChatServer

API_KEY = "sk-test-pev-3f9c1e7d-DO-NOT-LEAK"
SRC = Path(__file__).resolve().parents[2] / "src"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "PEV_LLM_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def ask(schema: dict[str, object] | None = SCHEMA, *, images: tuple[str, ...] = ()) -> ChatRequest:
    return ChatRequest(
        messages=(
            ChatMessage(role="system", text="Be brief."),
            ChatMessage(role="user", text="Is it done?", images=images),
        ),
        schema=schema,
        schema_name="answer",
    )


async def test_complete_sends_messages_and_reads_the_reply(chat_server: ChatServer) -> None:
    """Model, messages, temperature and the json_schema format go out; text and usage come back."""
    chat_server.reply('{"ok": true}', prompt_tokens=9, completion_tokens=4)
    async with OpenAIChat("m1", base_url=chat_server.url, api_key=API_KEY) as chat:
        assert isinstance(chat, ChatModel)
        reply = await chat.complete(ask())
    assert (reply.text, reply.model, reply.input_tokens, reply.output_tokens) == (
        '{"ok": true}', "scripted-model", 9, 4,
    )  # fmt: skip
    [seen] = chat_server.requests
    assert seen.body["model"] == "m1"
    assert seen.body["temperature"] == 0.0
    assert seen.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Is it done?"},
    ]
    assert seen.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA, "strict": False},
    }


async def test_json_object_mode_puts_the_schema_in_the_prompt(chat_server: ChatServer) -> None:
    """For servers without json_schema: ask for a JSON object, and show the schema as text."""
    chat_server.reply('{"ok": true}')
    async with OpenAIChat("m", base_url=chat_server.url, structured_output="json_object") as chat:
        await chat.complete(ask())
    [seen] = chat_server.requests
    assert seen.body["response_format"] == {"type": "json_object"}
    system, user = seen.body["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("Be brief.\n\nReply with one JSON object")
    assert '"required": [' in system["content"]
    assert user == {"role": "user", "content": "Is it done?"}


async def test_no_schema_no_response_format(chat_server: ChatServer) -> None:
    """A request without a schema asks for plain text."""
    chat_server.reply("hello")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        assert (await chat.complete(ask(None))).text == "hello"
    assert "response_format" not in chat_server.requests[0].body


async def test_images_are_sent_as_image_parts(chat_server: ChatServer) -> None:
    """A user message with images becomes text and image_url content parts."""
    url = "data:image/png;base64,iVBORw0KGgo="
    chat_server.reply('{"ok": true}')
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask(images=(url,)))
    user = chat_server.requests[0].body["messages"][1]
    assert user["content"] == [
        {"type": "text", "text": "Is it done?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]


async def test_a_local_server_gets_a_placeholder_key(chat_server: ChatServer) -> None:
    """No key configured and a base_url: a placeholder is sent (local servers ignore it)."""
    chat_server.reply("x")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask(None))
    assert chat_server.requests[0].headers["authorization"] == "Bearer pev-local-no-key"


async def test_the_key_comes_from_the_environment(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PEV_LLM_API_KEY is preferred over OPENAI_API_KEY."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("PEV_LLM_API_KEY", API_KEY)
    chat_server.reply("x")
    async with OpenAIChat("m", base_url=chat_server.url) as chat:
        await chat.complete(ask(None))
    assert chat_server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_errors_never_hold_the_key(chat_server: ChatServer) -> None:
    """An error whose server echoes the key still names no key."""
    async with OpenAIChat("m", base_url=chat_server.url, api_key=API_KEY, max_retries=0) as chat:
        error = chat._error(f"the server said: bad key {API_KEY}", 401)
    assert API_KEY not in str(error)
    assert "***" in str(error)
    assert (error.model, error.status_code) == ("m", 401)


async def test_an_unreachable_server_is_an_llm_error() -> None:
    """Nothing listening: LLMError after the bounded retries, naming the URL, not the key."""
    async with OpenAIChat(
        "m", base_url="http://127.0.0.1:9/v1", api_key=API_KEY, max_retries=0, timeout_s=2
    ) as chat:
        with pytest.raises(LLMError, match="could not connect") as caught:
            await chat.complete(ask(None))
    assert "127.0.0.1:9" in str(caught.value)
    assert API_KEY not in str(caught.value)
    assert caught.value.unreachable  # an outage: a planner makes it PlannerUnavailable


@pytest.mark.parametrize(
    ("status", "outage"), [(503, True), (500, True), (429, True), (408, True), (400, False)]
)
async def test_an_http_error_says_whether_it_is_an_outage(
    chat_server: ChatServer, status: int, *, outage: bool
) -> None:
    """5xx, 429 and 408 say "not now" (an outage); another status refused the request."""
    chat_server.fail(status, times=1)
    async with OpenAIChat("m", base_url=chat_server.url, max_retries=0) as chat:
        with pytest.raises(LLMError) as caught:
            await chat.complete(ask(None))
    assert (caught.value.status_code, caught.value.unreachable) == (status, outage)


def test_repr_shows_no_credentials() -> None:
    """The key does not appear in the repr (a URL with a password is refused: test_base_url)."""
    chat = OpenAIChat("m", base_url="http://localhost:8000/v1", api_key=API_KEY)
    text = repr(chat)
    assert "localhost:8000" in text
    assert API_KEY not in text


def test_the_hosted_api_needs_a_key() -> None:
    """No key and no base_url: a UsageError that says where a key comes from."""
    with pytest.raises(UsageError, match="PEV_LLM_API_KEY"):
        OpenAIChat("gpt-4o-mini")


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"timeout_s": 0}, id="timeout"),
        pytest.param({"max_retries": -1}, id="retries"),
        pytest.param({"structured_output": "grammar"}, id="structured-output"),
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, object]) -> None:
    """Options out of range are refused at construction."""
    with pytest.raises(UsageError):
        OpenAIChat("m", base_url="http://localhost:8000/v1", **options)  # type: ignore[arg-type]


def test_from_env_reads_the_pev_variables() -> None:
    """PEV_LLM_BASE_URL, PEV_LLM_MODEL, PEV_LLM_API_KEY and the tuning variables."""
    chat = OpenAIChat.from_env(
        {
            "PEV_LLM_BASE_URL": "http://localhost:11434/v1",
            "PEV_LLM_MODEL": "qwen2.5:7b",
            "PEV_LLM_API_KEY": API_KEY,
            "PEV_LLM_TIMEOUT_S": "30",
            "PEV_LLM_MAX_RETRIES": "1",
            "PEV_LLM_STRUCTURED_OUTPUT": "json_object",
        }
    )
    assert chat.model == "qwen2.5:7b"
    assert chat.base_url.startswith("http://localhost:11434/v1")
    assert (chat.timeout_s, chat.max_retries, chat.structured_output) == (30.0, 1, "json_object")
    assert API_KEY not in repr(chat)


def test_from_env_needs_a_model() -> None:
    """Without PEV_LLM_MODEL there is nothing to ask."""
    with pytest.raises(UsageError, match="PEV_LLM_MODEL"):
        OpenAIChat.from_env({"PEV_LLM_BASE_URL": "http://localhost:8000/v1"})


def test_images_belong_to_user_messages() -> None:
    """Chat APIs take images only in user messages; anything else is refused up front."""
    with pytest.raises(ValueError, match="only user messages"):
        ChatMessage(role="system", text="x", images=("data:image/png;base64,AA==",))


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the openai SDK, pev.llm still imports; OpenAIChat says what to install."""
    llm = importlib.import_module("pev.llm")
    # As in a process that never had the SDK: the module and the names bound from it are gone.
    monkeypatch.delitem(sys.modules, "pev.llm.openai", raising=False)
    monkeypatch.delattr(llm, "openai", raising=False)
    monkeypatch.delattr(llm, "OpenAIChat", raising=False)
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail
    assert llm.LLMPlanner.__name__ == "LLMPlanner"
    with pytest.raises(ImportError, match=r"pip install 'pev-agent\[llm\]'"):
        importlib.import_module("pev.llm.openai")
    with pytest.raises(ImportError, match=r"pip install 'pev-agent\[llm\]'"):
        llm.OpenAIChat  # noqa: B018 - the lazy attribute is what is tested


def test_openai_chat_is_served_from_its_module() -> None:
    """``from pev.llm import OpenAIChat`` is the class of the public module pev.llm.openai."""
    from pev.llm import openai as adapter

    assert OpenAIChat is adapter.OpenAIChat
    assert "OpenAIChat" in dir(importlib.import_module("pev.llm"))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        importlib.import_module("pev.llm").Nope  # noqa: B018


def _imports_openai(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(name == "openai" or name.startswith("openai.") for name in names):
            return True
    return False


def test_only_the_adapter_imports_the_sdk() -> None:
    """Nothing in pev imports openai but the adapter, pev.llm.openai."""
    importers = sorted(
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if _imports_openai(path)
    )
    assert importers == ["pev/llm/openai.py"]


def test_one_chat_serves_several_event_loops(chat_server: ChatServer) -> None:
    """Each run_sync has its own event loop; the same OpenAIChat works in all of them."""
    chat = OpenAIChat("m", base_url=chat_server.url)
    for turn in range(3):
        chat_server.reply(f"answer {turn}")
        reply = asyncio.run(chat.complete(ask(None)))
        assert reply.text == f"answer {turn}"
    asyncio.run(chat.aclose())
    assert [seen.headers["connection"] for seen in chat_server.requests] == ["close"] * 3
