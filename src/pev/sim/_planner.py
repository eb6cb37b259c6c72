"""The demo's planner: symbolic, no LLM, planning from the scene it reads.

It plans ``observe``, ``pick`` and ``place`` steps from the scene it reads through a read-only
pose sensor, and re-plans from what it reads then. It is told what the engine tells any planner
(the :class:`~pev.engine.PlanRequest`) and reads the scene, nothing else: not the devices, and
not whatever may be wrong with them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from pev.engine import PlanRequest
from pev.ledger import RevisionKind
from pev.model import Effect, ExecutionRecord, Plan, PlanNode, digest
from pev.sim._scene import Scene, colour_of, cube_of

__all__ = ["SceneSensor", "SymbolicPlanner"]


class SceneSensor(Protocol):
    """Something that reads the scene."""

    def read(self) -> Scene:
        """The scene as it is now."""
        ...


class SymbolicPlanner:
    """Plans one pick and one place per cube that is not yet in the tray.

    * initial and global plans: ``observe``, then for each such cube ``pick_<colour>`` (taking
      the cube's pose from ``observe``'s output through a ``$ref``) and ``place_<colour>``;
    * a local replan replaces the redo nodes: a pick goes to where the sensor sees the cube
      *now*, and its place follows it.

    In a replan, picking and placing a cube again is the intent (it fell, or was knocked out of
    the tray): those nodes are new occurrences (``repeat=True``), not the effects the task
    already has (docs/engine.md, "Effects happen once"). It never plans an action that repeats
    one whose outcome is unknown: that cube is left out.
    """

    def __init__(self, sensor: SceneSensor) -> None:
        self._sensor = sensor

    async def plan(self, request: PlanRequest) -> Plan:
        """A plan for ``request`` from the scene as the sensor reads it now."""
        scene = self._sensor.read()
        goal = request.contract.goal or "put the cubes in the tray"
        if request.kind is RevisionKind.LOCAL and request.previous_plan is not None:
            return Plan(goal, self._replacements(request, scene, request.previous_plan))
        return Plan(goal, self._fresh(request, scene))

    def _fresh(self, request: PlanRequest, scene: Scene) -> tuple[PlanNode, ...]:
        nodes = [
            PlanNode(
                "observe",
                "read the pose of every cube",
                tool="observe",
                effect=Effect.QUERY,
            )
        ]
        again = request.kind is not RevisionKind.INITIAL
        for colour in _colours(request):
            cube = cube_of(colour)
            if scene.in_tray(cube) or _unknown(request.unknown_records, _place_args(cube)):
                continue
            nodes.append(
                PlanNode(
                    f"pick_{colour}",
                    f"grasp the {colour} cube where observe saw it",
                    tool="pick",
                    args={"object": cube, "pose": {"$ref": f"observe.{cube}"}},
                    after=("observe",),
                    repeat=again,
                )
            )
            nodes.append(_place(colour, again=again))
        return tuple(nodes)

    def _replacements(
        self, request: PlanRequest, scene: Scene, previous: Plan
    ) -> tuple[PlanNode, ...]:
        replacements: list[PlanNode] = []
        for node in previous.nodes:
            if node.id not in request.redo_nodes:
                continue
            cube = node.args.get("object")
            pose = scene.objects.get(cube) if isinstance(cube, str) else None
            if node.tool == "pick" and pose is not None:
                x, y, _ = pose.position
                colour = cube.removesuffix("_cube") if isinstance(cube, str) else ""
                replacements.append(
                    PlanNode(
                        node.id,
                        f"grasp the {colour} cube again where it lies now, at ({x:.2f}, {y:.2f})",
                        tool="pick",
                        args={"object": cube, "pose": pose.to_json()},
                        after=node.after,
                        repeat=True,
                    )
                )
            elif node.tool == "place":
                replacements.append(replace(node, repeat=True))  # to the same slot, again
            else:
                replacements.append(node)  # others stay as they were
        return tuple(replacements)


def _colours(request: PlanRequest) -> list[str]:
    """The colours the contract's criteria name, in order."""
    colours = (colour_of(criterion) for criterion in request.contract.success_criteria)
    return [colour for colour in colours if colour is not None]


def _place_args(cube: str) -> dict[str, str]:
    return {"object": cube, "target": "tray"}


def _place(colour: str, *, again: bool) -> PlanNode:
    cube = cube_of(colour)
    return PlanNode(
        f"place_{colour}",
        f"put the {colour} cube in the tray",
        tool="place",
        args=_place_args(cube),
        after=(f"pick_{colour}",),
        repeat=again,
    )


def _unknown(records: tuple[ExecutionRecord, ...], args: dict[str, str]) -> bool:
    """True if a ``place`` with these args was sent before and its outcome is unknown."""
    wanted = digest(args)
    return any(record.tool == "place" and record.args_digest == wanted for record in records)
