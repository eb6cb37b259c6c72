"""Verify from the events: raw reads, the tasks the events know, and index/event disagreement.

Runs against every backend. ``read_raw`` hands back what is stored, undecoded;
``ledger_task_ids`` lists tasks from the events, not the index; ``Ledger.verify`` recomputes a
chain from the stored texts, compares the index with the events, and reports any damage at its
event instead of raising.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.support.ledger_rows import rows_of

from pev import codec
from pev.errors import UnknownTaskError
from pev.ledger import Ledger, LedgerEntry, Store, event_text, replay, summarize
from pev.stores import SQLiteStore

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import TaskFactory

GOLDEN = Path(__file__).resolve().parents[1] / "ledger" / "golden"


async def test_read_raw_gives_the_stored_texts(store: Store, tasks: TaskFactory) -> None:
    """Each raw entry holds the texts that were sealed: the time's and the event's JSON."""
    await tasks.verifying("t1")
    entries = await store.read("t1")
    raws = await store.read_raw("t1")
    assert [(r.seq, r.schema, r.prev_hash, r.hash) for r in raws] == [
        (e.seq, e.schema, e.prev_hash, e.hash) for e in entries
    ]
    assert [(r.at, r.event) for r in raws] == [
        (codec.dumps(e.at), event_text(e.event, e.schema)) for e in entries
    ]


async def test_read_raw_of_an_unknown_task_is_refused(store: Store) -> None:
    """A task with no events is an UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        await store.read_raw("nobody")


async def test_ledger_task_ids_come_from_the_events(store: Store, tasks: TaskFactory) -> None:
    """Every task with events is listed, sorted, its index row gone or not."""
    for task_id in ("t2", "t3", "t1"):
        await tasks.planning(task_id)
    rows_of(store).drop_index_row("t2")
    assert await store.ledger_task_ids() == ("t1", "t2", "t3")


async def test_a_task_without_its_index_row_fails_verify(store: Store, tasks: TaskFactory) -> None:
    """Events whose index row was deleted are a task the index hides: verify says so."""
    await tasks.verifying("t1")
    rows_of(store).drop_index_row("t1")
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.events) == (False, 5)
    assert "no row in the task index" in report.problem


async def test_an_index_row_without_events_fails_verify(store: Store, tasks: TaskFactory) -> None:
    """An index row whose events are gone fails at event 1."""
    await tasks.verifying("t1")
    rows_of(store).drop_events("t1")
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.first_bad_seq, report.events) == (False, 1, 0)
    assert "holds none" in report.problem


async def test_verify_of_a_task_nobody_knows_is_refused(store: Store) -> None:
    """Neither index nor events know the task: UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        await Ledger(store).verify("nobody")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"kind":', id="not-json"),
        pytest.param('{"kind":"capture_failed"}', id="does-not-decode"),
        pytest.param("[" * 5000 + "]" * 5000, id="too-deep"),
    ],
)
async def test_an_unreadable_event_is_reported_at_its_seq(
    store: Store, tasks: TaskFactory, text: str
) -> None:
    """A stored event that does not parse or decode is a report at that event, never raised."""
    rows = rows_of(store)
    if not rows.can_hold_any_text:
        pytest.skip("the memory store keeps decoded entries, not texts")
    await tasks.verifying("t1")
    await tasks.verifying("t2")
    rows.set_event("t1", 3, event=text)
    ledger = Ledger(store)
    report = await ledger.verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, 3)
    assert (await ledger.verify("t2")).ok


async def test_an_old_schema_ledger_reads_and_verifies_in_a_store(store: Store) -> None:
    """A golden (schema 1) history is read back, verified from its texts, and listed."""
    lines = (GOLDEN / "happy_path.jsonl").read_text(encoding="utf-8").splitlines()
    entries: list[LedgerEntry] = [codec.loads(line, LedgerEntry) for line in lines]
    await store.append(entries, summarize(replay(entries), head_hash=entries[-1].hash))
    task = entries[0].task_id
    assert await store.read(task) == tuple(entries)
    assert [raw.event for raw in await store.read_raw(task)] == [
        codec.dumps(entry.event) for entry in entries
    ]
    report = await Ledger(store).verify(task)
    assert (report.ok, report.events) == (True, len(entries))
    assert await store.ledger_task_ids() == (task,)


async def test_an_event_of_bytes_that_are_not_utf8_is_reported(
    store: Store, tasks: TaskFactory
) -> None:
    """SQLite: an event text whose bytes are not UTF-8 is read raw and named, not a failed read."""
    if not isinstance(store, SQLiteStore):
        pytest.skip("only an SQLite file can hold text that is not UTF-8")
    await tasks.verifying("t1")
    with contextlib.closing(sqlite3.connect(store.location, isolation_level=None)) as conn:
        conn.execute("DROP TRIGGER pev_events_no_update")
        conn.execute(
            "UPDATE pev_events SET event = CAST(X'7B226B696E64223AFF7D' AS TEXT) "
            "WHERE task_id = 't1' AND seq = 2"
        )
    (raw,) = [r for r in await store.read_raw("t1") if r.seq == 2]
    assert raw.event == '{"kind":\udcff}'
    report = await Ledger(store).verify("t1")
    assert (report.ok, report.first_bad_seq) == (False, 2)
