"""A secret's value never leaves a tool call: what the call raises or returns names it instead.

See docs/tools.md ("Secrets"). Each tool here is handed the secret and puts it where pev would
record it: an exception's message, its chained cause, its attributes, the returned value.
"""

from __future__ import annotations

import asyncio
import secrets
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Annotated, Any

import pytest
from tests.support.tools import context, node

import pev
from pev.engine import Secret, ToolExecutor, tool
from pev.engine._redact import RedactedError, Redactor
from pev.model import DeviceFailure, Success, VerifierFailure

ENV = "PEV_TEST_GATEWAY_TOKEN"
VALUE = f"gw-{secrets.token_hex(12)}"
MARKER = f"[secret {ENV}]"


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The secret, set in the environment under ENV."""
    monkeypatch.setenv(ENV, VALUE)
    return VALUE


def gateway(behave: Callable[[str], object]) -> pev.engine.Tool[..., Any]:
    """A tool named gateway that is handed the secret and does ``behave(token)``."""

    def call_gateway(token: str) -> object:
        """Call the payment gateway."""
        return behave(token)

    call_gateway.__annotations__["token"] = Annotated[str, Secret(ENV)]
    return tool(call_gateway, name="gateway")


async def run(item: pev.engine.Tool[..., Any]) -> object:
    """Run ``item`` through the executor, as the engine does."""
    return await ToolExecutor([item]).execute(node(item.name), context())


async def raised_by(item: pev.engine.Tool[..., Any]) -> Exception:
    """What calling ``item`` through its secret guard raised (as the executor would see it)."""
    kwargs: dict[str, object] = {}

    async def invoke() -> object:
        return item.fn(**kwargs)

    try:
        await item.call_with(kwargs, invoke)
    except Exception as exc:  # noqa: BLE001 - what it raised is the subject
        return exc
    raise AssertionError("the tool was expected to raise")


def refuse(token: str) -> None:
    """Fail the way a gateway client does that quotes its request."""
    raise PermissionError(f"gateway refused Authorization: Bearer {token}")


async def test_an_exception_message_holding_the_secret_names_it_instead() -> None:
    """The recorded error keeps the type and the message, with the value replaced by its name."""
    result = await run(gateway(refuse))
    assert isinstance(result, DeviceFailure)
    assert "PermissionError" in result.error
    assert f"gateway refused Authorization: Bearer {MARKER}" in result.error
    assert VALUE not in result.error


async def test_a_secret_escaped_by_repr_is_found_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyError shows its key as a repr, escaping quotes: that form is replaced as well."""
    quoted = VALUE + "'\\x"
    monkeypatch.setenv(ENV, quoted)

    def look_up(token: str) -> None:
        raise KeyError(token)

    result = await run(gateway(look_up))
    assert isinstance(result, DeviceFailure)
    assert MARKER in result.error
    assert VALUE not in result.error


async def test_the_exceptions_it_chains_to_are_redacted() -> None:
    """The cause and the context keep their types, with the value replaced in their messages."""

    def check(token: str) -> None:
        raise ValueError(f"bad token {token}")

    def wrap(token: str) -> None:
        try:
            check(token)
        except ValueError as exc:
            raise RuntimeError("the gateway call failed") from exc

    error = await raised_by(gateway(wrap))
    text = "".join(traceback.format_exception(error))
    assert isinstance(error.__cause__, ValueError)
    assert f"bad token {MARKER}" in text
    assert VALUE not in text


async def test_an_os_errors_file_name_is_redacted() -> None:
    """OSError keeps its file name outside args; it is redacted where it is."""

    def open_it(token: str) -> None:
        raise FileNotFoundError(2, "No such file", f"/run/keys/{token}")

    error = await raised_by(gateway(open_it))
    assert isinstance(error, FileNotFoundError)
    assert str(error) == f"[Errno 2] No such file: '/run/keys/{MARKER}'"


class Leaky(Exception):  # noqa: N818 - named for what it does in this test
    """An exception whose message comes from outside it, where redaction cannot reach."""

    held: list[str] = []  # noqa: RUF012 - the outside place

    def __str__(self) -> str:
        return f"token {self.held[0]} refused"


async def test_an_exception_that_cannot_be_redacted_in_place_is_replaced() -> None:
    """A RedactedError stands in: the original's type and message, redacted, and its frames."""

    def leak(token: str) -> None:
        Leaky.held[:] = [token]
        raise Leaky

    error = await raised_by(gateway(leak))
    assert isinstance(error, RedactedError)
    assert str(error) == f"Leaky: token {MARKER} refused"
    assert error.__cause__ is None
    assert error.__suppress_context__
    assert traceback.extract_tb(error.__traceback__)[-1].name == "leak"


async def test_a_returned_value_holding_the_secret_names_it_instead() -> None:
    """Strings in the returned JSON, keys included and at any place, are redacted."""

    def echo(token: str) -> object:
        return {"sent": f"Bearer {token}", token: [1, {"again": token}], "n": 3}

    result = await run(gateway(echo))
    assert result == Success({"sent": f"Bearer {MARKER}", MARKER: [1, {"again": MARKER}], "n": 3})


@pytest.mark.parametrize(
    "returned",
    [
        pytest.param(lambda t: DeviceFailure("", f"server said {t}"), id="device-failure"),
        pytest.param(lambda t: VerifierFailure("", f"echoed {t}"), id="verifier-failure"),
        pytest.param(lambda t: Success({"token": t}), id="success"),
    ],
)
async def test_a_returned_node_result_holding_the_secret_names_it_instead(
    returned: Callable[[str], object],
) -> None:
    """A result the tool builds itself is redacted field by field."""
    result = await run(gateway(returned))
    assert VALUE not in repr(result)
    assert MARKER in repr(result)


class Unreadable(Mapping[str, str]):
    """A mapping of the tool's own whose items cannot be read."""

    def __getitem__(self, key: str) -> str:
        raise RuntimeError("closed")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("closed")

    def __len__(self) -> int:
        return 1


async def test_a_returned_value_that_cannot_be_searched_is_not_recorded() -> None:
    """An action that ran and returned what cannot be read: unknown, and the value not kept."""
    result = await run(gateway(lambda token: Unreadable()))
    assert isinstance(result, DeviceFailure)
    assert result.outcome_unknown
    assert "could not be searched for its secrets (RuntimeError)" in result.error


def test_redaction_walks_any_depth_without_recursion() -> None:
    """A value nested far past the recursion limit is rewritten, not a RecursionError."""
    deep: object = VALUE
    for _ in range(20_000):
        deep = [deep]
    redacted = Redactor.of({VALUE: ENV}).value(deep)
    for _ in range(20_000):
        assert isinstance(redacted, list)
        redacted = redacted[0]
    assert redacted == MARKER


@pytest.mark.parametrize("signal", [KeyboardInterrupt, asyncio.CancelledError])
async def test_base_exceptions_pass_through_as_themselves(signal: type[BaseException]) -> None:
    """A KeyboardInterrupt or a cancellation is not a tool failure: the very object propagates."""
    raised = signal()

    async def interrupted() -> object:
        raise raised

    call: Callable[[], Awaitable[object]] = interrupted
    with pytest.raises(signal) as caught:
        await gateway(refuse).call_with({}, call)
    assert caught.value is raised
