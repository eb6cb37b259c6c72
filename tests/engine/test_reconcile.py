"""Reconciling calls of unknown outcome during a run (docs/design.md §2.2, §4, §5.4).

A timed-out or crashed action may or may not have taken effect. When its tool (or a custom
executor) can tell what it really did, the engine asks right after the round and writes a
``record_reconciled`` event; the record itself stays ``unknown`` and is never rewritten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

import pev
from pev.engine import VerifyRequest, current_node_context
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import RecordReconciled, unsettled_unknown_actions
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    Verdict,
)
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import Engine

SHORT = 0.2  # the action's timeout, and so its reconcile's (a thread under load needs room)
LONG = 1.0  # how long the action hangs after taking effect

PLAN = Plan("publish the bulletin", (PlanNode("post", "publish it", tool="publish", args={}),))


def blame_unsucceeded(request: VerifyRequest) -> Verdict:
    """Pass when every node has a success; else blame the nodes without one."""
    failed = [
        n.id for n in request.plan.nodes if not isinstance(request.results.get(n.id), Success)
    ]
    if failed:
        return Verdict.failed(request.contract, failed_nodes=failed, feedback="not published")
    return Verdict.passed(request.contract)


class Channel:
    """A publishing channel that remembers what each idempotency key published."""

    def __init__(self, *, takes_effect: bool = True) -> None:
        self.takes_effect = takes_effect
        self.published: dict[str, dict[str, str]] = {}
        self.calls = 0
        self.asked: list[ExecutionRecord] = []

    def tool(self, reconcile: Callable[[ExecutionRecord], Any] | None) -> pev.Tool[..., Any]:
        """``publish``: takes effect (or not), then hangs past its timeout."""

        async def publish() -> dict[str, str]:
            self.calls += 1
            key = current_node_context().idempotency_key
            if self.takes_effect:
                self.published[key] = {"text": "rain tomorrow"}
            await asyncio.sleep(LONG)
            return self.published[key]

        return pev.tool(publish, effect="action", timeout_s=SHORT, reconcile=reconcile)

    def lookup(self, record: ExecutionRecord) -> NodeResult | None:
        """What the call behind ``record`` did: published, not published, or None if unsure."""
        self.asked.append(record)
        found = self.published.get(record.idempotency_key)
        if found is not None:
            return Success(found)
        return DeviceFailure(record.node_id, "the channel shows no bulletin for this key")


async def _run(engine: Engine, publish: pev.Tool[..., Any], **options: Any) -> pev.RunResult:
    return await engine.run(
        planner=ScriptedPlanner(PLAN, repeat_last=True),
        tools=[publish],
        verifier=ScriptedVerifier(blame_unsucceeded, repeat_last=True),
        **options,
    )


async def _reconciled(engine: Engine, task_id: str) -> list[RecordReconciled]:
    return [e for e in await engine.events(task_id) if isinstance(e, RecordReconciled)]


async def test_an_action_that_took_effect_is_settled_and_the_task_succeeds(engine: Engine) -> None:
    """Timed out after publishing: reconcile finds the bulletin, and the run passes."""
    channel = Channel()

    result = await _run(engine, channel.tool(channel.lookup))

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert dict(result.outputs) == {"post": {"text": "rain tomorrow"}}
    assert channel.calls == 1  # never re-sent
    [settled] = await _reconciled(engine, result.task_id)
    assert settled.result == Success({"text": "rain tomorrow"})
    assert "reconcile" in settled.note
    state = await engine.state(result.task_id)
    [record] = state.records.values()
    assert record.status is RecordStatus.UNKNOWN  # the record itself is never rewritten
    assert settled.record_id == record.id
    assert [r.id for r in channel.asked] == [record.id]
    assert unsettled_unknown_actions(state) == ()


async def test_an_action_that_did_not_take_effect_is_settled_as_failed(engine: Engine) -> None:
    """Timed out before publishing: settled as a device failure, which is accepted as partial."""
    channel = Channel(takes_effect=False)

    result = await _run(engine, channel.tool(channel.lookup))

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    [settled] = await _reconciled(engine, result.task_id)
    assert isinstance(settled.result, DeviceFailure)
    assert not settled.result.outcome_unknown
    assert unsettled_unknown_actions(await engine.state(result.task_id)) == ()
    assert channel.calls == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda record: None, id="none"),
        pytest.param(
            lambda record: DeviceFailure(record.node_id, "cannot tell", outcome_unknown=True),
            id="still-unknown",
        ),
    ],
)
async def test_a_reconcile_that_cannot_tell_settles_nothing(
    engine: Engine, answer: Callable[[ExecutionRecord], Any]
) -> None:
    """None, or a result that is still unknown: no event, the record stays unknown, partial."""
    channel = Channel()

    result = await _run(engine, channel.tool(answer))

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert await _reconciled(engine, result.task_id) == []
    [unknown] = unsettled_unknown_actions(await engine.state(result.task_id))
    assert unknown.tool == "publish"


async def test_a_reconcile_that_raises_is_logged_and_settles_nothing(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A reconcile function that raises changes nothing but the log."""

    def broken(record: ExecutionRecord) -> NodeResult:
        raise ConnectionError("the channel's archive is offline")

    caplog.set_level(logging.ERROR, logger="pev.engine")
    result = await _run(engine, Channel().tool(broken))

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert await _reconciled(engine, result.task_id) == []
    assert "reconciling record" in caplog.text
    assert "archive is offline" in caplog.text


async def test_a_slow_reconcile_is_bounded_by_the_tools_timeout(engine: Engine) -> None:
    """A reconcile function that hangs gives up at the tool's timeout, and settles nothing."""

    async def hangs(record: ExecutionRecord) -> NodeResult:
        await asyncio.sleep(LONG)
        return Success("too late")

    result = await _run(engine, Channel().tool(hangs))

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert await _reconciled(engine, result.task_id) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_plain_value_means_success(engine: Engine, kind: str) -> None:
    """A reconcile function, sync or async, may answer with a plain value: ``Success(value)``."""
    channel = Channel()

    def sync_lookup(record: ExecutionRecord) -> object:
        return channel.published.get(record.idempotency_key)

    async def async_lookup(record: ExecutionRecord) -> object:
        return channel.published.get(record.idempotency_key)

    result = await _run(engine, channel.tool(sync_lookup if kind == "sync" else async_lookup))

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    [settled] = await _reconciled(engine, result.task_id)
    assert settled.result == Success({"text": "rain tomorrow"})


async def test_a_custom_executors_reconcile_is_asked_during_the_run(engine: Engine) -> None:
    """Any executor with ``reconcile(record)`` is asked, once per record, right after the round."""
    executor = FunctionExecutor(
        {"publish": lambda: DeviceFailure("post", "the line dropped", outcome_unknown=True)},
        reconcile=lambda record: Success({"text": "it went out"}),
    )

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        executor=executor,
        verifier=ScriptedVerifier(blame_unsucceeded, repeat_last=True),
    )

    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert len(executor.reconciled) == 1
    assert executor.calls == {"post": 1}


async def test_a_query_that_failed_is_not_reconciled(engine: Engine) -> None:
    """Only records of unknown outcome are asked about: a failed query changed nothing."""
    executor = FunctionExecutor(
        {"look": lambda: DeviceFailure("look", "camera offline")},
        reconcile=lambda record: Success("never asked"),
    )
    plan = Plan("look", (PlanNode("look", "look around", effect="query"),))

    result = await engine.run(
        planner=ScriptedPlanner(plan),
        executor=executor,
        verifier=ScriptedVerifier(blame_unsucceeded, repeat_last=True),
    )

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert executor.reconciled == []


async def test_a_tool_without_reconcile_leaves_the_record_unknown(engine: Engine) -> None:
    """The default: no reconcile, so the action stays unknown and the run is partial."""
    channel = Channel()

    result = await _run(engine, channel.tool(None))

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert await _reconciled(engine, result.task_id) == []
    assert channel.calls == 1


def test_reconcile_must_be_callable() -> None:
    """A reconcile that is not a function is refused when the tool is made."""

    def publish() -> str:
        return "done"

    with pytest.raises(TypeError, match="reconcile must be a function"):
        pev.tool(publish, reconcile="by key")  # type: ignore[arg-type]


async def test_the_verifier_sees_what_was_reconciled(engine: Engine) -> None:
    """The request's results, ``reconciled`` and ``record_ref`` reflect the settlement."""
    channel = Channel()
    seen: list[VerifyRequest] = []

    def verifier(request: VerifyRequest) -> Verdict:
        seen.append(request)
        return blame_unsucceeded(request)

    result = await engine.run(
        planner=ScriptedPlanner(PLAN),
        tools=[channel.tool(channel.lookup)],
        verifier=ScriptedVerifier(verifier),
    )

    assert result.ok
    [request] = seen
    [record] = request.records
    assert record.status is RecordStatus.UNKNOWN
    assert dict(request.reconciled) == {record.id: Success({"text": "rain tomorrow"})}
    assert request.output("post") == {"text": "rain tomorrow"}
    assert request.record_ref("post") == record.ref


def test_a_verify_request_cites_no_record_for_a_node_without_success() -> None:
    """``record_ref`` names the record behind a success only."""
    plan = Plan("g", (PlanNode("a", "step a"), PlanNode("b", "step b")))
    now = datetime.now(UTC)
    records = tuple(
        ExecutionRecord(
            id=RecordId(f"r-{node}"),
            task_id=TaskId("t"),
            revision=1,
            node_id=node,
            tool=None,
            args_digest="",
            effect=Effect.ACTION,
            idempotency_key=f"k-{node}",
            status=status,
            created_at=now,
            updated_at=now,
        )
        for node, status in (("a", RecordStatus.SUCCEEDED), ("b", RecordStatus.FAILED))
    )
    request = VerifyRequest(
        task_id=TaskId("t"),
        input="x",
        contract=pev.engine.default_contract("g", verifier=object()),
        plan=plan,
        revision=1,
        results={"a": Success(1), "b": DeviceFailure("b", "broken")},
        records=records,
    )

    assert request.record_ref("a") == "record:r-a"
    assert request.record_ref("b") is None
    assert request.record_ref("c") is None
    assert request.reconciled == {}
