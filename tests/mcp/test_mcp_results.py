"""What an MCP call's answer becomes, and how a call that got none ends, without a server."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from pev.errors import NotSent, UsageError
from pev.ledger import EffectStatus, TaskEffect
from pev.mcp import MCPServer
from pev.mcp._tools import Compensation, SchemaCheck, ToolCall, result_value
from pev.model import DeviceFailure, RecordId, Success, freeze_json


def _result(*blocks: Any, structured: Any = None, error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=list(blocks), structured_content=structured, is_error=error
    )


def _text(text: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(type="text", text=text)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        pytest.param(
            _result(_text("ignored"), structured={"rooms": ["301"]}),
            {"rooms": ["301"]},
            id="structured",
        ),
        pytest.param(_result(_text("all open")), "all open", id="one-text"),
        pytest.param(_result(_text("a"), _text("b")), ["a", "b"], id="texts"),
        pytest.param(_result(), None, id="nothing"),
        pytest.param(
            _result(mcp_types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")),
            [{"type": "image", "mime_type": "image/png", "base64_chars": 8}],
            id="image",
        ),
        pytest.param(
            _result(
                _text("see"),
                mcp_types.EmbeddedResource(
                    type="resource",
                    resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="hi"),
                ),
            ),
            ["see", {"type": "resource", "uri": "file:///a.txt", "text": "hi"}],
            id="text-resource",
        ),
        pytest.param(
            _result(
                mcp_types.EmbeddedResource(
                    type="resource",
                    resource=mcp_types.BlobResourceContents(
                        uri="file:///a.bin", blob="AAEC", mime_type="application/octet-stream"
                    ),
                )
            ),
            [
                {
                    "type": "resource",
                    "uri": "file:///a.bin",
                    "mime_type": "application/octet-stream",
                    "base64_chars": 4,
                }
            ],
            id="blob-resource",
        ),
        pytest.param(
            _result(mcp_types.ResourceLink(type="resource_link", uri="file:///r", name="r")),
            [{"type": "resource_link", "uri": "file:///r", "name": "r"}],
            id="resource-link",
        ),
    ],
)
def test_a_results_output_is_its_structured_content_else_its_blocks(
    result: mcp_types.CallToolResult, expected: object
) -> None:
    """Structured content first; text as strings; other blocks described without their bytes."""
    assert result_value(result) == expected


SCHEMA = {
    "type": "object",
    "properties": {
        "room": {"type": "string"},
        "slot": {
            "type": "object",
            "properties": {"minutes": {"type": "integer", "minimum": 15}},
            "required": ["minutes"],
        },
    },
    "required": ["room", "slot"],
    "additionalProperties": False,
}


def test_a_nested_error_names_its_path() -> None:
    """An error inside an argument names the path to it."""
    check = SchemaCheck(SCHEMA)
    problems = check(freeze_json({"room": "301", "slot": {"minutes": 5}}), frozenset())  # type: ignore[arg-type]
    assert problems == ["argument 'slot.minutes': 5 is less than the minimum of 15"]


def test_arguments_filled_later_are_neither_checked_nor_missing() -> None:
    """A $ref argument is left to dispatch; a missing one is still reported."""
    check = SchemaCheck(SCHEMA)
    assert check(freeze_json({"room": "301"}), frozenset({"slot"})) == []  # type: ignore[arg-type]
    assert check(freeze_json({"room": "301"}), frozenset()) == ["missing argument 'slot'"]  # type: ignore[arg-type]


class FakeSession:
    """A session whose call ends as the test says, and which notes what it was told."""

    name = "rooms"

    def __init__(
        self, outcome: BaseException | mcp_types.CallToolResult, broken: str | None = None
    ):
        self.outcome = outcome
        self.broken = broken
        self.losses: list[str] = []
        self.sent: list[dict[str, Any]] = []

    async def call(
        self, name: str, arguments: dict[str, Any], meta: mcp_types.RequestParamsMeta | None
    ) -> mcp_types.CallToolResult:
        self.sent.append(arguments)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def lost(self, reason: str) -> None:
        self.losses.append(reason)


def _call(session: FakeSession, *, action: bool) -> ToolCall:
    return ToolCall(session, "book", name="book", action=action, source=("mcp:rooms", "{}"))


async def test_a_call_after_the_connection_was_lost_is_not_sent() -> None:
    """Known before anything is written: NotSent, which an action may retry on."""
    session = FakeSession(_result(), broken="EOF")
    with pytest.raises(NotSent, match="the connection was lost earlier"):
        await _call(session, action=True)(room="301")
    assert session.sent == []


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(MCPError(mcp_types.CONNECTION_CLOSED, "closed"), id="connection-closed"),
        pytest.param(MCPError(mcp_types.REQUEST_TIMEOUT, "no answer"), id="request-timeout"),
        pytest.param(ConnectionResetError("reset by peer"), id="os-error"),
    ],
)
@pytest.mark.parametrize("action", [True, False], ids=["action", "query"])
async def test_a_call_that_got_no_answer_is_unknown_for_an_action(
    error: BaseException, action: bool
) -> None:
    """The request may have reached the server: unknown for an action, a failure for a query."""
    session = FakeSession(error)
    result = await _call(session, action=action)(room="301")
    assert isinstance(result, DeviceFailure)
    assert result.outcome_unknown is action
    assert "the connection broke" in result.error
    assert len(session.losses) == 1


@pytest.mark.parametrize("action", [True, False], ids=["action", "query"])
async def test_an_answer_that_cannot_be_read_is_unknown_for_an_action(action: bool) -> None:
    """A malformed answer: the tool may have run, so an action's outcome is unknown."""
    session = FakeSession(ValueError("not a CallToolResult"))
    result = await _call(session, action=action)(room="301")
    assert isinstance(result, DeviceFailure)
    assert result.outcome_unknown is action
    assert "no usable answer: ValueError" in result.error
    assert session.losses == []


async def test_an_error_the_server_answered_is_a_known_failure() -> None:
    """An MCP error answer (not a lost connection) means the tool did not run."""
    session = FakeSession(MCPError(-32602, "unknown tool"))
    result = await _call(session, action=True)(room="301")
    assert isinstance(result, DeviceFailure)
    assert not result.outcome_unknown
    assert result.error.endswith("failed: unknown tool (MCP error -32602)")


async def test_is_error_with_no_text_says_is_error() -> None:
    """isError with no text content still says why it failed."""
    result = await _call(FakeSession(_result(error=True)), action=True)(room="301")
    assert isinstance(result, DeviceFailure)
    assert result.error.endswith("failed: isError")


async def test_a_good_answer_is_a_success_of_its_output() -> None:
    """The answer's output, and the args sent as plain JSON."""
    session = FakeSession(_result(structured={"room": "301"}))
    result = await _call(session, action=True)(room="301", who={"name": "ann"})
    assert result == Success({"room": "301"})
    assert session.sent == [{"room": "301", "who": {"name": "ann"}}]


# --- a server's configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda: MCPServer.stdio(" "), "command must name the program", id="command"),
        pytest.param(lambda: MCPServer.stdio("python", name="a b"), "name 'a b'", id="name"),
        pytest.param(
            lambda: MCPServer.stdio("python", args="x.py"), "args must be a list", id="args-str"
        ),
        pytest.param(lambda: MCPServer.stdio("python", args=[1]), "1 is not one", id="args-item"),
        pytest.param(lambda: MCPServer.stdio("python", env={"A": 1}), "'A' = 1 does not", id="env"),
        pytest.param(lambda: MCPServer.stdio("python", env=[]), "must map names", id="env-list"),
        pytest.param(lambda: MCPServer.stdio("python", prefix="a/b"), "prefix 'a/b'", id="prefix"),
        pytest.param(lambda: MCPServer.stdio("python", tools=[]), "tools is empty", id="tools"),
        pytest.param(
            lambda: MCPServer.stdio("python", timeout_s=0), "timeout_s must be", id="timeout"
        ),
        pytest.param(
            lambda: MCPServer.stdio("python", connect_timeout_s=float("inf")),
            "connect_timeout_s must be",
            id="connect-timeout",
        ),
        pytest.param(lambda: MCPServer.http(""), "url must be the server's endpoint", id="no-url"),
        pytest.param(
            lambda: MCPServer.http("ftp://h/mcp"), "not an http:// or https://", id="scheme"
        ),
        pytest.param(
            lambda: MCPServer.http("http://u:p@h/mcp"), "url carries credentials", id="url-creds"
        ),
        pytest.param(
            lambda: MCPServer.http("http://h/mcp", headers={"X-Api-Key": "k"}),
            'write a credential as a reference to an environment variable, such as "${X_API_KEY}"',
            id="header-literal",
        ),
    ],
)
def test_a_bad_configuration_is_a_usage_error_that_names_the_field(make: Any, message: str) -> None:
    """Each bad value is refused when the server is described, naming what is wrong."""
    with pytest.raises(UsageError) as info:
        make()
    assert message in str(info.value)


def test_a_record_is_read_back_as_the_configuration_it_was() -> None:
    """What the ledger keeps opens the same server; a record another pev wrote is refused."""
    server = MCPServer.stdio(
        "python", args=["rooms.py"], env={"TOKEN": "${ROOMS_TOKEN}"}, prefix="r"
    )
    again = MCPServer.from_record(server.config.record())
    assert again.config == server.config
    http = MCPServer.http("https://rooms.example/mcp", headers={"Authorization": "Bearer ${T}"})
    assert MCPServer.from_record(http.config.record()).config == http.config
    assert http.name == "rooms.example"
    with pytest.raises(UsageError, match="written by another version of pev"):
        MCPServer.from_record('{"transport": "stdio"}')
    with pytest.raises(UsageError, match="written by another version of pev"):
        MCPServer.from_record("[1]")


# --- a compensation ------------------------------------------------------------------------------


def _effect(args: dict[str, Any] | None) -> TaskEffect:
    return TaskEffect(
        record_id=RecordId("1:book"),
        node_id="book",
        revision=1,
        tool="book",
        args=freeze_json(args) if args is not None else None,  # type: ignore[arg-type]
        args_digest="d",
        occurrence=1,
        key="t/book/d/1",
        status=EffectStatus.SUCCEEDED,
    )


def _undo(session: FakeSession) -> Compensation:
    return Compensation(session, "cancel", undoes="book")


async def test_a_compensation_sends_the_args_the_action_was_sent_with() -> None:
    """The compensating tool gets the effect's args, as plain JSON; its answer is a success."""
    session = FakeSession(_result(_text("cancelled")))
    result = await _undo(session)(_effect({"room": "301", "who": {"name": "ann"}}))
    assert result == Success("cancelled")
    assert session.sent == [{"room": "301", "who": {"name": "ann"}}]


@pytest.mark.parametrize(
    ("outcome", "unknown"),
    [
        pytest.param(_result(_text("not booked"), error=True), False, id="is-error"),
        pytest.param(MCPError(-32602, "unknown tool"), False, id="error-answer"),
        pytest.param(MCPError(mcp_types.CONNECTION_CLOSED, "closed"), True, id="connection"),
        pytest.param(ConnectionResetError("reset by peer"), True, id="os-error"),
    ],
)
async def test_a_compensation_that_fails_or_gets_no_answer(
    outcome: BaseException | mcp_types.CallToolResult, unknown: bool
) -> None:
    """An error answered is a failure (the effect stands); no answer leaves it unknown."""
    result = await _undo(FakeSession(outcome))(_effect({"room": "301"}))
    assert isinstance(result, DeviceFailure)
    assert result.outcome_unknown is unknown


async def test_a_compensation_needs_the_effects_args() -> None:
    """A record kept without its args cannot be undone by a tool that needs them."""
    with pytest.raises(ValueError, match="does not hold the args it was sent with"):
        await _undo(FakeSession(_result()))(_effect(None))
