"""An LLM key a provider's error echoes reaches no log line (docs/security.md).

The adapter masks the key in its own :class:`~pev.llm.LLMError`, which it raises from the SDK's
error; that cause, and what it chains to, still quote the server's answer. A real handler that
formats tracebacks prints the whole chain, so the key must come out as its name there too.
"""

from __future__ import annotations

import contextlib
import io
import logging
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

import pev
from pev.llm import LLMError, LLMPlanner, OpenAIChat

if TYPE_CHECKING:
    from conftest import ChatServer

KEY = f"sk-test-echoed-{secrets.token_hex(12)}"


@contextlib.contextmanager
def _logged() -> Iterator[io.StringIO]:
    """Every log line, formatted as a real handler does (chained tracebacks included)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    level, root.level = root.level, logging.DEBUG
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pev.tool
def noop() -> str:
    """Do nothing."""
    return "done"


async def test_a_key_echoed_by_the_provider_is_in_no_log_line(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's logged LLMError chains to the SDK's error: its key is printed as its name."""
    monkeypatch.setenv("PEV_LLM_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    echoed = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "auth"}}
    chat_server.fail(401, error=echoed)
    with _logged() as out:
        async with OpenAIChat("m", base_url=chat_server.url, max_retries=0) as chat:
            result = await pev.run("plan it", planner=LLMPlanner(chat), tools=[noop])
    text = out.getvalue()
    assert result.status == "failed"
    assert chat_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert "The above exception was the direct cause" in text  # the SDK's error is shown
    assert "Incorrect API key provided: [secret PEV_LLM_API_KEY]" in text
    assert KEY not in text


async def test_the_caught_error_still_chains_to_what_the_sdk_raised(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what is logged is redacted: the caller's exceptions are the SDK's, unchanged."""
    monkeypatch.setenv("PEV_LLM_API_KEY", KEY)
    chat_server.fail(401, error={"error": {"message": f"bad key {KEY}", "type": "auth"}})
    async with OpenAIChat("m", base_url=chat_server.url, max_retries=0) as chat:
        with pytest.raises(LLMError) as caught:
            await chat.complete(
                pev.llm.ChatRequest(messages=(pev.llm.ChatMessage(role="user", text="hi"),))
            )
    assert KEY not in str(caught.value)
    assert KEY in str(caught.value.__cause__)


async def test_a_key_given_as_api_key_is_in_no_log_line(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key passed to the adapter, not through the environment, is redacted the same way."""
    monkeypatch.delenv("PEV_LLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    given = f"sk-test-given-{secrets.token_hex(12)}"
    chat_server.fail(401, error={"error": {"message": f"Incorrect key: {given}", "type": "auth"}})
    with _logged() as out:
        async with OpenAIChat("m", base_url=chat_server.url, max_retries=0, api_key=given) as chat:
            result = await pev.run("plan it", planner=LLMPlanner(chat), tools=[noop])
    text = out.getvalue()
    assert result.status == "failed"
    assert "Incorrect key: [secret api_key]" in text
    assert given not in text
