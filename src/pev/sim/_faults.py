"""Fault injection: what goes wrong in the demo, when, and which path of the kernel it must take.

A fault acts on the physics or on a device, never on the planner or the verifier, which are not
told about it. Each one is armed on the devices before the run starts: most wait for an arm
event (the n-th pick, a carry reaching some point, the n-th cube let go), the camera's waits for
its n-th frame. Triggers count events and simulation steps, never wall-clock time, so a seeded
run always fails the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.sim._arm import ArmEvent, ArmEventKind, SimArm
from pev.sim._camera import Camera
from pev.sim._scene import CUBES
from pev.sim._world import World

__all__ = ["FAULT_PATHS", "Fault", "FaultPath", "Recovery", "inject"]


class Fault(StrEnum):
    """The faults ``pev demo --fault`` can inject."""

    NONE = "none"
    SLIP = "slip"
    KNOCK = "knock"
    TIMEOUT = "timeout"
    DEAD_JOINT = "dead-joint"
    CAMERA = "camera"


class Recovery(StrEnum):
    """What the kernel did about the first verdict that did not pass."""

    NONE = "none"
    """Nothing to recover from: the first verdict passed."""
    LOCAL_REPLAN = "local replan"
    GLOBAL_REPLAN = "global replan"
    ACCEPT_PARTIAL = "accept partial"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPath:
    """The path a run takes through the kernel: two runs took the same path iff these are equal.

    Attributes:
        cause: The root cause of the last diagnosis (``None`` if every verdict passed).
        recovery: What the kernel did about the first verdict that did not pass.
        status: How the task ended.
        reason: Why.
        story: What happens, in words (not compared).
    """

    cause: RootCause | None
    recovery: Recovery
    status: TaskStatus
    reason: TerminalReason
    story: str = field(default="", compare=False)

    def describe(self) -> str:
        """``cause → recovery → status/reason`` on one line."""
        cause = str(self.cause) if self.cause is not None else "nothing to diagnose"
        recovery = "no recovery" if self.recovery is Recovery.NONE else str(self.recovery)
        return f"{cause} → {recovery} → {self.status}/{self.reason}"


# The documented path of every fault (docs/design.md §3, §10). The table test runs each fault and
# checks that its run took exactly this path; `pev demo` exits 1 if one did not.
FAULT_PATHS: Mapping[Fault, FaultPath] = MappingProxyType(
    {
        Fault.NONE: FaultPath(
            cause=None,
            recovery=Recovery.NONE,
            status=TaskStatus.SUCCEEDED,
            reason=TerminalReason.PASSED,
            story="no fault: the three cubes go into the tray in one round",
        ),
        Fault.SLIP: FaultPath(
            cause=RootCause.PLAN_OR_ANSWER_ERROR,
            recovery=Recovery.LOCAL_REPLAN,
            status=TaskStatus.SUCCEEDED,
            reason=TerminalReason.PASSED,
            story="the gripper opens halfway through carrying the red cube; perception blames "
            "its pick and place, a plan error re-planned locally: grasp it where it fell",
        ),
        Fault.KNOCK: FaultPath(
            cause=RootCause.PLAN_OR_ANSWER_ERROR,
            recovery=Recovery.GLOBAL_REPLAN,
            status=TaskStatus.SUCCEEDED,
            reason=TerminalReason.PASSED,
            story="the table is bumped as the last cube lands and all three are thrown out of "
            "the tray; six nodes are blamed, too many to patch, so the task is re-planned whole",
        ),
        Fault.TIMEOUT: FaultPath(
            cause=RootCause.DEVICE_FAILURE,
            recovery=Recovery.ACCEPT_PARTIAL,
            status=TaskStatus.PARTIAL,
            reason=TerminalReason.DEVICE_FAILURE,
            story="the arm controller hangs as it sets off with the red cube and does not "
            "answer within its step budget: a device failure whose outcome is unknown, "
            "accepted as partial; the move is never re-sent",
        ),
        Fault.DEAD_JOINT: FaultPath(
            cause=RootCause.DEVICE_FAILURE,
            recovery=Recovery.ACCEPT_PARTIAL,
            status=TaskStatus.PARTIAL,
            reason=TerminalReason.DEVICE_FAILURE,
            story="the arm's shoulder joint stops responding before the second pick: a device "
            "failure, accepted as partial with the red cube in the tray",
        ),
        Fault.CAMERA: FaultPath(
            cause=RootCause.PERCEPTION_UNRELIABLE,
            recovery=Recovery.ACCEPT_PARTIAL,
            status=TaskStatus.PARTIAL,
            reason=TerminalReason.VERIFIER_UNRELIABLE,
            story="the camera driver crashes when perception takes its look: the verifier "
            "raises, the verdict cannot be trusted, and the run is accepted as partial",
        ),
    }
)


@dataclass(frozen=True, slots=True)
class _When:
    """An arm event to wait for: its kind, its cube, and which time.

    With a cube, ``count`` counts that cube's events; without one, every cube's.
    """

    kind: ArmEventKind
    object: str | None = None
    count: int = 1

    def matches(self, event: ArmEvent) -> bool:
        if event.kind != self.kind:
            return False
        if self.object is None:
            return event.overall == self.count
        return event.object == self.object and event.count == self.count


_Strike = Callable[[World, SimArm, Camera, np.random.Generator], None]


def _scatter(world: World, arm: SimArm, camera: Camera, rng: np.random.Generator) -> None:
    for name, pose in zip(CUBES, world.free_spots(rng), strict=True):
        world.put(name, pose)


_SHOULDER = 1  # panda_joint2: every reach down to the table needs it

# When each fault strikes (an arm event: its kind, its cube, which time), and what it does to the
# physics or the device. The slip and the hang catch the red cube's first carry; the knock comes
# as the last cube of the first round is let go; the joint seizes as the second pick begins.
_ARM_FAULTS: Mapping[Fault, tuple[_When, _Strike]] = {
    Fault.SLIP: (
        _When("midway", "red_cube"),
        lambda world, arm, camera, rng: arm.slip(),
    ),
    Fault.KNOCK: (_When("released", count=len(CUBES)), _scatter),
    Fault.TIMEOUT: (
        _When("carry", "red_cube"),
        lambda world, arm, camera, rng: arm.controller.hang(),
    ),
    Fault.DEAD_JOINT: (
        _When("pick", count=2),
        lambda world, arm, camera, rng: arm.controller.seize(_SHOULDER),
    ),
}
# The camera's driver crashes on its third frame: the observer takes one before the first
# round and one after it, and perception's live look while verifying that round is the third.
_CAMERA_CRASH_FRAME = 3


def inject(fault: Fault, *, world: World, arm: SimArm, camera: Camera, seed: int = 0) -> None:
    """Arm ``fault`` on the devices; it strikes once, when its moment comes."""
    fault = Fault(fault)
    if fault is Fault.CAMERA:
        camera.crash_on_frame(_CAMERA_CRASH_FRAME)
        return
    armed = _ARM_FAULTS.get(fault)
    if armed is None:
        return
    when, strike = armed
    rng = np.random.default_rng([seed, 1])  # its own stream: the scene's draws stay the same
    struck = False

    def listener(event: ArmEvent) -> None:
        nonlocal struck
        if not struck and when.matches(event):
            struck = True
            strike(world, arm, camera, rng)

    arm.listen(listener)
