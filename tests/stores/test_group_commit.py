"""Group commit in the SQL stores: appends issued together share one durable commit.

Each append stays atomic and durable on its own: in a shared transaction it runs in a savepoint
of its own, so its failure (a conflict, a stale fence, a batch that does not follow the head, a
database error half-way through) is rolled back and raised to its caller alone, and every caller
returns only once the shared COMMIT has succeeded. Commits are counted from the database side:
SQLite's COMMIT statements, and PostgreSQL's committed transactions that wrote events (a test
trigger records the top-level transaction id of each). The PostgreSQL cases skip without a
server (and fail under CI=true): see tests/support/postgres.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import queue
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.support import postgres
from tests.support.builders import T0
from tests.support.index_refusal import REFUSAL, refusing_index

from pev.errors import ConflictError, LeaseLost, StoreError
from pev.ledger import (
    CaptureFailed,
    Ledger,
    LedgerEntry,
    Store,
    TaskState,
    TaskSummary,
    apply,
    seal,
    summarize,
)
from pev.model import EvidencePhase
from pev.stores import SQLiteStore
from pev.stores import _sqlite as sqlite_store

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

LEASE_S = 30.0


async def _open_offloaded(tmp_path: Path) -> Store:
    return SQLiteStore(tmp_path / "ledger.db", offload=True)


@pytest.fixture(params=["sqlite", "sqlite-offloaded", "postgres"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """The SQL stores (SQLite also with every call on its own thread), which group commits."""
    if request.param == "sqlite-offloaded":
        return dataclasses.replace(backends["sqlite"], open=_open_offloaded)
    return backends[request.param]


# --- helpers ---------------------------------------------------------------------------------


def capture(error: str = "camera offline") -> CaptureFailed:
    """An event legal in any phase of a live task."""
    return CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=error)


@dataclass(frozen=True, slots=True)
class Batch:
    """One append, sealed but not written: its entries, index row, and the state after it."""

    entries: tuple[LedgerEntry, ...]
    summary: TaskSummary
    state: TaskState

    def after(self, error: str = "and then") -> Batch:
        """The append that follows this one."""
        return follow(self.state, self.entries[-1].seq, self.entries[-1].hash, error)


def follow(state: TaskState, seq: int, hash_: str, error: str = "camera offline") -> Batch:
    """An append of one event after (seq, hash_) onto ``state``."""
    event = capture(error)
    entries = seal(state.task_id, [event], after_seq=seq, prev_hash=hash_, at=T0)
    folded = apply(state, event, at=T0)
    return Batch(entries, summarize(folded, head_hash=entries[-1].hash), folded)


async def next_append(ledger: Ledger, task_id: str, error: str = "camera offline") -> Batch:
    """The next append of a stored task, after its stored head."""
    state = await ledger.state(task_id)
    head = (await ledger.entries(task_id))[-1]
    return follow(state, head.seq, head.hash, error)


def limit_of(store: Store) -> int:
    """The most appends one of the store's commits holds."""
    if isinstance(store, SQLiteStore):
        return sqlite_store._GROUP_LIMIT
    from pev.stores import _postgres  # needs psycopg, which only PostgreSQL has

    return _postgres._GROUP_LIMIT


@contextlib.contextmanager
def counting_commits(store: Store) -> Iterator[Callable[[], int]]:
    """While the block runs: how many transactions that wrote events committed."""
    if isinstance(store, SQLiteStore):
        seen: list[str] = []
        conns = [c for c in (store._db._inline, store._db.conn) if c is not None]
        for conn in conns:
            conn.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
        try:
            yield lambda: len(seen)
        finally:
            for conn in conns:
                conn.set_trace_callback(None)
        return
    schema = store.schema  # type: ignore[attr-defined]
    postgres.execute(
        "CREATE TABLE {s}.pev_test_commits (xid bigint NOT NULL)",
        # txid_current() is the top-level transaction's id, even in a subtransaction.
        "CREATE FUNCTION {s}.pev_test_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN INSERT INTO {s}.pev_test_commits VALUES (txid_current()); RETURN NULL; END $$",
        "CREATE TRIGGER pev_test_commit AFTER INSERT ON {s}.pev_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION {s}.pev_test_commit()",
        schema=schema,
    )
    count = "SELECT count(DISTINCT xid) FROM {s}.pev_test_commits"
    yield lambda: int(postgres.execute(count, schema=schema)[0][0])


class Peek:
    """A connection of its own to the store's database: what another process would see."""

    def __init__(self, store: Store) -> None:
        self._schema = ""
        if isinstance(store, SQLiteStore):
            self._conn: Any = sqlite3.connect(store.location, isolation_level=None)
            self._query = "SELECT count(*) FROM pev_events WHERE task_id = ? AND seq = ?"
        else:
            self._schema = store.schema  # type: ignore[attr-defined]
            self._conn = postgres.psycopg.connect(postgres.URL, autocommit=True)
            self._query = postgres.in_schema(
                "SELECT count(*) FROM {s}.pev_events WHERE task_id = %s AND seq = %s",
                self._schema,
            )

    def has(self, task_id: str, seq: int) -> bool:
        """Whether event ``seq`` of the task is committed."""
        return bool(self._conn.execute(self._query, (task_id, seq)).fetchone()[0])

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


@contextlib.contextmanager
def holding_the_write(store: Store, task_id: str) -> Iterator[Callable[[], None]]:
    """Another connection holds what an append of ``task_id`` waits for; call to let it go.

    On SQLite the file's write lock, on PostgreSQL the task's index row.
    """
    if isinstance(store, SQLiteStore):
        conn: Any = sqlite3.connect(store.location, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        conn = postgres.psycopg.connect(postgres.URL)
        lock = "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE"
        conn.execute(postgres.in_schema(lock, store.schema), (task_id,))  # type: ignore[attr-defined]
    try:
        yield conn.commit
    finally:
        conn.close()


# --- sharing a commit ------------------------------------------------------------------------


async def test_appends_issued_together_share_one_commit(store: Store, ledger: Ledger) -> None:
    """Fifty tasks created in one turn of the loop: one commit, and every chain lands whole."""
    await store.list_tasks()  # the tables exist (PostgreSQL opens lazily)
    ids = [f"t{n}" for n in range(50)]
    with counting_commits(store) as commits:
        await asyncio.gather(*(ledger.create({"n": task_id}, task_id=task_id) for task_id in ids))
        assert commits() == 1
    assert sorted(await store.ledger_task_ids()) == sorted(ids)
    for task_id in ids:
        assert (await Ledger(store).verify(task_id)).ok


async def test_a_lone_append_is_one_transaction(store: Store, ledger: Ledger) -> None:
    """An append with nothing beside it commits on its own, once."""
    await store.list_tasks()
    with counting_commits(store) as commits:
        await ledger.create({"alone": True}, task_id="t1")
        assert commits() == 1
        await ledger.append("t1", [capture()])
        assert commits() == 2


async def test_a_burst_is_committed_a_capped_batch_at_a_time(store: Store, ledger: Ledger) -> None:
    """More appends than one commit holds: as many commits as batches of the cap."""
    await store.list_tasks()
    limit = limit_of(store)
    ids = [f"t{n}" for n in range(limit + 10)]
    with counting_commits(store) as commits:
        await asyncio.gather(*(ledger.create({"n": task_id}, task_id=task_id) for task_id in ids))
        assert commits() == math.ceil(len(ids) / limit) == 2
    assert len(await store.ledger_task_ids()) == len(ids)


async def test_every_caller_returns_after_the_commit(store: Store, ledger: Ledger) -> None:
    """Each caller, the moment its append returns, finds its event committed: another
    connection reads it."""
    ids = [f"t{n}" for n in range(20)]
    for task_id in ids:
        await ledger.create({"n": task_id}, task_id=task_id)
    peek = Peek(store)
    seen: dict[str, bool] = {}

    async def append(task_id: str) -> None:
        state = await ledger.append(task_id, [capture()])
        seen[task_id] = peek.has(task_id, state.event_count)  # no await in between

    try:
        await asyncio.gather(*(append(task_id) for task_id in ids))
    finally:
        peek.close()
    assert seen == dict.fromkeys(ids, True)


# --- failures are their callers' own ---------------------------------------------------------


async def test_each_failure_in_a_batch_is_its_own_callers(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """In one batch: a stale sequence number, a stale fence, a batch that does not follow the
    head and a database error half-way through each raise to their own caller and write nothing;
    the others commit, in the batch's one commit, and every chain verifies."""
    ids = ["good1", "good2", "stale", "fenced", "unlinked", "broken"]
    for task_id in ids:
        await tasks.planning(task_id)
    good = [await next_append(ledger, "good1"), await next_append(ledger, "good2")]
    stale = await next_append(ledger, "stale")
    await ledger.append("stale", [capture("the winner")])  # takes seq 2 first
    old = await store.acquire_lease("fenced", "a", now=T0, lease_s=LEASE_S)
    later = T0 + timedelta(seconds=LEASE_S + 1)
    await store.acquire_lease("fenced", "b", now=later, lease_s=LEASE_S)
    fenced = await next_append(ledger, "fenced")
    first = (await store.read("unlinked"))[0]
    unlinked = follow(await ledger.state("unlinked"), first.seq, "f" * 64)
    broken = await next_append(ledger, "broken")
    before = {task_id: await store.read(task_id) for task_id in ids}

    with refusing_index(store, "broken"), counting_commits(store) as commits:
        outcomes = await asyncio.gather(
            store.append(good[0].entries, good[0].summary),
            store.append(stale.entries, stale.summary),
            store.append(fenced.entries, fenced.summary, fence=old),
            store.append(unlinked.entries, unlinked.summary),
            store.append(broken.entries, broken.summary),
            store.append(good[1].entries, good[1].summary),
            return_exceptions=True,
        )
        assert commits() == 1
    assert outcomes[0] is None
    assert outcomes[-1] is None
    assert isinstance(outcomes[1], ConflictError)
    assert outcomes[1].seq == 2
    assert isinstance(outcomes[2], LeaseLost)
    assert isinstance(outcomes[3], StoreError)
    assert "does not link to the stored head" in str(outcomes[3])
    assert isinstance(outcomes[4], StoreError)
    assert REFUSAL in str(outcomes[4])
    for batch in good:
        stored = await store.read(batch.entries[0].task_id)
        assert stored[-1] == batch.entries[-1]
    for task_id in ("stale", "fenced", "unlinked", "broken"):
        assert await store.read(task_id) == before[task_id]
        summary = await store.summary(task_id)
        assert summary is not None
        assert summary.event_count == len(before[task_id])
    for task_id in ids:
        assert (await Ledger(store).verify(task_id)).ok


async def test_two_appends_of_one_task_in_one_batch_follow_each_other(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """The second append of a task in a batch sees the first one's head: both are written."""
    await tasks.planning("t1")
    first = await next_append(ledger, "t1")
    second = first.after()
    with counting_commits(store) as commits:
        await asyncio.gather(
            store.append(first.entries, first.summary),
            store.append(second.entries, second.summary),
        )
        assert commits() == 1
    assert [entry.seq for entry in await store.read("t1")] == [1, 2, 3]
    assert (await Ledger(store).verify("t1")).ok


async def test_an_append_after_a_failed_one_of_its_task_in_the_batch_fails_too(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """The first append of a task conflicts and is rolled back: the second, built on it, no
    longer follows the head and is refused; the task keeps the winner's event."""
    await tasks.planning("t1")
    first = await next_append(ledger, "t1")
    second = first.after()
    await ledger.append("t1", [capture("the winner")])
    outcomes = await asyncio.gather(
        store.append(first.entries, first.summary),
        store.append(second.entries, second.summary),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ConflictError)
    assert isinstance(outcomes[1], StoreError)
    assert [entry.seq for entry in await store.read("t1")] == [1, 2]
    assert (await Ledger(store).verify("t1")).ok


# --- cancelled callers -----------------------------------------------------------------------


async def test_an_append_cancelled_before_its_batch_starts_is_dropped(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """A caller cancelled while its append waits for the flush: the others commit, its event
    is not written, and its ledger writes to the task again as if nothing happened."""
    for task_id in ("t1", "t2", "t3"):
        await tasks.planning(task_id)
    appends = {
        task_id: asyncio.ensure_future(ledger.append(task_id, [capture()]))
        for task_id in ("t1", "t2", "t3")
    }
    await asyncio.sleep(0)  # each has issued its append; the flush comes at the end of the turn
    appends["t2"].cancel()
    outcomes = await asyncio.gather(*appends.values(), return_exceptions=True)
    assert isinstance(outcomes[0], TaskState)
    assert isinstance(outcomes[2], TaskState)
    assert isinstance(outcomes[1], asyncio.CancelledError)
    assert len(await store.read("t2")) == 1
    await ledger.append("t2", [capture("again")])
    assert [entry.seq for entry in await store.read("t2")] == [1, 2]
    assert (await ledger.verify("t2")).ok


async def test_an_append_cancelled_while_its_batch_commits_leaves_the_ledger_right(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """A caller cancelled while its batch waits on another writer: the batch goes on and
    commits its append, and the ledger, not knowing, reads the task's head again before its
    next write (no ConflictError)."""
    for task_id in ("t1", "t2"):
        await tasks.planning(task_id)
    with holding_the_write(store, "t1") as let_go:
        appends = [
            asyncio.ensure_future(ledger.append(task_id, [capture()])) for task_id in ("t1", "t2")
        ]
        await asyncio.sleep(0.2)  # the batch has started, and waits
        assert not any(append.done() for append in appends)
        appends[0].cancel()
        let_go()
        outcomes = await asyncio.gather(*appends, return_exceptions=True)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert isinstance(outcomes[1], TaskState)
    assert [entry.seq for entry in await store.read("t1")] == [1, 2]  # committed all the same
    state = await ledger.append("t1", [capture("next")])
    assert state.event_count == 3
    assert (await ledger.verify("t1")).ok


# --- a real crash ----------------------------------------------------------------------------

# Drives tasks concurrently, each appending one event after another, and prints each append it
# was told is done (task id and sequence number), flushed at once, until it is killed.
_CHILD = """
import asyncio
import sys

from pev.ledger import CaptureFailed, Ledger
from pev.model import EvidencePhase
from pev.stores import SQLiteStore


async def drive(ledger, task_id):
    await ledger.create({"crash": task_id}, task_id=task_id)
    print(task_id, 1, flush=True)
    while True:
        event = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="x")
        state = await ledger.append(task_id, [event])
        print(task_id, state.event_count, flush=True)


async def main(path, prefix, count):
    ledger = Ledger(SQLiteStore(path))
    await asyncio.gather(*(drive(ledger, f"{prefix}-{n}") for n in range(count)))


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _acknowledged_then_killed(path: Path, prefix: str, kill_after: int) -> list[tuple[str, int]]:
    """Run the child until it has acknowledged ``kill_after`` appends, SIGKILL it, and return
    every append it acknowledged (a line cut short by the kill is not one)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), prefix, "16"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in child.stdout or ()])
    reader.start()
    seen: list[str] = []
    try:
        while len(seen) < kill_after:
            seen.append(lines.get(timeout=30))
    finally:
        child.kill()
        child.wait(timeout=30)
        reader.join(timeout=30)
    errors = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    assert child.returncode == -9, errors  # killed mid-way, not ended on its own
    while not lines.empty():
        seen.append(lines.get())
    acknowledged = []
    for line in seen:
        if line.endswith("\n"):
            task_id, seq = line.split()
            acknowledged.append((task_id, int(seq)))
    return acknowledged


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_every_acknowledged_append_survives_a_kill(tmp_path: Path) -> None:
    """A process appending in groups is killed mid-way, a few times over one file: every append
    it acknowledged is in the file, and every chain verifies."""
    path = tmp_path / "ledger.db"
    for attempt, kill_after in enumerate((150, 400, 250)):
        acknowledged = _acknowledged_then_killed(path, f"run{attempt}", kill_after)
        assert len(acknowledged) >= kill_after
        assert asyncio.run(_lost(path, acknowledged)) == []


async def _lost(path: Path, acknowledged: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The acknowledged appends the file lacks, once every chain in it is checked whole."""
    store = SQLiteStore(path)
    try:
        ledger = Ledger(store)
        stored: dict[str, set[int]] = {}
        for task_id in await store.ledger_task_ids():
            stored[task_id] = {entry.seq for entry in await store.read(task_id)}
            report = await ledger.verify(task_id)
            assert report.ok, (task_id, report)
        return [(task, seq) for task, seq in acknowledged if seq not in stored.get(task, set())]
    finally:
        await store.close()
