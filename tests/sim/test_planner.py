"""The symbolic planner plans from the scene it reads, and never from the fault."""

from __future__ import annotations

import ast
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pev.engine import PlanRequest
from pev.ledger import RevisionKind
from pev.model import Effect, ExecutionRecord, RecordId, RecordStatus, TaskId, digest
from pev.sim import CONTRACT, Pose, Scene, SymbolicPlanner
from pev.sim._world import TRAY

SIM = Path(__file__).resolve().parents[2] / "src" / "pev" / "sim"
ON_TABLE = Pose(position=(0.5, -0.2, 0.025), yaw=0.1)
FELL_HERE = Pose(position=(0.45, 0.0, 0.025), yaw=0.7)
IN_TRAY = Pose(position=(0.45, 0.3, 0.032))


class Sensor:
    """Reads a fixed scene."""

    def __init__(self, **objects: Pose) -> None:
        self.scene = Scene(objects=objects, tray=TRAY)

    def read(self) -> Scene:
        return self.scene


def _request(kind: RevisionKind = RevisionKind.INITIAL, **fields: object) -> PlanRequest:
    return PlanRequest(
        kind=kind,
        attempt=1,
        task_id=TaskId("t1"),
        input="cubes",
        contract=CONTRACT,
        **fields,  # type: ignore[arg-type]
    )


async def test_a_fresh_plan_moves_every_cube_not_yet_in_the_tray() -> None:
    """observe, then a pick (pose taken from observe) and a place per cube still on the table."""
    sensor = Sensor(red_cube=ON_TABLE, green_cube=IN_TRAY, blue_cube=ON_TABLE)
    plan = await SymbolicPlanner(sensor).plan(_request())
    assert plan.node_ids == ("observe", "pick_red", "place_red", "pick_blue", "place_blue")
    assert plan.node("observe").effect is Effect.QUERY
    assert plan.node("pick_red").args["pose"] == {"$ref": "observe.red_cube"}
    assert plan.node("place_blue").args == {"object": "blue_cube", "target": "tray"}
    assert plan.node("place_blue").after == ("pick_blue",)


async def test_a_local_replan_grasps_the_cube_where_it_lies_now() -> None:
    """The replacement pick carries the pose read now; its place goes again to the same slot."""
    sensor = Sensor(red_cube=FELL_HERE, green_cube=IN_TRAY, blue_cube=IN_TRAY)
    planner = SymbolicPlanner(Sensor(red_cube=ON_TABLE, green_cube=ON_TABLE, blue_cube=ON_TABLE))
    first = await planner.plan(_request())
    local = _request(
        RevisionKind.LOCAL, previous_plan=first, redo_nodes=frozenset({"pick_red", "place_red"})
    )
    replacements = await SymbolicPlanner(sensor).plan(local)
    assert replacements.node_ids == ("pick_red", "place_red")
    assert replacements.node("pick_red").args["pose"] == FELL_HERE.to_json()
    assert replacements.node("place_red") == replace(first.node("place_red"), repeat=True)
    assert replacements.node("pick_red").repeat  # picking it again is the intent


async def test_a_place_whose_outcome_is_unknown_is_never_planned_again() -> None:
    """A cube whose place is in doubt is left out: the planner will not repeat that action."""
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    unknown = ExecutionRecord(
        id=RecordId("1:place_red"),
        task_id=TaskId("t1"),
        revision=1,
        node_id="place_red",
        tool="place",
        args_digest=digest({"object": "red_cube", "target": "tray"}),
        effect=Effect.ACTION,
        idempotency_key="t1/1:place_red",
        created_at=moment,
        updated_at=moment,
        status=RecordStatus.UNKNOWN,
    )
    sensor = Sensor(red_cube=ON_TABLE, green_cube=ON_TABLE, blue_cube=IN_TRAY)
    plan = await SymbolicPlanner(sensor).plan(
        _request(RevisionKind.GLOBAL, unknown_records=(unknown,))
    )
    assert plan.node_ids == ("observe", "pick_green", "place_green")


def _sim_imports(module: str) -> set[str]:
    """The pev.sim modules ``module`` imports, directly or through other pev.sim modules."""
    seen: set[str] = set()
    stack = [module]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse((SIM / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pev.sim."):
                stack.append((node.module or "").removeprefix("pev.sim."))
            elif isinstance(node, ast.Import):
                stack.extend(
                    alias.name.removeprefix("pev.sim.")
                    for alias in node.names
                    if alias.name.startswith("pev.sim.")
                )
    return seen


def test_the_planner_and_perception_cannot_reach_the_fault() -> None:
    """Neither the planner nor perception imports the fault module, even indirectly."""
    for module in ("_planner", "_perception"):
        assert {"_faults", "_demo"}.isdisjoint(_sim_imports(module)), module


def test_the_planner_reaches_nothing_but_scene_values() -> None:
    """The planner's only simulator import is the pure scene module: no world, no devices."""
    assert _sim_imports("_planner") == {"_planner", "_scene"}


def test_the_planner_never_mentions_a_fault() -> None:
    """No name in the planner's code refers to a fault."""
    tree = ast.parse((SIM / "_planner.py").read_text(encoding="utf-8"))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {name for name in names if "fault" in name.lower()}
