"""Rails off the critical path: a queue and a task per rail, drop-oldest, and a bounded drain.

See docs/design.md §7: a slow rail delays nothing, deadlines never wait for rails, and a run
waits at most a short bounded time at the end for rails to drain.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import LOOK, POUR, RECOVERY

import pev
from pev import codec
from pev.model import Plan, PlanNode, Success
from pev.policy import RecoveryPolicy
from pev.rails import RailBus, RailEvent, RailLike, RailPhase
from pev.rails._event import PHASES_OF_EVENT
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Recorder, Tasks

# How long a timed test may take past what it waits for, on a slow, loaded machine.
MARGIN_S = 8.0

# A passing task: pour, then look; 11 rail events in all (see test_bus).
RESULTS = {POUR: Success({"litres": 2}), LOOK: Success("damp")}
EVENTS = 11


class Gated:
    """An async rail that waits for its gate before it takes each event."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seqs: list[int] = []

    async def on_event(self, event: RailEvent) -> None:
        await self.gate.wait()
        self.seqs.append(event.seq)


class Stuck:
    """An async rail that never returns unless cancelled."""

    name = "stuck"

    def __init__(self) -> None:
        self.started = 0

    async def on_event(self, event: RailEvent) -> None:
        self.started += 1
        await asyncio.Event().wait()


def _rail_tasks() -> list[asyncio.Task[object]]:
    """The rails' tasks still running in this event loop."""
    return [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("pev-rail-") and not task.done()
    ]


async def test_emit_waits_for_no_rail(tasks: Tasks, recorder: Recorder) -> None:
    """Emit returns while a rail is still held up; the rail sees everything once let go."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    gated = Gated()
    bus = RailBus([gated, recorder])

    await asyncio.wait_for(bus.emit(entries, state), timeout=MARGIN_S)
    await asyncio.sleep(0.01)  # the rails' tasks run: the recorder is not held up by the gate
    assert (gated.seqs, len(recorder.events)) == ([], EVENTS)

    gated.gate.set()
    await bus.drain()
    assert gated.seqs == [event.seq for event in recorder.events]
    assert (bus.dropped_count, bus.failure_count) == (0, 0)


async def test_async_rail_runs_in_its_own_task(tasks: Tasks) -> None:
    """An async rail is called from its rail's task, not from the task that emits."""
    callers: list[asyncio.Task[object] | None] = []

    async def rail(event: RailEvent) -> None:
        callers.append(asyncio.current_task())

    state = await tasks.create("t")
    bus = RailBus([rail])
    await bus.emit(await tasks.entries("t"), state)
    await bus.drain()
    (caller,) = callers
    assert caller is not None
    assert caller is not asyncio.current_task()
    assert caller.get_name().startswith("pev-rail-")


async def test_order_is_kept_for_each_rail(
    tasks: Tasks, new_recorder: Callable[[], Recorder]
) -> None:
    """Each rail sees the events in ledger order, one at a time, whatever the other rails do."""
    order: list[tuple[int, str]] = []
    busy = 0

    async def yielding(event: RailEvent) -> None:
        nonlocal busy
        busy += 1
        assert busy == 1, "two events at once"
        await asyncio.sleep(0.001 * (event.seq % 3))
        order.append((event.seq, str(event.phase)))
        busy -= 1

    quick = new_recorder()
    bus = RailBus([yielding, quick])
    tasks.bus = bus
    await tasks.simple("t", RESULTS)
    assert order == [(event.seq, str(event.phase)) for event in quick.events]
    assert [seq for seq, _ in order] == sorted(seq for seq, _ in order)
    assert len(order) == EVENTS


async def test_overflow_drops_the_oldest_and_counts_them(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """A full queue drops its oldest event for the newest; each drop is counted for its rail."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    slow = Gated()

    async def quick(event: RailEvent) -> None:  # on the loop, as the gated: it keeps up
        recorder.on_event(event)

    bus = RailBus([slow, quick], queue_size=3)
    for entry in entries:  # one append at a time, as the engine writes them
        await bus.emit([entry], state)
        await asyncio.sleep(0)  # the rails' tasks run: the recorder keeps up, the gated not
    slow.gate.set()
    await bus.drain()

    # The gated rail had the first event when its queue began to overflow, and keeps the last 3.
    first, *_, last = recorder.events
    assert slow.seqs == [first.seq] + [event.seq for event in recorder.events[-3:]]
    assert last.phase is RailPhase.TASK_FINISHED
    assert len(recorder.events) == EVENTS
    assert bus.dropped == {"gated": EVENTS - 4}
    assert bus.dropped_count == EVENTS - 4


async def test_overflow_is_logged_once_per_rail_per_drive(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """The first drop of a drive logs a warning naming the rail; later drops are only counted."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    slow = Gated()
    bus = RailBus([slow], queue_size=2)
    with caplog.at_level(logging.WARNING, logger="pev.rails"):
        for _ in range(2):  # two drives on one bus
            await bus.emit(entries, state)
            await bus.emit(entries, state)
            slow.gate.set()
            await bus.drain()
            slow.gate.clear()

    full = [r for r in caplog.records if "falling behind" in r.getMessage()]
    message = (
        "rail gated is falling behind: its queue of 2 events is full, so its oldest events are "
        "dropped (counted in RailBus.dropped)"
    )
    assert [r.getMessage() for r in full] == [message, message]
    assert all(r.levelno == logging.WARNING for r in full)
    assert full[0].pev == {"rail": "gated", "queue_size": 2}
    assert bus.dropped == {"gated": 2 * (2 * EVENTS - 2)}
    assert slow.seqs == [entry.seq for entry in entries[-2:]] * 2


async def test_a_raising_rail_behind_a_queue_is_still_counted(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """An async rail raising from its task is logged and counted; the other rails see it all."""

    async def broken(event: RailEvent) -> None:
        await asyncio.sleep(0)
        raise RuntimeError(f"no collector for {event.phase}")

    bus = RailBus([broken, recorder])
    tasks.bus = bus
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await tasks.simple("t", RESULTS)
    assert bus.failures == {broken.__qualname__: EVENTS}
    assert len(recorder.events) == EVENTS
    assert len([r for r in caplog.records if " raised at phase " in r.getMessage()]) == EVENTS


async def test_a_vandal_ahead_of_a_slow_rail_changes_nothing_for_it(
    tasks: Tasks, new_recorder: Callable[[], Recorder]
) -> None:
    """A rail that mutates its copies first does not alter what a rail still queued sees later."""

    def vandal(event: RailEvent) -> None:
        object.__setattr__(event, "phase", RailPhase.TASK_FINISHED)
        object.__setattr__(event.contract, "goal", "set fire to the plants")
        if event.plan is not None:
            object.__setattr__(event.plan.nodes[0], "tool", "hammer")

    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    alone = new_recorder()
    bus = RailBus([alone])
    await bus.emit(entries, state)
    await bus.drain()
    slow, beside = Gated(), new_recorder()

    async def late(event: RailEvent) -> None:
        await slow.on_event(event)
        beside.on_event(event)

    bus = RailBus([vandal, late])
    await bus.emit(entries, state)
    await asyncio.sleep(0.01)  # the vandal has been at every event by now
    slow.gate.set()
    await bus.drain()
    assert [codec.dumps(e) for e in beside.events] == [codec.dumps(e) for e in alone.events]
    assert beside.events[1].plan is not None
    assert beside.events[1].plan.nodes[0].tool == "can"


async def test_drain_is_bounded_and_counts_what_is_left(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """A rail that never returns: drain waits drain_s, then drops its events and stops it."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    stuck = Stuck()
    bus = RailBus([stuck], timeout_s=60, drain_s=0.05)
    await bus.emit(entries, state)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pev.rails"):
        await bus.drain()

    assert time.monotonic() - began < 0.05 + MARGIN_S
    assert stuck.started == 1
    assert bus.dropped == {"stuck": EVENTS}  # the one it was on included
    assert bus.failure_count == 0
    assert _rail_tasks() == []
    (record,) = caplog.records
    assert record.getMessage() == (
        "rail stuck missed 11 events: the drive ended before the rail saw them "
        "(counted in RailBus.dropped)"
    )
    assert record.pev == {"rail": "stuck", "dropped": EVENTS}


async def test_drain_takes_its_own_timeout(tasks: Tasks) -> None:
    """drain(timeout_s=...) overrides the bus's drain_s for one call."""
    state = await tasks.create("t")
    bus = RailBus([Stuck()], timeout_s=60, drain_s=60)
    await bus.emit(await tasks.entries("t"), state)
    began = time.monotonic()
    await bus.drain(timeout_s=0.01)
    assert time.monotonic() - began < MARGIN_S
    assert bus.dropped_count == 1


async def test_drain_with_nothing_emitted(recorder: Recorder) -> None:
    """Draining a bus that was never given an event returns at once, as often as it is asked."""
    bus = RailBus([recorder], drain_s=60)
    began = time.monotonic()
    await bus.drain()
    await bus.drain()
    await RailBus((), drain_s=60).drain()
    assert time.monotonic() - began < MARGIN_S
    assert (bus.dropped_count, bus.failure_count, recorder.events) == (0, 0, [])


async def test_a_drained_bus_can_be_used_again(tasks: Tasks, recorder: Recorder) -> None:
    """After a drain the bus starts its rails' tasks again on the next emit."""
    state = await tasks.create("t")
    entries = await tasks.entries("t")
    bus = RailBus([recorder])
    for _ in range(2):
        await bus.emit(entries, state)
        await bus.drain()
        assert _rail_tasks() == []
    assert recorder.phases == ["task_started", "task_started"]


async def test_cancelling_drain_still_stops_the_rails(tasks: Tasks) -> None:
    """A drain cancelled while it waits still stops the rails' tasks and counts their events."""
    state = await tasks.create("t")
    stuck = Stuck()
    bus = RailBus([stuck], timeout_s=60, drain_s=60)
    await bus.emit(await tasks.entries("t"), state)
    draining = asyncio.create_task(bus.drain())
    await asyncio.sleep(0.01)
    assert stuck.started == 1
    draining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await draining
    assert _rail_tasks() == []
    assert bus.dropped == {"stuck": 1}


def test_a_bus_left_undrained_is_taken_up_by_the_next_loop(
    tasks: Tasks, recorder: Recorder
) -> None:
    """Events a loop ended on before its rails saw them are counted when the next loop emits."""
    bus = RailBus([Stuck(), recorder], timeout_s=60, drain_s=0.01)
    state = asyncio.run(tasks.create("t"))
    entries = asyncio.run(tasks.entries("t"))

    async def emit_and_leave() -> None:
        await bus.emit(entries, state)
        await asyncio.sleep(0.01)

    async def emit_and_drain() -> None:
        await bus.emit(entries, state)
        await bus.drain()

    logging.getLogger("pev.rails").disabled = True  # the stuck rail's warnings
    try:
        asyncio.run(emit_and_leave())
        asyncio.run(emit_and_drain())
    finally:
        logging.getLogger("pev.rails").disabled = False
    assert recorder.phases == ["task_started", "task_started"]
    assert bus.dropped == {"stuck": 2}


@pytest.mark.parametrize("queue_size", [0, -1, 1.5, True])
def test_queue_size_must_be_a_positive_integer(queue_size: int) -> None:
    """queue_size is a number of events, at least one."""
    with pytest.raises(ValueError, match="queue_size"):
        RailBus([], queue_size=queue_size)


@pytest.mark.parametrize("drain_s", [-1, float("inf"), float("nan")])
def test_drain_s_must_be_seconds(drain_s: float) -> None:
    """drain_s is a finite number of seconds, zero or more."""
    with pytest.raises(ValueError, match="drain_s"):
        RailBus([], drain_s=drain_s)


async def test_drain_timeout_must_be_seconds() -> None:
    """drain's own timeout_s is a finite number of seconds, zero or more."""
    with pytest.raises(ValueError, match="timeout_s"):
        await RailBus([]).drain(timeout_s=-1)


def test_defaults() -> None:
    """A thousand events a rail, two seconds to drain, a second per async call."""
    bus = RailBus([], drain_s=0)
    assert (bus.drain_s, RailBus([]).drain_s) == (0, 2.0)
    assert (bus.queue_size, bus.timeout_s, bus.dropped_count) == (1000, 1.0, 0)


# -- through pev.run -------------------------------------------------------------------------

PLAN = Plan("water the plants", (PlanNode("look", "read the soil", effect="query"),))


async def _run(
    rail: RailLike, *, policy: RecoveryPolicy | None = None, store: MemoryStore | None = None
) -> pev.RunResult:
    """A one-node task in recovery mode that its verifier passes."""
    return await pev.run(
        "water the plants",
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor({"look": lambda: {"soil": "damp"}}),
        verifier=ScriptedVerifier.passing(),
        contract=RECOVERY,
        policy=policy,
        store=store or MemoryStore(),
        rails=[rail],
    )


async def _phases_written(result: pev.RunResult, store: MemoryStore) -> int:
    entries = await store.read(result.task_id)
    return sum(len(PHASES_OF_EVENT.get(entry.event.kind, ())) for entry in entries)


async def test_a_slow_rail_does_not_hold_a_run_past_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rail taking 0.9 s an event neither fails a 3 s task nor loses events uncounted."""
    done: list[str] = []

    class Slow:
        name = "slow"

        async def on_event(self, event: RailEvent) -> None:
            await asyncio.sleep(0.9)
            done.append(str(event.phase))

    store = MemoryStore()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pev.rails"):
        result = await _run(Slow(), policy=RecoveryPolicy(task_timeout_s=3), store=store)
    elapsed = time.monotonic() - began

    assert (result.status, result.reason) == ("succeeded", "passed")
    assert elapsed < 2.0 + MARGIN_S  # the default drain_s, and a margin
    mine = [r for r in caplog.records if getattr(r, "pev", {}).get("rail") == "slow"]
    timed_out = [r for r in mine if r.levelno == logging.ERROR]  # on a very slow machine
    (missed,) = [r for r in mine if r.levelno == logging.WARNING]
    assert missed.pev["dropped"] > 0
    written = await _phases_written(result, store)
    assert written == len(done) + len(timed_out) + missed.pev["dropped"]
    assert _rail_tasks() == []


async def test_a_rail_that_never_returns_delays_a_run_by_drain_s_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run ends, with its outcome, within the bus's drain time (and a margin)."""
    stuck = Stuck()
    began = time.monotonic()
    with caplog.at_level(logging.CRITICAL, logger="pev.rails"):
        result = await _run(stuck, policy=RecoveryPolicy(task_timeout_s=3))
    assert time.monotonic() - began < 2.0 + MARGIN_S
    assert (result.status, result.reason) == ("succeeded", "passed")
    assert stuck.started >= 1
    assert _rail_tasks() == []


async def test_a_quick_rail_sees_every_event_before_run_returns() -> None:
    """Run drains the rails: a quick rail has every phase of the task when run returns."""
    heard: list[RailPhase] = []

    async def quick(event: RailEvent) -> None:
        await asyncio.sleep(0)
        heard.append(event.phase)

    result = await _run(quick)
    assert result.ok
    assert heard[0] is RailPhase.TASK_STARTED
    assert heard[-1] is RailPhase.TASK_FINISHED
    assert len(heard) == EVENTS - 2  # one node, not two
