"""How to reach one MCP server: a frozen value, checked, and recorded as JSON in the ledger.

A task records the servers its tools came from (``mcp:<name>`` among its components), so that
``pev resume`` and workers start them again. The record holds the configuration as it was
given: an ``env`` or ``headers`` value may name environment variables, ``${NAME}``, which are
read only when the server is opened, so that a credential stays out of the ledger. A value for
a key that names a credential (``Authorization``, ``API_KEY``...) must be written that way.

This module needs nothing of the SDK: the command line checks task files with it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from pev.engine._secret import looks_like_credential
from pev.errors import UsageError

__all__ = ["RECORD_PREFIX", "ServerConfig", "expand", "recorded_configs"]

RECORD_PREFIX = "mcp:"
"""A task's components key for a server is this prefix and the server's name."""

DEFAULT_CONNECT_TIMEOUT_S = 30.0

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_A_DAY_S = 24 * 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """One MCP server: how to start or reach it, and which of its tools to take.

    Attributes:
        name: What pev calls the server in errors and in the ledger (``mcp:<name>``).
        transport: ``stdio`` (a command pev starts) or ``http`` (streamable HTTP at ``url``).
        command: The program to start, for ``stdio``.
        args: Its arguments.
        env: Variables set for it, over the few the SDK passes on (``PATH``, ``HOME``...);
            ``${NAME}`` in a value is read from pev's environment when the server starts.
        cwd: The folder it starts in (``None``: this process's).
        url: The endpoint, for ``http``.
        headers: Sent with every request (``${NAME}`` read as for ``env``).
        prefix: Put before each tool's name, with ``_`` (``rooms_book``).
        tools: Only these tools of the server (by their names on the server); ``None``: all.
        timeout_s: How long one call may take; ``None``: the executor's ``node_timeout_s``.
        connect_timeout_s: How long starting or reaching the server, and listing its tools, may
            take.
        compensate: Action tool → the tool of the same server that undoes one of its effects
            (both by their names on the server): ``{"book_room": "cancel_booking"}``. The
            compensating tool is called with the args the action was sent with; see
            docs/mcp.md, "Compensation".
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    prefix: str | None = None
    tools: tuple[str, ...] | None = None
    timeout_s: float | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    compensate: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        what = f"MCP server {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise UsageError(
                f"MCP server name {self.name!r}: use 1 to 64 letters, digits, '_', '.' or '-' "
                "(it names the server in errors and in the ledger)"
            )
        if self.transport == "stdio":
            if not isinstance(self.command, str) or not self.command.strip():
                raise UsageError(f"{what}: command must name the program that starts the server")
        elif self.transport == "http":
            _check_url(self.url, what)
        else:
            raise UsageError(f"{what}: transport must be 'stdio' or 'http'")
        object.__setattr__(self, "args", _texts(self.args, f"{what}: args"))
        object.__setattr__(self, "env", _mapping(self.env, f"{what}: env"))
        object.__setattr__(self, "headers", _mapping(self.headers, f"{what}: headers"))
        if self.cwd is not None and (not isinstance(self.cwd, str) or not self.cwd):
            raise UsageError(f"{what}: cwd must be a folder's path")
        if self.prefix is not None and (
            not isinstance(self.prefix, str) or not _NAME.fullmatch(self.prefix)
        ):
            raise UsageError(
                f"{what}: prefix {self.prefix!r} must be 1 to 64 letters, digits, '_', '.' or '-'"
            )
        if self.tools is not None:
            names = _texts(self.tools, f"{what}: tools")
            if not names:
                raise UsageError(f"{what}: tools is empty; list the tools to take, or leave it out")
            object.__setattr__(self, "tools", names)
        _check_seconds(self.timeout_s, f"{what}: timeout_s", optional=True)
        _check_seconds(self.connect_timeout_s, f"{what}: connect_timeout_s", optional=False)
        object.__setattr__(self, "compensate", _compensations(self.compensate, self.tools, what))

    def record(self) -> str:
        """The JSON text the ledger keeps for this server (values as given, never expanded)."""
        data: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.transport == "stdio":
            data |= {"command": self.command, "args": list(self.args), "env": dict(self.env)}
            data["cwd"] = self.cwd
        else:
            data |= {"url": self.url, "headers": dict(self.headers)}
        data |= {
            "prefix": self.prefix,
            "tools": list(self.tools) if self.tools is not None else None,
            "timeout_s": self.timeout_s,
            "connect_timeout_s": self.connect_timeout_s,
        }
        if self.compensate:
            # Only when given: the records of servers without it read as they always did.
            data["compensate"] = dict(self.compensate)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_record(cls, text: str) -> ServerConfig:
        """The configuration a task recorded.

        Raises:
            UsageError: The record is not one this version of pev wrote.
        """
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError("not an object")  # noqa: TRY301 - reported as one below
            return cls(
                name=data["name"],
                transport=data["transport"],
                command=data.get("command", ""),
                args=tuple(data.get("args", ())),
                env=data.get("env") or {},
                cwd=data.get("cwd"),
                url=data.get("url", ""),
                headers=data.get("headers") or {},
                prefix=data.get("prefix"),
                tools=tuple(data["tools"]) if data.get("tools") is not None else None,
                timeout_s=data.get("timeout_s"),
                connect_timeout_s=data.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S),
                compensate=data.get("compensate") or {},
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise UsageError(
                f"a recorded MCP server cannot be read ({type(exc).__name__}: {exc}); it was "
                "written by another version of pev: pass tools=... to resume"
            ) from None

    def expanded_env(self) -> dict[str, str]:
        """``env`` with each ``${NAME}`` read from this process's environment."""
        return {
            key: expand(value, f"MCP server {self.name!r}: env {key}")
            for key, value in self.env.items()
        }

    def expanded_headers(self) -> dict[str, str]:
        """``headers`` with each ``${NAME}`` read from this process's environment."""
        return {
            key: expand(value, f"MCP server {self.name!r}: header {key}")
            for key, value in self.headers.items()
        }

    def where(self) -> str:
        """The command or URL, for messages (never a header or an environment value)."""
        if self.transport == "http":
            return self.url
        return " ".join([self.command, *self.args])


def expand(value: str, what: str) -> str:
    """``value`` with each ``${NAME}`` replaced by that environment variable's value.

    Raises:
        UsageError: A variable named is not set.
    """

    def value_of(match: re.Match[str]) -> str:
        found = os.environ.get(match[1])
        if found is None:
            raise UsageError(f"{what}: the environment variable {match[1]} is not set; set it")
        return found

    return _REFERENCE.sub(value_of, value)


def recorded_configs(components: Mapping[str, str]) -> tuple[ServerConfig, ...]:
    """The MCP servers a task's components record, in their order.

    Raises:
        UsageError: A record cannot be read.
    """
    return tuple(
        ServerConfig.from_record(text)
        for key, text in components.items()
        if key.startswith(RECORD_PREFIX)
    )


def default_name(transport: str, command: str, args: Iterable[str], url: str) -> str:
    """A name for a server given none: its script's or program's stem, or its URL's host."""
    if transport == "http":
        base = urlsplit(url).hostname or "server"
    else:
        scripts = [arg for arg in args if not arg.startswith("-")]
        base = Path(scripts[-1] if scripts else command).stem or "server"
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", base).lstrip("_.-")[:64]
    return cleaned or "server"


def _check_url(url: object, what: str) -> None:
    if not isinstance(url, str) or not url:
        raise UsageError(f"{what}: url must be the server's endpoint, such as http://host:8000/mcp")
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise UsageError(
            f"{what}: url {url!r} is not an http:// or https:// address with a host; give the "
            "server's endpoint, such as http://127.0.0.1:8000/mcp"
        )
    if parts.username or parts.password:
        raise UsageError(
            f"{what}: url carries credentials, which the ledger would keep; send them in a "
            'header instead: headers = {Authorization = "Bearer ${TOKEN}"}'
        )


def _texts(values: object, what: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise UsageError(f"{what} must be a list of strings, got {values!r}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str):
            raise UsageError(f"{what} must be a list of strings; {item!r} is not one")
    return items


def _mapping(values: object, what: str) -> Mapping[str, str]:
    if not isinstance(values, Mapping):
        raise UsageError(f"{what} must map names to strings, got {type(values).__name__}")
    checked: dict[str, str] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise UsageError(f"{what} must map names to strings; {key!r} = {value!r} does not")
        if looks_like_credential(key) and not _REFERENCE.search(value):
            raise UsageError(
                f"{what} {key}: write a credential as a reference to an environment variable, "
                f'such as "${{{_variable_for(key)}}}" (or "Bearer ${{TOKEN}}"), so that the '
                "ledger records its name, never its value"
            )
        checked[key] = value
    return MappingProxyType(checked)


def _compensations(values: object, taken: tuple[str, ...] | None, what: str) -> Mapping[str, str]:
    """``compensate`` checked as far as it can be without the server: names, and ``tools``.

    Whether both names are tools of the server, and the compensated one an action, is checked
    when the server is opened (``MCPServer``), which lists its tools.
    """
    if not isinstance(values, Mapping):
        raise UsageError(
            f"{what}: compensate must map an action tool to the tool that undoes it, such as "
            f'{{ book_room = "cancel_booking" }}; got {type(values).__name__}'
        )
    checked: dict[str, str] = {}
    for action, undo in values.items():
        if not isinstance(action, str) or not action or not isinstance(undo, str) or not undo:
            raise UsageError(
                f"{what}: compensate must map tool names to tool names; {action!r} = {undo!r} "
                "does not"
            )
        if action == undo:
            raise UsageError(
                f"{what}: compensate {action}: a tool cannot undo its own effect; name the "
                "server's tool that undoes it, or drop the entry"
            )
        if taken is not None and action not in taken:
            raise UsageError(
                f"{what}: compensate {action}: tools does not take {action!r}, so nothing would "
                "call it; add it to tools, or drop the entry"
            )
        checked[action] = undo
    return MappingProxyType(checked)


def _variable_for(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", key).upper()


def _check_seconds(value: object, what: str, *, optional: bool) -> None:
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= _A_DAY_S
    ):
        raise UsageError(
            f"{what} must be a positive number of seconds, at most a day; got {value!r}"
        )
