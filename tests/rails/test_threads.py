"""Sync rails in threads of their own (docs/rails.md): a slow rail never holds the event loop.

A sync rail is fed from its bounded queue by a daemon thread of its own: it sees one event at a
time, in ledger order; on overflow its oldest events are dropped and counted; what it raises is
logged and counted; the drain at the end of a drive is bounded as for async rails, and a rail
still busy then finishes in the background without holding the run or the process.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import LOOK, POUR, RECOVERY

import pev
from pev.ledger import TaskFinished
from pev.model import Plan, PlanNode, Success
from pev.policy import RecoveryPolicy
from pev.rails import RailBus, RailEvent, RailPhase
from pev.rails._event import PHASES_OF_EVENT
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Recorder, Tasks

# How long a timed test may take past what it waits for, on a slow, loaded machine.
MARGIN_S = 8.0
# How long a test waits for a rail's thread to get somewhere before it fails.
WAIT_S = 10.0

RESULTS = {POUR: Success({"litres": 2}), LOOK: Success("damp")}
EVENTS = 11  # the rail events of that task (see test_bus)

PLAN = Plan("water the plants", (PlanNode("look", "read the soil", effect="query"),))


class Blocked:
    """A sync rail that waits for its gate before it takes each event."""

    name = "blocked"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.seqs: list[int] = []

    def on_event(self, event: RailEvent) -> None:
        self.entered.set()
        if not self.gate.wait(WAIT_S * 3):
            raise TimeoutError("the test never opened the gate")
        self.seqs.append(event.seq)


def _rail_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"pev-rail-{name}"]


def _ends(name: str) -> bool:
    """Whether the rail's thread has ended within WAIT_S."""
    give_up = time.monotonic() + WAIT_S
    while _rail_threads(name):
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True


async def _run(rail: object, *, store: MemoryStore) -> pev.RunResult:
    """A one-node task that its verifier passes, under a 3 s deadline."""
    return await pev.run(
        "water the plants",
        planner=ScriptedPlanner(PLAN),
        executor=FunctionExecutor({"look": lambda: {"soil": "damp"}}),
        verifier=ScriptedVerifier.passing(),
        contract=RECOVERY,
        policy=RecoveryPolicy(task_timeout_s=3),
        store=store,
        rails=[rail],
    )


async def test_a_slow_sync_rail_does_not_change_a_runs_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sync rail taking 0.9 s an event neither fails a 3 s task nor holds run past the drain
    bound; it loses no event uncounted, and its thread ends once it is done."""
    done: list[str] = []

    class Slow:
        name = "slow"

        def on_event(self, event: RailEvent) -> None:
            time.sleep(0.9)
            done.append(str(event.phase))

    store = MemoryStore()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pev.rails"):
        result = await _run(Slow(), store=store)
    returned = datetime.now(UTC)
    elapsed = time.monotonic() - began

    assert (result.status, result.reason) == ("succeeded", "passed")
    entries = await store.read(result.task_id)
    finished = next(e for e in entries if isinstance(e.event, TaskFinished))
    # The default drain_s (2 s) after the task's end, and a margin for a loaded machine.
    assert (returned - finished.at).total_seconds() < 2.0 + MARGIN_S
    assert elapsed < 2.0 + MARGIN_S
    assert _ends("slow"), "the rail's thread outlived the event it was on"
    mine = [r for r in caplog.records if getattr(r, "pev", {}).get("rail") == "slow"]
    dropped = sum(r.pev.get("dropped", 0) for r in mine)
    unfinished = sum(r.pev.get("unfinished", 0) for r in mine)
    assert dropped > 0
    assert unfinished <= 1
    written = sum(len(PHASES_OF_EVENT.get(e.event.kind, ())) for e in entries)
    # What the rail was still on when run returned, it finished in the background.
    assert written == len(done) + dropped


async def test_a_sync_rail_runs_in_a_thread_with_the_drives_context(tasks: Tasks) -> None:
    """The rail's calls run in its own thread, never the loop's, seeing the emitter's
    context variables."""
    request = contextvars.ContextVar[str]("request")
    seen: list[tuple[str, str]] = []

    def rail(event: RailEvent) -> None:
        seen.append((threading.current_thread().name, request.get("unset")))

    state = await tasks.create("t")
    bus = RailBus([rail])
    request.set("watering")
    await bus.emit(await tasks.entries("t"), state)
    await bus.drain()
    name = f"pev-rail-{rail.__qualname__}"
    assert seen == [(name, "watering")]
    assert threading.current_thread().name != name


async def test_a_sync_rail_sees_events_in_order_one_at_a_time(
    tasks: Tasks, recorder: Recorder
) -> None:
    """However long each call takes, a sync rail sees its events in ledger order, never two
    at once."""
    order: list[tuple[int, str]] = []
    inside = threading.Semaphore(1)

    def uneven(event: RailEvent) -> None:
        assert inside.acquire(blocking=False), "two events at once"
        time.sleep(0.002 * (event.seq % 3))
        order.append((event.seq, str(event.phase)))
        inside.release()

    bus = RailBus([uneven, recorder])
    tasks.bus = bus
    await tasks.simple("t", RESULTS)
    assert order == [(event.seq, str(event.phase)) for event in recorder.events]
    assert len(order) == EVENTS
    assert (bus.failure_count, bus.dropped_count) == (0, 0)


async def test_a_sync_rail_shared_by_two_buses_sees_one_event_at_a_time(tasks: Tasks) -> None:
    """One rail object given to the buses of two runs going on at once (a worker's tasks) is
    still called one event at a time, as it was on one event loop."""
    seen: list[int] = []
    inside = threading.Semaphore(1)

    class Shared:
        name = "shared"

        def on_event(self, event: RailEvent) -> None:
            assert inside.acquire(blocking=False), "two events at once"
            time.sleep(0.001)
            seen.append(event.seq)
            inside.release()

    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    rail = Shared()
    one, two = RailBus([rail]), RailBus([rail])
    await asyncio.gather(one.emit(entries, state), two.emit(entries, state))
    await asyncio.gather(one.drain(timeout_s=WAIT_S), two.drain(timeout_s=WAIT_S))
    assert len(seen) == 2 * EVENTS
    assert one.failure_count + two.failure_count == 0


async def test_a_sync_rails_overflow_drops_the_oldest_and_counts_them(tasks: Tasks) -> None:
    """A sync rail held up while its queue overflows keeps the event it is on and the newest
    events; the others are dropped and counted."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    blocked = Blocked()
    bus = RailBus([blocked], queue_size=3)
    await bus.emit(entries[:1], state)
    assert await asyncio.to_thread(blocked.entered.wait, WAIT_S)  # the rail is on the first
    for entry in entries[1:]:
        await bus.emit([entry], state)
    blocked.gate.set()
    await bus.drain(timeout_s=WAIT_S)

    phased = [entry.seq for entry in entries if PHASES_OF_EVENT.get(entry.event.kind)]
    assert blocked.seqs[0] == phased[0]
    assert len(blocked.seqs) == 4
    assert bus.dropped == {"blocked": EVENTS - 4}
    assert bus.unfinished == {}


async def test_a_raising_sync_rail_is_logged_and_counted(
    tasks: Tasks, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """What a sync rail raises is logged from its thread, with the traceback, and counted."""

    def broken(event: RailEvent) -> None:
        raise RuntimeError(f"no collector for {event.phase}")

    bus = RailBus([broken, recorder])
    tasks.bus = bus
    with caplog.at_level(logging.ERROR, logger="pev.rails"):
        await tasks.simple("t", RESULTS)
    raised = [r for r in caplog.records if " raised at phase " in r.getMessage()]
    assert bus.failures == {broken.__qualname__: EVENTS}
    assert len(recorder.events) == EVENTS
    assert len(raised) == EVENTS
    assert all(r.threadName == f"pev-rail-{broken.__qualname__}" for r in raised)
    assert all(isinstance(r.exc_info[1], RuntimeError) for r in raised if r.exc_info)


async def test_drain_leaves_a_busy_sync_rail_to_finish_in_the_background(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """Drain waits drain_s for a held-up sync rail, counts the rest, and leaves the event it
    is on to finish; the next drive is served by the same thread once the rail returns."""
    await tasks.simple("t", RESULTS)
    entries, state = await tasks.entries("t"), await tasks.ledger.state("t")
    blocked = Blocked()
    bus = RailBus([blocked], drain_s=0.05)
    try:
        await bus.emit(entries, state)
        assert await asyncio.to_thread(blocked.entered.wait, WAIT_S)
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="pev.rails"):
            await bus.drain()
        assert time.monotonic() - began < 0.05 + MARGIN_S
        assert bus.dropped == {"blocked": EVENTS - 1}
        assert bus.unfinished == {"blocked": 1}
        assert [r.pev for r in caplog.records] == [
            {"rail": "blocked", "dropped": EVENTS - 1},
            {"rail": "blocked", "unfinished": 1},
        ]
        (thread,) = _rail_threads("blocked")

        await bus.emit(entries[-1:], state)  # a second drive while the rail is still busy
        blocked.gate.set()
        await bus.drain(timeout_s=WAIT_S)
        assert blocked.seqs == [entries[0].seq, entries[-1].seq]
        assert not thread.is_alive() or _rail_threads("blocked") == [thread]
    finally:
        blocked.gate.set()
    assert _ends("blocked")


async def test_a_sync_callable_returning_a_coroutine_is_awaited_on_the_loop(
    tasks: Tasks,
) -> None:
    """A sync function that returns a coroutine has it awaited on the drive's event loop, bounded by
    timeout_s as an async rail is."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def note(event: RailEvent) -> None:
        loops.append(asyncio.get_running_loop())
        if event.phase is RailPhase.TASK_FINISHED:
            await asyncio.sleep(60)

    def handing_on(event: RailEvent) -> object:  # a sync function, returning a coroutine
        return note(event)

    bus = RailBus([handing_on], timeout_s=0.2)
    tasks.bus = bus
    await tasks.simple("t", RESULTS)
    assert loops == [asyncio.get_running_loop()] * EVENTS
    assert bus.failures == {handing_on.__qualname__: 1}


STUCK_RUN = r"""
import asyncio
import threading

import pev
from pev.model import Plan, PlanNode
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier


def stuck(event):
    threading.Event().wait()  # never returns


async def main():
    result = await pev.run(
        "water the plants",
        planner=ScriptedPlanner(Plan("water", (PlanNode("look", "read the soil"),))),
        executor=FunctionExecutor({"look": lambda: "damp"}),
        verifier=ScriptedVerifier.passing(),
        store=MemoryStore(),
        rails=[stuck],
    )
    print(result.status, flush=True)


asyncio.run(main())
"""


def test_a_stuck_sync_rail_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """A process whose sync rail never returns still exits once its run has returned."""
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_RUN)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=2.0 + 3 * MARGIN_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["succeeded"]
    assert time.monotonic() - began < 2.0 + 3 * MARGIN_S
