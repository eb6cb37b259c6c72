"""The rail bus: which phases each event marks, private copies, and rails that misbehave."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pytest

from pev import codec
from pev.kernel import GlobalReplan, diagnose
from pev.ledger import (
    Diagnosed,
    Event,
    LedgerEntry,
    RoundExecuted,
    TaskFinished,
    TaskState,
    VerdictRecorded,
    begin_replan,
    dispatch,
    lineage_results,
)
from pev.model import (
    DeviceFailure,
    JsonObject,
    Plan,
    PlanNode,
    Reliability,
    Success,
    Verdict,
)
from pev.rails import Rail, RailBus, RailEvent, RailPhase

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Recorder, Tasks

KIND_PHASES = [
    ("task_created", ["task_started"]),
    ("plan_rejected", ["plan_rejected"]),
    ("awaiting_replan", []),
    ("replan_started", []),
    ("revision_started", ["planned", "revision_started"]),
    ("node_dispatched", ["node_started"]),
    ("node_progressed", []),
    ("node_finished", ["node_finished"]),
    ("node_skipped", []),
    ("record_reconciled", ["record_reconciled"]),
    ("evidence_captured", ["evidence_captured"]),
    ("capture_failed", []),
    ("round_executed", ["executed"]),
    ("verdict_recorded", ["verified"]),
    ("diagnosed", ["diagnosed"]),
    ("dispatched", ["dispatched"]),
    ("cancel_requested", []),
    ("driver_started", []),
    ("start_failed", []),
    ("approval_requested", ["approval_requested"]),
    ("approved", ["approved"]),
    ("rejected", ["rejected"]),
    ("task_finished", ["task_finished"]),
    # What befalls effects (tasks.effects).
    ("node_reused", ["node_reused"]),
    ("effect_superseded", ["effect_superseded"]),
    ("compensation_dispatched", ["compensation_started"]),
    ("effect_compensated", ["compensation_finished"]),
    ("compensation_failed", ["compensation_finished"]),
    ("unwind_started", ["unwind_started"]),
]

POUR = PlanNode("pour", "pour water", tool="can", args={"litres": 1})
LOOK = PlanNode("look", "look at the soil", tool="camera", after=("pour",))


class RailBrokeError(Exception):
    """What a broken rail raises."""


class Stop(BaseException):
    """Stands for KeyboardInterrupt and friends, which must not be swallowed."""


async def _deliver(bus: RailBus, entries: Sequence[LedgerEntry], state: TaskState) -> None:
    """Emit ``entries`` as the engine does after an append, then drain as it does at the end."""
    await bus.emit(entries, state)
    await bus.drain()


async def _everything(tasks: Tasks, recorder: Recorder) -> None:
    """Write the every-event tasks, the bus emitting to ``recorder`` after each append."""
    tasks.bus = RailBus([recorder])
    await tasks.everything("t")
    await tasks.effects("t-effects")


@pytest.mark.parametrize(("kind", "phases"), KIND_PHASES, ids=[kind for kind, _ in KIND_PHASES])
async def test_event_kind_marks_phases(
    kind: str, phases: list[str], tasks: Tasks, recorder: Recorder
) -> None:
    """Each ledger event marks its rail phases, in order, or none at all."""
    await _everything(tasks, recorder)
    entries = [*await tasks.entries("t"), *await tasks.entries("t-effects")]
    of_kind = [(entry.task_id, entry.seq) for entry in entries if entry.event.kind == kind]
    assert of_kind, f"the scenarios wrote no {kind}"
    for task_id, seq in of_kind:
        marked = [str(e.phase) for e in recorder.events if (e.task_id, e.seq) == (task_id, seq)]
        assert marked == phases


def test_table_covers_every_event_kind() -> None:
    """The table above names every kind of ledger event there is."""
    kinds = {member.kind for member in typing.get_args(Event)}
    assert kinds == {kind for kind, _ in KIND_PHASES}


async def test_every_phase_is_reached(tasks: Tasks, recorder: Recorder) -> None:
    """A task that writes every event kind takes rails through every phase."""
    await _everything(tasks, recorder)
    assert set(recorder.phases) == set(RailPhase)


async def test_happy_task_phases_in_order(tasks: Tasks, recorder: Recorder) -> None:
    """A passing task's boundaries arrive in loop order, planned before revision_started."""
    tasks.bus = RailBus([recorder])
    await tasks.simple("t", {POUR: Success(1), LOOK: Success("damp")})
    assert recorder.phases == [
        "task_started",
        "planned",
        "revision_started",
        "node_started",
        "node_finished",
        "node_started",
        "node_finished",
        "executed",
        "verified",
        "dispatched",
        "task_finished",
    ]


async def test_event_carries_entry_contract_plan_tools_record(
    tasks: Tasks, recorder: Recorder
) -> None:
    """A rail event holds its entry's place, the contract, the plan, its tools and its record."""
    tasks.bus = RailBus([recorder])
    await tasks.everything("t")
    entries = {entry.seq: entry for entry in await tasks.entries("t")}
    state = await tasks.ledger.state("t")
    for event in recorder.events:
        entry = entries[event.seq]
        assert (event.task_id, event.at, event.event) == ("t", entry.at, entry.event)
        assert event.contract == state.contract
    started, *_ = recorder.events
    assert (started.plan, dict(started.tools), started.record) == (None, {}, None)
    node_started = next(e for e in recorder.events if e.phase is RailPhase.NODE_STARTED)
    assert node_started.plan == state.revisions[0].plan
    assert dict(node_started.tools) == {"pour": "can", "look": "camera"}
    assert node_started.record is not None
    assert node_started.record.node_id == "pour"
    node_finished = next(e for e in recorder.events if e.phase is RailPhase.NODE_FINISHED)
    assert node_finished.record is not None
    assert (node_finished.record.node_id, node_finished.record.status) == ("pour", "unknown")


async def test_plan_is_the_one_in_force_at_each_entry(tasks: Tasks, recorder: Recorder) -> None:
    """Emitting two revisions at once, each entry still sees the plan in force when written."""
    first, second = Plan("water", (POUR,)), Plan("water", (POUR, LOOK))
    await tasks.create("t")
    await tasks.revision("t", first)
    state = await tasks.run_node("t", POUR, DeviceFailure("pour", "jammed"))
    state = await tasks.append("t", [RoundExecuted(revision=1, executed_ok=False)])
    verdict = Verdict.failed(state.contract, failed_nodes=["pour"])
    results = lineage_results(state)
    state = await tasks.append(
        "t",
        [
            VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK),
            Diagnosed(revision=1, diagnosis=diagnose(verdict, Reliability.OK, results)),
        ],
    )
    state = await tasks.append("t", dispatch(state, GlobalReplan("again"), now=tasks.clock()))
    state = await tasks.append("t", begin_replan(state, now=tasks.clock()))
    await tasks.revision("t", second, number=2)
    state = await tasks.run_node("t", POUR, Success(1))

    await _deliver(RailBus([recorder]), await tasks.entries("t"), state)

    plans = [(str(e.phase), e.plan) for e in recorder.events]
    assert plans[0] == ("task_started", None)
    assert plans[1:4] == [("planned", first), ("revision_started", first), ("node_started", first)]
    assert plans[-4:] == [
        ("planned", second),
        ("revision_started", second),
        ("node_started", second),
        ("node_finished", second),
    ]


def _vandalise(event: RailEvent) -> None:
    """Mutate everything reachable, frozen or not."""
    object.__setattr__(event, "phase", RailPhase.TASK_FINISHED)
    object.__setattr__(event, "seq", -1)
    object.__setattr__(event, "tools", {"pour": "hammer"})
    object.__setattr__(event.contract, "goal", "set fire to the plants")
    if event.plan is not None:
        node = event.plan.nodes[0]
        object.__setattr__(node, "tool", "hammer")
        args = node.args
        assert isinstance(args, JsonObject)
        args._items["litres"] = 999  # reaching inside on purpose
    if event.record is not None:
        object.__setattr__(event.record, "node_id", "vandalised")
    inner = event.event
    if isinstance(inner, TaskFinished):
        outputs = inner.outputs
        assert isinstance(outputs, JsonObject)
        outputs._items["pour"] = "vandalised"  # reaching inside on purpose
    if hasattr(inner, "revision"):
        object.__setattr__(inner, "revision", 99)


async def test_vandal_rail_changes_nothing_for_others(
    tasks: Tasks, new_recorder: Callable[[], Recorder]
) -> None:
    """A rail mutating its events, nested values included, affects no other rail nor the input."""
    await tasks.simple("t", {POUR: Success({"poured": 1}), LOOK: Success("damp")})
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    before = codec.dumps([entries, state.contract, state.plan, list(state.records.values())])

    alone, beside = new_recorder(), new_recorder()
    await _deliver(RailBus([alone]), entries, state)
    await _deliver(RailBus([_vandalise, beside, _vandalise]), entries, state)

    assert codec.dumps([entries, state.contract, state.plan, list(state.records.values())]) == (
        before
    )
    assert [codec.dumps(e) for e in beside.events] == [codec.dumps(e) for e in alone.events]


async def test_each_rail_gets_its_own_objects(
    tasks: Tasks, new_recorder: Callable[[], Recorder]
) -> None:
    """No two rails, and no rail and the caller, share an event, entry, plan or contract."""
    await tasks.simple("t", {POUR: Success(1)})
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    one, two = new_recorder(), new_recorder()
    await _deliver(RailBus([one, two]), entries, state)
    for a, b in zip(one.events, two.events, strict=True):
        assert a == b
        assert a is not b
        assert a.event is not b.event
        assert a.contract is not b.contract
        assert a.contract is not state.contract
    planned = [e for e in one.events if e.plan is not None]
    assert all(e.plan is not state.plan for e in planned)
    assert all(e.event is not entry.event for e in one.events for entry in entries)


async def test_raising_rail_is_counted_and_logged(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """A rail that raises is logged with its name and phase, counted, and the next rail runs."""

    def broken(event: RailEvent) -> None:
        raise RailBrokeError(f"cannot handle {event.phase}")

    await tasks.simple("t", {POUR: Success(1)})
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    bus = RailBus([broken, recorder])
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await _deliver(bus, entries, state)

    assert len(recorder.events) == 9
    name = broken.__qualname__
    assert bus.failures == {name: 9}
    assert bus.failure_count == 9
    messages = [r.getMessage() for r in caplog.records if r.name == "pev.rails"]
    assert len(messages) == 9
    assert messages[0].startswith(f"rail {name} raised at phase task_started (task t, seq 1): ")
    assert "RailBrokeError: cannot handle task_started at test_bus.py:" in messages[0]
    assert all(isinstance(r.exc_info[1], RailBrokeError) for r in caplog.records if r.exc_info)
    assert caplog.records[0].pev == {"rail": name, "phase": "task_started", "task": "t"}


@pytest.mark.parametrize("interrupt", [Stop, KeyboardInterrupt, SystemExit])
async def test_base_exception_propagates(tasks: Tasks, interrupt: type[BaseException]) -> None:
    """What is not an Exception (KeyboardInterrupt, SystemExit, ...) is not swallowed.

    It comes out of drain, in the caller's task: out of the rail's own task, it would stop the
    event loop.
    """

    def interrupted(event: RailEvent) -> None:
        raise interrupt

    state = await tasks.create("t")
    bus = RailBus([interrupted])
    await bus.emit(await tasks.entries("t"), state)
    with pytest.raises(interrupt):
        await bus.drain()
    await bus.drain()  # raised once, and the bus is stopped
    assert (bus.failure_count, bus.dropped_count) == (0, 0)


async def test_base_exception_surfaces_at_the_next_emit(tasks: Tasks, recorder: Recorder) -> None:
    """A rail's BaseException reaches the engine's next emit, as it reached the emit before."""

    def interrupted(event: RailEvent) -> None:
        raise Stop

    state = await tasks.create("t")
    entries = await tasks.entries("t")
    bus = RailBus([interrupted, recorder])
    await bus.emit(entries, state)
    for _ in range(1000):  # the rail's thread runs, and raises (within seconds, on a slow box)
        if bus._error is not None:  # private: waiting for the thread, not testing it
            break
        await asyncio.sleep(0.005)
    with pytest.raises(Stop):
        await bus.emit(entries, state)
    await bus.emit(entries, state)
    await bus.drain()
    assert recorder.phases == ["task_started", "task_started"]
    assert bus.dropped == {interrupted.__qualname__: 1}


async def test_async_rail_is_awaited(tasks: Tasks) -> None:
    """An async on_event is awaited, in order, before drain returns."""
    seen: list[str] = []

    class Slow:
        async def on_event(self, event: RailEvent) -> None:
            await asyncio.sleep(0)
            seen.append(str(event.phase))

    await tasks.simple("t", {POUR: Success(1)})
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    await _deliver(RailBus([Slow()]), entries, state)
    assert seen[:3] == ["task_started", "planned", "revision_started"]
    assert len(seen) == 9


async def test_overlapping_emits_take_turns(tasks: Tasks) -> None:
    """Two emits at once do not interleave: an async rail sees one event at a time, in order."""
    seen: list[int] = []

    async def yielding(event: RailEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event.seq)

    state = await tasks.simple("t", {POUR: Success(1), LOOK: Success(2)})
    entries = await tasks.entries("t")
    bus = RailBus([yielding])
    await asyncio.gather(bus.emit(entries[:5], state), bus.emit(entries[5:], state))
    await bus.drain()
    assert seen == sorted(seen)
    assert len(seen) == 11


def test_bus_serves_one_loop_after_another(tasks: Tasks, recorder: Recorder) -> None:
    """One bus can be used from several asyncio.run calls in turn."""
    bus = RailBus([recorder])
    state = asyncio.run(tasks.create("t"))
    entries = asyncio.run(tasks.entries("t"))
    for _ in range(2):
        asyncio.run(_deliver(bus, entries, state))
    assert recorder.phases == ["task_started", "task_started"]
    assert bus.dropped_count == 0


async def test_async_rail_past_timeout_is_a_failure(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """An async rail that runs past timeout_s is cancelled, counted and logged; others still run."""
    cancelled: list[bool] = []

    async def stuck(event: RailEvent) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    state = await tasks.create("t")
    bus = RailBus([stuck, recorder], timeout_s=0.01)
    began = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await _deliver(bus, await tasks.entries("t"), state)

    assert time.monotonic() - began < 1
    assert cancelled == [True]
    assert bus.failures == {stuck.__qualname__: 1}
    assert recorder.phases == ["task_started"]
    (record,) = caplog.records
    assert record.getMessage() == (
        f"rail {stuck.__qualname__} timed out after 0.01 s at phase task_started (task t, seq 1)"
    )


async def test_timeout_error_raised_by_rail_is_a_plain_failure(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """A TimeoutError a rail raises itself is logged as raised, not as the bus's timeout."""

    async def gives_up(event: RailEvent) -> None:
        raise TimeoutError("the collector did not answer")

    state = await tasks.create("t")
    bus = RailBus([gives_up])
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await _deliver(bus, await tasks.entries("t"), state)
    assert bus.failure_count == 1
    assert "raised at phase task_started" in caplog.records[0].getMessage()


async def test_callables_and_objects_are_rails(tasks: Tasks) -> None:
    """Functions, lambdas, async functions and callable objects are rails; returns are ignored."""
    seen: list[str] = []

    def function(event: RailEvent) -> str:
        seen.append("function")
        return "stop the task!"

    async def coroutine_function(event: RailEvent) -> bool:
        seen.append("coroutine function")
        return False

    class CallableObject:
        def __call__(self, event: RailEvent) -> None:
            seen.append("callable object")

    class WithOnEvent:
        name = "named rail"

        def on_event(self, event: RailEvent) -> None:
            seen.append("on_event")

        def __call__(self, event: RailEvent) -> None:
            raise AssertionError("on_event wins over __call__")

    rails = [function, lambda event: seen.append("lambda"), coroutine_function]
    bus = RailBus([*rails, CallableObject(), WithOnEvent()])
    state = await tasks.create("t")
    await _deliver(bus, await tasks.entries("t"), state)
    assert sorted(seen) == sorted(
        ["function", "lambda", "coroutine function", "callable object", "on_event"]
    )
    assert bus.failure_count == 0
    assert isinstance(WithOnEvent(), Rail)


async def test_rail_names_count_failures(tasks: Tasks) -> None:
    """Failures are counted by the rail's name attribute, else its function or class name."""

    class Broken:
        def on_event(self, event: RailEvent) -> None:
            raise RailBrokeError

    class Named(Broken):
        name = "my-rail"

    state = await tasks.create("t")
    bus = RailBus([Broken(), Named(), Broken()])
    await _deliver(bus, await tasks.entries("t"), state)
    assert bus.failures == {Broken.__qualname__: 2, "my-rail": 1}


def test_not_a_rail_is_refused() -> None:
    """Something without on_event that cannot be called is a TypeError, at once."""
    with pytest.raises(TypeError, match="int is not a rail"):
        RailBus([42])  # type: ignore[list-item]


@pytest.mark.parametrize("timeout_s", [0, -1, float("inf"), float("nan")])
def test_timeout_must_be_positive(timeout_s: float) -> None:
    """timeout_s is a positive, finite number of seconds."""
    with pytest.raises(ValueError, match="timeout_s"):
        RailBus([], timeout_s=timeout_s)


class _Untouchable(Sequence[LedgerEntry]):
    """A batch that fails if anything looks at it."""

    def __getitem__(self, index: typing.Any) -> typing.Any:
        raise AssertionError("the empty bus looked at the entries")

    def __len__(self) -> int:
        raise AssertionError("the empty bus looked at the entries")

    def __iter__(self) -> Iterator[LedgerEntry]:
        raise AssertionError("the empty bus looked at the entries")


async def test_empty_bus_does_no_work(tasks: Tasks) -> None:
    """A bus without rails returns at once, without looking at the entries."""
    state = await tasks.create("t")
    bus = RailBus(())
    await bus.emit(_Untouchable(), state)
    assert (bus.rails, bus.failure_count, bus.timeout_s) == ((), 0, 1.0)


async def test_entry_that_cannot_be_copied_counts_for_every_rail(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry the codec cannot copy reaches no rail; each rail is charged one failure."""
    state = await tasks.create("t")
    (entry,) = await tasks.entries("t")
    broken = dataclasses.replace(entry, event=dataclasses.replace(entry.event, input=object()))
    bus = RailBus([recorder])
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await _deliver(bus, [broken], state)
    assert recorder.events == []
    assert bus.failures == {"Recorder": 1}
    assert "could not be copied" in caplog.records[0].getMessage()


async def test_ended_task_views_are_dropped(tasks: Tasks, recorder: Recorder) -> None:
    """A rail's copies of a task's plan and contract go once the task ends."""
    bus = RailBus([recorder])
    tasks.bus = bus
    await tasks.simple("t", {POUR: Success(1)})
    assert all(not slot.views for slot in bus._slots)  # private: checking for a leak


async def test_views_of_unfinished_tasks_are_bounded(tasks: Tasks, recorder: Recorder) -> None:
    """Tasks that never finish leave at most a bounded number of copies behind in a rail."""
    bus = RailBus([recorder])
    tasks.bus = bus
    for number in range(130):
        await tasks.create(f"t{number}")
    await bus.drain()
    (slot,) = bus._slots  # private: checking for a leak
    assert len(slot.views) == 128
    assert "t0" not in slot.views
    assert "t129" in slot.views
