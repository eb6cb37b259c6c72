"""The arm's tools: ``pick`` and ``place`` on the Panda, and ``observe`` on the pose tracker.

Every motion goes through the :class:`~pev.sim._controller.ArmController`, one command at a time,
and is measured in simulation steps. The arm knows nothing of faults: it announces what it is doing
(:class:`ArmEvent`) and exposes the way a grip fails (:meth:`SimArm.slip`); :mod:`pev.sim._faults`
decides when something goes wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pev.engine import ToolRegistry, current_node_context, tool
from pev.model import DeviceFailure, JsonValue, NodeResult, VerifierFailure
from pev.sim._bullet import pb
from pev.sim._controller import GRASP_LINK, OPEN, ArmController, MoveReport
from pev.sim._scene import CUBES, Pose
from pev.sim._world import STEPS_PER_SECOND, TRAY, World

__all__ = ["ArmEvent", "ArmEventKind", "SimArm", "sim_tools"]

_WAYPOINT_SPACING = 0.03  # m between the waypoints of a straight-line path
_AROUND_CUBE = 0.026  # just wider than a 5 cm cube: the fingers close around it, not on it
_GRASP_REACH = 0.02  # how far the cube's centre may be from the grasp point to be taken
_CARRY_HEIGHT = 0.2
_ABOVE = 0.15
_RELEASE_CLEARANCE = 0.01
_SLOT_SPACING = 0.065  # cubes go side by side along the tray's y axis
_PLACE_YAW = math.pi / 2  # fingers open along x, across the row of slots: no neighbour is hit
_REST = (0.35, 0.0, 0.45)  # where the hand waits between tools, high above the table
_MIDWAY = (0.45, 0.0, _CARRY_HEIGHT)  # every carry passes here, over open table


# What the arm announces: a pick begins; a carry sets off (the cube lifted, the first move of the
# carry not yet sent); the carry passes midway, over open table between the cubes and the tray;
# a cube is let go over its slot.
ArmEventKind = Literal["pick", "carry", "midway", "released"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmEvent:
    """What the arm is doing, announced to whoever listens.

    Attributes:
        kind: ``pick``, ``carry``, ``midway`` or ``released``.
        object: The cube concerned.
        count: Which time this kind of event is happening for this cube (1 for the first).
        overall: Which time it is happening for any cube.
    """

    kind: ArmEventKind
    object: str
    count: int
    overall: int


class _MoveFailed(Exception):  # noqa: N818 - a private signal, carrying a DeviceFailure
    def __init__(self, failure: DeviceFailure) -> None:
        super().__init__(failure.error)
        self.failure = failure


class SimArm:
    """The arm's tools, ``pick`` and ``place``, driven through its :class:`ArmController`.

    The gripper closes around a cube and a fixed constraint then carries it: a suction-like grasp
    that is still physics (the cube moves with the hand, and falls when let go). The arm tracks
    what it *commanded*: a grip that gives in transit goes unnoticed until someone looks.

    The tools are coroutines that never await: the simulation runs on the event loop's thread,
    so every pybullet call comes from one thread, in the order the plan runs.
    """

    def __init__(self, world: World) -> None:
        self._world = world
        self.controller = ArmController(world)
        self._holding: str | None = None
        self._grip: int | None = None
        self._listeners: list[Callable[[ArmEvent], None]] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._overall: Counter[str] = Counter()

    def listen(self, listener: Callable[[ArmEvent], None]) -> None:
        """Call ``listener`` with every :class:`ArmEvent` from now on."""
        self._listeners.append(listener)

    def slip(self) -> None:
        """The grip gives: whatever the gripper carries falls (the arm does not notice)."""
        self._let_go()

    # -- the tools ----------------------------------------------------------------------------

    async def pick(
        self,
        object: str,  # noqa: A002 - the tool's parameter, as plans name it
        pose: dict[str, Any],
    ) -> dict[str, JsonValue] | NodeResult:
        """Grasp a cube lying at ``pose`` (its position and yaw, as the observe tool reports)."""
        if object not in CUBES:
            return VerifierFailure(_node(), f"there is no cube {object!r} (cubes: {CUBES})")
        try:
            where = Pose.from_json(pose)
        except ValueError as exc:
            return VerifierFailure(_node(), f"pick needs a pose with a position: {exc}")
        self._announce(self._count("pick", object))
        start = self._world.steps
        try:
            dropped = self._holding
            self._let_go()  # an open hand first: whatever it still held falls here
            self._holding = None
            grasp_yaw = (where.yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4
            x, y, z = where.position
            self._line_to((x, y, z + _ABOVE), grasp_yaw)
            self._line_to((x, y, z + 0.005), grasp_yaw)
            self.controller.fingers(_AROUND_CUBE)
            self._world.step(20)
            taken = self._take(object)
            self._line_to((x, y, z + _ABOVE), grasp_yaw)
        except _MoveFailed as failed:
            return failed.failure
        if not taken:
            return VerifierFailure(
                _node(),
                f"nothing between the fingers at ({x:.3f}, {y:.3f}): {object} is not where "
                "the plan said it was",
            )
        result: dict[str, JsonValue] = {
            "holding": object,
            "grasped_at": where.to_json()["position"],
            "steps": self._world.steps - start,
        }
        if dropped is not None:
            result["dropped_first"] = dropped
        return result

    async def place(
        self,
        object: str,  # noqa: A002 - the tool's parameter, as plans name it
        target: Literal["tray"],
    ) -> dict[str, JsonValue] | NodeResult:
        """Carry the cube the arm holds to its slot in the tray and let go of it."""
        if target != "tray":
            return VerifierFailure(_node(), f"unknown place target {target!r}; only 'tray'")
        if self._holding != object:
            holding = self._holding or "nothing"
            return VerifierFailure(_node(), f"the arm holds {holding}, not {object}")
        slot = _slot(object)
        start = self._world.steps
        try:
            x, y, _ = self.controller.hand().position
            self._line_to((x, y, _CARRY_HEIGHT), self.controller.hand().yaw)
            self._announce(self._count("carry", object))
            self._line_to(_MIDWAY, _PLACE_YAW)
            self._announce(self._count("midway", object))
            above_slot = (slot[0], slot[1], _CARRY_HEIGHT)
            self._line_to(above_slot, _PLACE_YAW)
            self._line_to(slot, _PLACE_YAW)
            self._let_go()
            self._world.step(30)
            self._holding = None
            self._announce(self._count("released", object))
            self._line_to(above_slot, _PLACE_YAW)
            self._line_to(_REST, 0.0)
        except _MoveFailed as failed:
            return failed.failure
        return {
            "released": object,
            "over": target,
            "at": [round(value, 4) for value in slot],
            "steps": self._world.steps - start,
        }

    # -- motion -------------------------------------------------------------------------------

    def _line_to(self, position: tuple[float, float, float], yaw: float) -> None:
        """Move the grasp point along a straight line to ``position``, turning towards ``yaw``."""
        start = self.controller.hand()
        turn = (yaw - start.yaw + math.pi) % (2 * math.pi) - math.pi
        distance = math.dist(start.position, position)
        waypoints = max(2, math.ceil(distance / _WAYPOINT_SPACING))
        for index in range(1, waypoints + 1):
            fraction = index / waypoints
            x, y, z = (
                a + (b - a) * fraction for a, b in zip(start.position, position, strict=True)
            )
            target = self.controller.solve((x, y, z), start.yaw + turn * fraction)
            waypoint = index < waypoints
            self._check(self.controller.move(target, waypoint=waypoint), waypoint=waypoint)

    def _check(self, report: MoveReport, *, waypoint: bool = False) -> None:
        if not report.answered:
            seconds = report.steps / STEPS_PER_SECOND
            raise _MoveFailed(
                DeviceFailure(
                    _node(),
                    f"the arm controller did not answer within {report.steps} simulation steps "
                    f"({seconds:.1f} s simulated); the move may or may not have happened",
                    is_timeout=True,
                    outcome_unknown=True,
                )
            )
        if report.stalled_joint is not None:
            raise _MoveFailed(
                DeviceFailure(
                    _node(),
                    f"joint panda_joint{report.stalled_joint + 1} stopped responding: it is "
                    f"{report.error:.2f} rad from its target and does not move",
                )
            )
        if not report.reached and not waypoint:
            raise _MoveFailed(
                DeviceFailure(
                    _node(),
                    f"the arm did not reach its target within {report.steps} simulation steps "
                    f"(still {report.error:.3f} rad away)",
                )
            )

    # -- the gripper --------------------------------------------------------------------------

    def _take(self, cube: str) -> bool:
        """Close the grip on ``cube`` if it is between the fingers; False if it is not."""
        reach = math.dist(self.controller.hand().position, self._world.pose(cube).position)
        if reach > _GRASP_REACH:
            self.controller.fingers(OPEN)
            return False
        client = self._world.client
        link = pb.getLinkState(self._world.bodies["arm"], GRASP_LINK, physicsClientId=client)
        body = self._world.bodies[cube]
        position, orientation = pb.getBasePositionAndOrientation(body, physicsClientId=client)
        inverse = pb.invertTransform(link[4], link[5])
        relative = pb.multiplyTransforms(inverse[0], inverse[1], position, orientation)
        self._grip = pb.createConstraint(
            self._world.bodies["arm"],
            GRASP_LINK,
            body,
            -1,
            pb.JOINT_FIXED,
            [0, 0, 0],
            relative[0],
            [0, 0, 0],
            relative[1],
            physicsClientId=client,
        )
        pb.changeConstraint(self._grip, maxForce=200, physicsClientId=client)
        self._holding = cube
        return True

    def _let_go(self) -> None:
        if self._grip is not None:
            pb.removeConstraint(self._grip, physicsClientId=self._world.client)
            self._grip = None
        self.controller.fingers(OPEN)
        # What the arm believes it holds is cleared only by a command, never by a slip.

    # -- events -------------------------------------------------------------------------------

    def _count(self, kind: ArmEventKind, cube: str) -> ArmEvent:
        self._counts[(kind, cube)] += 1
        self._overall[kind] += 1
        return ArmEvent(
            kind=kind,
            object=cube,
            count=self._counts[(kind, cube)],
            overall=self._overall[kind],
        )

    def _announce(self, event: ArmEvent) -> None:
        for listener in self._listeners:
            listener(event)


def _slot(cube: str) -> tuple[float, float, float]:
    """Where a cube is let go: its own slot in a row across the tray, just above the floor."""
    offset = (CUBES.index(cube) - 1) * _SLOT_SPACING
    x, y, z = TRAY.centre
    return (x, y + offset, z + 0.025 + _RELEASE_CLEARANCE)


def _node() -> str:
    """The node being executed (the executor stamps it again; this keeps errors readable)."""
    try:
        return current_node_context().node_id
    except LookupError:
        return ""


def sim_tools(world: World, arm: SimArm) -> ToolRegistry:
    """The demo's tools: ``observe`` (a query), ``pick`` and ``place`` (actions on the arm)."""

    async def observe() -> dict[str, JsonValue]:
        """Read the pose of every cube from the pose tracker."""
        return {name: pose.to_json() for name, pose in world.scene().objects.items()}

    return ToolRegistry.of(
        [
            tool(observe, effect="query"),
            tool(arm.pick, name="pick", resource="arm"),
            tool(arm.place, name="place", resource="arm"),
        ]
    )
