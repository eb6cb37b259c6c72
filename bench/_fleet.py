"""What the worker benchmarks run on: fresh ledgers, and `pev worker` processes serving them.

Each measurement gets a ledger of its own (`place`): a fresh SQLite file, or a fresh PostgreSQL
schema that is dropped afterwards. `fleet` starts `pev worker` processes on it (the `pev` script
next to this Python), each logging to a file of its own, waits until every one is up and has been
idle for a while, and stops them all when it ends, however it ends: SIGTERM, then SIGKILL for
any that has not exited in time. With `PEV_BENCH_PROFILE=DIR` set, each worker runs under
cProfile and writes its profile to `DIR` when it exits.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pev
from pev.ledger import TERMINAL_PHASES, TaskPhase, TaskSummary

BENCH = Path(__file__).resolve().parent
PEV = Path(sys.executable).with_name("pev")
URL = os.environ.get("PEV_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PROFILE_DIR = os.environ.get("PEV_BENCH_PROFILE", "")
START_TIMEOUT_S = 60.0  # a worker process imports pev and opens its store well within this
STOP_TIMEOUT_S = 15.0  # an idle worker drains and exits well within this, else it is killed
UNFINISHED = tuple(phase for phase in TaskPhase if phase not in TERMINAL_PHASES)

_STARTED = re.compile(r"worker (\S+) started")
_STOPPED = re.compile(
    r"(\d+) claimed, (\d+) ended, (\d+) drained, (?:\d+ awaiting approval, )?(\d+) failed"
)


class FleetError(RuntimeError):
    """A worker process or a wait did not behave as the benchmark needs; names which, and why."""


# -- ledgers --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """Where one measurement's ledger lives.

    Attributes:
        kind: ``"sqlite"`` or ``"postgres"``.
        db: What ``pev --db`` takes: the SQLite file, or the URL naming the schema.
        schema: The PostgreSQL schema (``""`` for SQLite).
    """

    kind: str
    db: str
    schema: str = ""

    def open(self) -> pev.Store:
        """A store on this ledger (opened on first use; close it when done)."""
        if self.kind == "sqlite":
            return pev.SQLiteStore(self.db)
        from pev.stores import PostgresStore  # the postgres extra, only when asked for

        return PostgresStore(URL, schema=self.schema)


@contextmanager
def place(kind: str, folder: Path) -> Iterator[Place]:
    """A fresh ledger of ``kind``, its tables created; a PostgreSQL schema is dropped after."""
    name = f"pev_bench_{secrets.token_hex(6)}"
    if kind == "sqlite":
        where = Place(kind=kind, db=str(folder / f"{name}.db"))
        asyncio.run(_create(where))
        yield where
        return
    joiner = "&" if "?" in URL else "?"
    where = Place(kind=kind, db=f"{URL}{joiner}schema={name}", schema=name)
    try:
        asyncio.run(_create(where))
        yield where
    finally:
        _drop_schema(name)


async def _create(where: Place) -> None:
    """Create the ledger's tables before any worker opens it."""
    store = where.open()
    try:
        upgrade = getattr(store, "upgrade", None)
        if upgrade is not None:
            await upgrade()
        await store.list_tasks(limit=1)
    finally:
        await store.close()


def _drop_schema(schema: str) -> None:
    import psycopg  # the postgres extra, only when asked for

    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def summaries(store: pev.Store, tasks: int) -> tuple[TaskSummary, ...]:
    """Every task's index row (there must be exactly ``tasks``)."""
    rows = await store.list_tasks(limit=tasks + 1)
    if len(rows) != tasks:
        raise FleetError(f"the ledger holds {len(rows)} tasks, not the {tasks} written")
    return rows


# -- worker processes -----------------------------------------------------------------------


@dataclass(slots=True)
class Worker:
    """One `pev worker` process and the file it logs to."""

    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        """What it has logged so far."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    @property
    def owner(self) -> str:
        """Its lease owner id, from its `started` line."""
        found = _STARTED.search(self.text())
        if found is None:
            raise FleetError(f"worker {self.process.pid} has not logged its start")
        return found.group(1)

    def check_alive(self) -> None:
        """Raise if the process has exited, with the end of its log."""
        if self.process.poll() is not None:
            tail = "\n".join(self.text().splitlines()[-10:])
            raise FleetError(
                f"worker {self.process.pid} exited with {self.process.returncode}:\n{tail}"
            )

    def kill(self) -> None:
        """SIGKILL: nothing in the process gets to run, its leases stay held until they expire."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)


@dataclass(slots=True, kw_only=True)
class Counts:
    """What the workers of a fleet said they did, summed over their `stopped` lines.

    ``silent`` describes each worker that logged no such line (killed, or it crashed): its exit
    status and the end of its log.
    """

    workers: int = 0
    claimed: int = 0
    ended: int = 0
    drained: int = 0
    failed: int = 0
    silent: list[str] = field(default_factory=list)


def _command(db: str, options: tuple[str, ...], number: int) -> list[str]:
    if not PEV.exists():
        raise FleetError(f"no `pev` script beside {sys.executable}: pip install -e . there")
    command = [str(PEV), "--db", db, "worker", *options]
    if PROFILE_DIR:
        out = Path(PROFILE_DIR) / f"worker-{os.getpid()}-{number}-{secrets.token_hex(3)}.prof"
        command = [sys.executable, "-m", "cProfile", "-o", str(out), *command]
    return command


def _start(
    db: str, folder: Path, options: tuple[str, ...], env: Mapping[str, str], number: int
) -> Worker:
    log = folder / f"worker-{secrets.token_hex(4)}.log"
    path = os.pathsep.join([str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])
    environment = {**os.environ, **env, "PYTHONPATH": path}
    with log.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603 - pev's own script, with our own arguments
            _command(db, options, number),
            cwd=folder,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Worker(process, log)


def _stop(workers: list[Worker]) -> Counts:
    """SIGTERM every live worker, wait for each (SIGKILL past the timeout); sum their counts."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    counts = Counts()
    for worker in workers:
        try:
            worker.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(timeout=STOP_TIMEOUT_S)
        found = _STOPPED.search(worker.text())
        if found is None:
            last = (worker.text().splitlines() or ["(nothing)"])[-1]
            counts.silent.append(
                f"pid {worker.process.pid} exited {worker.process.returncode}, last logging "
                f"{last!r}"
            )
        else:
            counts.workers += 1
            claimed, ended, drained, failed = (int(n) for n in found.groups())
            counts.claimed += claimed
            counts.ended += ended
            counts.drained += drained
            counts.failed += failed
    return counts


@dataclass(slots=True)
class Fleet:
    """Worker processes on one ledger; :attr:`counts` is filled in once they have stopped."""

    workers: list[Worker]
    counts: Counts | None = None

    def check_alive(self) -> None:
        """Raise if any worker that was not killed on purpose has exited."""
        for worker in self.workers:
            if worker.process.returncode != -signal.SIGKILL:
                worker.check_alive()


@contextmanager
def fleet(
    db: str,
    folder: Path,
    count: int,
    *options: str,
    env: Mapping[str, str] | None = None,
    idle_s: float = 0.0,
) -> Iterator[Fleet]:
    """``count`` `pev worker` processes on ``db``, each up and idle for ``idle_s``; stopped after.

    ``options`` go to `pev worker` (none: its defaults). The fleet's counts are summed from the
    workers' own `stopped` lines once it has stopped.
    """
    started = Fleet([])
    try:
        for number in range(count):
            started.workers.append(_start(db, folder, options, env or {}, number))
        for worker in started.workers:
            wait_for(lambda w=worker: _up(w), START_TIMEOUT_S, f"worker {worker.process.pid}")
        time.sleep(idle_s)
        yield started
    finally:
        started.counts = _stop(started.workers)


def _up(worker: Worker) -> bool:
    worker.check_alive()
    return _STARTED.search(worker.text()) is not None


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 10 ms until it holds; raise once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise FleetError(f"{what}: still waiting after {timeout_s:.0f} s")
        time.sleep(0.01)


async def until(
    condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str, *, every_s: float = 0.01
) -> None:
    """:func:`wait_for` for an async condition, inside an event loop."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise FleetError(f"{what}: still waiting after {timeout_s:.0f} s")
        await asyncio.sleep(every_s)
