"""RootCauseRail: device failures by node and tool, across tasks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pev.ledger import NodeFinished
from pev.model import (
    DeviceFailure,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerificationContract,
    VerificationMode,
    VerifierFailure,
)
from pev.rails import RailBus, RailEvent, RailPhase, RootCauseRail

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Tasks

GRIP = PlanNode("grip", "grip the pot", tool="arm")
LOOK = PlanNode("look", "look at the pot", tool="camera", after=("grip",))
MOVE = PlanNode("move", "move the pot", after=("grip",))


async def test_counts_across_two_tasks(tasks: Tasks) -> None:
    """Failures of two tasks add up by node, by tool, as unknown outcomes and as diagnoses."""
    rail = RootCauseRail()
    tasks.bus = RailBus([rail])
    await tasks.simple(
        "t1", {GRIP: DeviceFailure("grip", "slipped"), LOOK: Success("ok")}, blame=["grip"]
    )
    unknown = DeviceFailure("grip", "no reply", is_timeout=True, outcome_unknown=True)
    await tasks.simple("t2", {GRIP: unknown, MOVE: Success(1)}, blame=["grip"])
    assert rail.by_node == {"grip": 2}
    assert rail.by_tool == {"arm": 2}
    assert rail.unknown_outcomes == {"grip": 1}
    assert rail.diagnosed_by_node == {"grip": 2}
    assert rail.device_failures == 2


async def test_only_device_failures_count(tasks: Tasks) -> None:
    """Successes and node-level check failures are not device failures."""
    rail = RootCauseRail()
    tasks.bus = RailBus([rail])
    await tasks.simple("t", {GRIP: Success(1), LOOK: VerifierFailure("look", "blurry")})
    assert rail.summary() == {
        "device_failures": 0,
        "unknown_outcomes": 0,
        "by_node": {},
        "by_tool": {},
        "unknown_by_node": {},
        "diagnosed_by_node": {},
    }


async def test_node_without_tool_counts_by_node_only(tasks: Tasks) -> None:
    """A failed node that names no tool counts for its node, not for any tool."""
    rail = RootCauseRail()
    tasks.bus = RailBus([rail])
    await tasks.simple("t", {GRIP: Success(1), MOVE: DeviceFailure("move", "stuck")})
    assert (rail.by_node, rail.by_tool) == ({"move": 1}, {})


def test_tool_from_plan_when_record_is_missing() -> None:
    """Without the record, the tool comes from the event's node → tool mapping."""
    rail = RootCauseRail()
    failure = DeviceFailure("grip", "slipped")
    finished = NodeFinished(
        record_id=RecordId("r1"),
        status=RecordStatus.FAILED,
        result=failure,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    rail.on_event(
        RailEvent(
            phase=RailPhase.NODE_FINISHED,
            task_id=TaskId("t"),
            seq=4,
            at=finished.at,
            event=finished,
            contract=VerificationContract(VerificationMode.OFF),
            plan=None,
            tools={"grip": "arm"},
        )
    )
    assert (rail.by_node, rail.by_tool) == ({"grip": 1}, {"arm": 1})


async def test_summary_most_common_first(tasks: Tasks) -> None:
    """The summary is plain data, each mapping most common first."""
    rail = RootCauseRail()
    tasks.bus = RailBus([rail])
    await tasks.simple("t1", {GRIP: Success(1), LOOK: DeviceFailure("look", "dark")})
    await tasks.simple("t2", {GRIP: Success(1), LOOK: DeviceFailure("look", "dark")})
    await tasks.simple("t3", {GRIP: DeviceFailure("grip", "slipped")}, blame=["grip"])
    summary = rail.summary()
    assert summary["device_failures"] == 3
    assert list(summary["by_node"].items()) == [("look", 2), ("grip", 1)]
    assert list(summary["by_tool"].items()) == [("camera", 2), ("arm", 1)]
    assert summary["diagnosed_by_node"] == {"grip": 1}
