"""The perception verifier judges from the evidence, cites it, and blames the right nodes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from pev.engine import VerifyRequest
from pev.ledger import known_refs
from pev.model import (
    CriterionStatus,
    Evidence,
    EvidenceId,
    Plan,
    PlanNode,
    TaskId,
    VerdictStatus,
)
from pev.sim import CONTRACT, Fault, Frame, PerceptionVerifier, Pose, Scene
from pev.sim._observer import encode_labels
from pev.sim._world import TRAY

NAMES = ("background", "table", "tray", "arm", "red_cube", "green_cube", "blue_cube")
IN_TRAY = Pose(position=(0.45, 0.3, 0.032))
ON_TABLE = {"red_cube": (0.5, -0.2, 0.025), "blue_cube": (0.4, -0.3, 0.025)}
MOMENT = datetime(2026, 1, 1, tzinfo=UTC)


def _labels(**cubes: tuple[int, int]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A segmentation image: table everywhere, the tray on the right, cubes where told."""
    labels = np.full((96, 128), NAMES.index("table"), dtype=np.uint8)
    labels[30:70, 80:120] = NAMES.index("tray")
    for name, (row, col) in cubes.items():
        labels[row : row + 4, col : col + 4] = NAMES.index(name)
    return labels


SEEN = _labels(red_cube=(48, 20), green_cube=(48, 98), blue_cube=(60, 40))


class StubCamera:
    """A camera that sees ``labels``, or raises."""

    def __init__(self, labels: np.ndarray[Any, Any] | None) -> None:
        self.labels = labels

    def frame(self) -> Frame:
        if self.labels is None:
            raise RuntimeError("the camera driver crashed")
        return Frame(np.zeros((*self.labels.shape, 3), np.uint8), self.labels, NAMES)


def _plan() -> Plan:
    nodes = [PlanNode("observe", "look", tool="observe", effect="query")]
    for colour in ("red", "green", "blue"):
        nodes.append(
            PlanNode(f"pick_{colour}", "pick", tool="pick", args={"object": f"{colour}_cube"})
        )
        nodes.append(
            PlanNode(
                f"place_{colour}",
                "place",
                tool="place",
                args={"object": f"{colour}_cube", "target": "tray"},
                after=(f"pick_{colour}",),
            )
        )
    return Plan(CONTRACT.goal, tuple(nodes))


def _request(*, green: Pose = IN_TRAY, labels: np.ndarray[Any, Any] = SEEN) -> VerifyRequest:
    objects = {name: Pose(position=position) for name, position in ON_TABLE.items()}
    scene = Scene(objects={**objects, "green_cube": green}, tray=TRAY)
    common: Mapping[str, Any] = {"phase": "after", "captured_at": MOMENT, "revision": 1}
    evidence = (
        Evidence(
            id=EvidenceId("1-after-1"),
            kind="state",
            source="poses",
            payload=scene.to_json(),
            **common,
        ),
        Evidence(
            id=EvidenceId("1-after-2"),
            kind="segmentation",
            source="camera",
            payload={"labels": list(NAMES)},
            artifact=encode_labels(labels, NAMES),
            media_type="image/png",
            **common,
        ),
    )
    return VerifyRequest(
        task_id=TaskId("t1"),
        input="cubes",
        contract=CONTRACT,
        plan=_plan(),
        revision=1,
        results={},
        evidence=evidence,
    )


async def test_a_cube_seen_and_tracked_in_the_tray_is_satisfied_citing_both() -> None:
    """Green is in the tray by pose and sight; red and blue are not, and their nodes are blamed."""
    request = _request()
    verdict = await PerceptionVerifier(StubCamera(SEEN)).verify(request)
    statuses = {result.criterion: result.status for result in verdict.criteria}
    assert statuses == {
        "red cube in tray": CriterionStatus.UNSATISFIED,
        "green cube in tray": CriterionStatus.SATISFIED,
        "blue cube in tray": CriterionStatus.UNSATISFIED,
    }
    assert verdict.status is VerdictStatus.REPLAN_REQUIRED
    assert verdict.failed_nodes == {"pick_red", "place_red", "pick_blue", "place_blue"}
    cited = {"evidence:1-after-1", "evidence:1-after-2"}
    assert all(set(result.evidence_refs) == cited for result in verdict.criteria)
    assert set(verdict.evidence_refs) == cited


async def test_pose_and_sight_that_disagree_are_unknown_not_guessed() -> None:
    """The pose puts green in the tray but the camera sees it on the table: inconclusive."""
    labels = _labels(red_cube=(48, 20), green_cube=(10, 10), blue_cube=(60, 40))
    request = _request(labels=labels)
    verdict = await PerceptionVerifier(StubCamera(labels)).verify(request)
    green = next(r for r in verdict.criteria if r.criterion == "green cube in tray")
    assert green.status is CriterionStatus.UNKNOWN
    assert verdict.status is VerdictStatus.REPLAN_REQUIRED  # red and blue are still unmet


async def test_a_scene_that_moved_since_the_evidence_is_inconclusive() -> None:
    """The live look differs from the saved image: the evidence no longer describes the scene."""
    moved = _labels(red_cube=(48, 24), green_cube=(48, 98), blue_cube=(60, 40))
    verdict = await PerceptionVerifier(StubCamera(moved)).verify(_request())
    assert verdict.status is VerdictStatus.INCONCLUSIVE
    assert {r.status for r in verdict.criteria} == {CriterionStatus.UNKNOWN}


async def test_a_crashed_camera_makes_perception_raise() -> None:
    """Perception cannot look: it raises (the engine records the verdict as thrown)."""
    with pytest.raises(RuntimeError, match="camera driver crashed"):
        await PerceptionVerifier(StubCamera(None)).verify(_request())


@pytest.mark.parametrize("fault", list(Fault), ids=str)
def test_every_verdict_cites_only_evidence_of_its_task(
    fault_runs: Mapping[Fault, Any], fault: Fault
) -> None:
    """In every run, each verdict cites evidence that exists: the round's own after-evidence."""
    state = fault_runs[fault].state
    existing = known_refs(state)
    after = {e.ref: e for e in state.evidence if e.phase == "after"}
    for recorded in state.verdicts:
        if recorded.verdict is None:
            continue
        cited = set(recorded.verdict.evidence_refs)
        for result in recorded.verdict.criteria:
            cited |= set(result.evidence_refs)
        assert cited
        assert cited <= existing
        assert {after[ref].revision for ref in cited} == {recorded.revision}
