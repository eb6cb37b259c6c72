"""The perception verifier: checks each "<colour> cube in tray" criterion against the evidence.

It judges only from the round's evidence: the poses the observer recorded (``state``) and the
segmentation image it saved (``segmentation``), and cites both. Before judging, it takes one live
look through the camera and checks that it sees exactly what the saved image shows: evidence
that no longer describes the scene cannot be judged on. So perception needs a working camera;
if the camera raises, so does the verifier, and the engine records the verdict as ``thrown``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pev.engine import VerifyRequest
from pev.model import (
    CriterionResult,
    CriterionStatus,
    Evidence,
    EvidencePhase,
    Plan,
    Verdict,
    VerdictStatus,
)
from pev.sim._camera import Camera
from pev.sim._observer import decode_labels
from pev.sim._scene import Scene, colour_of, cube_of

__all__ = ["PerceptionVerifier"]

# How a criterion is judged from two independent readings: does the pose put the cube in the
# tray, and does the camera see it there (None: the camera does not see the cube at all)?
# Both must agree for a yes; a cube the pose puts elsewhere and the camera does not see in the
# tray is a no; any disagreement is "unknown", never a guess.
_JUDGEMENT: Mapping[tuple[bool, bool | None], CriterionStatus] = {
    (True, True): CriterionStatus.SATISFIED,
    (True, False): CriterionStatus.UNKNOWN,
    (True, None): CriterionStatus.UNKNOWN,
    (False, False): CriterionStatus.UNSATISFIED,
    (False, None): CriterionStatus.UNSATISFIED,
    (False, True): CriterionStatus.UNKNOWN,
}

# The tray's inside is the middle of its image: its sloped rim takes a sixth on each side.
_RIM_FRACTION = 1 / 6


@dataclass(frozen=True, slots=True)
class _Sight:
    """What the segmentation image shows."""

    labels: np.ndarray[Any, np.dtype[np.uint8]]
    names: Sequence[str]

    def in_tray(self, name: str) -> bool | None:
        """Whether the object's pixels lie inside the tray's; ``None`` if it is not visible."""
        cube = self._pixels(name)
        tray = self._pixels("tray")
        if cube is None or tray is None:
            return None
        rows, cols = tray
        low_r, high_r = _inner(rows)
        low_c, high_c = _inner(cols)
        row, col = float(cube[0].mean()), float(cube[1].mean())
        return low_r <= row <= high_r and low_c <= col <= high_c

    def _pixels(self, name: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
        if name not in self.names:
            return None
        rows, cols = np.nonzero(self.labels == self.names.index(name))
        return (rows, cols) if rows.size else None


def _inner(coordinates: np.ndarray[Any, Any]) -> tuple[float, float]:
    low, high = float(coordinates.min()), float(coordinates.max())
    rim = (high - low) * _RIM_FRACTION
    return low + rim, high - rim


class PerceptionVerifier:
    """Judges the criteria "<colour> cube in tray" from the round's pose and camera evidence."""

    def __init__(self, camera: Camera) -> None:
        self._camera = camera

    async def verify(self, request: VerifyRequest) -> Verdict:
        """The verdict on the round just executed, citing the evidence it rests on.

        Raises:
            RuntimeError: The camera failed during the live look.
        """
        criteria = request.contract.success_criteria
        after = _latest_after(request.evidence, request.revision)
        state = after.get("state")
        if state is None:
            return _inconclusive(criteria, f"no pose evidence after round {request.revision}", ())
        live = self._camera.frame()
        scene = Scene.from_json(state.payload)
        refs = [state.ref]
        sight: _Sight | None = None
        segmentation = after.get("segmentation")
        if segmentation is not None and segmentation.artifact is not None:
            labels = decode_labels(segmentation.artifact)
            if labels.shape != live.labels.shape or not np.array_equal(labels, live.labels):
                return _inconclusive(
                    criteria,
                    f"the camera sees a different scene from the one {segmentation.ref} shows: "
                    "something moved after the evidence was captured",
                    (state.ref, segmentation.ref),
                )
            sight = _Sight(labels, _names(segmentation))
            refs.append(segmentation.ref)
        cited = tuple(refs)
        results: list[CriterionResult] = []
        notes: list[str] = []
        blamed: set[str] = set()
        for criterion in criteria:
            colour = colour_of(criterion)
            if colour is None:
                results.append(CriterionResult(criterion, CriterionStatus.UNKNOWN, cited))
                notes.append(f"perception cannot check {criterion!r}")
                continue
            cube = cube_of(colour)
            seen = sight.in_tray(cube) if sight is not None else None
            status = _JUDGEMENT[(scene.in_tray(cube), seen)]
            results.append(CriterionResult(criterion, status, cited))
            if status is CriterionStatus.UNSATISFIED:
                blamed |= _handling(request.plan, cube)
                notes.append(_where(scene, cube, colour, seen))
            elif status is CriterionStatus.UNKNOWN:
                notes.append(f"{colour} cube: the pose and the camera disagree")
        statuses = {result.status for result in results}
        if CriterionStatus.UNSATISFIED in statuses:
            overall = VerdictStatus.REPLAN_REQUIRED
        elif CriterionStatus.UNKNOWN in statuses:
            overall = VerdictStatus.INCONCLUSIVE
        else:
            overall = VerdictStatus.SUCCESS
        return Verdict(
            overall,
            failed_nodes=frozenset(blamed),
            feedback="; ".join(notes),
            criteria=tuple(results),
            unmet_criteria=tuple(
                r.criterion for r in results if r.status is CriterionStatus.UNSATISFIED
            ),
            preserved_constraints=request.contract.constraints,
            guidance="look where each missing cube lies now, and grasp it again from there"
            if blamed
            else "",
            evidence_refs=cited,
        )


def _latest_after(evidence: Sequence[Evidence], revision: int) -> dict[str, Evidence]:
    """The last ``after`` observation of each kind captured in this revision."""
    latest: dict[str, Evidence] = {}
    for item in evidence:
        if item.revision == revision and item.phase is EvidencePhase.AFTER:
            latest[item.kind] = item
    return latest


def _names(segmentation: Evidence) -> tuple[str, ...]:
    payload = segmentation.payload
    labels = payload.get("labels") if isinstance(payload, Mapping) else None
    return tuple(str(name) for name in labels) if isinstance(labels, Sequence) else ()


def _handling(plan: Plan, cube: str) -> set[str]:
    """The plan's pick and place nodes for ``cube``: the nodes responsible for where it is."""
    return {
        node.id
        for node in plan.nodes
        if node.tool in ("pick", "place") and node.args.get("object") == cube
    }


def _where(scene: Scene, cube: str, colour: str, seen: bool | None) -> str:
    pose = scene.objects.get(cube)
    tracked = (
        "not tracked"
        if pose is None
        else f"tracked at ({pose.position[0]:.2f}, {pose.position[1]:.2f})"
    )
    sight = "not seen" if seen is None else "seen outside the tray"
    return f"{colour} cube not in tray: {tracked}, {sight}"


def _inconclusive(criteria: Sequence[str], why: str, refs: Sequence[str]) -> Verdict:
    return Verdict(
        VerdictStatus.INCONCLUSIVE,
        feedback=why,
        criteria=tuple(
            CriterionResult(criterion, CriterionStatus.UNKNOWN, tuple(refs))
            for criterion in criteria
        ),
        evidence_refs=tuple(refs),
    )
