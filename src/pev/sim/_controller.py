"""The arm's joint controller: one command at a time, measured in simulation steps.

A move is one command: the controller drives the joints with position control towards an
inverse-kinematics target until they are there, until a joint stops following (a joint fault
it reports), or until the step budget runs out. A controller that does not answer within its
budget leaves the caller knowing nothing: the move may or may not happen.

The ways it fails (it hangs, a joint seizes) are methods here, used by :mod:`pev.sim._faults`;
the controller never decides to fail on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pev.sim._bullet import pb
from pev.sim._scene import Pose
from pev.sim._world import World

__all__ = ["GRASP_LINK", "HOME", "OPEN", "REPLY_BUDGET", "ArmController", "MoveReport"]

GRASP_LINK = 11
"""The link of panda_grasptarget, the point between the fingertips."""
HOME = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
"""The arm joints' angles at rest, folded above its base."""
OPEN = 0.04
"""The fingers' opening when the hand is open (m from the centre line, each side)."""
REPLY_BUDGET = 480
"""Simulation steps (2 s) a caller waits for the controller to answer a command at all."""

_ARM_JOINTS = tuple(range(7))
_FINGERS = (9, 10)
_LOWER = (-2.9671, -1.8326, -2.9671, -3.1416, -2.9671, -0.0873, -2.9671)
_UPPER = (2.9671, 1.8326, 2.9671, 0.0, 2.9671, 3.8223, 2.9671)
_LIMIT_MARGIN = 0.01  # targets stay inside the joint limits, which the physics enforces
_FORCES = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)  # the Panda's torque limits (N m)
_SPEED = 1.5  # rad/s, every joint
# The inverse kinematics works on all nine movable joints (seven arm joints, two fingers).
_IK_LOWER = [*_LOWER, 0.0, 0.0]
_IK_UPPER = [*_UPPER, OPEN, OPEN]
_IK_RANGES = [high - low for low, high in zip(_IK_LOWER, _IK_UPPER, strict=True)]
_IK_REST = [*HOME, OPEN, OPEN]

# Step budgets and tolerances of one command. A waypoint on the way need not be reached
# exactly; the end of a path must be.
_BUDGET = 480  # 2 s: a move that has not arrived by then is not coming
_TOLERANCE = 0.005  # rad
_WAYPOINT_BUDGET = 60
_WAYPOINT_TOLERANCE = 0.02
# A joint more than _STALL_ERROR from its target that has moved less than _STALL_MOTION over
# _STALL_WINDOW steps is not following its commands: the controller reports a joint fault.
_STALL_WINDOW = 48
_STALL_ERROR = 0.05
_STALL_MOTION = 1e-3


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveReport:
    """How one move ended.

    Attributes:
        reached: Every joint arrived within tolerance.
        answered: The controller replied; ``False`` means nobody knows what the arm did.
        steps: Simulation steps the move took (or waited).
        stalled_joint: The joint that stopped following its commands, if one did.
        error: That joint's distance from its target (rad).
    """

    reached: bool
    answered: bool = True
    steps: int = 0
    stalled_joint: int | None = None
    error: float = 0.0


class ArmController:
    """The Panda's joint controller: one command at a time, measured in simulation steps."""

    def __init__(self, world: World) -> None:
        self._world = world
        self._arm = world.bodies["arm"]
        self._hangs = 0
        self._seized: set[int] = set()
        for joint, angle in zip(_ARM_JOINTS, HOME, strict=True):
            pb.resetJointState(self._arm, joint, angle, physicsClientId=world.client)
        for finger in _FINGERS:
            pb.resetJointState(self._arm, finger, OPEN, physicsClientId=world.client)
        self._command(HOME)
        self.fingers(OPEN)

    # -- how it fails -----------------------------------------------------------------------

    def hang(self) -> None:
        """The controller stops answering for its next command (a watchdog revives it after)."""
        self._hangs += 1

    def seize(self, joint: int) -> None:
        """Joint ``joint``'s drive stops taking commands; its brake holds it where it is."""
        angle = self.joint_angles()[joint]
        pb.setJointMotorControl2(
            self._arm,
            joint,
            pb.POSITION_CONTROL,
            targetPosition=angle,
            force=500.0,
            physicsClientId=self._world.client,
        )
        self._seized.add(joint)

    # -- what it does ------------------------------------------------------------------------

    def joint_angles(self) -> tuple[float, ...]:
        """The arm joints' angles now (rad)."""
        states = pb.getJointStates(self._arm, _ARM_JOINTS, physicsClientId=self._world.client)
        return tuple(float(state[0]) for state in states)

    def hand(self) -> Pose:
        """Where the grasp point between the fingertips is."""
        link = pb.getLinkState(self._arm, GRASP_LINK, physicsClientId=self._world.client)
        x, y, z = (float(value) for value in link[4])
        return Pose(position=(x, y, z), yaw=float(pb.getEulerFromQuaternion(link[5])[2]))

    def solve(self, position: tuple[float, float, float], yaw: float) -> tuple[float, ...]:
        """Joint angles that put the grasp point at ``position``, fingers down, turned ``yaw``."""
        orientation = pb.getQuaternionFromEuler([math.pi, 0.0, yaw])
        angles = pb.calculateInverseKinematics(
            self._arm,
            GRASP_LINK,
            list(position),
            orientation,
            lowerLimits=_IK_LOWER,
            upperLimits=_IK_UPPER,
            jointRanges=_IK_RANGES,
            restPoses=_IK_REST,
            maxNumIterations=200,
            residualThreshold=1e-5,
            physicsClientId=self._world.client,
        )
        return tuple(
            min(max(float(angle), low + _LIMIT_MARGIN), high - _LIMIT_MARGIN)
            for angle, low, high in zip(angles, _LOWER, _UPPER, strict=False)
        )

    def move(self, target: tuple[float, ...], *, waypoint: bool = False) -> MoveReport:
        """Drive the joints to ``target``: one command, within its step budget.

        A ``waypoint`` on the way somewhere gets a short budget and a loose tolerance.
        """
        budget, tolerance = (
            (_WAYPOINT_BUDGET, _WAYPOINT_TOLERANCE) if waypoint else (_BUDGET, _TOLERANCE)
        )
        if self._hangs:
            self._hangs -= 1
            # Nothing is commanded and nothing answers; the tool waits out its reply budget.
            self._world.step(REPLY_BUDGET)
            return MoveReport(reached=False, answered=False, steps=REPLY_BUDGET)
        self._command(target)
        goal = np.asarray(target)
        window_start = np.asarray(self.joint_angles())
        for step in range(1, budget + 1):
            self._world.step()
            angles = np.asarray(self.joint_angles())
            errors = np.abs(angles - goal)
            if float(errors.max()) < tolerance:
                return MoveReport(reached=True, steps=step)
            if step % _STALL_WINDOW == 0:
                stuck = (errors > _STALL_ERROR) & (np.abs(angles - window_start) < _STALL_MOTION)
                if stuck.any():
                    joint = int(np.argmax(stuck))
                    self._command(tuple(float(angle) for angle in angles))  # stop where it is
                    return MoveReport(
                        reached=False, steps=step, stalled_joint=joint, error=float(errors[joint])
                    )
                window_start = angles
        return MoveReport(reached=False, steps=budget, error=float(errors.max()))

    def fingers(self, opening: float) -> None:
        """Command both fingers to ``opening`` (m from the centre line)."""
        pb.setJointMotorControlArray(
            self._arm,
            list(_FINGERS),
            pb.POSITION_CONTROL,
            targetPositions=[opening, opening],
            forces=[20.0, 20.0],
            physicsClientId=self._world.client,
        )

    def _command(self, target: tuple[float, ...]) -> None:
        for joint in _ARM_JOINTS:
            if joint in self._seized:
                continue  # its drive no longer takes commands
            pb.setJointMotorControl2(
                self._arm,
                joint,
                pb.POSITION_CONTROL,
                targetPosition=target[joint],
                force=_FORCES[joint],
                maxVelocity=_SPEED,
                physicsClientId=self._world.client,
            )
