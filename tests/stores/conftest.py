"""Fixtures of the store contract suite: every backend, a fake clock, tasks, and tampering.

A backend joins the suite by adding one entry to :data:`BACKENDS`: how to open a fresh store,
and how to tamper with what it stored. Every test that asks for ``store`` (or anything built on
it) then runs against it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import pytest
from tests.support import builders, postgres

from pev import codec
from pev.kernel import Finish, LocalReplan, TaskStatus, TerminalReason, diagnose
from pev.ledger import (
    ApprovalRequested,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Event,
    Ledger,
    NodeDispatched,
    RevisionStarted,
    RoundExecuted,
    Store,
    TaskCreated,
    TaskState,
    VerdictRecorded,
    dispatch,
    lineage_results,
)
from pev.model import (
    Effect,
    EvidencePhase,
    Plan,
    PlanNode,
    Reliability,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
)
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import FakeClock

START = datetime(2026, 1, 1, tzinfo=UTC)


# --- tampering -------------------------------------------------------------------------------


class Tamper(Protocol):
    """Changes a stored ledger behind the store's back, the way an attacker or a bad disk would.

    None of these touch the task index row, so a dropped last event leaves the index head behind.
    """

    def edit(self, task_id: str, seq: int) -> None:
        """Rewrite event ``seq`` in place (same seq, same stored hash, different event)."""
        ...

    def drop(self, task_id: str, seq: int) -> None:
        """Delete event ``seq``."""
        ...

    def swap(self, task_id: str, first: int, second: int) -> None:
        """Exchange the places of events ``first`` and ``second``."""
        ...

    def drop_last(self, task_id: str) -> None:
        """Delete the task's last event."""
        ...


def forge(event: Event) -> Event:
    """A plausible forgery of ``event``: one small field changed, or another event altogether."""
    if isinstance(event, TaskCreated):
        return dataclasses.replace(event, input={"forged": True})
    for field in dataclasses.fields(event):
        if field.name in ("task_id", "record_id", "revision"):
            continue
        value = getattr(event, field.name)
        if type(value) is bool:
            return dataclasses.replace(event, **{field.name: not value})
        if type(value) is int:
            return dataclasses.replace(event, **{field.name: value + 1})
        if type(value) is str:
            return dataclasses.replace(event, **{field.name: value + " (forged)"})
        if isinstance(value, datetime):
            return dataclasses.replace(event, **{field.name: value + timedelta(seconds=1)})
    return CancelRequested(reason="forged")


class MemoryTamper:
    """Tampers with a :class:`MemoryStore` through its private entry lists."""

    def __init__(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
        self._entries = store._entries

    def edit(self, task_id: str, seq: int) -> None:
        entries = self._entries[task_id]
        original = entries[seq - 1]
        entries[seq - 1] = dataclasses.replace(original, event=forge(original.event))

    def drop(self, task_id: str, seq: int) -> None:
        del self._entries[task_id][seq - 1]

    def swap(self, task_id: str, first: int, second: int) -> None:
        entries = self._entries[task_id]
        entries[first - 1], entries[second - 1] = entries[second - 1], entries[first - 1]

    def drop_last(self, task_id: str) -> None:
        self._entries[task_id].pop()


class SQLiteTamper:
    """Tampers with a :class:`SQLiteStore`'s file through a connection of its own.

    Each change first drops the append-only triggers, as someone with write access could.
    """

    _PARKED = 1_000_000_000  # a seq no test ledger reaches, to park a row while swapping
    _DELETE_LAST = (
        "DELETE FROM pev_events WHERE task_id = ? AND seq = "
        "(SELECT MAX(seq) FROM pev_events WHERE task_id = ?)"
    )

    def __init__(self, store: Store) -> None:
        assert isinstance(store, SQLiteStore)
        self._location = store.location

    def _execute(self, *statements: tuple[str, tuple[object, ...]]) -> None:
        with contextlib.closing(sqlite3.connect(self._location, isolation_level=None)) as conn:
            conn.execute("DROP TRIGGER IF EXISTS pev_events_no_update")
            conn.execute("DROP TRIGGER IF EXISTS pev_events_no_delete")
            conn.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                conn.execute(sql, params)
            conn.execute("COMMIT")

    def _event_json(self, task_id: str, seq: int) -> str:
        with contextlib.closing(sqlite3.connect(self._location)) as conn:
            row = conn.execute(
                "SELECT event FROM pev_events WHERE task_id = ? AND seq = ?", (task_id, seq)
            ).fetchone()
        assert row is not None, f"task {task_id} has no event {seq}"
        return str(row[0])

    def edit(self, task_id: str, seq: int) -> None:
        forged = forge(codec.loads(self._event_json(task_id, seq), Event))
        self._execute(
            (
                "UPDATE pev_events SET event = ?, kind = ? WHERE task_id = ? AND seq = ?",
                (codec.dumps(forged), forged.kind, task_id, seq),
            )
        )

    def drop(self, task_id: str, seq: int) -> None:
        self._execute(("DELETE FROM pev_events WHERE task_id = ? AND seq = ?", (task_id, seq)))

    def swap(self, task_id: str, first: int, second: int) -> None:
        renumber = "UPDATE pev_events SET seq = ? WHERE task_id = ? AND seq = ?"
        self._execute(
            (renumber, (self._PARKED, task_id, first)),
            (renumber, (first, task_id, second)),
            (renumber, (second, task_id, self._PARKED)),
        )

    def drop_last(self, task_id: str) -> None:
        self._execute((self._DELETE_LAST, (task_id, task_id)))


class PostgresTamper:
    """Tampers with a :class:`PostgresStore`'s schema through a connection of its own.

    Each change runs with ``session_replication_role = replica``, under which the append-only
    triggers do not fire, as someone with a superuser's access could.
    """

    _PARKED = 1_000_000_000
    _DELETE = "DELETE FROM {s}.pev_events WHERE task_id = %s AND seq = %s"
    _DELETE_LAST = (
        "DELETE FROM {s}.pev_events WHERE task_id = %s AND seq = "
        "(SELECT max(seq) FROM {s}.pev_events WHERE task_id = %s)"
    )
    _EDIT = "UPDATE {s}.pev_events SET event = %s, kind = %s WHERE task_id = %s AND seq = %s"
    _RENUMBER = "UPDATE {s}.pev_events SET seq = %s WHERE task_id = %s AND seq = %s"

    def __init__(self, store: Store) -> None:
        assert isinstance(store, postgres.PostgresStore)
        self._schema = store.schema

    def _execute(self, *statements: tuple[str, tuple[object, ...]]) -> None:
        with postgres.psycopg.connect(postgres.URL) as conn, conn.cursor() as cur:
            cur.execute("SET LOCAL session_replication_role = replica")
            for sql, params in statements:
                cur.execute(postgres.in_schema(sql, self._schema), params)

    def edit(self, task_id: str, seq: int) -> None:
        ((text,),) = postgres.execute(
            "SELECT event FROM {s}.pev_events WHERE task_id = %s AND seq = %s",
            schema=self._schema,
            params=(task_id, seq),
        )
        forged = forge(codec.loads(text, Event))
        self._execute((self._EDIT, (codec.dumps(forged), forged.kind, task_id, seq)))

    def drop(self, task_id: str, seq: int) -> None:
        self._execute((self._DELETE, (task_id, seq)))

    def swap(self, task_id: str, first: int, second: int) -> None:
        self._execute(
            (self._RENUMBER, (self._PARKED, task_id, first)),
            (self._RENUMBER, (first, task_id, second)),
            (self._RENUMBER, (second, task_id, self._PARKED)),
        )

    def drop_last(self, task_id: str) -> None:
        self._execute((self._DELETE_LAST, (task_id, task_id)))


# --- backends --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backend:
    """How the suite opens a fresh store of one kind, and tampers with it."""

    open: Callable[[Path], Awaitable[Store]]
    tamper: Callable[[Store], Tamper]


async def _open_memory(tmp_path: Path) -> Store:
    return MemoryStore()


async def _open_sqlite(tmp_path: Path) -> Store:
    return SQLiteStore(tmp_path / "ledger.db")


async def _open_postgres(tmp_path: Path) -> Store:
    # A schema of its own, dropped when the store is closed; skipped without a server (failed
    # under CI=true).
    return postgres.throwaway_store(max_size=4)  # type: ignore[no-any-return]


def postgres_at_version(schema: str, version: int) -> None:
    """Make ``schema`` hold pev's tables at ``version``, as the pev of that version left them."""
    from pev.stores import _postgres_schema as ddl

    statements = ["CREATE SCHEMA {s}"]
    for step in ddl.MIGRATIONS[:version]:
        statements += step.statements
    statements.append(
        "INSERT INTO {s}.pev_meta VALUES ('application', 'pev ledger'), ('schema_version', %s)"
    )
    postgres.execute(*statements, schema=schema, params=(str(version),))


async def _open_postgres_upgraded(tmp_path: Path) -> Store:
    # A schema as the pev of schema version 5 made it, brought to the current version by
    # `pev db upgrade`: what the migrations make must keep the contract as a fresh schema does.
    store = postgres.throwaway_store(max_size=4)
    postgres_at_version(store.schema, 5)
    await store.upgrade()
    return store  # type: ignore[no-any-return]


# One entry per backend.
BACKENDS: dict[str, Backend] = {
    "memory": Backend(open=_open_memory, tamper=MemoryTamper),
    "postgres": Backend(open=_open_postgres, tamper=PostgresTamper),
    "sqlite": Backend(open=_open_sqlite, tamper=SQLiteTamper),
}

# Backends that only the contract and claim suites run against, besides BACKENDS.
UPGRADED: dict[str, Backend] = {
    "postgres-upgraded": Backend(open=_open_postgres_upgraded, tamper=PostgresTamper),
}


@pytest.fixture
def backends() -> dict[str, Backend]:
    """Every backend by name, for a module that overrides ``backend`` to pin one of them."""
    return {**BACKENDS, **UPGRADED}


@pytest.fixture
def at_version() -> Callable[[str, int], None]:
    """Makes a schema hold pev's tables at a version, as the pev of that version left them."""
    return postgres_at_version


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    return BACKENDS[request.param]


@pytest.fixture
async def store(backend: Backend, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of the backend under test, closed afterwards."""
    opened = await backend.open(tmp_path)
    yield opened
    await opened.close()


@pytest.fixture
def tamper(backend: Backend, store: Store) -> Tamper:
    """Tampering with ``store``'s stored ledgers."""
    return backend.tamper(store)


# --- time, ledgers and tasks -----------------------------------------------------------------


CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, "fetch the answer", ("the answer is stored",)
)
PLAN = Plan("fetch the answer", (PlanNode("a", "fetch it", tool="fetch"),))


class TaskFactory:
    """Drives tasks through a ledger to a given phase with real, legal events."""

    contract = CONTRACT
    plan = PLAN

    def __init__(self, ledger: Ledger, clock: FakeClock) -> None:
        self.ledger = ledger
        self.clock = clock

    async def planning(self, task_id: str) -> TaskState:
        """A new task: one ``task_created`` event."""
        return await self.ledger.create({"question": task_id}, contract=CONTRACT, task_id=task_id)

    async def executing(self, task_id: str) -> TaskState:
        """A task whose initial revision started (2 events)."""
        await self.planning(task_id)
        return await self.ledger.append(task_id, [self.revision()])

    async def verifying(self, task_id: str) -> TaskState:
        """A task whose one node ran and succeeded (5 events)."""
        now = _written_at(await self.executing(task_id))
        rid = f"{task_id}-r1"
        record = builders.record(
            rid, "a", task_id=task_id, tool="fetch", effect=Effect.QUERY, at=now
        )
        await self.ledger.append(task_id, [NodeDispatched(record=record)])
        done = builders.finished(rid, Success(42), at=now)
        return await self.ledger.append(
            task_id, [done, RoundExecuted(revision=1, executed_ok=True)]
        )

    async def awaiting_replan(self, task_id: str) -> TaskState:
        """A task whose verdict failed and that waits for a local replan (9 events)."""
        state = await self.verifying(task_id)
        verdict = Verdict.failed(CONTRACT, failed_nodes=["a"], feedback="wrong answer")
        diagnosis = diagnose(verdict, Reliability.OK, lineage_results(state))
        state = await self.ledger.append(
            task_id,
            [
                VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK),
                Diagnosed(revision=1, diagnosis=diagnosis),
            ],
        )
        decision = LocalReplan(frozenset({"a"}), "wrong answer")
        return await self.ledger.append(task_id, dispatch(state, decision, now=_written_at(state)))

    async def awaiting_approval(self, task_id: str) -> TaskState:
        """A task whose initial revision waits for a person's approval (3 events)."""
        await self.planning(task_id)
        return await self.ledger.append(task_id, [self.revision(), ApprovalRequested(revision=1)])

    async def finished(self, task_id: str) -> TaskState:
        """A task that ended succeeded/passed (8 events)."""
        state = await self.verifying(task_id)
        verdict = Verdict.passed(CONTRACT)
        state = await self.ledger.append(
            task_id, [VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK)]
        )
        decision = Finish(TaskStatus.SUCCEEDED, TerminalReason.PASSED)
        return await self.ledger.append(task_id, dispatch(state, decision, now=_written_at(state)))

    @staticmethod
    def revision(number: int = 1) -> RevisionStarted:
        """The initial revision's start."""
        return builders.revision(number, plan=PLAN, reason="initial plan")

    @staticmethod
    def capture_failed(error: str = "camera offline") -> CaptureFailed:
        """An event legal in any phase of a live task."""
        return CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=error)


def _written_at(state: TaskState) -> datetime:
    """When the task's last event was written: the ledger clock's latest reading."""
    assert state.updated_at is not None
    return state.updated_at


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock that moves one second each time it is read, from 2026-01-01T00:00:01Z."""
    return FakeClock(START + timedelta(seconds=1), step=1)


@pytest.fixture
def ledger(store: Store, clock: FakeClock) -> Ledger:
    """A ledger over ``store`` on the fake clock."""
    return Ledger(store, clock=clock)


@pytest.fixture
def tasks(ledger: Ledger, clock: FakeClock) -> TaskFactory:
    """Builds tasks in a chosen phase through ``ledger``."""
    return TaskFactory(ledger, clock)


@pytest.fixture
async def other(store: Store) -> AsyncIterator[Store]:
    """A second store over the same ledgers (for memory, the same store)."""
    if isinstance(store, MemoryStore):
        yield store
        return
    if isinstance(store, SQLiteStore):
        second: Store = SQLiteStore(store.location)
    else:
        second = postgres.same_schema(store, max_size=4)
    yield second
    await second.close()  # a plain PostgresStore leaves the schema to ``store`` to drop
