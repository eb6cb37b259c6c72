"""Caches belong to the ledger that uses them: bounded, never shared, never changing a byte.

The fold, the chain, the index row and the codec keep no values at module level. A
:class:`~pev.ledger.Ledger` keeps the heads of its recent tasks (state, chain head and title: a
bounded cache of its own), and :func:`~pev.ledger.seal` hands the texts it hashed to the store
along with the entries, so the SQLite store writes them without encoding any event a second
time, byte for byte what encoding them again would give.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import types
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from tests.support import builders
from tests.support.builders import T0

import pev._canonical
import pev._jcs
import pev.ledger._chain
import pev.ledger._checks
import pev.ledger._ledger
import pev.ledger._machine
import pev.ledger._state
import pev.ledger._summary
from pev import codec
from pev._jcs import jcs_json
from pev._json import canonical_json
from pev.ledger import GENESIS_HASH, Ledger, LedgerEntry, replay, seal, summarize, verify_chain
from pev.ledger._chain import Sealed, entry_texts
from pev.model import Plan, PlanNode, TaskId, VerificationContract, VerificationMode
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import FakeClock

GOLDEN = Path(__file__).resolve().parent / "golden"
CONTRACT = VerificationContract(VerificationMode.OFF, "water the plants")
PLAN = Plan("water the plants", (PlanNode("a", "water", tool="water"),))
FIRST_REVISION = builders.revision(1, plan=PLAN, reason="first")


def clock() -> FakeClock:
    """A clock that moves one millisecond per reading, as a real one would between writes."""
    return FakeClock(T0, step=timedelta(milliseconds=1))


# --- the ledger's heads ----------------------------------------------------------------------


async def test_each_ledger_keeps_its_own_heads() -> None:
    """Two ledgers over one store share nothing: each keeps the heads of the tasks it touched."""
    store = MemoryStore()
    first, second = Ledger(store, clock=clock()), Ledger(store, clock=clock())
    await first.create("x", contract=CONTRACT, task_id="t1")
    assert (list(first._heads), list(second._heads)) == (["t1"], [])
    await second.append("t1", [FIRST_REVISION])
    assert (first._heads["t1"].seq, second._heads["t1"].seq) == (1, 2)
    (row,) = await store.list_tasks()
    assert row.title == "water the plants"


async def test_the_heads_never_exceed_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past HEADS tasks the least recently used head goes; that task is folded again, intact."""
    monkeypatch.setattr(Ledger, "HEADS", 4)
    ledger = Ledger(MemoryStore(), clock=clock())
    for number in range(6):
        await ledger.create(
            "x", contract=replace(CONTRACT, goal=f"goal {number}"), task_id=f"t{number}"
        )
        assert len(ledger._heads) <= 4
    assert list(ledger._heads) == ["t2", "t3", "t4", "t5"]
    await ledger.state("t3")  # used again: now the most recent
    assert list(ledger._heads) == ["t2", "t4", "t5", "t3"]
    state = await ledger.append("t0", [FIRST_REVISION])  # its head went: folded from the store
    assert (state.event_count, list(ledger._heads)) == (2, ["t4", "t5", "t3", "t0"])
    rows = await ledger.tasks(limit=10)
    assert sorted(row.title for row in rows) == sorted(f"goal {n}" for n in range(6))
    assert (await ledger.verify("t0")).ok


def test_summarize_needs_no_memo() -> None:
    """The pure index row computes its title itself; a title handed in is used as given."""
    event = builders.created(CONTRACT, task_id="t1", input="x")
    entries = seal(TaskId("t1"), [event], after_seq=0, prev_hash=GENESIS_HASH, at=T0)
    state = replay(entries)
    assert summarize(state, head_hash=entries[-1].hash).title == "water the plants"
    assert summarize(state, head_hash=entries[-1].hash, title="kept").title == "kept"


# --- no module keeps values -------------------------------------------------------------------

MODULES = [
    codec,
    pev._canonical,
    pev._jcs,
    pev.ledger._chain,
    pev.ledger._checks,
    pev.ledger._ledger,
    pev.ledger._machine,
    pev.ledger._state,
    pev.ledger._summary,
]


def _module_containers() -> dict[str, int]:
    """The size of every dict, list and set held at module level by the modules above."""
    sizes = {}
    for module in MODULES:
        for name, value in vars(module).items():
            if isinstance(value, dict | list | set | types.MappingProxyType):
                sizes[f"{module.__name__}.{name}"] = len(value)
    return sizes


async def test_writing_grows_no_module_level_state(tmp_path: Path) -> None:
    """Once every class has its codec writer, writing more tasks adds nothing at module level."""

    async def run(store: SQLiteStore | MemoryStore, task_id: str) -> None:
        ledger = Ledger(store, clock=clock())
        await ledger.create({"pots": 3}, contract=CONTRACT, task_id=task_id)
        await ledger.append(task_id, [FIRST_REVISION])
        assert (await ledger.verify(task_id)).ok

    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        await run(store, "warm-up")
        before = _module_containers()
        for number in range(5):
            await run(store, f"t{number}")
            await run(MemoryStore(), f"t{number}")
        assert _module_containers() == before
    finally:
        await store.close()


# --- the texts handed to stores ---------------------------------------------------------------


def golden_entries(name: str) -> tuple[list[str], list[LedgerEntry]]:
    lines = (GOLDEN / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return lines, [codec.loads(line, LedgerEntry) for line in lines]


def reseal(entries: list[LedgerEntry]) -> list[tuple[LedgerEntry, ...]]:
    """The entries sealed again batch by batch (a batch shares one time), as a ledger seals."""
    batches = []
    seq, prev = 0, GENESIS_HASH
    for at, group in itertools.groupby(entries, key=lambda entry: entry.at):
        events = [entry.event for entry in group]
        batch = seal(entries[0].task_id, events, after_seq=seq, prev_hash=prev, at=at)
        batches.append(batch)
        seq, prev = batch[-1].seq, batch[-1].hash
    return batches


@pytest.mark.parametrize("name", ["local_replan_then_pass", "device_failure_partial"])
def test_sealing_hands_over_the_texts_it_hashed(name: str) -> None:
    """Sealed again, a golden history's batches carry each entry's JCS texts, as encoded anew."""
    _, entries = golden_entries(name)
    batches = reseal(entries)
    resealed = [entry for batch in batches for entry in batch]
    assert [(e.seq, e.at, e.event) for e in resealed] == [(e.seq, e.at, e.event) for e in entries]
    assert verify_chain(entries[0].task_id, resealed).ok
    for batch in batches:
        assert isinstance(batch, Sealed)
        expected = [(codec.dumps(e.at), codec.dumps_jcs(e.event)) for e in batch]
        assert list(entry_texts(batch)) == expected == list(entry_texts(list(batch)))


@pytest.mark.parametrize("name", ["local_replan_then_pass", "device_failure_partial"])
def test_recorded_entries_bring_their_own_schema_texts(name: str) -> None:
    """Entries read back from a golden ledger (schema 1) are written in pev's own form again."""
    lines, entries = golden_entries(name)
    recorded = [json.loads(line) for line in lines]
    assert [text for _, text in entry_texts(entries)] == [
        canonical_json(line["event"]) for line in recorded
    ]


def _stored_rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        query = "SELECT task_id, seq, at, schema, kind, event, prev_hash, hash FROM pev_events"
        return conn.execute(f"{query} ORDER BY task_id, seq").fetchall()


@pytest.mark.parametrize("name", ["local_replan_then_pass", "device_failure_partial"])
async def test_the_sqlite_store_keeps_the_same_bytes_with_or_without_sealed_texts(
    name: str, tmp_path: Path
) -> None:
    """Sealed batches (texts handed over) and plain lists (texts encoded) store the same rows."""
    lines, entries = golden_entries(name)
    batches = reseal(entries)
    for file, plain in (("sealed.db", False), ("plain.db", True)):
        store = SQLiteStore(tmp_path / file)
        try:
            for batch in batches:
                state = replay(entries[: batch[-1].seq])
                summary = summarize(state, head_hash=batch[-1].hash)
                await store.append(list(batch) if plain else batch, summary)
        finally:
            await store.close()
    sealed = _stored_rows(tmp_path / "sealed.db")
    assert sealed == _stored_rows(tmp_path / "plain.db")
    recorded = [json.loads(line) for line in lines]
    assert [row[5] for row in sealed] == [jcs_json(line["event"]) for line in recorded]
    assert [row[2] for row in sealed] == [json.dumps(line["at"]) for line in recorded]
