"""``MCPServer``: one session with an MCP server, open for a task's life, and its tools.

The SDK's client runs its transport in anyio task groups. So that a transport failing (a server
killed, a connection reset) can never cancel the caller's own task, the session lives in a task
of its own, which enters the SDK's client, lists the tools, and waits to be told to close; calls
are made from any task of the loop. ``async with`` opens and closes it, from the same task or
not.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO, cast

import jsonschema
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pev.engine import Tool
from pev.errors import ComponentError, UsageError
from pev.mcp._config import RECORD_PREFIX, ServerConfig, default_name
from pev.mcp._tools import build_tool

__all__ = ["MCPServer", "MCPUnavailable", "open_servers"]

log = logging.getLogger("pev.mcp")

# The most pages of tools/list read (a server whose cursor never ends cannot hang the open).
_MAX_PAGES = 100
# How long closing may take: the SDK's own stdio shutdown is bounded by about 6 seconds.
_CLOSE_TIMEOUT_S = 15.0


class MCPUnavailable(ComponentError):  # noqa: N818 - the documented public name
    """An MCP server could not be started or reached, or did not list its tools in time.

    Attributes:
        server: The server's name.
        where: Its command line or URL (never its headers or environment).
    """

    def __init__(self, message: str, *, server: str, where: str) -> None:
        super().__init__(message, role="tools")
        self.server = server
        self.where = where


class MCPServer:
    """An MCP server whose tools a task may call: open it with ``async with``.

    Build one with :meth:`stdio` (a command pev starts, talking over its stdin and stdout) or
    :meth:`http` (a streamable-HTTP endpoint). While it is open, :meth:`tools` gives its tools
    as pev tools to pass to :func:`pev.run`; it stays open for the task's life and is closed
    (a stdio server's process ended) when the block ends. An instance is opened once.

    Example::

        async with pev.mcp.MCPServer.stdio("python", args=["rooms.py"]) as rooms:
            result = await pev.run("book a room", planner=planner, tools=await rooms.tools())
    """

    def __init__(self, config: ServerConfig) -> None:
        """A server described by ``config``; see :meth:`stdio` and :meth:`http`."""
        self.config = config
        self.name = config.name
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lost: str | None = None
        self._closed = False

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | Path | None = None,
        name: str | None = None,
        prefix: str | None = None,
        tools: Iterable[str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        compensate: Mapping[str, str] | None = None,
    ) -> MCPServer:
        """A server pev starts as a process, talking MCP over its stdin and stdout.

        Args:
            command: The program (``"python"``, ``"npx"``, a path).
            args: Its arguments.
            env: Variables to set for it; it gets only these and the few the SDK passes on
                (``PATH``, ``HOME``, ``USER``, ``SHELL``, ``TERM``, ``LOGNAME``). ``${NAME}`` in a
                value is read from this process's environment when the server starts; a variable
                whose name says credential (``API_KEY``) must be given that way.
            cwd: The folder it starts in; default: this process's current folder.
            name: What pev calls it in errors and in the ledger; default: the script's stem.
            prefix: Put before each tool's name with ``_`` (``rooms_book``), to keep the tools
                of two servers apart.
            tools: Take only these of its tools (their names on the server).
            timeout_s: How long one call may take; default: the executor's ``node_timeout_s``.
            connect_timeout_s: How long starting it and listing its tools may take.
            compensate: Action tool → the tool of this server that undoes one of its effects,
                by their names on the server (``{"book_room": "cancel_booking"}``); the undoing
                tool is called with the args the action was sent with. Checked when the server
                is opened: both must be its tools, the first an action.

        Raises:
            UsageError: A value pev cannot use, naming it.
        """
        resolved = str(Path(cwd).resolve()) if cwd is not None else str(Path.cwd())
        listed = tuple(args) if not isinstance(args, str) else args
        return cls(
            ServerConfig(
                name=name or default_name("stdio", command, _strings(listed), ""),
                transport="stdio",
                command=command,
                args=listed,  # type: ignore[arg-type] # checked by ServerConfig
                env=env if env is not None else {},
                cwd=resolved,
                prefix=prefix,
                tools=_names(tools),
                timeout_s=timeout_s,
                connect_timeout_s=connect_timeout_s,
                compensate=compensate if compensate is not None else {},
            )
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        prefix: str | None = None,
        tools: Iterable[str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        compensate: Mapping[str, str] | None = None,
    ) -> MCPServer:
        """A server at a streamable-HTTP endpoint (``http://127.0.0.1:8000/mcp``).

        Args:
            url: The endpoint.
            headers: Sent with every request; write a credential as ``${NAME}``
                (``{"Authorization": "Bearer ${ROOMS_TOKEN}"}``), read from this process's
                environment when the server is opened, so that the ledger keeps only its name.
            name: What pev calls it; default: the URL's host.
            prefix: As for :meth:`stdio`.
            tools: As for :meth:`stdio`.
            timeout_s: As for :meth:`stdio`.
            connect_timeout_s: How long reaching it and listing its tools may take.
            compensate: As for :meth:`stdio`.

        Raises:
            UsageError: A value pev cannot use, naming it.
        """
        return cls(
            ServerConfig(
                name=name or default_name("http", "", (), url if isinstance(url, str) else ""),
                transport="http",
                url=url,
                headers=headers if headers is not None else {},
                prefix=prefix,
                tools=_names(tools),
                timeout_s=timeout_s,
                connect_timeout_s=connect_timeout_s,
                compensate=compensate if compensate is not None else {},
            )
        )

    @classmethod
    def from_record(cls, text: str) -> MCPServer:
        """A server as a task recorded it (``mcp:<name>`` among its components), to open again.

        Raises:
            UsageError: The record cannot be read.
        """
        return cls(ServerConfig.from_record(text))

    @property
    def record_key(self) -> str:
        """The key of this server among a task's components: ``mcp:<name>``."""
        return RECORD_PREFIX + self.name

    @property
    def broken(self) -> str | None:
        """Why the connection is known to be gone, or ``None`` while it may work."""
        if self._closed:
            return "the server was closed"
        return self._lost

    async def __aenter__(self) -> Self:
        """Start or reach the server within ``connect_timeout_s``; check ``compensate``.

        Raises:
            MCPUnavailable: It could not be started or reached, or did not answer in time.
            UsageError: This instance was opened before, an ``${NAME}`` is not set, or
                ``compensate`` names a tool the server lacks, or one that is read-only.
        """
        if self._owner is not None or self._closed:
            raise UsageError(
                f"MCP server {self.name!r} was opened before; an MCPServer is opened once: "
                "build another"
            )
        target = self._target()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(target, ready), name=f"pev-mcp-{self.name}")
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                self._client = await asyncio.shield(ready)
        except TimeoutError:
            await self._close(cancel=True)
            raise self._unavailable(
                f"did not answer within {self.config.connect_timeout_s:g} s "
                "(connect_timeout_s); check that it starts and speaks MCP"
            ) from None
        except BaseException:
            await self._close(cancel=True)
            raise
        if self.config.compensate:
            try:
                _compensations(self.name, await self._list(), self.config.compensate)
            except BaseException:
                await self._close(cancel=True)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the session; a stdio server's process is ended."""
        await self._close(cancel=False)

    async def tools(self) -> list[Tool[..., Any]]:
        """The server's tools as pev tools, listed now (only those ``tools`` names, if given).

        Raises:
            UsageError: The server is not open, or lacks a tool that ``tools`` or ``compensate``
                names, or ``compensate`` names a read-only tool.
            MCPUnavailable: The tools could not be listed, or one's schema is invalid.
        """
        listed = await self._list()
        undo = _compensations(self.name, listed, self.config.compensate)
        by_name = {tool.name: tool for tool in listed}
        wanted = self.config.tools
        if wanted is not None:
            missing = [name for name in wanted if name not in by_name]
            if missing:
                close = difflib.get_close_matches(missing[0], list(by_name), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise UsageError(
                    f"MCP server {self.name!r} has no tool {missing[0]!r}{hint} (it has: "
                    f"{', '.join(sorted(by_name)) or 'none'}); fix the tools list"
                )
            listed = [by_name[name] for name in wanted]
        built = []
        for tool in listed:
            try:
                built.append(
                    build_tool(
                        self,
                        tool,
                        prefix=self.config.prefix,
                        timeout_s=self.config.timeout_s,
                        source=(self.record_key, self.config.record()),
                        compensate=undo.get(tool.name),
                    )
                )
            except jsonschema.SchemaError as exc:
                raise self._unavailable(
                    f"lists tool {tool.name!r} with an input schema that is not valid JSON "
                    f"Schema ({exc.message})"
                ) from None
        return built

    async def call(
        self, name: str, arguments: dict[str, Any], meta: mcp_types.RequestParamsMeta | None
    ) -> mcp_types.CallToolResult:
        """Send one ``tools/call`` to the server (what each of its tools does).

        Raises:
            UsageError: The server is not open.
            MCPError: The server answered with an error, or the connection closed.
        """
        return await self._open_client().call_tool(name, arguments, meta=meta)

    def lost(self, reason: str) -> None:
        """Note that the connection broke: later calls fail at once, sending nothing."""
        if self._lost is None:
            log.warning("MCP server %r: connection lost (%s)", self.name, reason)
            self._lost = reason

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, {self.config.transport}: {self.config.where()!r})"

    # -- the session's own task ---------------------------------------------------------------

    def _target(self) -> Any:
        """What the SDK's client connects to; ``${NAME}`` references read now."""
        config = self.config
        if config.transport == "stdio":
            parameters = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=config.expanded_env(),
                cwd=config.cwd,
            )
            return stdio_client(parameters, errlog=_errlog())
        http = create_mcp_http_client(headers=config.expanded_headers())
        return streamable_http_client(config.url, http_client=http), http

    async def _own(self, target: Any, ready: asyncio.Future[Client]) -> None:
        """Hold the session: enter the client, hand it over, wait for the close, exit it."""
        http = None
        if isinstance(target, tuple):
            target, http = target
        stop = self._stop
        assert stop is not None  # noqa: S101 - set before this task starts
        try:
            if http is not None:
                async with http:
                    await self._session(Client(target), ready, stop)
            else:
                await self._session(Client(target), ready, stop)
        except Exception as exc:  # noqa: BLE001 - reported to the opener, or logged once open
            reason = _reason(exc)
            if not ready.done():
                ready.set_exception(self._unavailable(f"could not be started or reached: {reason}"))
            elif not stop.is_set():
                self.lost(reason)
        finally:
            if not ready.done():
                ready.cancel()

    async def _session(
        self, client: Client, ready: asyncio.Future[Client], stop: asyncio.Event
    ) -> None:
        async with client:
            if not ready.done():
                ready.set_result(client)
            await stop.wait()

    async def _list(self) -> list[mcp_types.Tool]:
        client = self._open_client()
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except TimeoutError:
            raise self._unavailable(
                f"did not list its tools within {self.config.connect_timeout_s:g} s "
                "(connect_timeout_s)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised, in one line
            raise self._unavailable(f"could not list its tools: {_reason(exc)}") from None
        return listed

    def _open_client(self) -> Client:
        if self._client is None or self._closed:
            raise UsageError(
                f"MCP server {self.name!r} is not open; use it inside `async with server:`"
            )
        return self._client

    async def _close(self, *, cancel: bool) -> None:
        owner, stop = self._owner, self._stop
        self._closed = True
        self._client = None
        if owner is None or stop is None:
            return
        stop.set()
        if cancel and not owner.done():
            owner.cancel()
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await asyncio.shield(owner)
        except TimeoutError:
            owner.cancel()
            log.warning("MCP server %r did not close within %g s", self.name, _CLOSE_TIMEOUT_S)
        except asyncio.CancelledError:
            if not owner.cancelled():
                raise  # this task is being cancelled, not the session's own
        except Exception:
            log.debug("MCP server %r: closing failed", self.name, exc_info=True)

    def _unavailable(self, problem: str) -> MCPUnavailable:
        config = self.config
        return MCPUnavailable(
            f"MCP server {self.name!r} ({config.transport}: {config.where()}) {problem}",
            server=self.name,
            where=config.where(),
        )


def _compensations(
    server: str, listed: Sequence[mcp_types.Tool], compensate: Mapping[str, str]
) -> Mapping[str, str]:
    """``compensate``, checked against the tools the server lists.

    Raises:
        UsageError: A name that is no tool of the server, or a read-only tool to compensate.
    """
    by_name = {tool.name: tool for tool in listed}
    for action, undo in compensate.items():
        for name in (action, undo):
            if name not in by_name:
                close = difflib.get_close_matches(name, list(by_name), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise UsageError(
                    f"MCP server {server!r}: compensate {action} = {undo!r} names {name!r}, "
                    f"which is no tool of the server ({hint}it has: "
                    f"{', '.join(sorted(by_name)) or 'none'}); name its tools, or drop the entry"
                )
        annotations = by_name[action].annotations
        if annotations is not None and annotations.read_only_hint is True:
            raise UsageError(
                f"MCP server {server!r}: compensate {action} = {undo!r}: {action!r} is read-only "
                "(readOnlyHint), a query with no effect to undo; compensate only its actions, "
                "or drop the entry"
            )
    return compensate


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's stderr.

    When that was replaced by something without a file descriptor (a test runner's capture),
    the original; without one, nowhere.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    # The SDK hands it to the process as its stderr, which takes a descriptor as well.
    return cast("TextIO", subprocess.DEVNULL)


def _reason(exc: BaseException) -> str:
    """The innermost real error of ``exc`` (anyio wraps them in groups), in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _strings(values: object) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        return ()
    return tuple(value for value in values if isinstance(value, str))


def _names(tools: Iterable[str] | None) -> tuple[str, ...] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        return (tools,)
    return tuple(tools)


@asynccontextmanager
async def open_servers(configs: Iterable[ServerConfig]) -> AsyncIterator[list[Tool[..., Any]]]:
    """Open each server in turn and give all their tools; close them all when the block ends.

    Raises:
        MCPUnavailable: A server could not be started or reached (those opened are closed).
        UsageError: A server lacks a tool its ``tools`` names, or an ``${NAME}`` is not set.
    """
    async with AsyncExitStack() as stack:
        tools: list[Tool[..., Any]] = []
        for config in configs:
            server = await stack.enter_async_context(MCPServer(config))
            tools.extend(await server.tools())
        yield tools
