"""The ledger key: HMAC-SHA256 seals with ``PEV_LEDGER_KEY``, and chains of mixed seals.

Without a key, new events are JCS text sealed with sha256 (schema 2); with one, HMAC-SHA256
(schema 3). Unkeyed ledgers stay readable and verifiable; a keyed task is never continued
without its key.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.support import builders
from tests.support.builders import T0

from pev import codec
from pev.errors import UsageError
from pev.ledger import (
    LEDGER_KEY_ENV,
    CaptureFailed,
    EventSchema,
    Ledger,
    LedgerEntry,
    ledger_key,
    reject_plan,
    replay,
    summarize,
)
from pev.model import EvidencePhase, VerificationContract, VerificationMode
from pev.stores import MemoryStore
from pev.testing import FakeClock

KEY = "correct horse battery staple"
CONTRACT = VerificationContract(VerificationMode.OFF, "water the plants")
CAPTURE = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="camera offline")
GOLDEN = Path(__file__).resolve().parent / "golden"


def _clock() -> FakeClock:
    return FakeClock(T0, step=timedelta(milliseconds=1))


async def _schemas(ledger: Ledger, task_id: str) -> list[int]:
    return [entry.schema for entry in await ledger.entries(task_id)]


async def test_a_keyed_ledger_seals_with_hmac_and_verifies_with_its_key() -> None:
    """With a key every event is schema 3, and the task verifies under that key."""
    ledger = Ledger(MemoryStore(), clock=_clock(), key=KEY)
    await ledger.create("x", contract=CONTRACT, task_id="t1")
    await ledger.append("t1", [CAPTURE])
    assert await _schemas(ledger, "t1") == [EventSchema.JCS_HMAC_SHA256] * 2
    report = await ledger.verify("t1")
    assert (report.ok, report.keyed_events) == (True, 2)


async def test_an_unkeyed_ledger_seals_jcs_text_with_sha256() -> None:
    """Without a key every new event is schema 2."""
    ledger = Ledger(MemoryStore(), clock=_clock(), key=None)
    await ledger.create("x", contract=CONTRACT, task_id="t1")
    assert await _schemas(ledger, "t1") == [EventSchema.JCS_SHA256]
    assert not ledger.keyed


async def test_the_key_comes_from_the_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PEV_LEDGER_KEY is the default key; key=None leaves it out; an empty one is no key."""
    monkeypatch.setenv(LEDGER_KEY_ENV, KEY)
    assert Ledger(MemoryStore()).keyed
    assert not Ledger(MemoryStore(), key=None).keyed
    assert ledger_key() == KEY.encode()
    monkeypatch.setenv(LEDGER_KEY_ENV, "")
    assert not Ledger(MemoryStore()).keyed


async def test_a_keyed_task_without_the_key_asks_for_it_and_still_reads() -> None:
    """Read without the key, a keyed task folds; its verify says to set PEV_LEDGER_KEY."""
    store = MemoryStore()
    keyed = Ledger(store, clock=_clock(), key=KEY)
    created = await keyed.create("x", contract=CONTRACT, task_id="t1")
    bare = Ledger(store, key=None)
    assert await bare.state("t1") == created
    report = await bare.verify("t1")
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, 1, True)
    assert LEDGER_KEY_ENV in report.problem


async def test_a_wrong_key_fails_the_first_keyed_event() -> None:
    """Verified under another key, a keyed task fails at its first event, as a bad seal."""
    store = MemoryStore()
    await Ledger(store, clock=_clock(), key=KEY).create("x", contract=CONTRACT, task_id="t1")
    report = await Ledger(store, key="another key").verify("t1")
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, 1, False)


async def test_a_keyed_task_is_not_continued_without_the_key() -> None:
    """An append without the key to a task whose last event is keyed is refused; nothing lands."""
    store = MemoryStore()
    await Ledger(store, clock=_clock(), key=KEY).create("x", contract=CONTRACT, task_id="t1")
    with pytest.raises(UsageError, match=LEDGER_KEY_ENV):
        await Ledger(store, clock=_clock(), key=None).append("t1", [CAPTURE])
    assert len(await store.read("t1")) == 1


async def test_a_key_continues_an_unkeyed_task() -> None:
    """A keyed ledger appends to an unkeyed task; the mixed chain verifies with the key."""
    store = MemoryStore()
    await Ledger(store, clock=_clock(), key=None).create("x", contract=CONTRACT, task_id="t1")
    keyed = Ledger(store, clock=_clock(), key=KEY)
    await keyed.append("t1", [CAPTURE])
    assert await _schemas(keyed, "t1") == [EventSchema.JCS_SHA256, EventSchema.JCS_HMAC_SHA256]
    report = await keyed.verify("t1")
    assert (report.ok, report.keyed_events) == (True, 1)


async def test_an_old_ledger_is_continued_under_a_key_and_verifies() -> None:
    """A golden (schema 1) history appended to with a key holds schemas 1 and 3, and verifies."""
    lines = (GOLDEN / "local_replan_then_pass.jsonl").read_text(encoding="utf-8").splitlines()
    # The recorded history before it ended: an observation may follow it.
    entries: list[LedgerEntry] = [codec.loads(line, LedgerEntry) for line in lines[:5]]
    task = entries[0].task_id
    store = MemoryStore()
    await store.append(entries, summarize(replay(entries), head_hash=entries[-1].hash))
    ledger = Ledger(store, clock=_clock(), key=KEY)
    await ledger.append(task, [builders.captured("late", EvidencePhase.AFTER)])
    assert {entry.schema for entry in await ledger.entries(task)} == {1, 3}
    report = await ledger.verify(task)
    assert (report.ok, report.events, report.keyed_events) == (True, len(entries) + 1, 1)


async def test_expiry_without_the_key_leaves_a_keyed_task_alone() -> None:
    """A ledger without the key expires the unkeyed overdue tasks and skips the keyed ones."""
    store = MemoryStore()
    keyed = Ledger(store, clock=_clock(), key=KEY)
    bare = Ledger(store, clock=_clock(), key=None)
    for ledger, task_id in ((keyed, "keyed"), (bare, "plain")):
        created = await ledger.create("x", contract=builders.CONTRACT, task_id=task_id)
        await ledger.append(task_id, reject_plan(created, problems=["bad"], plan=None, now=T0))
    later = T0 + timedelta(days=1)
    assert await bare.expire_overdue(later) == ("plain",)
    assert await keyed.expire_overdue(later) == ("keyed",)
