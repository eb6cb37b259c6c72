"""The durable-commit floor: raw sqlite3 committing pev's own event rows, as pev grouped them."""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pev import codec
from pev.ledger import LedgerEntry, event_text


def raw_commit_floor(path: Path, entries: Sequence[LedgerEntry]) -> float:
    """Seconds per raw durable commit of `entries`' rows, one transaction per row."""
    seconds, _ = raw_transactions(path, [[entry] for entry in entries])
    return seconds / len(entries)


def raw_transactions(
    path: Path,
    transactions: Sequence[Sequence[LedgerEntry]],
    *,
    bare_commits: int = 0,
    cpu_s: float = 0.0,
) -> tuple[float, WalCount | None]:
    """Seconds raw sqlite3 takes to commit the entries' rows, one transaction per group.

    A fresh file at `path` with pev's pragmas (WAL, `synchronous=FULL`) and a table of the event
    rows' columns; each group is `BEGIN IMMEDIATE`, its rows' `INSERT`s and `COMMIT`. Then
    `bare_commits` more transactions of one short row each, in a table of their own: the floor
    of the commits a run makes without an event (a lease taken, say). With `cpu_s`, each
    transaction comes after that long of busy CPU work, as a run's do (a chain node's work lies
    between two commits), and the seconds are the transactions' alone: on some disks a commit
    takes longer when the CPU did something else since the last one.

    Returns:
        The seconds, and what the commits wrote to the write-ahead log (`None` if it was
        restarted meanwhile).
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE events (task_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, "
        "schema INTEGER NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL, prev_hash TEXT NOT "
        "NULL, hash TEXT NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID"
    )
    # The very rows pev wrote, encoded up front: the floor is the commits alone.
    groups = [
        [
            (e.task_id, e.seq, codec.dumps(e.at), e.schema, e.event.kind,
             event_text(e.event, e.schema), e.prev_hash, e.hash)
            for e in group
        ]
        for group in transactions
    ]  # fmt: skip
    conn.execute("CREATE TABLE marks (n INTEGER PRIMARY KEY, at TEXT NOT NULL)")
    before = wal_count(path)
    elapsed = 0.0
    for rows in groups:
        start = _busy(cpu_s)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        elapsed += time.perf_counter() - start
    for n in range(bare_commits):
        start = _busy(cpu_s)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO marks VALUES (?, ?)", (n, groups[0][0][2]))
        conn.execute("COMMIT")
        elapsed += time.perf_counter() - start
    written = wal_count(path).since(before)  # before the close, which empties the log
    conn.close()
    return elapsed, written


def _busy(seconds: float) -> float:
    """Keep the CPU busy for `seconds` (none when 0); the clock when it stops."""
    now = time.perf_counter()
    until = now + seconds
    while now < until:
        now = time.perf_counter()
    return now


def appends(entries: Sequence[LedgerEntry]) -> list[list[LedgerEntry]]:
    """The entries grouped by the append that wrote them: one append's entries share their `at`.

    Two appends of one task cannot share it: each takes far longer than the clock's microsecond.
    """
    return [list(group) for _, group in itertools.groupby(entries, key=lambda e: e.at)]


@dataclass(frozen=True, slots=True)
class WalCount:
    """What a database's write-ahead log holds: its salt, its commits and its frames (pages).

    Counted before and after some work, under the same salt, it tells what the work committed.
    """

    salt: bytes
    commits: int
    frames: int

    def since(self, before: WalCount) -> WalCount | None:
        """What was committed since `before`: `None` if the log was restarted in between."""
        if self.salt != before.salt:
            return None
        return WalCount(self.salt, self.commits - before.commits, self.frames - before.frames)


def wal_count(path: Path) -> WalCount:
    """What the write-ahead log of the database at `path` holds, read from its file.

    As SQLite's file format documents it: a 32-byte header (its salt at bytes 16-24), then
    frames of a 24-byte header and a page each; a frame that ends a transaction gives the
    database's size after it (bytes 4-8), others 0. The log's frames run until the first one
    whose salt differs (left from before the log was last restarted).
    """
    wal = path.with_name(path.name + "-wal")
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return WalCount(b"", 0, 0)
    # A page size of 65536 is written as 1.
    page_size = 65536 if data[8:12] == b"\0\0\0\1" else int.from_bytes(data[8:12], "big")
    salt = data[16:24]
    commits = frames = 0
    for offset in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        frame = data[offset : offset + 24]
        if frame[8:16] != salt:
            break
        frames += 1
        commits += frame[4:8] != b"\0\0\0\0"
    return WalCount(salt, commits, frames)
