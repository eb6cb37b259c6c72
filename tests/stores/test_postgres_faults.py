"""The PostgreSQL store under faults: frozen lock holders, lost connections, timeouts.

A process frozen inside a transaction (SIGSTOP here; a GC pause or a frozen VM elsewhere) must not
keep its tasks from being taken over once their leases expire; a connection killed under a read,
an append or a lease change is :class:`~pev.errors.StoreUnavailable` (try again), never a bare
:class:`~pev.errors.StoreError`; the connection settings pev applies reach the server, and a
value the URL sets wins. Each test is bounded in time (a few seconds).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from tests.support import postgres
from tests.support.builders import T0

from pev.errors import StoreError, StoreUnavailable, UsageError
from pev.ledger import (
    Ledger,
    LedgerEntry,
    RevisionKind,
    RevisionStarted,
    TaskSummary,
    apply,
    seal,
    summarize,
    utc_now,
)
from pev.model import Plan, PlanNode
from pev.stores import PostgresStore
from pev.stores._postgres_db import (
    CONNECTION_SETTINGS,
    POOL_SETTINGS,
    SERVER_SETTINGS,
    connection_options,
    unavailable_state,
)

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

PLAN = Plan("fetch the answer", (PlanNode("a", "fetch it", tool="fetch"),))
LEASE_S = 2.0
# How long a test waits for something that should happen within a second or two, at most.
PATIENCE_S = 15.0


@pytest.fixture
def backend(backends: dict[str, Backend]) -> Backend:
    """Only the PostgreSQL backend, for every fixture built on ``backend`` in this module."""
    return backends["postgres"]


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema name of the test's own (skipped without a server), dropped afterwards."""
    with postgres.throwaway_schema() as name:
        yield name


def with_options(url: str, options: str) -> str:
    """``url`` with libpq ``options`` (server settings) added."""
    return f"{url}{'&' if '?' in url else '?'}options={urllib.parse.quote(options, safe='')}"


@pytest.fixture
async def impatient(store: PostgresStore) -> AsyncIterator[PostgresStore]:
    """A second store on ``store``'s schema whose URL sets a 300 ms lock_timeout."""
    second = PostgresStore(with_options(postgres.URL, "-c lock_timeout=300ms"), schema=store.schema)
    yield second
    await second.close()


async def next_batch(ledger: Ledger, task_id: str) -> tuple[tuple[LedgerEntry, ...], TaskSummary]:
    """The entries and index row of the next append of a planning task (not written)."""
    state = await ledger.state(task_id)
    head = (await ledger.entries(task_id))[-1]
    event = RevisionStarted(number=1, revision_kind=RevisionKind.INITIAL, reason="r", plan=PLAN)
    batch = seal(state.task_id, [event], after_seq=head.seq, prev_hash=head.hash, at=T0)
    return batch, summarize(apply(state, event, at=T0), head_hash=batch[-1].hash)


def hold(schema: str, statement: str, *params: object) -> Any:
    """A transaction of the test's own that ran ``statement`` (taking its locks) and stays open."""
    conn = postgres.psycopg.connect(postgres.URL)
    conn.execute(postgres.in_schema(statement, schema), params or None)
    return conn


async def kill_waiting(schema: str, work: Awaitable[object]) -> BaseException:
    """Run ``work`` until its backend waits for a lock, kill that backend; what ``work`` raised."""
    running = asyncio.ensure_future(work)
    give_up = time.monotonic() + PATIENCE_S
    killed: list[tuple[Any, ...]] = []
    while not killed and not running.done() and time.monotonic() < give_up:
        await asyncio.sleep(0.02)
        killed = await asyncio.to_thread(
            postgres.execute,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
            "wait_event_type = 'Lock' AND datname = current_database() AND query LIKE %s",
            params=(f'%"{schema}"%',),
        )
    assert killed, "the store's statement never waited for the test's lock"
    with pytest.raises(StoreError) as failed:
        await asyncio.wait_for(running, PATIENCE_S)
    return failed.value


# --- settings --------------------------------------------------------------------------------


async def test_the_timeouts_reach_the_server(store: PostgresStore) -> None:
    """Every pooled connection carries pev's timeouts and TCP settings (docs/stores.md)."""
    pool = await store._db._ready()
    async with pool.connection() as conn:
        for name, value in {**SERVER_SETTINGS, **POOL_SETTINGS}.items():
            cur = await conn.execute(f"SHOW {name}")
            assert await cur.fetchone() == (value,), name
        parameters = conn.info.get_parameters()
    for name, value in CONNECTION_SETTINGS.items():
        assert parameters.get(name) == value, name


async def test_a_setting_the_url_makes_wins(schema: str) -> None:
    """A timeout in the URL's options is the one the connection gets; the others still apply."""
    url = with_options(postgres.URL, "-c lock_timeout=7s --statement-timeout=9s")
    store = PostgresStore(f"{url}&tcp_user_timeout=1234", schema=schema)
    try:
        pool = await store._db._ready()
        async with pool.connection() as conn:
            shown = {}
            for name in (
                "lock_timeout",
                "statement_timeout",
                "idle_in_transaction_session_timeout",
            ):
                cur = await conn.execute(f"SHOW {name}")
                shown[name] = (await cur.fetchone() or ("",))[0]
            parameters = conn.info.get_parameters()
        assert shown == {
            "lock_timeout": "7s",
            "statement_timeout": "9s",
            "idle_in_transaction_session_timeout": "2s",
        }
        assert parameters["tcp_user_timeout"] == "1234"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("params", "environ", "expected"),
    [
        pytest.param({}, {}, "-c lock_timeout=3s", id="none-set"),
        pytest.param({"options": "-c lock_timeout=1s"}, {}, "-c lock_timeout=1s", id="url-sets-it"),
        pytest.param({"options": "--lock_timeout=1s"}, {}, "--lock_timeout=1s", id="url-long-form"),
        pytest.param(
            {"options": "-c search_path=x"},
            {},
            "-c lock_timeout=3s -c search_path=x",
            id="url-sets-another",
        ),
        pytest.param({}, {"PGOPTIONS": "-clock-timeout=5s"}, "-clock-timeout=5s", id="pgoptions"),
    ],
)
def test_options_keep_what_the_user_set(
    params: dict[str, str], environ: dict[str, str], expected: str
) -> None:
    """pev's server settings go in libpq ``options`` only where the user set none."""
    options = connection_options(params, {"lock_timeout": "3s"}, environ=environ)
    assert options.get("options", params.get("options") or environ.get("PGOPTIONS")) == expected


def test_keepalives_the_url_sets_are_left_alone() -> None:
    """A TCP setting in the URL is not overridden (the URL's value is the one libpq uses)."""
    options = connection_options({"keepalives_idle": "60"}, {}, environ={})
    assert "keepalives_idle" not in options
    assert options["tcp_user_timeout"] == CONNECTION_SETTINGS["tcp_user_timeout"]


@pytest.mark.parametrize(
    ("state", "retry"),
    [
        ("08006", True),
        ("57P01", True),
        ("55P03", True),
        ("57014", True),
        ("40001", True),
        ("40P01", True),
        ("25P03", True),
        ("23505", False),
        ("42P01", False),
        ("P0001", False),
    ],
)
def test_sqlstates_that_say_try_again(state: str, retry: bool) -> None:
    """Lost connections, shutdowns and timeouts say "try again"; refusals and damage do not."""
    assert unavailable_state(state) is retry


# --- a frozen lock holder --------------------------------------------------------------------

FROZEN = r"""
import asyncio, os, signal, sys
from datetime import datetime, UTC
from pev.stores import PostgresStore

url, schema, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])

async def main():
    store = PostgresStore(url, schema=schema)
    lease = await store.acquire_lease("t1", "frozen", now=datetime.now(UTC), lease_s=lease_s)
    print(lease.epoch, flush=True)
    pool = await store._db._ready()
    try:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                f'SELECT 1 FROM "{schema}".pev_tasks WHERE task_id = %s FOR UPDATE', ("t1",)
            )
            print("locked", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen with the row locked, until SIGCONT
            await conn.execute("SELECT 1")
        print("thawed: still connected", flush=True)
    except Exception as exc:
        print("thawed: connection gone", flush=True)
    try:
        await store.renew_lease(lease, now=datetime.now(UTC), lease_s=lease_s)
        print("renewed", flush=True)
    except Exception as exc:
        print(type(exc).__name__, flush=True)
    await store.close()

asyncio.run(main())
"""


@pytest.fixture
def freeze(store: PostgresStore) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Starts a process that takes task t1's lease, locks its row in a transaction, and freezes.

    Each is thawed (SIGCONT) and awaited after the test, killed if it does not end.
    """
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", FROZEN, postgres.URL, store.schema, str(LEASE_S)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
        try:
            process.communicate(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def read_line(process: subprocess.Popen[str]) -> str:
    """The process's next line of output (it prints a few, promptly)."""
    assert process.stdout is not None
    return process.stdout.readline().strip()


async def frozen(process: subprocess.Popen[str]) -> float:
    """Wait until ``process`` froze holding its row lock; when it took its lease (monotonic)."""
    assert await asyncio.to_thread(read_line, process) == "1"  # its lease, epoch 1
    took = time.monotonic()
    assert await asyncio.to_thread(read_line, process) == "locked"
    give_up = time.monotonic() + PATIENCE_S
    while not _stopped(process.pid):
        assert time.monotonic() < give_up, "the holder never froze"
        await asyncio.sleep(0.01)
    return took


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", maxsplit=1)[1].split()[0] == "T"


async def test_a_frozen_lock_holder_does_not_keep_its_task_from_a_claim(
    store: PostgresStore, tasks: TaskFactory, freeze: Callable[[], subprocess.Popen[str]]
) -> None:
    """A worker frozen inside a transaction holding the task's row: claimed within lease_s + 2 s.

    Its session, idle in its transaction, is ended by the server; once thawed, the frozen
    process finds its connection gone, and its heartbeat is refused: LeaseLost.
    """
    await tasks.planning("t1")
    holder = freeze()
    took = await frozen(holder)
    claimed = ()
    while not claimed and time.monotonic() - took < LEASE_S + 2:
        claimed = await store.claim("worker", now=utc_now(), lease_s=30, limit=5)
        await asyncio.sleep(0.05)
    assert [(lease.task_id, lease.owner, lease.epoch) for lease in claimed] == [
        ("t1", "worker", 2)
    ], f"not claimed within {LEASE_S + 2} s of the frozen worker's lease"
    holder.send_signal(signal.SIGCONT)
    rest, _ = await asyncio.to_thread(holder.communicate, timeout=PATIENCE_S)
    assert rest.splitlines() == ["thawed: connection gone", "LeaseLost"]
    assert await store.lease("t1") == claimed[0]


async def test_a_frozen_lock_holder_does_not_keep_its_task_from_a_takeover(
    store: PostgresStore, tasks: TaskFactory, freeze: Callable[[], subprocess.Popen[str]]
) -> None:
    """``pev resume`` takes the lease (acquire_lease) within lease_s + 2 s, and can append."""
    await tasks.planning("t1")
    took = await frozen(freeze())
    while time.monotonic() - took < LEASE_S:
        await asyncio.sleep(0.05)
    lease = await asyncio.wait_for(
        store.acquire_lease("t1", "resumer", now=utc_now(), lease_s=30), timeout=2
    )
    assert (lease.owner, lease.epoch) == ("resumer", 2)
    entries, summary = await next_batch(tasks.ledger, "t1")
    await asyncio.wait_for(store.append(entries, summary, fence=lease), timeout=2)
    assert len(await store.read("t1")) == 2


# --- errors that tell the truth --------------------------------------------------------------


async def test_a_backend_killed_under_an_append_is_unavailable(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """A connection lost while an append waits: StoreUnavailable ("write"); nothing written."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=3600)
    entries, summary = await next_batch(tasks.ledger, "t1")
    lock = hold(store.schema, "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE", "t1")
    try:
        error = await kill_waiting(store.schema, store.append(entries, summary, fence=lease))
    finally:
        lock.rollback()
        lock.close()
    assert isinstance(error, StoreUnavailable)
    assert (error.operation, error.location) == ("write", store.location)
    assert len(await store.read("t1")) == 1  # the pool gives a working connection again
    await store.append(entries, summary, fence=lease)  # and the same append, tried again, lands
    assert len(await store.read("t1")) == 2


async def test_a_backend_killed_under_a_lease_change_is_unavailable(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """A connection lost while a heartbeat waits: StoreUnavailable ("lease"); the lease stays."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=3600)
    lock = hold(store.schema, "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE", "t1")
    try:
        error = await kill_waiting(
            store.schema, store.renew_lease(lease, now=T0 + timedelta(seconds=1), lease_s=3600)
        )
    finally:
        lock.rollback()
        lock.close()
    assert isinstance(error, StoreUnavailable)
    assert error.operation == "lease"
    assert await store.lease("t1") == lease


async def test_a_backend_killed_under_a_claim_is_unavailable(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """A connection lost while a claim's search waits: StoreUnavailable ("lease")."""
    await tasks.planning("t1")
    lock = hold(store.schema, "LOCK TABLE {s}.pev_leases IN ACCESS EXCLUSIVE MODE")
    try:
        error = await kill_waiting(store.schema, store.claim("w", now=T0, lease_s=30, limit=1))
    finally:
        lock.rollback()
        lock.close()
    assert isinstance(error, StoreUnavailable)
    assert error.operation == "lease"
    assert len(await store.claim("w", now=T0, lease_s=30, limit=1)) == 1


async def test_a_backend_killed_under_a_read_is_unavailable(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """A connection lost while a read waits: StoreUnavailable ("read"), without the password."""
    await tasks.planning("t1")
    lock = hold(store.schema, "LOCK TABLE {s}.pev_events IN ACCESS EXCLUSIVE MODE")
    try:
        error = await kill_waiting(store.schema, store.read("t1"))
    finally:
        lock.rollback()
        lock.close()
    assert isinstance(error, StoreUnavailable)
    assert (error.operation, error.location) == ("read", store.location)
    assert "\n" not in str(error)
    assert len(await store.read("t1")) == 1


async def test_idle_connections_killed_are_unavailable_then_replaced(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """A server restart ends every pooled connection: the next use says so, the one after works."""
    await tasks.planning("t1")
    killed = postgres.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND datname = current_database() AND state = 'idle' AND query LIKE %s",
        params=(f'%"{store.schema}"%',),
    )
    assert killed
    outcomes = []
    for _ in range(6):  # each broken connection of the pool fails once, then is replaced
        try:
            outcomes.append(len(await store.read("t1")))
        except StoreUnavailable as exc:
            outcomes.append(exc.operation)
    assert outcomes[-1] == 1
    assert set(outcomes) <= {1, "read"}


async def test_a_lock_timeout_inside_an_append_is_unavailable(
    store: PostgresStore, impatient: PostgresStore, tasks: TaskFactory
) -> None:
    """The append function catches a lock timeout ('failed'): StoreUnavailable, by its code."""
    await tasks.planning("t1")
    entries, summary = await next_batch(tasks.ledger, "t1")
    lock = hold(store.schema, "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE", "t1")
    try:
        with pytest.raises(StoreUnavailable, match="55P03") as failed:
            await asyncio.wait_for(impatient.append(entries, summary), PATIENCE_S)
    finally:
        lock.rollback()
        lock.close()
    assert failed.value.operation == "write"
    await impatient.append(entries, summary)
    assert len(await store.read("t1")) == 2


async def test_a_lock_timeout_under_a_lease_change_is_unavailable(
    store: PostgresStore, impatient: PostgresStore, tasks: TaskFactory
) -> None:
    """A heartbeat that cannot get the task's row in time: StoreUnavailable, not lost."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=3600)
    lock = hold(store.schema, "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE", "t1")
    try:
        with pytest.raises(StoreUnavailable, match="lock timeout") as failed:
            await impatient.renew_lease(lease, now=T0, lease_s=3600)
    finally:
        lock.rollback()
        lock.close()
    assert failed.value.operation == "lease"


async def test_a_statement_timeout_is_unavailable(store: PostgresStore, tasks: TaskFactory) -> None:
    """A statement cancelled by statement_timeout (which the append's handler cannot catch)."""
    await tasks.planning("t1")
    url = with_options(postgres.URL, "-c statement_timeout=300ms")
    slow = PostgresStore(url, schema=store.schema)
    entries, summary = await next_batch(tasks.ledger, "t1")
    lock = hold(store.schema, "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE", "t1")
    try:
        with pytest.raises(StoreUnavailable, match="statement timeout") as failed:
            await asyncio.wait_for(slow.append(entries, summary), PATIENCE_S)
    finally:
        lock.rollback()
        lock.close()
        await slow.close()
    assert failed.value.operation == "write"


async def test_an_unreachable_server_is_unavailable() -> None:
    """Nothing listens at the URL: StoreUnavailable ("connect"), a refused login is not."""
    store = PostgresStore("postgresql://pev:secret@127.0.0.1:1/ledgers")
    try:
        with pytest.raises(StoreUnavailable, match="cannot connect") as refused:
            await store.list_tasks()
        assert refused.value.operation == "connect"
        assert "secret" not in str(refused.value)
    finally:
        await store.close()
    postgres.require()
    missing = PostgresStore(postgres.URL.rsplit("/", maxsplit=1)[0] + "/pev_no_such_database")
    try:
        with pytest.raises(StoreError, match="does not exist") as refused_for_good:
            await missing.list_tasks()
        assert not isinstance(refused_for_good.value, StoreUnavailable)
    finally:
        await missing.close()


# --- opening without creating ----------------------------------------------------------------


async def test_a_store_that_may_not_create_refuses_an_empty_database(schema: str) -> None:
    """create=False: no pev schema is a one-line UsageError naming where and what to run."""
    store = PostgresStore(postgres.URL, schema=schema, create=False)
    try:
        with pytest.raises(UsageError, match="pev db upgrade") as refused:
            await store.list_tasks()
    finally:
        await store.close()
    assert schema in str(refused.value)
    assert "\n" not in str(refused.value)
    created = postgres.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname = %s", params=(schema,)
    )
    assert created == [(0,)]


async def test_a_store_that_may_not_create_opens_an_existing_ledger(schema: str) -> None:
    """create=False opens a ledger pev made, and reads what it holds."""
    maker = PostgresStore(postgres.URL, schema=schema)
    await maker.list_tasks()
    await maker.close()
    reader = PostgresStore(postgres.URL, schema=schema, create=False)
    try:
        assert await reader.list_tasks() == ()
        assert await reader.version() > 0
    finally:
        await reader.close()
