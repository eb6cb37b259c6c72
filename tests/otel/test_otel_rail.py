"""OTelRail: a span per task, revision, planner call, node and verifier call (observability.md).

Each test runs a real task with the rail on a tracer provider of its own, and reads the spans
it ended from the SDK's in-memory exporter.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

import pev
from pev.engine import current_node_context
from pev.ledger import Ledger, RevisionStarted, VerdictRecorded
from pev.llm import LLMPlanner, LLMVerifier
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.otel import OTelRail
from pev.rails import RailEvents, RailPhase
from pev.testing import (
    FakeClock,
    FunctionExecutor,
    MemoryStore,
    ScriptedChat,
    ScriptedPlanner,
    ScriptedVerifier,
)

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Spans

CONTRACT = VerificationContract("recovery", "water the plants", ["the soil is damp"])
PLAN = Plan(
    "water the plants",
    (
        PlanNode("pour", "pour two litres", tool="can"),
        PlanNode("look", "look at the soil", tool="camera", effect="query", after=("pour",)),
    ),
)


def _tools(*, camera_fails: bool = False) -> FunctionExecutor:
    def camera() -> dict[str, str]:
        if camera_fails:
            raise RuntimeError("lens cap on")
        return {"soil": "damp"}

    return FunctionExecutor({"can": lambda: {"litres": 2}, "camera": camera})


async def _run(rail: OTelRail, **parts: object) -> pev.RunResult:
    settings: dict[str, object] = {
        "planner": ScriptedPlanner(PLAN),
        "executor": _tools(),
        "verifier": ScriptedVerifier.passing(),
        "contract": CONTRACT,
        "rails": [rail],
    }
    settings.update(parts)
    return await pev.run("water the plants", **settings)  # type: ignore[arg-type]


async def test_a_run_is_one_task_span_holding_its_revision_and_its_calls(
    rail: OTelRail, spans: Spans
) -> None:
    """task → revision → planner call, one span per node, verifier call; nothing left open."""
    result = await _run(rail)
    assert result.ok
    [task] = spans.roots()
    assert spans.tree(task) == [
        "pev.task",
        [
            [
                "pev.revision",
                [
                    ["invoke_agent planner", []],
                    ["execute_tool can", []],
                    ["execute_tool camera", []],
                    ["invoke_agent verifier", []],
                ],
            ]
        ],
    ]
    assert rail.open_tasks == ()
    assert all(span.status.status_code is StatusCode.UNSET for span in spans.all)


async def test_spans_carry_pevs_ids_and_the_genai_names(rail: OTelRail, spans: Spans) -> None:
    """Task, revision, node and call spans carry pev's ids, outcomes and the gen_ai attributes."""
    result = await _run(rail)
    task_id = str(result.task_id)
    task = spans.one("pev.task")
    assert dict(task.attributes or {}) == {
        "pev.task_id": task_id,
        "pev.verification_mode": "recovery",
        "pev.criteria": 1,
        "pev.status": "succeeded",
        "pev.reason": "passed",
        "pev.outputs": ("look", "pour"),
    }
    revision = spans.one("pev.revision")
    assert revision.attributes is not None
    assert revision.attributes["pev.revision"] == 1
    assert revision.attributes["pev.revision_kind"] == "initial"
    assert revision.attributes["pev.decision"] == "finish"
    assert revision.attributes["pev.verdict"] == "success"
    camera = spans.one("execute_tool camera")
    assert dict(camera.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "camera",
        "gen_ai.tool.call.id": "1:look",
        "pev.task_id": task_id,
        "pev.revision": 1,
        "pev.node_id": "look",
        "pev.record_id": "1:look",
        "pev.effect": "query",
        "pev.status": "succeeded",
    }
    planner = spans.one("invoke_agent planner")
    assert planner.attributes is not None
    assert planner.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert planner.attributes["gen_ai.agent.name"] == "planner"
    assert planner.attributes["pev.plan.accepted"] is True
    assert "gen_ai.request.model" not in planner.attributes  # a scripted planner has no model
    verifier = spans.one("invoke_agent verifier")
    assert verifier.attributes is not None
    assert verifier.attributes["gen_ai.agent.name"] == "verifier"
    assert verifier.attributes["pev.reliability"] == "ok"
    assert [event.name for event in revision.events] == ["pev.executed", "pev.dispatched"]


async def test_spans_take_the_ledgers_times(rail: OTelRail, spans: Spans) -> None:
    """A span starts and ends at its entries' times, however late the rail hears of them."""
    start = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    store = MemoryStore()
    result = await _run(rail, store=store, clock=FakeClock(start, step=timedelta(seconds=1)))
    entries = await Ledger(store).entries(result.task_id)
    task = spans.one("pev.task")
    ns = 1_000_000_000
    assert task.start_time == int(entries[0].at.timestamp()) * ns
    assert task.end_time == int(entries[-1].at.timestamp()) * ns
    for span in spans.all:
        assert span.start_time is not None
        assert span.end_time is not None
        assert task.start_time <= span.start_time <= span.end_time <= task.end_time


async def test_a_replan_is_a_second_revision_with_its_own_planner_call(
    rail: OTelRail, spans: Spans
) -> None:
    """A local replan: two revisions under the task, each with its planner call and verdict."""
    verifier = ScriptedVerifier(
        Verdict.failed(CONTRACT, failed_nodes=["pour"], feedback="pour more"),
        Verdict.passed(CONTRACT),
    )
    # Pouring again is the intent: a new occurrence of the pour the task already made.
    again = Plan(PLAN.goal, (replace(PLAN.node("pour"), repeat=True), PLAN.node("look")))
    result = await _run(rail, planner=ScriptedPlanner(PLAN, again), verifier=verifier)
    assert result.ok
    [task] = spans.roots()
    first, second = spans.children(task)
    assert [first.name, second.name] == ["pev.revision", "pev.revision"]
    assert first.attributes is not None
    assert second.attributes is not None
    assert (first.attributes["pev.revision"], second.attributes["pev.revision"]) == (1, 2)
    assert first.attributes["pev.decision"] == "local_replan"
    assert first.attributes["pev.verdict"] == "replan_required"
    assert second.attributes["pev.revision_kind"] == "local"
    assert second.attributes["pev.redo"] == ("look", "pour")  # pour, and what depends on it
    assert [s.name for s in spans.children(second)] == [
        "invoke_agent planner",
        "execute_tool can",
        "execute_tool camera",
        "invoke_agent verifier",
    ]
    replanned = spans.children(second)[0]
    assert replanned.attributes is not None
    assert replanned.attributes["pev.planning"] == "local"
    assert first.end_time is not None
    assert second.start_time is not None
    assert first.end_time <= second.start_time  # the next revision's planning follows the decision
    diagnosed = [event for event in first.events if event.name == "pev.diagnosed"]
    assert len(diagnosed) == 1
    assert diagnosed[0].attributes is not None
    assert diagnosed[0].attributes["pev.nodes"] == ("pour",)


async def test_a_failed_node_ends_with_status_error(rail: OTelRail, spans: Spans) -> None:
    """A tool that raised: its span has status ERROR, error.type and the error as description."""
    await _run(rail, executor=_tools(camera_fails=True))
    [camera, *_] = spans.named("execute_tool camera")
    assert camera.status.status_code is StatusCode.ERROR
    assert "lens cap on" in (camera.status.description or "")
    assert camera.attributes is not None
    assert camera.attributes["error.type"] == "device_failure"
    assert camera.attributes["pev.status"] == "failed"
    assert spans.named("execute_tool can")[0].status.status_code is StatusCode.UNSET


async def test_a_rejected_plan_is_a_failed_planner_call_inside_the_revision(
    rail: OTelRail, spans: Spans
) -> None:
    """The refused plan's call and the accepted one's both sit in revision 1, the first ERROR."""
    bad = Plan(
        "water the plants",
        (PlanNode("x", "one", after=("y",)), PlanNode("y", "two", after=("x",))),
    )
    await _run(rail, planner=ScriptedPlanner(bad, PLAN))
    revision = spans.one("pev.revision")
    refused, accepted = (s for s in spans.children(revision) if s.name == "invoke_agent planner")
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None
    assert refused.attributes["error.type"] == "plan_rejected"
    assert refused.attributes["pev.plan.accepted"] is False
    assert any("cycle" in problem for problem in refused.attributes["pev.problems"])  # type: ignore[union-attr]
    assert accepted.attributes is not None
    assert accepted.attributes["pev.plan.accepted"] is True
    assert refused.end_time == accepted.start_time


async def test_an_llm_planned_run_carries_model_and_token_usage(
    rail: OTelRail, spans: Spans
) -> None:
    """Planner and verifier calls carry the model and token counts the ledger recorded."""
    plan = {
        "goal": "water the plants",
        "nodes": [
            {"id": "pour", "description": "pour", "tool": "can", "args": {}, "after": []},
        ],
    }
    verdict = {
        "status": "success",
        "failed_nodes": [],
        "feedback": "",
        "guidance": "",
        "criteria": [{"criterion": "the soil is damp", "status": "satisfied", "evidence_refs": []}],
        "unmet_criteria": [],
        "preserved_constraints": [],
        "evidence_refs": [],
    }
    store = MemoryStore()
    result = await _run(
        rail,
        planner=LLMPlanner(ScriptedChat(json.dumps(plan), model="planner-7b")),
        verifier=LLMVerifier(ScriptedChat(json.dumps(verdict), model="judge-70b")),
        store=store,
    )
    assert result.ok, result.detail
    events = [entry.event for entry in await Ledger(store).entries(result.task_id)]
    [started] = [e for e in events if isinstance(e, RevisionStarted)]
    [recorded] = [e for e in events if isinstance(e, VerdictRecorded)]
    for name, usage in (
        ("invoke_agent planner", started.usage),
        ("invoke_agent verifier", recorded.usage),
    ):
        assert usage is not None
        assert usage.output_tokens > 0
        attributes = spans.one(name).attributes
        assert attributes is not None
        assert attributes["gen_ai.request.model"] == usage.model
        assert attributes["gen_ai.usage.input_tokens"] == usage.input_tokens
        assert attributes["gen_ai.usage.output_tokens"] == usage.output_tokens
    assert started.usage is not None
    assert started.usage.model == "planner-7b"


async def test_a_cancelled_task_ends_every_span(rail: OTelRail, spans: Spans) -> None:
    """Cancelled while a node runs: the node, revision and task spans all end; task: cancelled."""
    running = asyncio.Event()

    async def camera() -> dict[str, str]:
        running.set()
        await asyncio.wait_for(current_node_context().cancelled.wait(), 10)
        return {"soil": "damp"}

    executor = FunctionExecutor({"can": lambda: {"litres": 2}, "camera": camera})
    handle = await pev.start(
        "water the plants",
        planner=ScriptedPlanner(PLAN),
        executor=executor,
        verifier=ScriptedVerifier.passing(),
        contract=CONTRACT,
        rails=[rail],
    )
    await asyncio.wait_for(running.wait(), 10)
    await handle.cancel("no longer needed")
    result = await handle.result()
    assert result.status == "cancelled"
    task = spans.one("pev.task")
    assert task.attributes is not None
    assert task.attributes["pev.status"] == "cancelled"
    assert task.status.status_code is StatusCode.UNSET
    assert [s.name for s in spans.children(spans.one("pev.revision"))] == [
        "invoke_agent planner",
        "execute_tool can",
        "execute_tool camera",
    ]
    assert len(spans.all) == 5
    assert rail.open_tasks == ()


async def test_an_unreachable_planner_is_a_failed_call_and_a_failed_task(
    rail: OTelRail, spans: Spans
) -> None:
    """PlannerUnavailable: the call's span (under the task: no revision began), and task ERROR."""
    planner = ScriptedPlanner(pev.PlannerUnavailable("the model server is down"))
    result = await _run(rail, planner=planner)
    assert result.reason == "planner_unavailable"
    [task] = spans.roots()
    assert spans.tree(task) == ["pev.task", [["invoke_agent planner", []]]]
    [call] = spans.children(task)
    assert call.status.status_code is StatusCode.ERROR
    assert "the model server is down" in (call.status.description or "")
    assert task.status.status_code is StatusCode.ERROR
    assert task.attributes is not None
    assert task.attributes["error.type"] == "planner_unavailable"


async def test_the_task_span_is_a_child_of_the_callers_span(
    rail: OTelRail, spans: Spans, provider: TracerProvider
) -> None:
    """pev.run inside a span of the caller's: the task's trace hangs below it."""
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("handle request") as outer:
        await _run(rail)
    task = spans.one("pev.task")
    assert task.parent is not None
    assert task.parent.span_id == outer.get_span_context().span_id


async def _events_of_a_run(**parts: object) -> list[object]:
    """The rail events of a finished run, read back from its ledger."""
    store = MemoryStore()
    settings: dict[str, object] = {
        "planner": ScriptedPlanner(PLAN),
        "executor": _tools(),
        "verifier": ScriptedVerifier.passing(),
        "contract": CONTRACT,
        "store": store,
    }
    settings.update(parts)
    result = await pev.run("water the plants", **settings)  # type: ignore[arg-type]
    return list(RailEvents().feed(await Ledger(store).entries(result.task_id)))


async def test_close_ends_the_spans_of_a_task_that_never_finished(
    rail: OTelRail, spans: Spans
) -> None:
    """A drive stopped mid-task: close() ends what is open, marked pev.incomplete."""
    events = await _events_of_a_run()
    cut = next(i for i, e in enumerate(events) if e.phase is RailPhase.NODE_FINISHED)  # type: ignore[attr-defined]
    for event in events[:cut]:
        rail.on_event(event)  # type: ignore[arg-type]
    assert spans.named("pev.task") == []
    assert len(rail.open_tasks) == 1
    rail.close()
    assert rail.open_tasks == ()
    [task] = spans.roots()
    assert spans.tree(task) == [
        "pev.task",
        [["pev.revision", [["invoke_agent planner", []], ["execute_tool can", []]]]],
    ]
    for span in (task, spans.one("pev.revision"), spans.one("execute_tool can")):
        assert span.attributes is not None
        assert span.attributes["pev.incomplete"] is True


async def test_a_task_heard_of_part_way_gets_a_resumed_span(rail: OTelRail, spans: Spans) -> None:
    """Events from the middle (a resumed task): a task span marked resumed, its revision opened."""
    events = await _events_of_a_run()
    first = next(i for i, e in enumerate(events) if e.phase is RailPhase.NODE_STARTED)  # type: ignore[attr-defined]
    for event in events[first:]:
        rail.on_event(event)  # type: ignore[arg-type]
    [task] = spans.roots()
    assert task.attributes is not None
    assert task.attributes["pev.resumed"] is True
    revision = spans.one("pev.revision")
    assert revision.attributes is not None
    assert revision.attributes["pev.revision"] == 1
    assert [s.name for s in spans.children(revision)] == [
        "execute_tool can",
        "execute_tool camera",
        "invoke_agent verifier",
    ]
    assert rail.open_tasks == ()


async def test_past_max_open_tasks_the_oldest_task_is_ended(
    provider: TracerProvider, spans: Spans
) -> None:
    """More unfinished tasks than max_open_tasks: the oldest's spans end, marked incomplete."""
    rail = OTelRail(provider, max_open_tasks=1)
    one = await _events_of_a_run(task_id="one")
    two = await _events_of_a_run(task_id="two")
    rail.on_event(one[0])  # type: ignore[arg-type]
    rail.on_event(two[0])  # type: ignore[arg-type]
    assert rail.open_tasks == ("two",)
    [ended] = spans.named("pev.task")
    assert ended.attributes is not None
    assert (ended.attributes["pev.task_id"], ended.attributes["pev.incomplete"]) == ("one", True)


async def test_without_a_provider_the_global_one_is_used() -> None:
    """No provider given: spans go to the global provider (a no-op until one is set)."""
    result = await pev.run(
        "water the plants",
        planner=ScriptedPlanner(PLAN),
        executor=_tools(),
        verifier=ScriptedVerifier.passing(),
        contract=CONTRACT,
        rails=[rail := OTelRail()],
    )
    assert result.ok
    assert rail.open_tasks == ()


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        pytest.param({"tracer_provider": "jaeger"}, TypeError, "TracerProvider", id="provider"),
        pytest.param({"max_open_tasks": 0}, ValueError, "max_open_tasks", id="zero"),
        pytest.param({"max_open_tasks": True}, ValueError, "max_open_tasks", id="bool"),
    ],
)
def test_bad_arguments_are_named(arguments: dict[str, object], error: type, message: str) -> None:
    """A provider that is none, or a bad bound: a clear error naming it."""
    with pytest.raises(error, match=message):
        OTelRail(**arguments)  # type: ignore[arg-type]


def test_without_the_api_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """import pev.otel without OpenTelemetry: an ImportError naming pev-agent[otel]."""
    for name in [n for n in sys.modules if n == "pev.otel" or n.startswith("pev.otel.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ImportError, match=r"pip install 'pev-agent\[otel\]'"):
        import pev.otel  # noqa: F401


async def _awaiting(handle: pev.TaskHandle, revision: int) -> None:
    async with asyncio.timeout(10):
        while (state := await handle.state()).awaiting is None or (
            state.awaiting.revision != revision
        ):
            assert not state.terminal
            await asyncio.sleep(0.01)


async def test_a_reviewers_rejection_ends_the_revision_and_the_next_is_approved(
    rail: OTelRail, spans: Spans
) -> None:
    """Approval events sit on their revision; a rejection ends it and the planner is asked again."""
    handle = await pev.start(
        "water the plants",
        planner=ScriptedPlanner(PLAN, PLAN),
        executor=_tools(),
        verifier=ScriptedVerifier.passing(),
        contract=CONTRACT,
        policy=pev.RecoveryPolicy(approval="always"),  # type: ignore[arg-type]
        rails=[rail],
    )
    await _awaiting(handle, 1)
    await handle.reject("not before noon", by="ana")
    await _awaiting(handle, 2)
    await handle.approve(by="ana")
    assert (await handle.result()).ok
    first, second = spans.named("pev.revision")
    assert [e.name for e in first.events] == ["pev.approval_requested", "pev.rejected"]
    assert first.attributes is not None
    assert first.attributes["pev.rejected_by"] == "ana"
    assert [s.name for s in spans.children(first)] == ["invoke_agent planner"]
    assert [e.name for e in second.events][:2] == ["pev.approval_requested", "pev.approved"]
    assert [s.name for s in spans.children(second)] == [
        "invoke_agent planner",
        "execute_tool can",
        "execute_tool camera",
        "invoke_agent verifier",
    ]
    assert rail.open_tasks == ()
