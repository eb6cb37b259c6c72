"""Task handles and live streams (docs/control.md): events read back from the ledger, in order.

A stream is the task's ledger read as it grows: these tests check that what a watcher sees is
exactly what the ledger holds and what a rail of the run heard, whether it watches from the
start, falls behind, or comes after the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

import pev
from pev.errors import UnknownTaskError, UsageError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import Ledger, TaskPhase, utc_now
from pev.model import Effect, Plan, PlanNode, VerificationContract, VerificationMode
from pev.rails import RailEvent, RailEvents, RailPhase
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import ScriptedPlanner, ScriptedVerifier

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "count", ("counted",))


@pev.tool(effect="query")
async def tick(n: int) -> int:
    """A query that takes a moment, so that watchers see the task grow."""
    await asyncio.sleep(0.01)
    return n


def chain(length: int) -> Plan:
    """``length`` ticks, each after the one before."""
    return Plan(
        "count",
        tuple(
            PlanNode(
                f"t{i}",
                f"tick {i}",
                tool="tick",
                args={"n": i},
                effect=Effect.QUERY,
                after=(f"t{i - 1}",) if i else (),
            )
            for i in range(length)
        ),
    )


def start(store: pev.Store, **options: object) -> pev.TaskHandle:
    """``pev.start`` a counting task that is re-planned once (so it has two revisions)."""
    options.setdefault(
        "verifier",
        ScriptedVerifier(
            lambda request: pev.Verdict.failed(request.contract, failed_nodes=["t2"]),
            lambda request: pev.Verdict.passed(request.contract),
        ),
    )
    return pev.start(
        "count",
        planner=ScriptedPlanner(chain(4), chain(4)),
        tools=[tick],
        contract=CONTRACT,
        store=store,
        **options,  # type: ignore[arg-type]
    )


def seen(events: list[RailEvent]) -> list[tuple[int, RailPhase, str]]:
    """What a list of events says: sequence number, phase and event kind."""
    return [(event.seq, event.phase, event.event.kind) for event in events]


async def from_ledger(store: pev.Store, task_id: str) -> list[RailEvent]:
    """The rail events the task's stored entries give."""
    return list(RailEvents().feed(await Ledger(store).entries(task_id)))


async def test_events_stream_every_phase_in_order_and_match_the_ledger_and_the_rails() -> None:
    """A watcher from the start sees what the ledger holds and what a rail of the run heard."""
    store = MemoryStore()
    heard: list[RailEvent] = []
    async with start(store, rails=[heard.append]) as handle:
        streamed = [event async for event in handle.events()]
        result = await handle.result()
    assert result.ok
    assert result.revisions == 2
    assert streamed[0].phase is RailPhase.TASK_STARTED
    assert streamed[-1].phase is RailPhase.TASK_FINISHED
    assert seen(streamed) == seen(await from_ledger(store, handle.task_id))
    assert seen(streamed) == seen(heard)
    seqs = [event.seq for event in streamed]
    assert seqs == sorted(seqs)
    started = [e for e in streamed if e.phase is RailPhase.NODE_STARTED]
    assert [e.record.node_id for e in started if e.record] == ["t0", "t1", "t2", "t3", "t2", "t3"]
    assert streamed[-1].plan == chain(4)
    assert streamed[-1].tools == {f"t{i}": "tick" for i in range(4)}


async def test_a_watcher_that_falls_behind_catches_up_with_everything(tmp_path: Path) -> None:
    """A slow consumer misses nothing and slows nothing: it reads the ledger at its own pace."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        async with start(store) as handle:
            slow: list[RailEvent] = []
            async with handle.events() as stream:
                async for event in stream:
                    slow.append(event)
                    if len(slow) == 2:
                        await handle.result()  # the task ends while this watcher sleeps
            fast = [event async for event in handle.events()]
        assert seen(slow) == seen(fast) == seen(await from_ledger(store, handle.task_id))
    finally:
        await store.close()


async def test_two_watchers_and_a_late_one_see_the_same_events(tmp_path: Path) -> None:
    """Watchers on other store objects (another process, in effect) agree event for event."""
    path = tmp_path / "ledger.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    try:
        async with start(store) as handle:

            async def watched() -> list[RailEvent]:
                return [event async for event in pev.watch(handle.task_id, store=other)]

            first, second = await asyncio.gather(watched(), watched())
        late = [event async for event in pev.watch(handle.task_id, store=other)]
        after = [event async for event in pev.watch(handle.task_id, store=other, after=10)]
    finally:
        await store.close()
        await other.close()
    assert seen(first) == seen(second) == seen(late)
    assert seen(after) == [item for item in seen(late) if item[0] > 10]


async def test_a_handle_of_a_task_run_elsewhere_waits_for_its_end() -> None:
    """TaskHandle(task_id, store=...) follows a task another driver runs."""
    store = MemoryStore()
    async with start(store) as started:
        handle = pev.TaskHandle(started.task_id, store=store)
        assert repr(handle) == f"TaskHandle({started.task_id!r})"
        result = await handle.result()
    assert result == await started.result()
    assert result.ok


async def test_leaving_the_block_by_an_exception_cancels_the_task() -> None:
    """The block's exception cancels the task (through the ledger) before it propagates."""
    store = MemoryStore()
    plan = Plan("wait", (PlanNode("w", "wait", tool="tick", args={"n": 1}, effect=Effect.ACTION),))
    started: list[pev.TaskHandle] = []

    async def ui() -> None:
        async with (
            pev.start(
                "wait",
                planner=lambda _: plan,
                tools=[tick],
                store=store,
                policy=pev.RecoveryPolicy(approval="actions"),
            ) as handle,
            handle.events() as stream,
        ):
            started.append(handle)
            async for event in stream:
                if event.phase is RailPhase.APPROVAL_REQUESTED:
                    raise RuntimeError("the UI crashed")

    with pytest.raises(RuntimeError, match="the UI crashed"):
        await ui()
    handle = started[0]
    state = await Ledger(store).state(handle.task_id)
    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == (
        TaskStatus.CANCELLED,
        TerminalReason.CANCELLED,
    )
    assert "RuntimeError" in (state.cancel_reason or "")


async def test_watching_what_does_not_exist_or_with_bad_bounds_is_refused() -> None:
    """An unknown task, a negative ``after`` or ``poll_s``: clear errors, nothing left running."""
    store = MemoryStore()
    with pytest.raises(UnknownTaskError):
        async for _ in pev.watch("no-such-task", store=store):
            pass
    with pytest.raises(UsageError, match="after must be a sequence number"):
        pev.watch("t", store=store, after=-1)
    with pytest.raises(UsageError, match="poll_s must be a positive"):
        async for _ in pev.watch("t", store=store, poll_s=0):
            pass


async def test_a_stream_left_early_stops_listening() -> None:
    """Leaving ``async with`` on the stream closes it: no task is left behind."""
    store = MemoryStore()
    async with start(store) as handle:
        async with handle.events() as stream:
            first = await anext(stream)
        assert first.phase is RailPhase.TASK_STARTED
        with contextlib.suppress(StopAsyncIteration):
            await anext(stream)
    assert (await handle.result()).ok


async def test_start_refuses_bad_input_before_writing_anything() -> None:
    """What run refuses, start refuses at once: no task is written."""
    store = MemoryStore()
    with pytest.raises(pev.ComponentError):
        pev.start("x", store=store)
    assert await Ledger(store).tasks() == ()


async def test_start_returns_the_handle_at_once_and_await_waits_for_the_write() -> None:
    """The handle comes back before the task is written; awaiting it (or any method) waits."""
    store = MemoryStore()
    handle = start(store, task_id="count-1")
    assert handle.task_id == "count-1"
    assert await handle is handle
    assert (await Ledger(store).state("count-1")).task_id == "count-1"
    assert (await handle.result()).ok


async def test_a_task_that_cannot_be_written_fails_its_handle() -> None:
    """A store that refuses the task: awaiting the handle raises why; nothing was written."""
    store = MemoryStore()
    first = start(store, task_id="same")
    await first.result()
    second = start(store, task_id="same")
    with pytest.raises(pev.ConflictError, match="a task with id same exists already"):
        await second
    with pytest.raises(pev.ConflictError):
        await second.result()


def test_start_needs_a_running_event_loop() -> None:
    """Called from sync code, start says what to do instead."""
    with pytest.raises(UsageError, match=r"use pev\.run_sync"):
        pev.start("count", planner=lambda _: chain(1), tools=[tick])


async def test_the_handles_state_and_cancel() -> None:
    """state() reads the ledger; cancel() stops the task; an ended task is left as it is."""
    store = MemoryStore()
    handle = await pev.start(
        "wait",
        planner=lambda _: chain(1),
        tools=[tick],
        store=store,
        policy=pev.RecoveryPolicy(approval="always"),
    )
    async with asyncio.timeout(10):
        while (await handle.state()).phase is not TaskPhase.AWAITING_APPROVAL:
            await asyncio.sleep(0.01)
    cancelled = await handle.cancel("no longer needed")
    assert cancelled.terminal
    assert cancelled.cancel_reason == "no longer needed"
    result = await handle.result()
    assert result.status is TaskStatus.CANCELLED
    assert (await handle.cancel()).event_count == cancelled.event_count
    assert (await handle.state()).updated_at is not None
    assert (await handle.state()).updated_at <= utc_now()  # type: ignore[operator]
