"""What the demo's scene is made of, as plain values: object poses, the tray, the criteria.

Pure: no pybullet here. The world produces these values, the observer writes them as evidence,
and the planner and the perception verifier read them back (from a sensor and from evidence).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pev.model import JsonValue

__all__ = [
    "COLOURS",
    "CUBES",
    "Pose",
    "Scene",
    "TrayGeometry",
    "colour_of",
    "criterion_for",
    "cube_of",
]

COLOURS = ("red", "green", "blue")
"""The cubes' colours, in the order the planner handles them."""

CUBES = tuple(f"{colour}_cube" for colour in COLOURS)
"""The cubes' object names."""

# A success criterion names one cube: "red cube in tray".
_CRITERION = re.compile(r"^(?P<colour>[a-z]+) cube in tray$")

_DECIMALS = 4  # a tenth of a millimetre: poses in evidence and outputs stay readable


def criterion_for(colour: str) -> str:
    """The success criterion for one cube: ``"<colour> cube in tray"``."""
    return f"{colour} cube in tray"


def colour_of(criterion: str) -> str | None:
    """The colour a criterion names, or ``None`` if it is not a "<colour> cube in tray" one."""
    match = _CRITERION.match(criterion.strip())
    return match["colour"] if match else None


def cube_of(colour: str) -> str:
    """The object name of the cube of this colour."""
    return f"{colour}_cube"


def _rounded(values: tuple[float, ...]) -> list[float]:
    return [round(value, _DECIMALS) for value in values]


@dataclass(frozen=True, slots=True, kw_only=True)
class Pose:
    """Where an object is: its centre (metres, world frame) and its heading about z (radians)."""

    position: tuple[float, float, float]
    yaw: float = 0.0

    def to_json(self) -> dict[str, JsonValue]:
        """``{"position": [x, y, z], "yaw": yaw}``, rounded to a tenth of a millimetre."""
        return {"position": _rounded(self.position), "yaw": round(self.yaw, _DECIMALS)}

    @classmethod
    def from_json(cls, value: Any) -> Pose:
        """Read :meth:`to_json`'s form back.

        Raises:
            ValueError: Not a pose.
        """
        try:
            x, y, z = (float(item) for item in value["position"])
            return cls(position=(x, y, z), yaw=float(value.get("yaw", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a pose: {value!r}") from exc

    def distance_xy(self, other: Pose) -> float:
        """The horizontal distance between the two centres."""
        return math.dist(self.position[:2], other.position[:2])


@dataclass(frozen=True, slots=True, kw_only=True)
class TrayGeometry:
    """The tray: the centre of its floor, the half-width of its flat inside, its rim height."""

    centre: tuple[float, float, float]
    inner_half_extent: float
    rim_height: float

    def holds(self, position: tuple[float, float, float]) -> bool:
        """True if a point lies over the tray's inside and below its rim."""
        x, y, z = position
        cx, cy, cz = self.centre
        inside = abs(x - cx) <= self.inner_half_extent and abs(y - cy) <= self.inner_half_extent
        return inside and cz - 0.01 <= z <= cz + self.rim_height

    def to_json(self) -> dict[str, JsonValue]:
        """The geometry as JSON, for evidence."""
        return {
            "centre": _rounded(self.centre),
            "inner_half_extent": self.inner_half_extent,
            "rim_height": self.rim_height,
        }

    @classmethod
    def from_json(cls, value: Any) -> TrayGeometry:
        """Read :meth:`to_json`'s form back.

        Raises:
            ValueError: Not a tray geometry.
        """
        try:
            x, y, z = (float(item) for item in value["centre"])
            return cls(
                centre=(x, y, z),
                inner_half_extent=float(value["inner_half_extent"]),
                rim_height=float(value["rim_height"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a tray geometry: {value!r}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Scene:
    """A snapshot of the scene: every movable object's pose, and the tray."""

    objects: Mapping[str, Pose]
    tray: TrayGeometry

    def __post_init__(self) -> None:
        object.__setattr__(self, "objects", MappingProxyType(dict(self.objects)))

    def in_tray(self, name: str) -> bool:
        """True if the object ``name`` lies in the tray."""
        pose = self.objects.get(name)
        return pose is not None and self.tray.holds(pose.position)

    def to_json(self) -> dict[str, JsonValue]:
        """``{"objects": {name: pose}, "tray": geometry}``."""
        return {
            "objects": {name: pose.to_json() for name, pose in self.objects.items()},
            "tray": self.tray.to_json(),
        }

    @classmethod
    def from_json(cls, value: Any) -> Scene:
        """Read :meth:`to_json`'s form back (extra keys are ignored).

        Raises:
            ValueError: Not a scene.
        """
        try:
            objects = {str(name): Pose.from_json(pose) for name, pose in value["objects"].items()}
            return cls(objects=objects, tray=TrayGeometry.from_json(value["tray"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a scene: {exc}") from exc
