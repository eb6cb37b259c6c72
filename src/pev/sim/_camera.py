"""The overhead camera: a small colour image and a segmentation image per frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pev.sim._bullet import pb
from pev.sim._world import World

__all__ = ["Camera", "Frame"]


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """One camera frame: colour pixels, and which object each pixel shows."""

    rgb: np.ndarray[Any, np.dtype[np.uint8]]
    labels: np.ndarray[Any, np.dtype[np.uint8]]
    names: tuple[str, ...]


class Camera:
    """A small overhead camera (128 x 96) looking down at the table, tray and cubes.

    Each frame also gives a segmentation image: for every pixel, the index in :attr:`names` of
    the object it shows (0 is the background).
    """

    WIDTH = 128
    HEIGHT = 96

    def __init__(self, world: World) -> None:
        self._world = world
        self.names: tuple[str, ...] = ("background", *world.bodies)
        self._label_of = {body: index + 1 for index, body in enumerate(world.bodies.values())}
        self._view = pb.computeViewMatrix([0.48, 0.04, 0.85], [0.48, 0.04, 0.0], [-1, 0, 0])
        self._projection = pb.computeProjectionMatrixFOV(45, self.WIDTH / self.HEIGHT, 0.1, 2.0)
        self.frames = 0
        self._crash_at: int | None = None
        self._crashed = False

    def crash_on_frame(self, number: int) -> None:
        """The camera's driver crashes when asked for frame ``number``, and stays down."""
        self._crash_at = number

    def frame(self) -> Frame:
        """Take a frame.

        Raises:
            RuntimeError: The camera driver has crashed.
        """
        self.frames += 1
        if self._crashed or (self._crash_at is not None and self.frames >= self._crash_at):
            self._crashed = True
            raise RuntimeError(f"the camera driver crashed (frame {self.frames} never came)")
        _, _, rgba, _, segmentation = pb.getCameraImage(
            self.WIDTH,
            self.HEIGHT,
            self._view,
            self._projection,
            renderer=pb.ER_TINY_RENDERER,
            physicsClientId=self._world.client,
        )
        pixels = np.asarray(rgba, dtype=np.uint8).reshape(self.HEIGHT, self.WIDTH, 4)
        bodies = np.asarray(segmentation, dtype=np.int64).reshape(self.HEIGHT, self.WIDTH)
        labels = np.zeros(bodies.shape, dtype=np.uint8)
        for body, label in self._label_of.items():
            labels[bodies == body] = label
        return Frame(rgb=np.ascontiguousarray(pixels[:, :, :3]), labels=labels, names=self.names)
