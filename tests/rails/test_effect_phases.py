"""What befalls effects, as the rails show it: reused nodes, superseded effects, compensations.

The tasks of ``tests.support.effect_surfaces``, run for real: ``paid`` refunds a payment a local
replan replaces, then reuses both its effects in a global replan; ``unwound`` fails and undoes
its effects, one refund failing. Each is a phase boundary of its own (docs/rails.md).
"""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from tests.support.effect_surfaces import CLOSED, run_paid, run_unwound

import pev
from pev.rails import ConsoleRail, LoggingRail, RailEvent, RailPhase


async def _heard(*, unwound: bool = False) -> list[RailEvent]:
    heard: list[RailEvent] = []
    run = run_unwound if unwound else run_paid
    await run(pev.MemoryStore(), rails=[heard.append])
    return heard


async def _console_lines(*, unwound: bool = False) -> list[str]:
    out = io.StringIO()
    run = run_unwound if unwound else run_paid
    await run(pev.MemoryStore(), rails=[ConsoleRail(Console(file=out, width=300))])
    return out.getvalue().splitlines()


def _logged(caplog: pytest.LogCaptureFixture, phase: str) -> list[dict[str, object]]:
    return [r.pev for r in caplog.records if getattr(r, "pev", {}).get("phase") == phase]


async def test_a_rail_hears_supersede_compensate_then_reuse_in_order() -> None:
    """Superseded, compensation started and finished before revision 2 sends; then two reuses."""
    phases = [str(event.phase) for event in await _heard()]

    superseded = phases.index("effect_superseded")
    assert phases[superseded : superseded + 4] == [
        "effect_superseded",
        "compensation_started",
        "compensation_finished",
        "node_started",
    ]
    assert phases.count("node_reused") == 2
    assert phases.index("node_reused") > phases.index("compensation_finished")


async def test_a_reused_node_comes_with_the_record_it_reuses() -> None:
    """node_reused carries the effect's record, from the revision that sent it."""
    reused = [event for event in await _heard() if event.phase is RailPhase.NODE_REUSED]

    assert [(e.record.id, e.record.revision) for e in reused if e.record] == [
        ("1:ship", 1),
        ("2:pay", 2),
    ]


async def test_a_compensation_comes_with_its_own_record() -> None:
    """Started with the pending undo:1:pay record; finished with it as it ended."""
    heard = await _heard()

    [started] = [e for e in heard if e.phase is RailPhase.COMPENSATION_STARTED]
    [finished] = [e for e in heard if e.phase is RailPhase.COMPENSATION_FINISHED]
    assert started.record is not None
    assert finished.record is not None
    assert (started.record.id, started.record.status) == ("undo:1:pay", "pending")
    assert (finished.record.id, finished.record.status) == ("undo:1:pay", "succeeded")


async def test_the_console_says_a_node_was_reused_and_from_where() -> None:
    """``↺ ship reused record 1:ship (sent in revision 1)``: nothing was sent for it."""
    lines = await _console_lines()

    assert "  ↺ ship reused record 1:ship (sent in revision 1)" in lines
    assert "  ↺ pay reused record 2:pay (sent in revision 2)" in lines


async def test_the_console_says_an_effect_was_superseded_and_compensated() -> None:
    """A ``↷`` superseded line, the compensation starting, then ``⤺ record 1:pay compensated``."""
    lines = await _console_lines()

    superseded = lines.index(
        "  ↷ record 1:pay superseded: revision 2 redoes node 'pay' with another call"
    )
    assert lines[superseded + 1] == "  ▶ compensating record 1:pay (pay)"
    assert lines[superseded + 2].startswith("  ⤺ record 1:pay compensated  ")


async def test_the_console_says_a_failed_compensation_left_the_effect_in_place() -> None:
    """``✗ compensation of 1:pay failed: <error>; left in place``, after the unwinding line."""
    lines = await _console_lines(unwound=True)

    unwinding = lines.index(
        "unwinding: undoing its effects before it ends failed/replan_budget_exhausted"
    )
    [failed] = [line for line in lines if line.startswith("  ✗ compensation of 1:pay")]
    assert lines.index(failed) > unwinding
    assert f"failed: RuntimeError: {CLOSED}" in failed
    assert "; left in place  " in failed
    assert any(line.startswith("  ⤺ record 1:ship compensated") for line in lines)


async def test_the_logging_rail_logs_a_reused_node(caplog: pytest.LogCaptureFixture) -> None:
    """node_reused: the revision and node, the record reused and the revision that sent it."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await run_paid(pev.MemoryStore(), rails=[LoggingRail()])

    first, _ = _logged(caplog, "node_reused")
    assert first == {
        "task": "paid",
        "phase": "node_reused",
        "seq": first["seq"],
        "revision": 3,
        "node": "ship",
        "tool": "ship",
        "record": "1:ship",
        "sent_in": 1,
    }


async def test_the_logging_rail_logs_a_failed_compensation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """compensation_finished: the compensation's record, the effect, failed, and the error."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await run_unwound(pev.MemoryStore(), rails=[LoggingRail()])

    failed, undone = _logged(caplog, "compensation_finished")
    assert (failed["record"], failed["effect"], failed["status"]) == (
        "undo:1:pay",
        "1:pay",
        "failed",
    )
    assert CLOSED in str(failed["error"])
    assert (undone["effect"], undone["status"]) == ("1:ship", "succeeded")


async def test_the_logging_rail_logs_the_unwind(caplog: pytest.LogCaptureFixture) -> None:
    """unwind_started: how the task ends once its effects are undone (it has not ended yet)."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        await run_unwound(pev.MemoryStore(), rails=[LoggingRail()])

    [unwind] = _logged(caplog, "unwind_started")
    assert (unwind["ends"], unwind["reason"]) == ("failed", "replan_budget_exhausted")
    assert unwind["detail"] == "verifier blamed pay"
