"""KeyboardInterrupt and SystemExit raised inside a component leave run as themselves.

The ledger is left consistent first: no record is left pending, the lease is released, and the
task can be resumed (on the same SQLite file, from a fresh store) or cancelled; an action whose
call was interrupted is ``unknown`` and is never sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.watering import GOAL, RECOVERY

import pev
from pev.engine import Observation
from pev.ledger import Ledger, TaskPhase, TaskState
from pev.model import Effect, Plan, PlanNode, RecordStatus, Verdict
from pev.rails import RailEvent
from pev.stores import SQLiteStore

INTERRUPTS = [pytest.param(KeyboardInterrupt, id="keyboard"), pytest.param(SystemExit, id="exit")]
COMPONENTS = ["tool", "planner", "verifier", "observer", "rail"]
TASK = "t-interrupted"


class Armed:
    """Components that raise ``interrupt`` once, from the one named by ``where``."""

    def __init__(self, where: str, interrupt: type[BaseException]) -> None:
        self.where = where
        self.interrupt = interrupt
        self.fired = False
        self.sent = 0  # how many times the action reached the outside world

    def _maybe(self, where: str) -> None:
        if where == self.where and not self.fired:
            self.fired = True
            raise self.interrupt

    def agent(self) -> pev.Agent:
        armed = self

        @pev.tool
        def water() -> str:
            """Pour water (an action)."""
            armed.sent += 1
            armed._maybe("tool")
            return "poured"

        def planner(request: object) -> Plan:
            armed._maybe("planner")
            return Plan(GOAL, (PlanNode("water", "pour water", tool="water"),))

        def verifier(request: pev.engine.VerifyRequest) -> Verdict:
            armed._maybe("verifier")
            return Verdict.passed(request.contract)

        def observer(phase: object, context: object) -> Observation:
            armed._maybe("observer")
            return Observation(kind="state", payload={"soil": "damp"})

        def rail(event: RailEvent) -> None:
            armed._maybe("rail")

        return pev.Agent(
            planner,
            tools=[water],
            verifier=verifier,
            observer=observer,
            contract=RECOVERY,
            rails=(rail,),
        )


async def _state(db: Path) -> TaskState:
    store = SQLiteStore(db)
    try:
        return await Ledger(store).state(TASK)
    finally:
        await store.close()


async def _run_then_resume(
    db: Path, armed: Armed, interrupt: type[BaseException]
) -> tuple[TaskState, pev.RunResult]:
    """Run until the interrupt comes out of run; then resume from a fresh store."""
    agent = armed.agent()
    store = SQLiteStore(db)
    try:
        with pytest.raises(interrupt):
            await pev.run(GOAL, agent=agent, store=store, task_id=TASK)
    finally:
        await store.close()
    left = await _state(db)
    store = SQLiteStore(db)
    try:
        resumed = await pev.resume(TASK, store=store, agent=agent)
    finally:
        await store.close()
    return left, resumed


@pytest.mark.parametrize("interrupt", INTERRUPTS)
@pytest.mark.parametrize("where", COMPONENTS)
async def test_an_interrupt_in_a_component_propagates_as_itself_and_the_task_resumes(
    tmp_path: Path, where: str, interrupt: type[BaseException]
) -> None:
    """run raises the interrupt itself (not CancelledError); nothing is left pending; resume ends
    the task without sending the action again."""
    armed = Armed(where, interrupt)

    left, resumed = await _run_then_resume(tmp_path / "ledger.db", armed, interrupt)

    assert armed.fired
    assert not left.terminal
    assert all(record.terminal for record in left.records.values())
    assert resumed.status in ("succeeded", "partial", "failed")
    assert armed.sent == 1  # never re-sent on resume


async def test_an_interrupted_action_is_recorded_unknown_with_its_frame(tmp_path: Path) -> None:
    """The tool's record ends unknown, naming the interrupt and the tool's line."""
    armed = Armed("tool", KeyboardInterrupt)

    left, _ = await _run_then_resume(tmp_path / "ledger.db", armed, KeyboardInterrupt)

    [record] = left.records.values()
    assert record.status is RecordStatus.UNKNOWN
    assert record.error is not None
    assert record.error.startswith("interrupted by KeyboardInterrupt at test_interrupts.py:")
    assert "in _maybe" in record.error
    assert left.phase is TaskPhase.EXECUTING


@pytest.mark.parametrize(
    ("where", "phase"),
    [("planner", TaskPhase.PLANNING), ("verifier", TaskPhase.VERIFYING)],
)
async def test_an_interrupted_planner_or_verifier_call_is_repeated_on_resume(
    tmp_path: Path, where: str, phase: TaskPhase
) -> None:
    """The task stays in the phase whose call was interrupted; resume repeats the call."""
    armed = Armed(where, SystemExit)

    left, resumed = await _run_then_resume(tmp_path / "ledger.db", armed, SystemExit)

    assert left.phase is phase
    assert left.replans_used == 0
    assert resumed.ok


async def test_an_interrupted_task_can_be_cancelled(tmp_path: Path) -> None:
    """After the interrupt, cancel from another store ends the task when it is driven again."""
    db = tmp_path / "ledger.db"
    armed = Armed("tool", KeyboardInterrupt)
    agent = armed.agent()
    store = SQLiteStore(db)
    try:
        with pytest.raises(KeyboardInterrupt):
            await pev.run(GOAL, agent=agent, store=store, task_id=TASK)
        await pev.cancel(TASK, store=store, reason="operator stop")
        result = await pev.resume(TASK, store=store, agent=agent)
    finally:
        await store.close()

    assert (result.status, result.reason) == ("failed", "cancelled")  # the action is unknown
    assert armed.sent == 1


async def test_the_other_running_nodes_reach_a_terminal_record(tmp_path: Path) -> None:
    """A node running beside the interrupted one is cancelled and recorded before run raises."""
    started = asyncio.Event()

    @pev.tool(effect="query")
    async def wait_for_rain() -> str:
        """A slow query."""
        started.set()
        await asyncio.sleep(30)
        return "rain"

    @pev.tool
    async def pour() -> str:
        """Pour, once the slow query is under way; then the operator presses Ctrl-C."""
        await started.wait()
        raise KeyboardInterrupt

    plan = Plan(
        GOAL,
        (
            PlanNode("rain", "wait", tool="wait_for_rain", effect=Effect.QUERY),
            PlanNode("pour", "pour", tool="pour"),
        ),
    )
    planner: Callable[[object], Plan] = lambda request: plan  # noqa: E731
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        # Awaited directly: asyncio stops the loop with a KeyboardInterrupt that leaves any task
        # but the one awaiting run (wait_for's, say), as it would for any coroutine.
        with pytest.raises(KeyboardInterrupt):
            await pev.run(
                GOAL, planner=planner, tools=[wait_for_rain, pour], store=store, task_id=TASK
            )
    finally:
        await store.close()

    state = await _state(tmp_path / "ledger.db")
    statuses = {record.node_id: record.status for record in state.records.values()}
    assert statuses == {"rain": RecordStatus.CANCELLED, "pour": RecordStatus.UNKNOWN}
