"""Cancellation and deadlines in a run: stopping work without losing a record.

See docs/design.md §5.3, §6.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from tests.support.watering import GOAL, RECOVERY

import pev
from pev.engine import PlanRequest, VerifyRequest, current_node_context
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import VerdictRecorded
from pev.model import (
    Plan,
    PlanNode,
    RecordStatus,
    Reliability,
    Verdict,
)
from pev.policy import RecoveryPolicy
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

WAIT_S = 3.0  # longer than any test should take: a call that sleeps this long must be stopped


def _slow_then_more(effect: str) -> Plan:
    return Plan(
        GOAL,
        (
            PlanNode("slow", "a long step", effect=effect),
            PlanNode("next", "what follows", effect="query", after=("slow",)),
        ),
    )


async def _slow_pass(request: VerifyRequest) -> Verdict:
    """A verifier that passes the round after WAIT_S: it must be stopped before then."""
    await asyncio.sleep(WAIT_S)
    return Verdict.passed(request.contract)


async def _cancel_once_started(engine: Engine, started: asyncio.Event, task_id: str) -> None:
    await asyncio.wait_for(started.wait(), WAIT_S)
    await pev.cancel(task_id, store=engine.store, reason="operator said stop")


# -- cancellation -----------------------------------------------------------------------------


async def test_cancelling_while_a_query_runs_ends_cancelled(engine: Engine) -> None:
    """A cancel during a query that watches context.cancelled: cancelled/cancelled, nothing more."""
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.wait_for(current_node_context().cancelled.wait(), WAIT_S)
        return "stopped early"

    executor = FunctionExecutor({"slow": slow})
    run = asyncio.create_task(
        engine.run(
            planner=ScriptedPlanner(_slow_then_more("query")), executor=executor, task_id="t1"
        )
    )
    await _cancel_once_started(engine, started, "t1")

    result = await asyncio.wait_for(run, WAIT_S)

    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)
    assert executor.calls == {"slow": 1}
    assert "cancel_requested" in await engine.kinds("t1")


async def test_a_running_node_is_let_finish_on_cancel(engine: Engine) -> None:
    """The engine lets a running node reach a terminal record before ending the task."""
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.wait_for(current_node_context().cancelled.wait(), WAIT_S)
        return "stopped early"

    run = asyncio.create_task(
        engine.run(
            planner=ScriptedPlanner(_slow_then_more("query")),
            executor=FunctionExecutor({"slow": slow}),
            task_id="t1",
        )
    )
    await _cancel_once_started(engine, started, "t1")
    await asyncio.wait_for(run, WAIT_S)

    records = list((await engine.state("t1")).records.values())
    assert [(r.node_id, r.status) for r in records] == [("slow", RecordStatus.SUCCEEDED)]


async def test_cancelling_while_an_action_is_left_unknown_ends_failed(engine: Engine) -> None:
    """A cancel that leaves an action's outcome unknown (it timed out): failed/cancelled."""
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(WAIT_S)  # ignores the cancel: only its timeout stops it
        return "done"

    run = asyncio.create_task(
        engine.run(
            planner=ScriptedPlanner(_slow_then_more("action")),
            executor=FunctionExecutor({"slow": slow}),
            policy=RecoveryPolicy(node_timeout_s=0.3),
            task_id="t1",
        )
    )
    await _cancel_once_started(engine, started, "t1")

    result = await asyncio.wait_for(run, WAIT_S)

    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.CANCELLED)
    [record] = (await engine.state("t1")).records.values()
    assert record.status is RecordStatus.UNKNOWN


async def test_cancelling_an_ended_task_changes_nothing(engine: Engine) -> None:
    """pev.cancel on a task that has ended returns it unchanged and writes nothing."""
    result = await engine.run(
        planner=ScriptedPlanner(_slow_then_more("query")), executor=FunctionExecutor()
    )
    before = await engine.kinds(result.task_id)

    state = await pev.cancel(result.task_id, store=engine.store)

    assert state.finished is not None
    assert state.finished.reason is TerminalReason.EXECUTION_SUCCEEDED
    assert await engine.kinds(result.task_id) == before


async def test_a_node_task_cancelled_before_it_ran_stops_the_round(engine: Engine) -> None:
    """A node's task cancelled by someone else before its first step: the run does not hang.

    Such a task cannot tell the round it ended, so the round learns it from the task itself
    and passes the cancellation on, as it does for any node task that ends cancelled.
    """

    def cancel_nodes(
        loop: asyncio.AbstractEventLoop, coro: Any, **options: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        if getattr(coro, "__qualname__", "") == "Round._run_node":
            task.cancel()
        return task

    loop = asyncio.get_running_loop()
    loop.set_task_factory(cancel_nodes)
    try:
        executor = FunctionExecutor({"slow": lambda: "done", "next": lambda: "done"})
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(
                engine.run(planner=ScriptedPlanner(_slow_then_more("query")), executor=executor),
                WAIT_S,
            )
    finally:
        loop.set_task_factory(None)
    assert executor.calls == {}


# -- the task deadline ------------------------------------------------------------------------


async def test_a_slow_action_past_the_task_deadline_ends_unknown_and_expired(
    engine: Engine,
) -> None:
    """task_timeout_s passes while an action runs: task_deadline_expired, the record unknown."""
    executor = FunctionExecutor({"slow": lambda: asyncio.sleep(WAIT_S)})

    result = await engine.run(
        planner=ScriptedPlanner(_slow_then_more("action")),
        executor=executor,
        policy=RecoveryPolicy(task_timeout_s=0.1),
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
    )
    [record] = (await engine.state(result.task_id)).records.values()
    assert record.status is RecordStatus.UNKNOWN
    assert executor.calls == {"slow": 1}


async def test_a_planner_slower_than_the_task_deadline_ends_the_task(engine: Engine) -> None:
    """The initial plan not ready by the task deadline: failed/task_deadline_expired."""

    async def slow(request: PlanRequest) -> Plan:
        await asyncio.sleep(WAIT_S)
        return _slow_then_more("query")

    result = await engine.run(
        planner=ScriptedPlanner(slow),
        executor=FunctionExecutor(),
        policy=RecoveryPolicy(task_timeout_s=0.1),
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
    )
    assert result.revisions == 0


async def test_a_verifier_slower_than_the_task_deadline_ends_the_task(engine: Engine) -> None:
    """The verifier still thinking at the task deadline: failed/task_deadline_expired."""
    result = await engine.run(
        planner=ScriptedPlanner(_slow_then_more("query")),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(_slow_pass),
        contract=RECOVERY,
        policy=RecoveryPolicy(task_timeout_s=0.1),
    )

    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
    )


async def test_a_verifier_past_verify_timeout_counts_as_thrown(engine: Engine) -> None:
    """A verifier slower than verify_timeout_s is unreliable: partial/verifier_unreliable."""
    result = await engine.run(
        planner=ScriptedPlanner(_slow_then_more("query")),
        executor=FunctionExecutor(),
        verifier=ScriptedVerifier(_slow_pass),
        contract=RECOVERY,
        policy=RecoveryPolicy(verify_timeout_s=0.05),
    )

    assert (result.status, result.reason) == (
        TaskStatus.PARTIAL,
        TerminalReason.VERIFIER_UNRELIABLE,
    )
    [recorded] = [e for e in await engine.events(result.task_id) if isinstance(e, VerdictRecorded)]
    assert recorded.reliability is Reliability.THROWN


async def test_cancelling_while_the_planner_works_stops_waiting_for_it(engine: Engine) -> None:
    """A cancel during a slow planner call ends the task without waiting for the planner."""
    started = asyncio.Event()

    async def slow_planner(request: PlanRequest) -> Plan:
        started.set()
        await asyncio.sleep(WAIT_S)
        return _slow_then_more("query")

    run = asyncio.create_task(
        engine.run(planner=slow_planner, executor=FunctionExecutor(), task_id="t1")
    )
    await _cancel_once_started(engine, started, "t1")

    result = await asyncio.wait_for(run, WAIT_S / 2)

    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)
    assert "revision_started" not in await engine.kinds("t1")


async def test_cancelling_while_the_verifier_works_stops_waiting_for_it(engine: Engine) -> None:
    """A cancel during a slow verifier call ends the task without a verdict."""
    started = asyncio.Event()

    async def slow_verifier(request: VerifyRequest) -> Verdict:
        started.set()
        await asyncio.sleep(WAIT_S)
        return Verdict.passed(request.contract)

    run = asyncio.create_task(
        engine.run(
            planner=ScriptedPlanner(_slow_then_more("query")),
            executor=FunctionExecutor(),
            verifier=slow_verifier,
            contract=RECOVERY,
            task_id="t1",
        )
    )
    await _cancel_once_started(engine, started, "t1")

    result = await asyncio.wait_for(run, WAIT_S / 2)

    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)
    assert "verdict_recorded" not in await engine.kinds("t1")
