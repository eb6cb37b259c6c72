"""An MCP server's tools as pev tools: effect, schema, checks, calls and results.

``readOnlyHint`` makes a ``query``; anything else is an ``action`` (the safe assumption). The
server's input schema is the tool's schema, checked with ``jsonschema`` at plan validation and
again before the call. A result's structured content is the node's output; without it, its
text (one block: the string; several: a list), other blocks as small descriptions (their bytes
are not kept). ``isError``, an error the server answers and a broken connection are failures;
for an action whose request may have reached the server before the connection broke, the
outcome is unknown, so it is never sent again. An action may name a tool of the same server that
undoes its effects (``compensate``): it is called with the effect's args, and answers the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol, cast

import jsonschema
import mcp_types
from mcp.shared.exceptions import MCPError

from pev._json import thaw_json
from pev.engine import Tool, current_node_context
from pev.errors import NotSent
from pev.ledger import TaskEffect
from pev.model import DeviceFailure, Effect, JsonValue, NodeResult, Success

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "Compensation",
    "SchemaCheck",
    "ToolCall",
    "build_tool",
    "call_tool",
    "result_value",
]

log = logging.getLogger("pev.mcp")

IDEMPOTENCY_META_KEY = "pev/idempotency_key"
"""The ``_meta`` key of each call that carries the node's idempotency key, for servers that
de-duplicate."""

# Codes of errors that say the request never reached the tool, or that no answer can come.
_NO_ANSWER = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT})


class Session(Protocol):
    """What a tool needs of its server's session (``MCPServer`` provides it)."""

    name: str

    @property
    def broken(self) -> str | None:
        """Why the connection is known to be gone, or ``None`` while it may work."""
        ...

    def call(
        self, name: str, arguments: dict[str, Any], meta: mcp_types.RequestParamsMeta | None
    ) -> Awaitable[mcp_types.CallToolResult]:
        """Send one ``tools/call``."""
        ...

    def lost(self, reason: str) -> None:
        """Note that the connection broke."""
        ...


class SchemaCheck:
    """Checks a node's args against a tool's JSON Schema, one problem per error.

    Args named in ``later`` are ``$ref`` references filled at dispatch: neither checked nor
    reported missing.
    """

    __slots__ = ("_properties", "_required", "_validator")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        self._validator = validator_class(schema)
        properties = schema.get("properties")
        self._properties: Mapping[str, Any] = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        self._required = (
            tuple(r for r in required if isinstance(r, str)) if isinstance(required, list) else ()
        )

    def __call__(self, args: Mapping[str, JsonValue], later: frozenset[str]) -> list[str]:
        """The problems of ``args``; an empty list when they fit."""
        plain = {name: thaw_json(value) for name, value in args.items() if name not in later}
        problems: list[str] = []
        for error in sorted(self._validator.iter_errors(plain), key=lambda e: list(e.path)):
            if error.validator == "required" and not error.path:
                missing = [n for n in self._required if n not in args and n not in later]
                problems.extend(f"missing argument {name!r}" for name in missing)
                continue
            if error.validator in {"additionalProperties", "unevaluatedProperties"} and later:
                extra = set(args) - set(self._properties) - later
                if not extra:
                    continue
            problems.append(_problem(error))
        return list(dict.fromkeys(problems))  # one line per problem, in order


def _problem(error: jsonschema.ValidationError) -> str:
    path = list(error.absolute_path)
    if not path:
        return str(error.message)
    where = ".".join(str(part) for part in path)
    return f"argument {where!r}: {error.message!s}"


class ToolCall:
    """The function behind one MCP tool: calls it on its server, returns a node result."""

    __slots__ = ("__name__", "__qualname__", "_action", "_remote", "_session", "recorded_source")

    def __init__(
        self, session: Session, remote: str, *, name: str, action: bool, source: tuple[str, str]
    ) -> None:
        self._session = session
        self._remote = remote
        self._action = action
        self.__name__ = self.__qualname__ = name
        # What the ledger records so that resume and workers open the server again.
        self.recorded_source = source

    async def __call__(self, **arguments: Any) -> NodeResult | JsonValue:
        """Call the tool with ``arguments`` (plain JSON) and turn its answer into a result."""
        return await call_tool(self._session, self._remote, arguments, action=self._action)


class Compensation:
    """The ``compensate`` of an MCP action: the server's tool that undoes one of its effects.

    Given the effect (a :class:`~pev.ledger.TaskEffect`), it calls the compensating tool with
    the args the action was sent with, carrying the compensation's own idempotency key in
    ``_meta``. An answer is as for any call: ``isError`` or an error the server answers is a
    failure (the effect is left in place); a broken connection leaves it unknown.
    """

    __slots__ = ("_remote", "_session", "undoes")

    def __init__(self, session: Session, remote: str, *, undoes: str) -> None:
        self._session = session
        self._remote = remote
        self.undoes = undoes

    async def __call__(self, effect: TaskEffect) -> NodeResult | JsonValue:
        """Undo ``effect`` with the compensating tool."""
        if effect.args is None:
            raise ValueError(
                f"record {effect.record_id} does not hold the args it was sent with, which MCP "
                f"tool {self._remote!r} of server {self._session.name!r} needs to undo it"
            )
        return await call_tool(self._session, self._remote, dict(effect.args), action=True)

    def __repr__(self) -> str:
        return f"Compensation({self._session.name!r}: {self._remote!r} undoes {self.undoes!r})"


async def call_tool(
    session: Session, remote: str, arguments: Mapping[str, Any], *, action: bool
) -> NodeResult | JsonValue:
    """Call MCP tool ``remote`` with ``arguments``; its answer as a node result.

    The call carries the current node's idempotency key in ``_meta``.

    Raises:
        NotSent: The connection was known to be lost before the call: nothing was sent.
    """
    where = f"MCP tool {remote!r} of server {session.name!r}"
    broken = session.broken
    if broken is not None:
        # Known before anything is written: nothing was sent.
        raise NotSent(f"{where} was not called: the connection was lost earlier ({broken})")
    plain = {key: thaw_json(value) for key, value in arguments.items()}
    try:
        result = await session.call(remote, plain, _meta())
    except MCPError as exc:
        if exc.code in _NO_ANSWER:
            session.lost(exc.message)
            return _broken(where, f"{exc.message} (MCP error {exc.code})", action=action)
        # The server answered with an error: the tool did not run.
        return DeviceFailure("", f"{where} failed: {exc.message} (MCP error {exc.code})")
    except OSError as exc:
        session.lost(f"{type(exc).__name__}: {exc}")
        return _broken(where, f"{type(exc).__name__}: {exc}", action=action)
    except Exception as exc:  # noqa: BLE001 - any other way the call ended without an answer
        # A malformed answer, say: the server may have run the tool, so what an action did is
        # unknown.
        return _broken(where, f"no usable answer: {type(exc).__name__}: {exc}", action=action)
    if result.is_error:
        return DeviceFailure("", f"{where} failed: {_text_of(result.content) or 'isError'}")
    return Success(result_value(result))


def _broken(where: str, why: str, *, action: bool) -> DeviceFailure:
    if action:
        return DeviceFailure(
            "",
            f"{where}: the connection broke during the call ({why}); the action may or may not "
            "have taken effect, so it is not sent again",
            outcome_unknown=True,
        )
    return DeviceFailure("", f"{where}: the connection broke ({why})")


def _meta() -> mcp_types.RequestParamsMeta | None:
    try:
        key = current_node_context().idempotency_key
    except LookupError:  # called outside a node (a test calling the tool directly)
        return None
    return cast("mcp_types.RequestParamsMeta", {IDEMPOTENCY_META_KEY: key})


def build_tool(
    session: Session,
    listed: mcp_types.Tool,
    *,
    prefix: str | None,
    timeout_s: float | None,
    source: tuple[str, str],
    compensate: str | None = None,
) -> Tool[..., Any]:
    """The pev tool for one tool a server listed.

    ``compensate`` names (on the server) the tool that undoes this action's effects.

    Raises:
        jsonschema.SchemaError: The server's input schema is not a valid JSON Schema.
    """
    annotations = listed.annotations
    read_only = annotations is not None and annotations.read_only_hint is True
    effect = Effect.QUERY if read_only else Effect.ACTION
    name = f"{prefix}_{listed.name}" if prefix else listed.name
    schema = dict(listed.input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    call = ToolCall(session, listed.name, name=name, action=effect is Effect.ACTION, source=source)
    return Tool(
        fn=call,
        name=name,
        effect=effect,
        timeout_s=timeout_s,
        description=(listed.description or "").strip(),
        input_schema=schema,
        check=SchemaCheck(schema),
        compensate=(
            Compensation(session, compensate, undoes=listed.name)
            if compensate is not None
            else None
        ),
    )


def result_value(result: mcp_types.CallToolResult) -> JsonValue:
    """A successful call's output, as the JSON the ledger keeps."""
    if result.structured_content is not None:
        return result.structured_content  # type: ignore[no-any-return]
    blocks = [_block(block) for block in result.content]
    if blocks and all(isinstance(block, str) for block in blocks):
        return blocks[0] if len(blocks) == 1 else blocks
    return blocks or None


def _block(block: mcp_types.ContentBlock) -> JsonValue:
    """A content block: text as a string; others described, without their bytes."""
    match block:
        case mcp_types.TextContent():
            return block.text
        case mcp_types.ImageContent() | mcp_types.AudioContent():
            return {
                "type": block.type,
                "mime_type": block.mime_type,
                "base64_chars": len(block.data),
            }
        case mcp_types.EmbeddedResource():
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                return {"type": "resource", "uri": str(resource.uri), "text": resource.text}
            return {
                "type": "resource",
                "uri": str(resource.uri),
                "mime_type": resource.mime_type,
                "base64_chars": len(resource.blob),
            }
        case mcp_types.ResourceLink():
            return {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        case _:
            return {"type": str(getattr(block, "type", "unknown"))}


def _text_of(content: Sequence[mcp_types.ContentBlock]) -> str:
    return " ".join(
        " ".join(block.text.split())
        for block in content
        if isinstance(block, mcp_types.TextContent)
    )[:2000]
