"""The observer: evidence before and after every round, from the pose tracker and the camera."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from pev.engine import Observation, ObserveContext
from pev.model import EvidencePhase, JsonValue
from pev.sim._camera import Camera
from pev.sim._world import World

__all__ = ["SceneObserver", "decode_labels", "encode_labels", "encode_rgb"]

# The segmentation image is a palette PNG: each pixel's value is the index of the object it shows
# (the evidence payload names them), and the palette makes it viewable as a picture.
_PALETTE_COLOURS = {
    "background": (0, 0, 0),
    "table": (196, 170, 130),
    "tray": (90, 90, 90),
    "arm": (235, 235, 235),
    "red_cube": (220, 30, 30),
    "green_cube": (30, 180, 60),
    "blue_cube": (30, 70, 230),
}


def encode_rgb(pixels: np.ndarray[Any, np.dtype[np.uint8]]) -> bytes:
    """A colour image as PNG bytes."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def encode_labels(labels: np.ndarray[Any, np.dtype[np.uint8]], names: Sequence[str]) -> bytes:
    """A segmentation image (one object index per pixel) as a palette PNG."""
    height, width = labels.shape
    image = Image.frombytes("P", (width, height), np.ascontiguousarray(labels).tobytes())
    palette: list[int] = []
    for name in names:
        palette.extend(_PALETTE_COLOURS.get(name, (255, 0, 255)))
    image.putpalette(palette)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def decode_labels(png: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The object index of every pixel of a segmentation PNG.

    Raises:
        ValueError: The bytes are not a palette PNG.
    """
    with Image.open(io.BytesIO(png)) as image:
        if image.mode != "P":
            raise ValueError(f"a segmentation image is a palette PNG, not mode {image.mode!r}")
        return np.asarray(image, dtype=np.uint8).copy()


class SceneObserver:
    """Captures the scene as evidence: its ``state``, and an ``image`` and a ``segmentation``.

    The state is every cube's pose and the tray, as JSON; the image is the overhead camera's view
    (a colour PNG) and the segmentation names the object each of its pixels shows (a palette
    PNG). If the camera fails, the state is still captured and says what the camera raised.
    """

    def __init__(self, world: World, camera: Camera) -> None:
        self._world = world
        self._camera = camera

    async def observe(self, phase: EvidencePhase, context: ObserveContext) -> list[Observation]:
        """Capture the scene now (the same whatever the phase)."""
        state: dict[str, JsonValue] = {"step": self._world.steps, **self._world.scene().to_json()}
        try:
            frame = self._camera.frame()
        except RuntimeError as exc:
            state["camera_error"] = f"{type(exc).__name__}: {exc}"
            return [Observation(kind="state", source="pose-tracker", payload=state)]
        size: dict[str, JsonValue] = {"width": Camera.WIDTH, "height": Camera.HEIGHT}
        return [
            Observation(kind="state", source="pose-tracker", payload=state),
            Observation(
                kind="image",
                source="overhead-camera",
                payload=size,
                artifact=encode_rgb(frame.rgb),
                media_type="image/png",
            ),
            Observation(
                kind="segmentation",
                source="overhead-camera",
                payload={**size, "labels": list(frame.names)},
                artifact=encode_labels(frame.labels, frame.names),
                media_type="image/png",
            ),
        ]
