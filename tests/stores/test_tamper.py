"""Tamper detection: ``Ledger.verify`` catches any edited, dropped, moved or resealed event.

See docs/design.md §5.2 and docs/ledger-format.md.

Runs against every backend; each backend's ``tamper`` fixture (and :mod:`tests.support.ledger_rows`)
changes its stored ledger behind its back. The test ledger is a task awaiting a replan: nine
events, each of another kind.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from tests.support.ledger_rows import rows_of

from pev import codec
from pev.ledger import (
    GENESIS_HASH,
    CancelRequested,
    EventSchema,
    Ledger,
    Store,
    entry_hash,
    event_text,
)
from pev.ledger._store import decode_entry
from pev.testing import FakeClock

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


# --- reseals: a forger who recomputes hashes --------------------------------------------------
#
# An unkeyed chain detects accidents and naive edits, not a writer who reseals: one who rewrites
# an event, computes its hash again and moves the index head along leaves a whole chain. What
# remains is the index head (when the forger leaves it), and the ledger key: without it no
# forger can seal an event as the ledger would.

KEY = b"the ledger key"
WRONG_KEY = b"a forger's guess"


@pytest.fixture
async def keyed_nine(store: Store, clock: FakeClock, tasks: TaskFactory) -> Store:
    """``store`` holding task ``t1``, nine events sealed with :data:`KEY`."""
    keyed = type(tasks)(Ledger(store, clock=clock, key=KEY), clock)
    state = await keyed.awaiting_replan("t1")
    assert state.event_count == EVENTS
    return store


def _later(at_text: str) -> str:
    """A stored time text moved on by one second."""
    moved = codec.loads(at_text, datetime) + timedelta(seconds=1)
    return codec.dumps(moved)


async def _reseal(
    store: Store, seq: int, *, key: bytes | None, at: str | None = None, forge: bool = False
) -> None:
    """Rewrite event ``seq`` (its time, or its content) and reseal it and every event after it.

    Each is sealed as a writer with ``key`` would seal it (sha256 without one), linked to the
    one before, and the index head is moved to the new last hash: a whole chain.
    """
    rows = rows_of(store)
    raws = await store.read_raw("t1")
    prev_hash = raws[seq - 2].hash if seq > 1 else GENESIS_HASH
    schema = EventSchema.JCS_HMAC_SHA256 if key else EventSchema.JCS_SHA256
    for raw in raws[seq - 1 :]:
        entry = decode_entry(raw, location="test")
        changes: dict[str, object] = {}
        if raw.seq == seq and at is not None:
            changes["at"] = codec.loads(at, datetime)
        if raw.seq == seq and forge:
            changes["event"] = CancelRequested(reason="forged")
        entry = replace(entry, prev_hash=prev_hash, schema=int(schema), **changes)  # type: ignore[arg-type]
        new_hash = entry_hash(
            task_id=entry.task_id,
            seq=entry.seq,
            at=entry.at,
            schema=entry.schema,
            event=entry.event,
            prev_hash=prev_hash,
            key=key,
        )
        rows.set_event(
            "t1",
            raw.seq,
            at=codec.dumps(entry.at),
            event=event_text(entry.event, entry.schema),
            schema=entry.schema,
            prev_hash=prev_hash,
            hash=new_hash,
        )
        prev_hash = new_hash
    rows.set_head("t1", prev_hash)


async def test_forged_last_event_with_a_chain_valid_hash_is_caught_by_the_head(
    ledger_of_nine: Ledger,
) -> None:
    """The last event rewritten with its hash computed again fails verify, at that event.

    Its link is whole, so only the index's head hash, left as it was, gives it away: a verify
    that ignored the head would pass it.
    """
    store = ledger_of_nine.store
    raws = await store.read_raw("t1")
    forged = CancelRequested(reason="forged")
    rows_of(store).set_event(
        "t1",
        EVENTS,
        event=event_text(forged, raws[-1].schema),
        hash=entry_hash(
            task_id="t1",
            seq=EVENTS,
            at=codec.loads(raws[-1].at, datetime),
            schema=raws[-1].schema,
            event=forged,
            prev_hash=raws[-1].prev_hash,
        ),
    )
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, EVENTS)
    assert "head hash" in report.problem


@pytest.mark.parametrize(
    "forger_key", [pytest.param(None, id="sha256"), pytest.param(WRONG_KEY, id="wrong-key")]
)
async def test_keyed_last_event_forged_and_resealed_with_its_head_is_caught(
    keyed_nine: Store, forger_key: bytes | None
) -> None:
    """With a key, a last event forged, resealed and the index head moved along still fails.

    The forger has a whole chain and a matching head, but no key: the event is caught where
    the forgery is, on every store.
    """
    await _reseal(keyed_nine, EVENTS, key=forger_key, forge=True)
    report = await Ledger(keyed_nine, key=KEY).verify("t1")
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, EVENTS, False)


@pytest.mark.parametrize("seq", POSITIONS)
async def test_changed_time_is_detected(ledger_of_nine: Ledger, seq: int) -> None:
    """An event whose stored time alone was changed fails verify at that event."""
    store = ledger_of_nine.store
    raws = await store.read_raw("t1")
    rows_of(store).set_event("t1", seq, at=_later(raws[seq - 1].at))
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, seq)


@pytest.mark.parametrize("seq", POSITIONS)
async def test_keyed_changed_time_resealed_with_a_wrong_key_is_detected(
    keyed_nine: Store, seq: int
) -> None:
    """With a key, a time changed and the chain resealed under another key fails there."""
    raws = await keyed_nine.read_raw("t1")
    await _reseal(keyed_nine, seq, key=WRONG_KEY, at=_later(raws[seq - 1].at))
    report = await Ledger(keyed_nine, key=KEY).verify("t1")
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, seq, False)


@pytest.mark.parametrize("seq", [pytest.param(5, id="middle"), pytest.param(EVENTS, id="last")])
async def test_keyed_changed_time_resealed_with_sha256_is_detected(
    keyed_nine: Store, seq: int
) -> None:
    """With a key, a time changed and the rest resealed with sha256 fails at the changed event.

    Keyed events come before it, and the ledger never follows a keyed event with an unkeyed one.
    """
    raws = await keyed_nine.read_raw("t1")
    await _reseal(keyed_nine, seq, key=None, at=_later(raws[seq - 1].at))
    report = await Ledger(keyed_nine, key=KEY).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, seq)
    assert "not sealed with the ledger key" in report.problem


async def test_a_whole_task_resealed_with_sha256_is_caught_when_the_key_is_required(
    keyed_nine: Store,
) -> None:
    """A keyed task resealed from its first event with sha256 reads as a task never keyed.

    That is the limit of a key alone: the report shows no event sealed with the key, and
    ``require_key`` (every event must be) fails it at its first event.
    """
    raws = await keyed_nine.read_raw("t1")
    await _reseal(keyed_nine, 1, key=None, at=_later(raws[0].at))
    ledger = Ledger(keyed_nine, key=KEY)
    lenient = await ledger.verify("t1")
    assert (lenient.ok, lenient.keyed_events) == (True, 0)
    strict = await ledger.verify("t1", require_key=True)
    assert (strict.ok, strict.first_bad_seq) == (False, 1)
