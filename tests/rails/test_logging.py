"""LoggingRail: one structured line per phase boundary, with the same fields as a dict."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import LOOK, POUR

from pev.model import DeviceFailure, Success, VerifierFailure
from pev.rails import LoggingRail, RailBus

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Tasks


async def _log_task(tasks: Tasks, rail: LoggingRail) -> None:
    tasks.bus = RailBus([rail])
    jammed = DeviceFailure("look", "lens cap on", is_timeout=True, outcome_unknown=True)
    await tasks.simple("t", {POUR: Success(1), LOOK: jammed}, blame=["look"])


async def test_one_line_per_event_with_pev_extra(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """Every rail event is one INFO record on pev.rails.log carrying its fields as ``pev``."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await _log_task(tasks, LoggingRail())
    records = [r for r in caplog.records if r.name == "pev.rails.log"]
    assert [r.pev["phase"] for r in records] == [
        "task_started",
        "planned",
        "revision_started",
        "node_started",
        "node_finished",
        "node_started",
        "node_finished",
        "executed",
        "verified",
        "diagnosed",
        "dispatched",
        "task_finished",
    ]
    assert all(r.levelno == logging.INFO for r in records)
    assert [r.pev["seq"] for r in records[:3]] == [1, 2, 2]
    assert all(r.getMessage().startswith(f"pev task=t phase={r.pev['phase']} ") for r in records)


@pytest.mark.parametrize(
    ("phase", "message", "fields"),
    [
        pytest.param(
            "task_started",
            "pev task=t phase=task_started seq=1 mode=recovery criteria=1",
            {"mode": "recovery", "criteria": 1},
            id="task_started",
        ),
        pytest.param(
            "planned",
            "pev task=t phase=planned seq=2 revision=1 kind=initial nodes=2",
            {"revision": 1, "kind": "initial", "nodes": 2},
            id="planned",
        ),
        pytest.param(
            "revision_started",
            'pev task=t phase=revision_started seq=2 revision=1 kind=initial reason="initial plan"',
            {"revision": 1, "kind": "initial", "reason": "initial plan"},
            id="revision_started",
        ),
        pytest.param(
            "node_finished",
            "pev task=t phase=node_finished seq=6 node=look tool=camera record=t-r2 "
            'status=unknown error="lens cap on" timeout=true outcome_unknown=true',
            {
                "node": "look",
                "tool": "camera",
                "record": "t-r2",
                "status": "unknown",
                "error": "lens cap on",
                "timeout": True,
                "outcome_unknown": True,
            },
            id="node_finished",
        ),
        pytest.param(
            "executed",
            "pev task=t phase=executed seq=7 revision=1 executed_ok=false",
            {"revision": 1, "executed_ok": False},
            id="executed",
        ),
        pytest.param(
            "verified",
            "pev task=t phase=verified seq=8 revision=1 verdict=replan_required reliability=ok "
            "failed_nodes=look",
            {
                "revision": 1,
                "verdict": "replan_required",
                "reliability": "ok",
                "failed_nodes": ["look"],
            },
            id="verified",
        ),
        pytest.param(
            "diagnosed",
            "pev task=t phase=diagnosed seq=9 revision=1 cause=device_failure nodes=look",
            {"revision": 1, "cause": "device_failure", "nodes": ["look"]},
            id="diagnosed",
        ),
        pytest.param(
            "dispatched",
            "pev task=t phase=dispatched seq=10 revision=1 decision=finish status=partial "
            "reason=device_failure",
            {"revision": 1, "decision": "finish", "status": "partial", "reason": "device_failure"},
            id="dispatched",
        ),
        pytest.param(
            "task_finished",
            "pev task=t phase=task_finished seq=11 status=partial reason=device_failure "
            "outputs=pour detail=broken",
            {"status": "partial", "reason": "device_failure", "outputs": ["pour"]},
            id="task_finished",
        ),
    ],
)
async def test_line_details(
    phase: str,
    message: str,
    fields: dict[str, object],
    tasks: Tasks,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each phase's line names its key details, in text and in the ``pev`` dict alike."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await _log_task(tasks, LoggingRail())
    record = [r for r in caplog.records if r.pev["phase"] == phase][-1]  # the last node
    assert record.getMessage() == message
    assert record.pev.items() >= fields.items()


async def test_node_started_details(tasks: Tasks, caplog: pytest.LogCaptureFixture) -> None:
    """A node_started line names the node, tool, record and effect."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await _log_task(tasks, LoggingRail())
    record = next(r for r in caplog.records if r.pev["phase"] == "node_started")
    assert record.getMessage() == (
        "pev task=t phase=node_started seq=3 revision=1 node=pour tool=can record=t-r1 "
        "effect=action"
    )


async def test_custom_logger_and_level(tasks: Tasks, caplog: pytest.LogCaptureFixture) -> None:
    """The rail logs to the logger and at the level it is given."""
    logger = logging.getLogger("my.agent")
    with caplog.at_level(logging.DEBUG, logger="my.agent"):
        await _log_task(tasks, LoggingRail(logger, level=logging.DEBUG))
    mine = [r for r in caplog.records if r.name == "my.agent"]
    assert len(mine) == 12
    assert {r.levelno for r in mine} == {logging.DEBUG}


async def test_disabled_level_logs_nothing(tasks: Tasks, caplog: pytest.LogCaptureFixture) -> None:
    """Below the logger's level, the rail writes nothing."""
    with caplog.at_level(logging.WARNING, logger="pev.rails.log"):
        await _log_task(tasks, LoggingRail())
    assert [r for r in caplog.records if r.name == "pev.rails.log"] == []


async def test_evidence_and_check_failure_details(
    tasks: Tasks, caplog: pytest.LogCaptureFixture
) -> None:
    """Evidence lines name the observation; a failed node check logs its reason as the error."""
    tasks.bus = RailBus([LoggingRail()])
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await tasks.everything("e")
        await tasks.simple("v", {POUR: VerifierFailure("pour", "too little water")})
    by_phase = {r.pev["phase"]: r.pev for r in caplog.records if r.pev["task"] == "e"}
    assert by_phase["evidence_captured"] | {"seq": 0} == {
        "task": "e",
        "phase": "evidence_captured",
        "seq": 0,
        "revision": 1,
        "evidence": "e-e1",
        "evidence_kind": "state",
        "evidence_phase": "after",
    }
    assert by_phase["dispatched"]["decision"] == "global_replan"
    failed = next(
        r for r in caplog.records if r.pev["phase"] == "node_finished" and r.pev["task"] == "v"
    )
    assert failed.pev["error"] == "too little water"
