"""Rails in a run: they observe every phase and never change what the engine decides.

See docs/design.md §7.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest
from tests.support.watering import GOAL, RECOVERY

import pev
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import LedgerEntry
from pev.model import JsonObject, Plan, PlanNode, Verdict
from pev.rails import LoggingRail, RailEvent, RailPhase, RootCauseRail
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

PLAN = Plan(
    GOAL,
    (
        PlanNode("look", "read the soil", effect="query"),
        PlanNode("water", "pour", args={"litres": {"$ref": "look.need"}}, after=("look",)),
    ),
)


def _scenario() -> dict[str, Any]:
    """A run with a local replan: two revisions, outputs with nested values."""
    return {
        "planner": ScriptedPlanner(PLAN, None),
        "executor": FunctionExecutor(
            {
                "look": lambda: {"need": 2, "soil": ["dry"]},
                "water": lambda litres: {"poured": litres},
            }
        ),
        "verifier": ScriptedVerifier(
            Verdict.failed(RECOVERY, failed_nodes=["water"], feedback="more"),
            Verdict.passed(RECOVERY),
        ),
        "contract": RECOVERY,
    }


def _outcome(result: pev.RunResult) -> tuple[object, ...]:
    return (
        result.status,
        result.reason,
        dict(result.outputs),
        result.failed_nodes,
        result.diagnosis,
        result.revisions,
    )


def raising_rail(event: RailEvent) -> None:
    """A rail that raises at every phase."""
    raise RuntimeError(f"rail broke at {event.phase}")


def _vandalise(value: object, seen: set[int]) -> None:
    """Overwrite everything reachable from ``value`` that Python lets us overwrite."""
    if id(value) in seen or isinstance(value, str | bytes | int | float | type(None)):
        return
    seen.add(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            inner = getattr(value, item.name)
            _vandalise(inner, seen)
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(value, item.name, None)
    elif isinstance(value, JsonObject):
        for inner in value.values():
            _vandalise(inner, seen)
        value._items.clear()  # breaking in on purpose
    elif isinstance(value, Mapping):
        for inner in value.values():
            _vandalise(inner, seen)
        if isinstance(value, dict):
            value.clear()
    elif isinstance(value, list | tuple | set | frozenset):
        for inner in value:
            _vandalise(inner, seen)
        if isinstance(value, list | set):
            value.clear()


class Vandal:
    """A rail that mutates every event it is given, nested values included, and returns junk."""

    def __init__(self) -> None:
        self.wrecked = 0

    def on_event(self, event: RailEvent) -> str:
        """Overwrite the event's fields, and those of everything inside it."""
        _vandalise(event, set())
        self.wrecked += 1
        return "stop the task"


async def test_rails_that_raise_or_mutate_do_not_change_the_run(engine: Engine) -> None:
    """Same status, reason, outputs and ledger event kinds with misbehaving rails as without."""
    quiet = await engine.run(**_scenario())

    vandal = Vandal()
    heard: list[RailPhase] = []

    noisy = await engine.run(
        **_scenario(), rails=[raising_rail, vandal, raising_rail, lambda e: heard.append(e.phase)]
    )

    assert vandal.wrecked == len(heard) > 0
    assert _outcome(noisy) == _outcome(quiet)
    assert await engine.kinds(noisy.task_id) == await engine.kinds(quiet.task_id)
    assert quiet.ok


async def test_a_rail_hears_every_phase_of_a_run(engine: Engine) -> None:
    """A rail sees the task start, plan, nodes, execution, verification, dispatch and finish."""
    heard: list[RailPhase] = []

    await engine.run(**_scenario(), rails=[lambda event: heard.append(event.phase)])

    assert heard[0] is RailPhase.TASK_STARTED
    assert heard[-1] is RailPhase.TASK_FINISHED
    # No evidence, no rejected plan, no approval, no reconciliation, no effect superseded or
    # undone: the scenario has none. Its declined local replan reuses the water it poured.
    assert set(heard) == set(RailPhase) - {
        RailPhase.EVIDENCE_CAPTURED,
        RailPhase.PLAN_REJECTED,
        RailPhase.RECORD_RECONCILED,
        RailPhase.APPROVAL_REQUESTED,
        RailPhase.APPROVED,
        RailPhase.REJECTED,
        RailPhase.EFFECT_SUPERSEDED,
        RailPhase.COMPENSATION_STARTED,
        RailPhase.COMPENSATION_FINISHED,
        RailPhase.UNWIND_STARTED,
    }
    assert heard.count(RailPhase.REVISION_STARTED) == 2


async def test_a_rail_after_a_vandal_still_sees_intact_events(engine: Engine) -> None:
    """One rail's mutations never reach the next rail's copy."""
    finished: list[Mapping[str, object]] = []

    def keep_outputs(event: RailEvent) -> None:
        if event.phase is RailPhase.TASK_FINISHED:
            finished.append(event.event.outputs)  # type: ignore[union-attr]

    result = await engine.run(**_scenario(), rails=[Vandal(), keep_outputs])

    assert finished == [dict(result.outputs)]


async def test_the_logging_rail_logs_the_run(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """LoggingRail writes one record per phase boundary, naming the task and phase."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        result = await engine.run(**_scenario(), rails=[LoggingRail()])

    lines = [r for r in caplog.records if r.name == "pev.rails.log"]
    assert lines
    assert all(f"task={result.task_id}" in r.getMessage() for r in lines)
    assert "phase=task_finished" in lines[-1].getMessage()


async def test_the_root_cause_rail_counts_a_device_failure_by_node_and_tool(
    engine: Engine,
) -> None:
    """A broken tool the verifier blames: counted once for its node and once for its tool."""

    @pev.tool(effect="action")
    def pump(litres: int) -> int:
        raise ConnectionError("pump jammed")

    rail = RootCauseRail()
    plan = Plan(GOAL, (PlanNode("water", "pour", tool="pump", args={"litres": 2}),))

    result = await engine.run(
        planner=ScriptedPlanner(plan),
        tools=[pump],
        verifier=ScriptedVerifier.failing("water"),
        contract=RECOVERY,
        rails=[rail],
    )

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    summary = rail.summary()
    assert summary["by_node"] == {"water": 1}
    assert summary["by_tool"] == {"pump": 1}
    assert summary["diagnosed_by_node"] == {"water": 1}
    assert summary["unknown_outcomes"] == 0


async def test_a_run_without_rails_reads_nothing_back_from_its_store() -> None:
    """The creation's entries are read back only for rails: no rails, no read of the ledger."""
    reads: list[str] = []

    class CountingStore(MemoryStore):
        async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
            reads.append(task_id)
            return await super().read(task_id, after=after)

    def ping() -> str:
        """Answer."""
        return "pong"

    plan = Plan("ping", (PlanNode("a", "ping", tool="ping", effect="query"),))
    for rails, expected in (((), 0), ((lambda event: None,), 1)):
        reads.clear()
        result = await pev.run(
            "ping",
            planner=ScriptedPlanner(plan),
            tools=[pev.tool(ping, effect="query")],
            store=CountingStore(),
            rails=rails,
        )
        assert result.status == "succeeded"
        assert len(reads) == expected, rails
