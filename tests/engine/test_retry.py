"""Retries, a tool's own policy (docs/design.md §6.2, docs/tools.md "Retries").

A query is called again on the exceptions its ``Retry`` lists; an action only on ``NotSent``;
the node's timeout is never retried; the waits stay within the node's deadline; and every
attempt is written to the ledger with the node's result and shown by ``pev show``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pytest
from click.testing import CliRunner
from tests.support.tools import context, node

import pev
from pev.cli import cli
from pev.codec import dumps_jcs, loads
from pev.engine import Secret, Tool, ToolExecutor, current_node_context, tool
from pev.engine._retry import AttemptLog
from pev.errors import NotSent, UsageError
from pev.ledger import ChainReport, Ledger, TaskState
from pev.model import (
    Attempt,
    DeviceFailure,
    Effect,
    Plan,
    PlanNode,
    RecordStatus,
    Success,
)
from pev.testing import ScriptedPlanner

if TYPE_CHECKING:
    from conftest import Engine

# Waits too short to matter.
QUICK: dict[str, Any] = {"wait_initial": 0.001, "wait_max": 0.01, "wait_jitter": 0.001}


class Flaky:
    """Fails ``failures`` times with ``error``, then returns ``"ok"``; counts every call."""

    def __init__(self, failures: int, error: Callable[[int], Exception]) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(self.calls)
        return "ok"


def flaky_tool(flaky: Flaky, *, is_async: bool, **options: Any) -> Tool[..., Any]:
    """A tool named ``fetch`` calling ``flaky``: a sync function, or an async one."""
    if is_async:

        async def fetch() -> str:
            await asyncio.sleep(0)
            return flaky()

        return tool(fetch, **options)

    def fetch_sync() -> str:
        return flaky()

    return tool(fetch_sync, name="fetch", **options)


async def execute(item: Tool[..., Any], *, effect: Effect | None = None) -> object:
    """Run ``item`` as node n1 through a ToolExecutor, as the engine does."""
    target = node(item.name)
    if effect is not None:
        target = dataclasses.replace(target, effect=effect)
    return await ToolExecutor([item]).execute(target, context())


def unavailable(call: int) -> Exception:
    return ConnectionError(f"503 Service Unavailable (call {call})")


# --- queries ----------------------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_query_retries_a_listed_exception_and_succeeds_on_the_third_attempt(
    is_async: bool,
) -> None:
    """Two 503s, then an answer: the node succeeds, and its result lists the three attempts."""
    flaky = Flaky(2, unavailable)
    item = flaky_tool(
        flaky,
        is_async=is_async,
        effect="query",
        retry=pev.Retry(attempts=3, on=(ConnectionError,), **QUICK),
    )

    result = await execute(item)

    assert result == Success("ok")
    assert flaky.calls == 3
    assert isinstance(result, Success)
    assert [a.number for a in result.attempts] == [1, 2, 3]
    first, second, third = result.attempts
    assert first.error is not None
    assert first.error.startswith("ConnectionError: 503 Service Unavailable (call 1)")
    assert second.error is not None
    assert "(call 2)" in second.error
    assert third.error is None
    assert first.wait_s > 0
    assert second.wait_s > 0
    assert third.wait_s == 0
    assert 0 == first.started_s <= second.started_s <= third.started_s


async def test_each_attempt_tried_again_is_a_warning_on_the_pev_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """pev says nothing on its own, but a logging application sees each retry and its wait."""
    flaky = Flaky(1, unavailable)
    item = flaky_tool(
        flaky, is_async=True, effect="query", retry=pev.Retry(on=ConnectionError, **QUICK)
    )
    with caplog.at_level(logging.WARNING, logger="pev"):
        assert await execute(item) == Success("ok")
    [retried] = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert "tool 'fetch' of node 'n1': attempt 1 of 3 failed (ConnectionError: 503" in retried
    assert retried.endswith(" s")


async def test_the_last_failure_is_kept_when_the_attempts_run_out() -> None:
    """Three 503s out of three attempts: the node fails with the third, as a plain failure."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky, is_async=True, effect="query", retry=pev.Retry(on=ConnectionError, **QUICK)
    )

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert flaky.calls == 3
    assert "(call 3)" in result.error
    assert not result.outcome_unknown
    assert len(result.attempts) == 3
    assert all(attempt.error is not None for attempt in result.attempts)
    assert result.attempts[-1].error == result.error
    # Where the failure happened is the tool's own code, not the retry machinery's.
    assert "test_retry.py" in result.error


async def test_a_query_does_not_retry_an_exception_it_does_not_list() -> None:
    """A ValueError under on=(ConnectionError,): one call, no attempts recorded."""
    flaky = Flaky(5, lambda call: ValueError("bad id"))
    item = flaky_tool(
        flaky, is_async=True, effect="query", retry=pev.Retry(on=(ConnectionError,), **QUICK)
    )

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert flaky.calls == 1
    assert result.attempts == ()


async def test_a_query_retries_any_exception_by_default() -> None:
    """Retry() on a query: any Exception is retried."""
    flaky = Flaky(2, lambda call: RuntimeError("HTTP 503"))
    item = flaky_tool(flaky, is_async=True, effect="query", retry=pev.Retry(**QUICK))

    assert await execute(item) == Success("ok")
    assert flaky.calls == 3


async def test_a_call_that_succeeds_at_once_records_no_attempts() -> None:
    """One attempt is the record itself: the result is exactly what it was without retries."""
    flaky = Flaky(0, unavailable)
    item = flaky_tool(flaky, is_async=False, effect="query", retry=pev.Retry(**QUICK))

    result = await execute(item)

    assert isinstance(result, Success)
    assert result.attempts == ()
    assert dumps_jcs(result) == '{"kind":"success","value":"ok"}'


async def test_a_cancelled_task_does_not_retry() -> None:
    """A call that fails after the task's cancel signal is set is not made again."""
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        current_node_context().cancelled.set()
        raise ConnectionError("503")

    result = await execute(tool(fetch, effect="query", retry=pev.Retry(**QUICK)))

    assert isinstance(result, DeviceFailure)
    assert calls == 1


# --- actions: only NotSent, never twice ---------------------------------------------------------


def sender(log: Path, *, refusals: int, error: type[Exception] = NotSent) -> Tool[..., Any]:
    """An action that refuses ``refusals`` times before sending, then appends a line to ``log``.

    With ``error=NotSent`` it refuses before anything leaves; with another error it has sent
    (appended its line) before failing, as a connection that drops after the request does.
    """
    calls = 0

    def send(text: str) -> str:
        nonlocal calls
        calls += 1
        if error is not NotSent:
            with log.open("a") as out:
                out.write(f"{text}\n")
            raise error("the connection dropped after the request")
        if calls <= refusals:
            raise NotSent(f"rate limited before sending (call {calls})")
        with log.open("a") as out:
            out.write(f"{text}\n")
        return "sent"

    return tool(send, effect="action", retry=pev.Retry(attempts=3, **QUICK))


def sent(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_an_action_is_retried_on_not_sent_and_sends_once(tmp_path: Path) -> None:
    """Refused twice with NotSent, sent on the third attempt: one line in the tool's own log."""
    log = tmp_path / "sent.log"
    item = sender(log, refusals=2)

    result = await ToolExecutor([item]).execute(node("send", text="hello"), context())

    assert result == Success("sent")
    assert sent(log) == ["hello"]
    assert isinstance(result, Success)
    assert [a.error is not None and "NotSent" in a.error for a in result.attempts] == [
        True,
        True,
        False,
    ]


async def test_an_action_raising_connection_error_is_not_retried(tmp_path: Path) -> None:
    """A ConnectionError from an action may come after the request left: it is never resent."""
    log = tmp_path / "sent.log"
    item = sender(log, refusals=0, error=ConnectionError)

    result = await ToolExecutor([item]).execute(node("send", text="hello"), context())

    assert isinstance(result, DeviceFailure)
    assert sent(log) == ["hello"]
    assert result.attempts == ()


async def test_a_query_tool_in_an_action_node_retries_only_on_not_sent() -> None:
    """A node that makes a query tool's call an action drops the other exceptions listed."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky, is_async=True, effect="query", retry=pev.Retry(on=(ConnectionError,), **QUICK)
    )

    result = await execute(item, effect=Effect.ACTION)

    assert isinstance(result, DeviceFailure)
    assert flaky.calls == 1


async def test_not_sent_after_the_last_attempt_is_a_known_failure(tmp_path: Path) -> None:
    """Refused on every attempt: the node fails, and its outcome is known (nothing was sent)."""
    log = tmp_path / "sent.log"
    item = sender(log, refusals=10)

    result = await ToolExecutor([item]).execute(node("send", text="hello"), context())

    assert isinstance(result, DeviceFailure)
    assert not result.outcome_unknown
    assert not result.is_timeout
    assert len(result.attempts) == 3
    assert sent(log) == []


async def test_not_sent_without_a_retry_policy_fails_the_record_not_unknown(
    engine: Engine,
) -> None:
    """NotSent from an action with no policy: a ``failed`` record, never ``unknown``."""

    async def send() -> str:
        raise NotSent("the gateway refused the connection")

    result = await engine.run(
        "send it",
        planner=ScriptedPlanner(Plan("send", (PlanNode("send", "send it", tool="send"),))),
        tools=[tool(send)],
    )

    assert not result.ok
    state = await engine.state(result.task_id)
    [record] = state.records.values()
    assert record.status is RecordStatus.FAILED
    failure = state.results[record.id]
    assert isinstance(failure, DeviceFailure)
    assert not failure.outcome_unknown
    assert "NotSent: the gateway refused the connection" in failure.error


# --- definition -------------------------------------------------------------------------------


def test_an_action_listing_other_exceptions_is_refused_when_defined() -> None:
    """Retry(on=ConnectionError) on an action: a UsageError that names it and the way out."""

    def send() -> None:
        """Send."""

    with pytest.raises(UsageError, match=r"'send' is an action.*ConnectionError.*NotSent"):
        tool(send, retry=pev.Retry(on=(NotSent, ConnectionError)))


def test_an_action_may_list_not_sent_and_its_subclasses() -> None:
    """NotSent, or a subclass of it, is what an action may retry on."""

    class RateLimited(NotSent):
        """Refused by the rate limiter before sending."""

    def send() -> None:
        """Send."""

    assert tool(send, retry=pev.Retry(on=RateLimited)).retry == pev.Retry(on=(RateLimited,))


def test_a_retry_that_is_not_a_retry_is_refused() -> None:
    """retry=3 is a UsageError that shows how to write it."""

    def fetch() -> None:
        """Fetch."""

    with pytest.raises(UsageError, match=r"retry must be a pev\.Retry"):
        tool(fetch, effect="query", retry=3)  # type: ignore[call-overload]


# --- timeouts and deadlines ---------------------------------------------------------------------


@pytest.mark.parametrize("effect", ["query", "action"])
async def test_the_timeout_is_never_retried(effect: Literal["query", "action"]) -> None:
    """A call cut short by its timeout is not made again; an action's outcome stays unknown."""
    calls = 0

    async def hang() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(10)
        return "late"

    item = tool(hang, effect=effect, timeout_s=0.05, retry=pev.Retry(attempts=5, **QUICK))

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert result.is_timeout
    assert result.outcome_unknown is (effect == "action")
    assert calls == 1
    assert result.attempts == ()


async def test_a_wait_that_would_pass_the_timeout_is_not_taken() -> None:
    """The first wait is longer than the whole timeout: one attempt, and its error is kept."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky,
        is_async=True,
        effect="query",
        timeout_s=5.0,
        retry=pev.Retry(attempts=10, wait_initial=30.0, wait_max=60.0),
    )

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert not result.is_timeout
    assert "(call 1)" in result.error
    assert flaky.calls == 1


async def test_retries_stop_before_the_wait_that_would_pass_the_deadline() -> None:
    """A short first wait fits the timeout, the second (10 s) does not: two attempts, last kept."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky,
        is_async=True,
        effect="query",
        timeout_s=5.0,
        retry=pev.Retry(
            attempts=10, wait_initial=0.001, wait_exp_base=10_000, wait_max=60.0, wait_jitter=0
        ),
    )

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert not result.is_timeout
    assert flaky.calls == 2
    assert "(call 2)" in result.error
    assert [a.number for a in result.attempts] == [1, 2]


async def test_the_node_deadline_bounds_the_waits_too() -> None:
    """The node's deadline, not only the tool's timeout, stops the retries."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky,
        is_async=True,
        effect="query",
        retry=pev.Retry(attempts=10, wait_initial=30.0, wait_max=60.0),
    )
    deadline = asyncio.get_running_loop().time() + 5.0

    result = await ToolExecutor([item]).execute(node("fetch"), context(deadline=deadline))

    assert isinstance(result, DeviceFailure)
    assert not result.is_timeout
    assert flaky.calls == 1


async def test_the_policys_own_timeout_bounds_the_waits() -> None:
    """Retry(timeout=...) stops the attempts as the node's deadline does."""
    flaky = Flaky(5, unavailable)
    item = flaky_tool(
        flaky,
        is_async=True,
        effect="query",
        retry=pev.Retry(attempts=10, wait_initial=30.0, wait_max=60.0, timeout=5.0),
    )

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert flaky.calls == 1


# --- secrets ----------------------------------------------------------------------------------

ENV = "PEV_TEST_RETRY_TOKEN"
TOKEN = "tok-retry-5f2c9e"  # noqa: S105 - a made-up value the test looks for


async def test_each_attempts_error_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret quoted by a retried error is named, not shown, in every attempt."""
    monkeypatch.setenv(ENV, TOKEN)
    calls = 0

    def fetch(token: str) -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError(f"503 for Bearer {token}")
        return "ok"

    fetch.__annotations__["token"] = Annotated[str, Secret(ENV)]
    item = tool(fetch, effect="query", retry=pev.Retry(**QUICK))

    result = await execute(item)

    assert isinstance(result, Success)
    errors = [a.error for a in result.attempts if a.error is not None]
    assert len(errors) == 2
    assert all(f"[secret {ENV}]" in error and TOKEN not in error for error in errors)


async def test_a_missing_secret_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """pev's own refusal before the call fails alike each time: one try, whatever ``on`` says."""
    monkeypatch.delenv(ENV, raising=False)
    calls = 0

    def fetch(token: str) -> str:
        nonlocal calls
        calls += 1
        return "ok"

    fetch.__annotations__["token"] = Annotated[str, Secret(ENV)]
    item = tool(fetch, effect="query", retry=pev.Retry(on=Exception, **QUICK))

    result = await execute(item)

    assert isinstance(result, DeviceFailure)
    assert ENV in result.error
    assert calls == 0
    assert result.attempts == ()


# --- the ledger and pev show --------------------------------------------------------------------


def test_attempts_are_in_the_ledger_and_in_pev_show(tmp_path: Path) -> None:
    """Each attempt's error and times are read back from the store, and ``pev show`` lists them."""
    db = tmp_path / "ledger.db"
    flaky = Flaky(2, unavailable)
    item = flaky_tool(flaky, is_async=True, effect="query", retry=pev.Retry(**QUICK))

    async def run() -> str:
        store = pev.SQLiteStore(db)
        try:
            result = await pev.run(
                "fetch the forecast",
                planner=ScriptedPlanner(
                    Plan("fetch", (PlanNode("get", "fetch it", tool="fetch"),))
                ),
                tools=[item],
                store=store,
            )
        finally:
            await store.close()
        assert result.ok
        return result.task_id

    async def read(task_id: str) -> tuple[TaskState, ChainReport]:
        store = pev.SQLiteStore(db)  # a fresh store: what is read back is what was written
        try:
            ledger = Ledger(store)
            return await ledger.state(task_id), await ledger.verify(task_id)
        finally:
            await store.close()

    task_id = asyncio.run(run())
    state, report = asyncio.run(read(task_id))

    assert report.ok, report.problem
    [record] = state.records.values()
    assert record.status is RecordStatus.SUCCEEDED
    attempts = state.results[record.id].attempts
    assert [a.number for a in attempts] == [1, 2, 3]
    assert [a.error is not None and "503 Service Unavailable" in a.error for a in attempts] == [
        True,
        True,
        False,
    ]

    shown = CliRunner().invoke(cli, ["--db", str(db), "show", task_id], catch_exceptions=False)
    assert shown.exit_code == 0
    words = " ".join(shown.output.split())
    assert "attempts of get (fetch):" in words
    assert "attempt 1 at +0.000 s" in words
    assert "ConnectionError: 503 Service Unavailable (call 1)" in words
    assert "(call 2)" in words
    assert "then waited" in words
    assert "succeeded" in words


def test_a_call_cut_short_while_waiting_ends_with_the_attempt_that_failed() -> None:
    """The log of a call timed out between attempts: its last attempt gets the wait so far."""
    log = AttemptLog()
    log.start(10.0)
    log.failed(10.5, "ConnectionError: 503")
    assert log.waiting

    [only] = log.attempts(12.0, "timed out")

    assert only == Attempt(
        number=1, started_s=0.0, duration_s=0.5, error="ConnectionError: 503", wait_s=1.5
    )


def test_a_single_attempt_is_no_attempts() -> None:
    """A call made once has nothing to list: the record is that attempt."""
    log = AttemptLog()
    log.start(1.0)
    assert log.attempts(2.0, "boom") == ()


def test_a_result_without_attempts_encodes_as_before() -> None:
    """Results written before retries existed keep their exact text (and so their hashes)."""
    failure = DeviceFailure("n1", "boom", is_timeout=True)
    assert dumps_jcs(failure) == (
        '{"error":"boom","is_timeout":true,"kind":"device_failure","node_id":"n1",'
        '"outcome_unknown":false}'
    )


def test_attempts_round_trip_through_the_codec() -> None:
    """A result with attempts decodes to the same attempts."""
    attempts = (
        Attempt(number=1, started_s=0.0, duration_s=0.25, error="ConnectionError: 503", wait_s=0.1),
        Attempt(number=2, started_s=0.35, duration_s=0.5),
    )
    text = dumps_jcs(Success({"temp": 21}, attempts=attempts))
    assert loads(text, Success).attempts == attempts


# --- Retry and NotSent values ---------------------------------------------------------------


def test_retry_defaults() -> None:
    """Three attempts, exponential backoff with a short jitter, the default exceptions by effect."""
    retry = pev.Retry()
    assert (retry.attempts, retry.on, retry.timeout) == (3, None, None)
    assert (retry.wait_initial, retry.wait_max, retry.wait_jitter, retry.wait_exp_base) == (
        0.1,
        5.0,
        0.1,
        2.0,
    )


def test_retry_is_frozen_and_its_repr_names_the_exceptions() -> None:
    """A Retry cannot change, and its repr can be read back by eye."""
    retry = pev.Retry(on=ConnectionError)
    assert retry.on == (ConnectionError,)
    assert repr(retry).startswith("Retry(attempts=3, on=(ConnectionError,), wait_initial=0.1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        retry.attempts = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        pytest.param({"attempts": 0}, "attempts", id="no-attempts"),
        pytest.param({"attempts": 2.5}, "attempts", id="fractional-attempts"),
        pytest.param({"attempts": True}, "attempts", id="bool-attempts"),
        pytest.param({"on": "ConnectionError"}, "on", id="on-text"),
        pytest.param({"on": (ValueError, 3)}, "on", id="on-not-a-class"),
        pytest.param({"on": KeyboardInterrupt}, "on", id="on-base-exception"),
        pytest.param({"on": ()}, "on", id="on-empty"),
        pytest.param({"wait_initial": -1}, "wait_initial", id="negative-wait"),
        pytest.param({"wait_max": math.inf}, "wait_max", id="infinite-wait"),
        pytest.param({"wait_jitter": math.nan}, "wait_jitter", id="nan-jitter"),
        pytest.param({"wait_exp_base": 0.5}, "wait_exp_base", id="shrinking-base"),
        pytest.param({"timeout": 0}, "timeout", id="zero-timeout"),
    ],
)
def test_bad_retry_values_are_usage_errors_naming_the_field(
    options: dict[str, Any], field: str
) -> None:
    """Each bad value is refused when the Retry is made, naming its field."""
    with pytest.raises(UsageError, match=rf"Retry {field}\b"):
        pev.Retry(**options)


def test_not_sent_carries_a_message_and_a_cause() -> None:
    """NotSent(message, cause=exc) keeps both; the cause is its __cause__."""
    refused = ConnectionRefusedError("port 443")
    error = NotSent("the gateway refused the connection", cause=refused)
    assert str(error) == "the gateway refused the connection"
    assert error.__cause__ is refused
    assert str(NotSent()) == "nothing was sent"
    assert isinstance(error, pev.PevError)
