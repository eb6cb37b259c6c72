"""Every fault takes its documented path: root cause, action, ending, and no blind repeats."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from pev.engine import RunResult
from pev.kernel import Finish, GlobalReplan, LocalReplan, RootCause, TaskStatus, TerminalReason
from pev.ledger import RevisionKind, verify_chain
from pev.model import RecordStatus, Reliability
from pev.sim import FAULT_PATHS, Fault, Recovery, path_taken

LOCAL, GLOBAL, PARTIAL, NONE = "local replan", "global replan", "accept partial", "none"
PLAN_ERROR = RootCause.PLAN_OR_ANSWER_ERROR
DEVICE = RootCause.DEVICE_FAILURE
SUCCEEDED = (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
BROKEN_DEVICE = (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)

# fault, root cause of the last diagnosis, the action taken, and how the task ended
TABLE = [
    pytest.param(Fault.NONE, None, NONE, SUCCEEDED, id="none"),
    pytest.param(Fault.SLIP, PLAN_ERROR, LOCAL, SUCCEEDED, id="slip"),
    pytest.param(Fault.KNOCK, PLAN_ERROR, GLOBAL, SUCCEEDED, id="knock"),
    pytest.param(Fault.TIMEOUT, DEVICE, PARTIAL, BROKEN_DEVICE, id="timeout"),
    pytest.param(Fault.DEAD_JOINT, DEVICE, PARTIAL, BROKEN_DEVICE, id="dead-joint"),
    pytest.param(
        Fault.CAMERA,
        RootCause.PERCEPTION_UNRELIABLE,
        PARTIAL,
        (TaskStatus.PARTIAL, TerminalReason.VERIFIER_UNRELIABLE),
        id="camera",
    ),
]


def _action(run: Any) -> str:
    """What the kernel did about the first verdict that did not pass."""
    for dispatched in run.state.decisions:
        match dispatched.decision:
            case LocalReplan():
                return LOCAL
            case GlobalReplan():
                return GLOBAL
            case Finish(status=TaskStatus.PARTIAL):
                return PARTIAL
            case Finish():
                continue
    return NONE


@pytest.mark.parametrize(("fault", "cause", "action", "ending"), TABLE)
def test_each_fault_takes_its_documented_path(
    fault_runs: Mapping[Fault, Any],
    fault: Fault,
    cause: RootCause | None,
    action: str,
    ending: tuple[TaskStatus, TerminalReason],
) -> None:
    """Root cause, action and ending are the ones the fault table documents."""
    run = fault_runs[fault]
    diagnoses = run.state.diagnoses
    assert (diagnoses[-1].diagnosis.cause if diagnoses else None) == cause
    assert _action(run) == action
    assert (run.result.status, run.result.reason) == ending
    documented = FAULT_PATHS[fault]
    assert (documented.cause, documented.recovery, documented.status, documented.reason) == (
        cause,
        Recovery(action),
        *ending,
    )
    assert path_taken(run.state) == documented


@pytest.mark.parametrize("fault", list(Fault), ids=str)
def test_no_action_with_unknown_outcome_is_sent_twice(
    fault_runs: Mapping[Fault, Any], fault: Fault
) -> None:
    """No record with outcome unknown has a second record with the same tool and args."""
    records = fault_runs[fault].state.records.values()
    sent = Counter((record.tool, record.args_digest) for record in records)
    unknown = [r for r in records if r.status is RecordStatus.UNKNOWN]
    assert all(sent[(r.tool, r.args_digest)] == 1 for r in unknown)


@pytest.mark.parametrize("fault", list(Fault), ids=str)
def test_every_ledger_explains_its_run(fault_runs: Mapping[Fault, Any], fault: Fault) -> None:
    """Each run's hash chain verifies, and its ledger alone rebuilds its result."""
    run = fault_runs[fault]
    assert verify_chain(run.result.task_id, run.entries).ok
    assert RunResult.from_state(run.state) == run.result


def _records(run: Any, revision: int) -> dict[str, Any]:
    return {r.node_id: r for r in run.state.records.values() if r.revision == revision}


def test_slip_redoes_only_the_red_cube_where_it_fell(fault_runs: Mapping[Fault, Any]) -> None:
    """The local revision re-grasps the red cube at its new pose; the other cubes are kept."""
    run = fault_runs[Fault.SLIP]
    local = run.state.revisions[1]
    assert local.kind is RevisionKind.LOCAL
    assert local.redo == {"pick_red", "place_red"}
    assert set(_records(run, 2)) == {"pick_red", "place_red"}
    regrasp = local.plan.node("pick_red")
    assert "$ref" not in str(regrasp.args["pose"])  # a fresh pose, read when re-planning
    fell_at = run.result.outputs["pick_red"]["grasped_at"]
    assert fell_at != run.result.outputs["observe"]["red_cube"]["position"]


def test_knock_replans_the_whole_task(fault_runs: Mapping[Fault, Any]) -> None:
    """All six pick and place nodes are blamed, so the second revision is a fresh global plan."""
    run = fault_runs[Fault.KNOCK]
    first = run.state.verdicts[0].verdict
    assert len(first.failed_nodes) == 6
    assert [revision.kind for revision in run.state.revisions] == [
        RevisionKind.INITIAL,
        RevisionKind.GLOBAL,
    ]
    assert len(_records(run, 2)) == 7  # observe again, then every pick and place


def test_timeout_is_an_unknown_outcome_measured_in_steps(fault_runs: Mapping[Fault, Any]) -> None:
    """The hung move is a timeout with unknown outcome, counted in simulation steps; no replan."""
    run = fault_runs[Fault.TIMEOUT]
    hung = _records(run, 1)["place_red"]
    assert hung.status is RecordStatus.UNKNOWN
    result = run.state.results[hung.id]
    assert result.is_timeout
    assert result.outcome_unknown
    assert "480 simulation steps" in result.error
    assert len(run.state.revisions) == 1
    assert {"place_green", "place_blue"} <= set(run.result.outputs)


def test_dead_joint_fails_the_picks_it_cannot_reach(fault_runs: Mapping[Fault, Any]) -> None:
    """The seized joint fails the later picks as known device failures; their places never run."""
    run = fault_runs[Fault.DEAD_JOINT]
    records = _records(run, 1)
    assert records["place_red"].status is RecordStatus.SUCCEEDED
    for pick in ("pick_green", "pick_blue"):
        assert records[pick].status is RecordStatus.FAILED
        assert "stopped responding" in (records[pick].error or "")
    skipped = {s.node_id for s in run.state.skipped}
    assert skipped == {"place_green", "place_blue"}


def test_camera_crash_makes_the_verdict_thrown(fault_runs: Mapping[Fault, Any]) -> None:
    """The camera raises inside perception: no verdict, reliability thrown, evidence intact."""
    run = fault_runs[Fault.CAMERA]
    (recorded,) = run.state.verdicts
    assert recorded.verdict is None
    assert recorded.reliability is Reliability.THROWN
    assert "camera driver crashed" in recorded.problems[0]
    kinds = {e.kind for e in run.state.evidence if e.phase == "after"}
    assert kinds == {"state", "image", "segmentation"}
