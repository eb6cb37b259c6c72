"""Tamper detection: ``Ledger.verify`` catches any edited, dropped or moved event.

See docs/design.md §5.2.

Runs against every backend; each backend's ``tamper`` fixture changes its stored ledger behind
its back. The test ledger is a task awaiting a replan: nine events, each of another kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pev.ledger import Ledger

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Tamper, TaskFactory

EVENTS = 9
POSITIONS = [
    pytest.param(1, id="first"),
    pytest.param(5, id="middle"),
    pytest.param(EVENTS, id="last"),
]


@pytest.fixture
async def ledger_of_nine(ledger: Ledger, tasks: TaskFactory) -> Ledger:
    """A ledger holding task ``t1``, awaiting a replan after nine events."""
    state = await tasks.awaiting_replan("t1")
    assert state.event_count == EVENTS
    return ledger


async def test_untouched_ledger_verifies(ledger_of_nine: Ledger) -> None:
    """A ledger nobody changed is whole."""
    report = await Ledger(ledger_of_nine.store).verify("t1")
    assert (report.ok, report.events, report.first_bad_seq, report.problem) == (
        True,
        EVENTS,
        None,
        "",
    )


@pytest.mark.parametrize("seq", POSITIONS)
async def test_edited_event_is_detected(ledger_of_nine: Ledger, tamper: Tamper, seq: int) -> None:
    """An event rewritten in place is named by ``verify``."""
    tamper.edit("t1", seq)
    report = await Ledger(ledger_of_nine.store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, seq)
    assert report.problem


@pytest.mark.parametrize("seq", POSITIONS)
async def test_dropped_event_is_detected(ledger_of_nine: Ledger, tamper: Tamper, seq: int) -> None:
    """A deleted event is named by ``verify`` (the last one through the index's head)."""
    tamper.drop("t1", seq)
    report = await Ledger(ledger_of_nine.store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, seq)
    assert report.problem


async def test_dropped_last_event_is_caught_by_the_index_head(
    ledger_of_nine: Ledger, tamper: Tamper
) -> None:
    """Without its last event the chain is still whole, but the index's head gives it away."""
    tamper.drop_last("t1")
    report = await Ledger(ledger_of_nine.store).verify("t1")
    assert (report.ok, report.events, report.first_bad_seq) == (False, EVENTS - 1, EVENTS)
    assert "index" in report.problem


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(1, 2, id="first-two"),
        pytest.param(5, 6, id="middle-neighbours"),
        pytest.param(EVENTS - 1, EVENTS, id="last-two"),
        pytest.param(1, EVENTS, id="first-and-last"),
        pytest.param(3, 7, id="far-apart"),
    ],
)
async def test_swapped_events_are_detected(
    ledger_of_nine: Ledger, tamper: Tamper, first: int, second: int
) -> None:
    """Two events that changed places are caught at the earlier of the two."""
    tamper.swap("t1", first, second)
    report = await Ledger(ledger_of_nine.store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, first)
    assert report.problem


async def test_tampering_leaves_other_tasks_whole(
    ledger: Ledger, tasks: TaskFactory, tamper: Tamper
) -> None:
    """Tampering with one task's ledger does not make another task's fail."""
    await tasks.awaiting_replan("t1")
    await tasks.awaiting_replan("t2")
    tamper.edit("t1", 5)
    fresh = Ledger(ledger.store)
    assert not (await fresh.verify("t1")).ok
    assert (await fresh.verify("t2")).ok
