"""The physics: a headless pybullet world with a table, a tray, a Franka Panda arm and three cubes.

Everything is deterministic: a DIRECT client (no GUI, no real time), a fixed time step, and cube
positions drawn from a seeded generator, so a seed gives the same run every time. Time here is
simulation steps; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType, TracebackType

import numpy as np

from pev.sim._bullet import pb, pybullet_data
from pev.sim._scene import COLOURS, CUBES, Pose, Scene, TrayGeometry

__all__ = ["CUBE_REGION", "STEPS_PER_SECOND", "TRAY", "PoseSensor", "World"]

STEPS_PER_SECOND = 240
"""Simulation steps per simulated second (pybullet's default time step)."""

# The layout, in metres. The table top is at z = 0 with the arm's base on it at the origin; the
# tray sits to the arm's left (+y) and the cubes start in a region to its right (-y), so every
# carry crosses open table.
TRAY = TrayGeometry(centre=(0.45, 0.3, 0.0075), inner_half_extent=0.1, rim_height=0.06)
CUBE_REGION = ((0.36, 0.62), (-0.36, -0.14))
"""Where cubes start, and where a knock throws them: (x range, y range)."""

_CUBE_HALF = 0.025
_MIN_SPACING = 0.1  # between cube centres, so the open fingers never brush a neighbour
_TRAY_SCALE = 0.5  # pybullet's traybox is 0.6 m across; half that fits the table
_RGBA = {"red": (0.85, 0.1, 0.1, 1.0), "green": (0.1, 0.7, 0.2, 1.0), "blue": (0.1, 0.25, 0.9, 1.0)}
_SETTLE_STEPS = 60


class World:
    """The simulated scene, stepped only when a device asks.

    Use it as a context manager (or call :meth:`close`) to release the physics client.

    Attributes:
        client: The pybullet client id; devices pass it to every pybullet call.
        bodies: Object name → pybullet body id: ``table``, ``tray``, ``arm`` and the cubes.
    """

    def __init__(self, *, seed: int = 0) -> None:
        """Build the scene; the cubes' start positions are drawn from ``seed``.

        Raises:
            ValueError: A negative seed.
        """
        if seed < 0:
            raise ValueError(f"the seed must be a whole number >= 0, got {seed}")
        self.seed = seed
        self.client: int = pb.connect(pb.DIRECT)
        self.steps = 0
        options = {"physicsClientId": self.client}
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), **options)
        pb.setGravity(0, 0, -9.81, **options)
        pb.setTimeStep(1 / STEPS_PER_SECOND, **options)
        pb.setPhysicsEngineParameter(deterministicOverlappingPairs=1, **options)
        bodies = {
            "table": pb.loadURDF(
                "table/table.urdf", [0.5, 0, -0.625], useFixedBase=True, **options
            ),
            "tray": pb.loadURDF(
                "tray/traybox.urdf",
                [TRAY.centre[0], TRAY.centre[1], 0],
                globalScaling=_TRAY_SCALE,
                useFixedBase=True,
                **options,
            ),
            "arm": pb.loadURDF("franka_panda/panda.urdf", [0, 0, 0], useFixedBase=True, **options),
        }
        for colour, pose in zip(COLOURS, self.free_spots(np.random.default_rng(seed)), strict=True):
            body = pb.loadURDF(
                "cube_small.urdf", list(pose.position), _quaternion(pose.yaw), **options
            )
            pb.changeVisualShape(body, -1, rgbaColor=list(_RGBA[colour]), **options)
            bodies[f"{colour}_cube"] = body
        self.bodies: Mapping[str, int] = MappingProxyType(bodies)
        self.sensor = PoseSensor(self)
        self._closed = False

    # -- stepping -------------------------------------------------------------------------

    def step(self, count: int = 1) -> None:
        """Advance the physics by ``count`` steps of 1/240 s."""
        for _ in range(count):
            pb.stepSimulation(physicsClientId=self.client)
        self.steps += count

    def settle(self) -> None:
        """Let things come to rest (a quarter of a simulated second)."""
        self.step(_SETTLE_STEPS)

    # -- reading --------------------------------------------------------------------------

    def pose(self, name: str) -> Pose:
        """Where the object ``name`` is now.

        Raises:
            KeyError: No object of that name.
        """
        position, orientation = pb.getBasePositionAndOrientation(
            self.bodies[name], physicsClientId=self.client
        )
        yaw = pb.getEulerFromQuaternion(orientation)[2]
        x, y, z = (float(value) for value in position)
        return Pose(position=(x, y, z), yaw=float(yaw))

    def scene(self) -> Scene:
        """Every cube's pose, and the tray."""
        return Scene(objects={name: self.pose(name) for name in CUBES}, tray=TRAY)

    # -- changing (only devices and faults call these) --------------------------------------

    def free_spots(self, rng: np.random.Generator) -> list[Pose]:
        """A resting pose per cube in the cube region, far enough apart to grasp each one."""
        (x_low, x_high), (y_low, y_high) = CUBE_REGION
        spots: list[Pose] = []
        while len(spots) < len(CUBES):
            x, y = float(rng.uniform(x_low, x_high)), float(rng.uniform(y_low, y_high))
            yaw = float(rng.uniform(-math.pi / 4, math.pi / 4))
            candidate = Pose(position=(x, y, _CUBE_HALF), yaw=yaw)
            if all(candidate.distance_xy(spot) >= _MIN_SPACING for spot in spots):
                spots.append(candidate)
        return spots

    def put(self, name: str, pose: Pose) -> None:
        """Move an object to ``pose`` at once, at rest (what a knock does to the cubes)."""
        body = self.bodies[name]
        pb.resetBasePositionAndOrientation(
            body, list(pose.position), _quaternion(pose.yaw), physicsClientId=self.client
        )
        pb.resetBaseVelocity(body, [0, 0, 0], [0, 0, 0], physicsClientId=self.client)

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect the physics client; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            pb.disconnect(physicsClientId=self.client)

    def __enter__(self) -> World:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class PoseSensor:
    """A read-only view of the scene: the poses of the cubes and the tray, nothing else.

    This is what the planner is given: it can look at the scene, but it cannot step, change or
    inspect the world (nor the devices, nor anything injected into them).
    """

    __slots__ = ("_world",)

    def __init__(self, world: World) -> None:
        self._world = world

    def read(self) -> Scene:
        """The scene as it is now."""
        return self._world.scene()


def _quaternion(yaw: float) -> list[float]:
    return list(pb.getQuaternionFromEuler([0, 0, yaw]))
