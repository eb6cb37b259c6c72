"""What pev logs holds no secret value, down the whole exception chain (docs/security.md).

pev logs a warning with the traceback of every exception a tool, planner, verifier, observer or
rail raises. A formatting handler prints the chained causes and contexts too, so a value quoted
by any link of the chain (its message, its args, its notes, a member of a group) must come out
as its marker there, while the exception objects the caller holds stay as they were.
"""

from __future__ import annotations

import ast
import io
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import pytest

import pev
from pev.engine import PlanRequest
from pev.engine._redact import (
    KEY_VARIABLES,
    LOGGERS,
    RedactedError,
    RedactingFilter,
    Redactor,
    remember,
)
from pev.testing import ScriptedPlanner

SRC = Path(__file__).resolve().parents[2] / "src" / "pev"
KEY = f"sk-test-chain-{secrets.token_hex(10)}"
ENV = "PEV_TEST_CHAIN_TOKEN"
VALUE = f"tok-chain-{secrets.token_hex(10)}"


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM key of the environment is a known value; the other key variable is unset."""
    monkeypatch.setenv("PEV_LLM_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@contextmanager
def formatted_logs() -> Iterator[io.StringIO]:
    """Every pev record of WARNING and up, formatted by a real handler, tracebacks included."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    pev_log = logging.getLogger("pev")
    pev_log.addHandler(handler)
    level, pev_log.level = pev_log.level, logging.WARNING
    try:
        yield out
    finally:
        pev_log.removeHandler(handler)
        pev_log.setLevel(level)


def _send_header() -> None:
    raise KeyError(f"header Authorization: Bearer {KEY}")


def _authenticate() -> None:
    try:
        _send_header()
    except KeyError:
        refused = PermissionError(401, f"Incorrect API key provided: {KEY}")
        refused.add_note(f"sent with key={KEY!r}")
        raise refused  # noqa: B904 - chained to the KeyError as its context, as SDKs do


def _request() -> None:
    try:
        _authenticate()
    except PermissionError as exc:
        raise ConnectionError("the model provider refused the request") from exc


def provider_error() -> ConnectionError:
    """An SDK's error: chained to a cause, itself with a context, each quoting the key."""
    try:
        _request()
    except ConnectionError as exc:
        return exc
    raise AssertionError("the request was expected to fail")


class RaisingPlanner:
    """A planner whose every call fails with :func:`provider_error`."""

    async def plan(self, request: PlanRequest) -> pev.Plan:
        """Raise the provider's error."""
        raise provider_error()


async def test_a_planners_chained_causes_log_no_key() -> None:
    """The key in the cause's message, args, notes and in its context is printed as its name."""
    with formatted_logs() as out:
        result = await pev.run("plan it", planner=RaisingPlanner(), tools=[fetch])
    text = out.getvalue()
    assert result.status == "failed"
    assert "the model provider refused the request" in text
    assert "The above exception was the direct cause" in text  # the chain is still shown
    assert "During handling of the above exception" in text
    assert "Incorrect API key provided: [secret PEV_LLM_API_KEY]" in text
    assert KEY not in text


def test_the_callers_exception_is_left_as_it_was() -> None:
    """Logging redacts a copy: the exception objects still quote what they quoted."""
    exc = provider_error()
    with formatted_logs() as out:
        logging.getLogger("pev.engine").warning("it failed", exc_info=exc)
    assert KEY not in out.getvalue()
    cause = exc.__cause__
    assert isinstance(cause, PermissionError)
    assert cause.args == (401, f"Incorrect API key provided: {KEY}")
    assert cause.__notes__ == [f"sent with key={KEY!r}"]
    assert KEY in str(cause.__context__)


def test_a_record_without_a_value_is_left_untouched() -> None:
    """Handlers that read the exception itself still get the original when nothing leaks."""
    exc = ValueError("nothing secret here")
    record = logging.LogRecord("pev.engine", logging.WARNING, __file__, 1, "m %s", ("a",), None)
    record.exc_info = (ValueError, exc, None)
    assert RedactingFilter().filter(record)
    assert record.exc_info[1] is exc
    assert (record.msg, record.args, record.exc_text) == ("m %s", ("a",), None)


def test_a_leaking_record_carries_a_redacted_stand_in() -> None:
    """For handlers that read ``exc_info``: a RedactedError, redacted, with nothing chained."""
    exc = provider_error()
    record = logging.LogRecord(
        "pev.engine", logging.WARNING, __file__, 1, "key %s", (KEY,), (type(exc), exc, None)
    )
    RedactingFilter().filter(record)
    assert record.getMessage() == "key [secret PEV_LLM_API_KEY]"
    assert record.exc_info is not None
    stand_in = record.exc_info[1]
    assert isinstance(stand_in, RedactedError)
    assert stand_in.__cause__ is None
    assert stand_in.__suppress_context__
    assert record.exc_text is not None
    assert KEY not in record.exc_text
    assert KEY not in logging.Formatter().format(record)


@pev.tool
def fetch(order: str, token: Annotated[str, pev.Secret(ENV)]) -> str:
    """Fetch the order with the token."""
    return f"order {order} fetched"


def _expired() -> NoReturn:
    raise LookupError(f"cached token {VALUE} expired")


FETCH = pev.Plan(
    "fetch the order", (pev.PlanNode("n1", "fetch", tool="fetch", args={"order": "o1"}),)
)


async def test_a_secret_a_tool_read_is_redacted_from_a_later_components_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a tool has read a secret, no component's logged chain shows the value."""
    monkeypatch.setenv(ENV, VALUE)

    class Rejecting:
        async def verify(self, request: object) -> NoReturn:
            try:
                _expired()
            except LookupError:
                raise OSError(5, f"verifier saw {VALUE}")  # noqa: B904 - the context is the point

    with formatted_logs() as out:
        await pev.run(
            "fetch the order",
            planner=ScriptedPlanner(FETCH),
            tools=[fetch],
            verifier=Rejecting(),
            contract=pev.VerificationContract(goal="fetched", success_criteria=["fetched"]),
        )
    text = out.getvalue()
    assert f"cached token [secret {ENV}] expired" in text  # the context
    assert f"verifier saw [secret {ENV}]" in text
    assert VALUE not in text


class _SlottedError(Exception):
    """An exception whose text lives outside ``args`` and ``__dict__``: it cannot be scrubbed."""

    __slots__ = ("said",)

    def __init__(self, said: str) -> None:
        super().__init__()
        self.said = said

    def __str__(self) -> str:
        return self.said


def test_a_group_member_that_cannot_be_scrubbed_replaces_the_group() -> None:
    """A tool's exception group with a leaking member is recorded as a RedactedError."""
    redactor = Redactor.of({VALUE: ENV})
    group = ExceptionGroup("two failures", [ValueError("fine"), _SlottedError(f"quoted {VALUE}")])
    redacted = redactor.exception(group)
    assert isinstance(redacted, RedactedError)
    assert VALUE not in "".join(logging.Formatter().formatException((None, redacted, None)))  # type: ignore[arg-type]


def test_a_remembered_value_is_redacted_from_a_group_member_in_the_logs() -> None:
    """The log filter searches the members of exception groups too."""
    remember(Redactor.of({VALUE: ENV}))
    group = ExceptionGroup("two failures", [ValueError("fine"), _SlottedError(f"quoted {VALUE}")])
    with formatted_logs() as out:
        logging.getLogger("pev.rails").error("a rail failed", exc_info=group)
    assert f"quoted [secret {ENV}]" in out.getvalue()
    assert VALUE not in out.getvalue()


def test_the_key_variables_are_the_llm_adapters() -> None:
    """The variables the filter reads are those the LLM adapter takes its key from."""
    source = (SRC / "llm" / "openai.py").read_text(encoding="utf-8")
    for name in KEY_VARIABLES:
        assert f'os.environ.get("{name}")' in source


def _logger_names() -> set[str]:
    """Every logger name pev's source asks for: string literals and modules' ``__name__``."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        module = ".".join(("pev", *path.relative_to(SRC).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
            ):
                continue
            [argument, *_] = node.args
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
            elif isinstance(argument, ast.Name) and argument.id == "__name__":
                names.add(module.removesuffix(".__init__"))
    return names


def test_every_logger_pev_uses_redacts() -> None:
    """Each logger named in pev's source has the filter (a logger's filter misses its children)."""
    names = _logger_names()
    assert {"pev.engine", "pev.rails", "pev.llm.openai"} <= names
    assert names <= set(LOGGERS), f"add {sorted(names - set(LOGGERS))} to LOGGERS"
    for name in LOGGERS:
        filters = logging.getLogger(name).filters
        assert any(isinstance(f, RedactingFilter) for f in filters), name
