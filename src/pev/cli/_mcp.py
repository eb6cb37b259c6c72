"""The MCP servers of a task, opened by the command line for the task's life (docs/mcp.md).

``pev run`` and ``pev submit`` open the servers a task file's ``[[mcp]]`` tables name; ``pev
resume`` and ``pev worker`` open those a task recorded (``mcp:<name>`` among its components).
The SDK is imported only for a task that has servers: without the ``mcp`` extra, such a task is
one line naming what to install.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pev.engine import Agent
from pev.engine._components import rebuild, recorded_tools
from pev.errors import UsageError
from pev.ledger import TaskState

if TYPE_CHECKING:
    from pev.mcp._config import ServerConfig

__all__ = ["open_recorded", "open_servers", "recorded_agent", "records_servers"]

_PREFIX = "mcp:"


def records_servers(components: Mapping[str, str]) -> bool:
    """Whether a task's components name MCP servers."""
    return any(key.startswith(_PREFIX) for key in components)


@asynccontextmanager
async def open_servers(configs: Iterable[ServerConfig]) -> AsyncIterator[list[Any]]:
    """The tools of ``configs``' servers, open until the block ends.

    Raises:
        UsageError: The extra is missing (naming it), or a server cannot be opened (an
            ``MCPUnavailable``, one line).
    """
    try:
        from pev.mcp._server import open_servers as opening  # noqa: PLC0415 - the mcp extra
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    async with opening(configs) as tools:
        yield tools


@asynccontextmanager
async def open_recorded(components: Mapping[str, str]) -> AsyncIterator[list[Any]]:
    """All the tools a task recorded: by path, and those of its MCP servers, open meanwhile.

    Raises:
        UsageError: As :func:`open_servers`, or a record that cannot be read.
        ComponentError: A tool path that cannot be rebuilt.
    """
    try:
        from pev.mcp._config import recorded_configs  # noqa: PLC0415 - the mcp extra
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    configs = recorded_configs(components)
    by_path = recorded_tools(components)
    async with open_servers(configs) as tools:
        yield [*by_path, *tools]


@asynccontextmanager
async def recorded_agent(state: TaskState) -> AsyncIterator[Agent]:
    """A worker's agent for a claimed task: its MCP servers open while it is driven."""
    components = state.created.components
    if not records_servers(components):
        yield rebuild(components, {})
        return
    async with open_recorded(components) as tools:
        yield rebuild(components, {"tools": tools})
