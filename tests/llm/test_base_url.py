"""Credentials never ride in an LLM server's URL, and no log line carries the key.

See docs/llm.md ("Keys and URLs").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from pev.errors import UsageError
from pev.llm import ChatMessage, ChatRequest, OpenAIChat

if TYPE_CHECKING:
    from conftest import ChatServer

API_KEY = "sk-test-pev-base-url-5d1f0a9c"
PASSWORD = "hunter2-7c4e9b"  # noqa: S105 - a planted value the tests look for


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "PEV_LLM_API_KEY", "OPENAI_BASE_URL", "PEV_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def refusal(caught: pytest.ExceptionInfo[UsageError]) -> str:
    """The error's text, its repr, and those of whatever it chains to."""
    error = caught.value
    chained = [error, error.__cause__, error.__context__]
    return "\n".join(f"{e}\n{e!r}" for e in chained if e is not None)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(f"http://user:{PASSWORD}@localhost:8000/v1", id="user-and-password"),
        pytest.param(f"http://{PASSWORD}@localhost:8000/v1", id="user-only"),
        pytest.param(f"https://:{PASSWORD}@api.example.com/v1", id="password-only"),
    ],
)
def test_a_base_url_with_user_information_is_refused_without_echoing_it(url: str) -> None:
    """user:password@ (or user@) in base_url: a UsageError naming the way out, not the secret."""
    with pytest.raises(UsageError) as caught:
        OpenAIChat("m", base_url=url, api_key=API_KEY)
    text = refusal(caught)
    assert "base_url carries credentials" in text
    assert "api_key=" in text
    assert "PEV_LLM_API_KEY" in text
    assert PASSWORD not in text
    assert API_KEY not in text


def test_a_base_url_with_a_key_in_its_query_is_refused() -> None:
    """?api-key=... in base_url is a credential in the URL too: refused, the value not echoed."""
    with pytest.raises(UsageError) as caught:
        OpenAIChat("m", base_url=f"https://api.example.com/v1?api-key={PASSWORD}")
    text = refusal(caught)
    assert "query parameter api-key" in text
    assert PASSWORD not in text


def test_pev_llm_base_url_with_credentials_is_refused_by_name() -> None:
    """from_env names PEV_LLM_BASE_URL as the place to fix, and does not echo the password."""
    environ = {
        "PEV_LLM_MODEL": "m",
        "PEV_LLM_BASE_URL": f"http://user:{PASSWORD}@localhost:11434/v1",
    }
    with pytest.raises(UsageError) as caught:
        OpenAIChat.from_env(environ)
    text = refusal(caught)
    assert "PEV_LLM_BASE_URL carries credentials" in text
    assert PASSWORD not in text


def test_openai_base_url_with_credentials_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's own default, OPENAI_BASE_URL, is checked too when no base_url is given."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://user:{PASSWORD}@proxy.example.com/v1")
    with pytest.raises(UsageError) as caught:
        OpenAIChat("m", api_key=API_KEY)
    text = refusal(caught)
    assert "OPENAI_BASE_URL carries credentials" in text
    assert PASSWORD not in text


def test_a_plain_base_url_with_port_path_and_query_is_accepted() -> None:
    """A URL with no credentials is taken as it is (its non-secret query kept)."""
    chat = OpenAIChat("m", base_url="http://localhost:8000/v1?api-version=2024-06-01")
    assert chat.base_url.startswith("http://localhost:8000/v1")


async def test_no_log_line_of_a_call_carries_the_key(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Every record logged during a call (pev's, the SDK's, the HTTP client's) lacks the key."""
    chat_server.reply('{"ok": true}')
    ask = ChatRequest(messages=(ChatMessage(role="user", text="Done?"),))
    with caplog.at_level(logging.DEBUG):
        async with OpenAIChat("m", base_url=chat_server.url, api_key=API_KEY) as chat:
            await chat.complete(ask)
    assert chat_server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    lines = [logging.Formatter().format(record) for record in caplog.records]
    assert any(chat_server.url.split("/v1")[0] in line for line in lines)  # the URL is logged
    assert [line for line in lines if API_KEY in line] == []
