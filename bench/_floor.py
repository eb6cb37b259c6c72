"""The durable-commit floor: raw sqlite3 committing pev's own event rows, one per transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from pev import codec
from pev.ledger import LedgerEntry, event_text


def raw_commit_floor(path: Path, entries: Sequence[LedgerEntry]) -> float:
    """Seconds per raw durable commit of `entries`' rows, one transaction per row."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE events (task_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, "
        "schema INTEGER NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL, prev_hash TEXT NOT "
        "NULL, hash TEXT NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID"
    )
    # The very rows pev wrote, encoded up front: the floor is the commit alone.
    rows = [
        (e.task_id, e.seq, codec.dumps(e.at), e.schema, e.event.kind,
         event_text(e.event, e.schema), e.prev_hash, e.hash)
        for e in entries
    ]  # fmt: skip
    start = time.perf_counter()
    for row in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / len(rows)
