"""Checking a chain from its stored texts: every kind of damage is named at its event, not raised.

``verify_raw`` is what ``Ledger.verify`` (and so ``pev ledger verify``) runs over a store's
``read_raw``: texts that do not parse, are not their schema's canonical text, hold what no
canonical text can, are not UTF-8, carry an unknown schema or a seal made without the key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.support import builders
from tests.support.builders import T0

from pev import codec
from pev.ledger import (
    GENESIS_HASH,
    CaptureFailed,
    Event,
    EventSchema,
    LedgerEntry,
    RawEntry,
    seal,
    verify_raw,
)
from pev.ledger._chain import raw_entry
from pev.model import EvidencePhase, TaskId, VerificationContract, VerificationMode

TASK = TaskId("t-raw")
KEY = b"raw key"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _events() -> list[Event]:
    contract = VerificationContract(VerificationMode.OFF, "count the pots")
    created = builders.created(contract, task_id=TASK, input={"pots": [1.0, -0.0, 1e-7, "é"]})
    capture = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="x")
    return [created, capture, replace(capture, error="y"), replace(capture, error="z")]


def _chain(key: bytes | None = None) -> list[RawEntry]:
    """A four-event chain, as a store of texts would hold it."""
    entries = seal(TASK, _events(), after_seq=0, prev_hash=GENESIS_HASH, at=T0, key=key)
    return [raw_entry(entry) for entry in entries]


def _with(raws: list[RawEntry], seq: int, **changes: Any) -> list[RawEntry]:
    changed = list(raws)
    changed[seq - 1] = replace(changed[seq - 1], **changes)
    return changed


def test_a_written_chain_verifies_from_its_texts() -> None:
    """The texts as sealed verify, with the head."""
    raws = _chain()
    report = verify_raw(TASK, raws, head_count=4, head_hash=raws[-1].hash)
    assert (report.ok, report.events, report.keyed_events) == (True, 4, 0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param('{"kind":', "not JSON text", id="truncated"),
        pytest.param("[" * 100_000 + "]" * 100_000, "", id="too-deep"),
        pytest.param('{"kind":"capture_failed","x":NaN}', "not JSON text", id="nan"),
        pytest.param('{"a": 1}', "not the canonical JSON", id="spaces"),
        pytest.param('{"b":1,"a":2}', "not the canonical JSON", id="unsorted"),
        pytest.param('{"a":1.0}', "not the canonical JSON", id="pev-float-under-jcs"),
        pytest.param('{"a":-0}', "not the canonical JSON", id="negative-zero-integer"),
        pytest.param('{"a":1e2}', "not the canonical JSON", id="integer-with-exponent"),
        pytest.param('{"a":1' + "0" * 640 + "}", "more than the 640", id="641-digit-integer"),
        pytest.param('{"a":1,"a":1}', "not the canonical JSON", id="duplicate-key"),
        pytest.param('"caf\udce9"', "not valid UTF-8", id="not-utf8"),
    ],
)
def test_a_damaged_event_text_is_named_at_its_event(text: str, words: str) -> None:
    """Each damage is a problem at event 3, with the chain otherwise whole."""
    report = verify_raw(TASK, _with(_chain(), 3, event=text))
    assert (report.ok, report.first_bad_seq) == (False, 3)
    assert words in report.problem


@pytest.mark.parametrize(
    "at",
    [
        pytest.param('"2026-01-01T09:00:00Z', id="not-json"),
        pytest.param("17", id="not-a-string"),
        pytest.param(' "2026-01-01T09:00:00Z"', id="spaced"),
        pytest.param('"2026-01-01T09:00:01Z"', id="another-time"),
    ],
)
def test_a_damaged_time_is_named_at_its_event(at: str) -> None:
    """A stored time that is not the canonical string sealed is a problem at its event."""
    report = verify_raw(TASK, _with(_chain(), 2, at=at))
    assert (report.ok, report.first_bad_seq) == (False, 2)


def test_an_unknown_schema_is_named() -> None:
    """An event schema this pev does not know is a problem at that event, with its number."""
    report = verify_raw(TASK, _with(_chain(), 2, schema=9))
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert "schema 9" in report.problem


def test_a_keyed_event_without_the_key_asks_for_it() -> None:
    """Without the key, a keyed event is reported as needing it, not as tampered with."""
    report = verify_raw(TASK, _chain(KEY))
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, 1, True)
    assert "PEV_LEDGER_KEY" in report.problem


def test_a_keyed_chain_verifies_with_its_key() -> None:
    """Every seal is an HMAC under the key, and the report counts them."""
    report = verify_raw(TASK, _chain(KEY), key=KEY)
    assert (report.ok, report.keyed_events) == (True, 4)


def test_a_wrong_key_is_a_bad_seal_at_the_first_keyed_event() -> None:
    """Another key fails the first keyed event's seal; that is not a missing key."""
    report = verify_raw(TASK, _chain(KEY), key=b"another key")
    assert (report.ok, report.first_bad_seq, report.needs_key) == (False, 1, False)
    assert "seal" in report.problem


def test_an_unkeyed_event_after_a_keyed_one_is_a_reseal() -> None:
    """An event sealed with sha256 after a keyed one is caught, even with a whole chain."""
    keyed = seal(TASK, _events()[:2], after_seq=0, prev_hash=GENESIS_HASH, at=T0, key=KEY)
    plain = seal(TASK, _events()[2:], after_seq=2, prev_hash=keyed[-1].hash, at=T0)
    raws = [raw_entry(entry) for entry in (*keyed, *plain)]
    report = verify_raw(TASK, raws, key=KEY)
    assert (report.ok, report.first_bad_seq) == (False, 3)
    assert "resealed" in report.problem


def test_require_key_refuses_an_unkeyed_event() -> None:
    """With require_key, a chain sealed with sha256 fails at its first event."""
    report = verify_raw(TASK, _chain(), key=KEY, require_key=True)
    assert (report.ok, report.first_bad_seq) == (False, 1)


def _golden(name: str) -> list[LedgerEntry]:
    lines = (GOLDEN / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [codec.loads(line, LedgerEntry) for line in lines]


def test_a_chain_of_every_schema_verifies() -> None:
    """A schema 1 history continued unkeyed (schema 2), then keyed (schema 3), verifies whole."""
    old = _golden("happy_path")
    task = old[0].task_id
    capture = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="late")
    plain = seal(task, [capture], after_seq=len(old), prev_hash=old[-1].hash, at=T0)
    keyed = seal(task, [capture], after_seq=len(old) + 1, prev_hash=plain[-1].hash, at=T0, key=KEY)
    entries = [*old, *plain, *keyed]
    assert [e.schema for e in entries[-3:]] == [1, 2, 3]
    raws = [raw_entry(entry) for entry in entries]
    report = verify_raw(task, raws, head_count=len(raws), head_hash=raws[-1].hash, key=KEY)
    assert (report.ok, report.keyed_events) == (True, 1)
    assert EventSchema(raws[0].schema) is EventSchema.PEV_SHA256
