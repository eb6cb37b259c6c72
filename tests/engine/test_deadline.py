"""The engine's one deadline arithmetic: a deadline read against a clock, as a table."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from pev.engine._deadline import Deadline, earliest
from pev.kernel import deadline_passed

NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else NOW + timedelta(seconds=seconds)


# at (seconds from now; None: no deadline) → remaining_s, passed, within(None), within(5)
CASES = [
    pytest.param(None, None, False, None, 5.0, id="no-deadline"),
    pytest.param(10.0, 10.0, False, 10.0, 5.0, id="later"),
    pytest.param(2.5, 2.5, False, 2.5, 2.5, id="sooner-than-the-limit"),
    pytest.param(0.0, 0.0, True, 0.0, 0.0, id="at-its-instant"),
    pytest.param(-3.0, 0.0, True, 0.0, 0.0, id="passed"),
]


@pytest.mark.parametrize(("at", "remaining", "passed", "unbounded", "five"), CASES)
def test_a_deadline_answers_every_time_question(
    at: float | None,
    remaining: float | None,
    passed: bool,
    unbounded: float | None,
    five: float | None,
) -> None:
    deadline = Deadline(_at(at), lambda: NOW)
    assert deadline.remaining_s() == remaining
    assert deadline.passed() is passed
    assert deadline.passed() is deadline_passed(NOW, _at(at))  # the kernel's one rule
    assert deadline.within(None) == unbounded
    assert deadline.within(5.0) == five
    assert deadline.now() == NOW


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param((), None, id="none-given"),
        pytest.param((None, None), None, id="none-present"),
        pytest.param((3.0, None, 1.0), 1.0, id="smallest"),
        pytest.param((None, 0.0, 2.0), 0.0, id="zero-counts"),
    ],
)
def test_earliest_is_the_smallest_limit_present(
    limits: tuple[float | None, ...], expected: float | None
) -> None:
    assert earliest(*limits) == expected


def test_a_deadline_reads_its_clock_each_time() -> None:
    """Time moves on between questions; the value itself never changes."""
    ticks = iter([NOW, NOW + timedelta(seconds=4), NOW + timedelta(seconds=6)])
    deadline = Deadline(_at(5.0), lambda: next(ticks))
    assert deadline.remaining_s() == 5.0
    assert deadline.remaining_s() == 1.0
    assert deadline.passed()
    with pytest.raises(dataclasses.FrozenInstanceError):
        deadline.at = None  # type: ignore[misc]
