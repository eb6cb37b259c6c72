"""An MCPServer's life: opened once, used while open, closed after; a server that never answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pev.mcp
from pev.errors import UsageError

pytestmark = pytest.mark.timeout(30)

SERVER = Path(__file__).with_name("rooms_server.py")


def _rooms(**options: object) -> pev.mcp.MCPServer:
    return pev.mcp.MCPServer.stdio(sys.executable, args=[str(SERVER)], **options)  # type: ignore[arg-type]


async def test_a_server_is_opened_once_and_used_only_while_open() -> None:
    """Its tools list inside the block; outside it, or opened again, a UsageError says why."""
    server = _rooms(tools=["free_rooms"])
    assert repr(server) == f"MCPServer('rooms_server', stdio: '{sys.executable} {SERVER}')"
    with pytest.raises(UsageError, match="is not open; use it inside `async with server:`"):
        await server.tools()
    async with server:
        assert server.broken is None
        assert [tool.name for tool in await server.tools()] == ["free_rooms"]
    assert server.broken == "the server was closed"
    with pytest.raises(UsageError, match="is not open"):
        await server.tools()
    with pytest.raises(UsageError, match="was opened before; an MCPServer is opened once"):
        async with server:
            pass


async def test_a_server_that_never_answers_is_unavailable_after_connect_timeout() -> None:
    """A program that starts but never speaks MCP: MCPUnavailable within connect_timeout_s."""
    silent = pev.mcp.MCPServer.stdio(
        sys.executable, args=["-c", "import time; time.sleep(60)"], connect_timeout_s=1.0
    )
    with pytest.raises(pev.mcp.MCPUnavailable, match=r"did not answer within 1 s"):
        async with silent:
            pass


async def test_an_env_reference_that_is_not_set_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """${NAME} is read when the server opens: unset, the error names the variable."""
    monkeypatch.delenv("PEV_TEST_UNSET_TOKEN", raising=False)
    server = _rooms(env={"ROOMS_TOKEN": "${PEV_TEST_UNSET_TOKEN}"})
    with pytest.raises(UsageError, match="PEV_TEST_UNSET_TOKEN is not set"):
        async with server:
            pass
