"""FakeClock: a UTC clock that moves only when told to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pev.ledger import Ledger
from pev.testing import FakeClock, MemoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_starts_at_new_year_2026_utc_by_default() -> None:
    """Without arguments the clock reads 2026-01-01T00:00Z."""
    assert FakeClock()() == START


def test_reading_does_not_move_a_clock_without_step() -> None:
    """Two reads of a clock with no step return the same time."""
    clock = FakeClock()
    assert clock() == clock()


def test_now_is_an_alias_for_calling() -> None:
    """clock.now() reads the same time as clock()."""
    clock = FakeClock(START + timedelta(hours=1))
    assert clock.now() == clock() == START + timedelta(hours=1)


def test_step_moves_the_clock_after_each_read() -> None:
    """With a step, the first read is the start and each later read is one step further."""
    clock = FakeClock(step=timedelta(seconds=2))
    assert [clock(), clock.now(), clock()] == [
        START,
        START + timedelta(seconds=2),
        START + timedelta(seconds=4),
    ]


def test_step_accepts_seconds() -> None:
    """A step given as a number is read as seconds."""
    clock = FakeClock(step=0.5)
    clock()
    assert clock() == START + timedelta(milliseconds=500)


def test_advance_by_seconds_returns_the_new_time() -> None:
    """advance(90) moves the clock 90 seconds on and returns where it now stands."""
    clock = FakeClock()
    assert clock.advance(90) == START + timedelta(seconds=90)
    assert clock() == START + timedelta(seconds=90)


def test_advance_by_timedelta() -> None:
    """advance() takes a timedelta as well as seconds."""
    clock = FakeClock()
    clock.advance(timedelta(days=1))
    assert clock() == START + timedelta(days=1)


def test_advance_refuses_to_go_backwards() -> None:
    """A negative advance is a ValueError that points at set()."""
    with pytest.raises(ValueError, match=r"set\(\)"):
        FakeClock().advance(-1)


def test_negative_step_is_refused() -> None:
    """A clock cannot be built to run backwards."""
    with pytest.raises(ValueError, match="step"):
        FakeClock(step=timedelta(seconds=-1))


def test_set_jumps_anywhere_even_backwards() -> None:
    """set() moves the clock to the given time, earlier ones included."""
    clock = FakeClock(START + timedelta(days=3))
    clock.set(START)
    assert clock() == START


def test_times_are_converted_to_utc() -> None:
    """An aware start in another zone reads back as the same instant in UTC."""
    paris = timezone(timedelta(hours=1))
    moment = FakeClock(datetime(2026, 1, 1, 1, 0, tzinfo=paris))()
    assert moment == START
    assert moment.tzinfo is UTC


NAIVE = datetime(2026, 1, 1)  # noqa: DTZ001 - the naive value under test


def test_naive_start_is_refused() -> None:
    """A naive start is a ValueError naming the fix."""
    with pytest.raises(ValueError, match="tzinfo=UTC"):
        FakeClock(NAIVE)


def test_naive_set_is_refused() -> None:
    """set() with a naive datetime is a ValueError naming the fix."""
    clock = FakeClock()
    with pytest.raises(ValueError, match="tzinfo=UTC"):
        clock.set(NAIVE)


async def test_ledger_stamps_events_with_the_fake_time() -> None:
    """Ledger(store, clock=FakeClock(...)) writes the clock's time on its events."""
    clock = FakeClock()
    ledger = Ledger(MemoryStore(), clock=clock)
    await ledger.create({"goal": "first"}, task_id="t1")
    clock.advance(60)
    await ledger.create({"goal": "second"}, task_id="t2")
    first, second = (await ledger.store.read("t1"))[0], (await ledger.store.read("t2"))[0]
    assert (first.at, second.at) == (START, START + timedelta(seconds=60))


def test_repr_shows_the_time() -> None:
    """The repr names the current time, for readable assertion failures."""
    assert "2026-01-01T00:00:00+00:00" in repr(FakeClock())
