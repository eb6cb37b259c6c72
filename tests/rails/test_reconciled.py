"""A record of unknown outcome that a reconciliation settled, as the rails show it.

The task of ``tests.support.reconciled``: ``post`` times out after taking effect, its record
ends ``unknown``, and its tool's ``reconcile`` settles it as done (or as not done). The rails
hear of the ``record_reconciled`` event as a phase of its own and say what was established.
"""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from tests.support.reconciled import NOT_FOUND, run_reconciled

import pev
from pev.rails import ConsoleRail, LoggingRail, RailEvent, RailPhase


async def _console_lines(*, done: bool) -> list[str]:
    out = io.StringIO()
    await run_reconciled(
        pev.MemoryStore(), done=done, rails=[ConsoleRail(Console(file=out, width=300))]
    )
    return out.getvalue().splitlines()


async def test_a_rail_hears_the_reconciliation_with_its_record() -> None:
    """``record_reconciled`` reaches rails after the unknown node, carrying the settled record."""
    heard: list[RailEvent] = []

    await run_reconciled(pev.MemoryStore(), rails=[heard.append])

    phases = [event.phase for event in heard]
    assert phases.index(RailPhase.RECORD_RECONCILED) > phases.index(RailPhase.NODE_FINISHED)
    [settled] = [event for event in heard if event.phase is RailPhase.RECORD_RECONCILED]
    assert settled.record is not None
    assert (settled.record.node_id, settled.record.status) == ("post", "unknown")


async def test_the_console_rail_says_a_record_was_reconciled_as_done() -> None:
    """After the ``?`` of the unknown node, a ``✓`` line: unknown → reconciled: succeeded."""
    lines = await _console_lines(done=True)

    [unknown] = [line for line in lines if line.startswith("  ? post unknown")]
    [settled] = [line for line in lines if "reconciled" in line]
    assert lines.index(settled) == lines.index(unknown) + 1
    assert settled.startswith("  ✓ post unknown → reconciled: succeeded  ")
    assert "reconcile" in settled.removeprefix("  ✓ post unknown → reconciled: succeeded")
    assert lines[-1] == "finished: succeeded/execution_succeeded"


async def test_the_console_rail_says_a_record_was_reconciled_as_not_done() -> None:
    """Settled as not done: a ``✗`` line, reconciled: failed, with what the reconcile found."""
    lines = await _console_lines(done=False)

    [settled] = [line for line in lines if "reconciled" in line]
    assert settled.startswith(f"  ✗ post unknown → reconciled: failed: {NOT_FOUND}  ")


async def test_the_logging_rail_logs_the_reconciliation(caplog: pytest.LogCaptureFixture) -> None:
    """One line for the reconciliation: the record stays unknown, reconciled says what it was."""
    with caplog.at_level(logging.INFO, logger="pev.rails.log"):
        result = await run_reconciled(pev.MemoryStore(), rails=[LoggingRail()])

    [record] = [r for r in caplog.records if r.pev["phase"] == "record_reconciled"]
    assert record.pev == {
        "task": result.task_id,
        "phase": "record_reconciled",
        "seq": record.pev["seq"],
        "node": "post",
        "tool": "post",
        "record": "1:post",
        "status": "unknown",
        "reconciled": "succeeded",
        "note": record.pev["note"],
    }
    assert "status=unknown reconciled=succeeded note=" in record.getMessage()
