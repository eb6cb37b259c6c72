"""A fleet of `pev worker` processes on a private PostgreSQL server, under store faults.

The fleet, its shop and its checks are :mod:`tests.support.fleet`'s: each task reserves an item
and charges for it, two actions delivered to "the other end", an append-only file that only the
tools write. :func:`run_under` submits the tasks, starts the workers, and while they work strikes
the server with one kind of fault (:data:`FAULTS`):

- ``restart-fast`` / ``restart-immediate``: ``pg_ctl restart`` with that shutdown mode;
- ``crash``: SIGKILL to the postmaster and its processes, then a start (crash recovery);
- ``terminate``: ``pg_terminate_backend`` of one of the workers' backends every ~100 ms,
  preferring one inside a transaction (mid-append, mid-claim);
- ``freeze``: SIGSTOP a worker while one of its connections is inside a transaction (else
  whenever the hunt for one gives up), SIGCONT it a while later.

It then waits (within a bound) for every task to end, stops the fleet, and returns a
:class:`FaultReport`: tasks not ended, keys sent twice (from the other end's file), events lost,
actions delivered but recorded ``unknown``, and how long takeovers and recoveries took.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import random
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from tests.support.fleet import (
    PEV,
    SHOP,
    UNFINISHED,
    Deliveries,
    Fleet,
    deliveries,
    tail,
    tally,
)
from tests.support.private_postgres import Backend, PrivateServer

import pev
from pev.kernel import TaskStatus
from pev.ledger import DriverStarted, Ledger
from pev.model import DeviceFailure, Effect, RecordStatus, Success

FAULTS = ("restart-fast", "restart-immediate", "crash", "terminate", "freeze")
# The faults under which every task must still succeed, as without a fault: nothing a tool did
# was cut short. Under "freeze" a worker stopped mid-call may truly cut its call short; the
# takeover's reconcile finds it never delivered and the task ends partial, honestly.
MUST_SUCCEED = frozenset({"restart-fast", "restart-immediate", "crash", "terminate"})
APPLICATION = "pev-fault-worker-"  # each worker's application_name: this and its number
FAULT_AT = (0.1, 0.7)  # the share of the tasks ended when a fault comes, drawn for each fault
FAULT_GAP_S = (0.0, 0.3)  # then a random moment more
TERMINATE_EVERY_S = 0.1
TERMINATE_FOR_S = 3.0  # one `terminate` fault: this long of terminations every ~100 ms
# How long a fault looks for a worker's backend inside a transaction before it takes any.
FREEZE_HUNT_S = 3.0
TERMINATE_HUNT_S = 0.05
TAKEOVER_SLACK_S = 2.0  # target: a frozen worker's tasks are taken over within lease_s + this
STOP_WITHIN_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The size of one run.

    Attributes:
        tasks: Tasks submitted.
        workers: `pev worker` processes.
        faults: Faults struck during the run.
        lease_s: The workers' ``--lease-s``.
        freeze_s: How long a frozen worker stays stopped (``freeze``).
        within_s: The bound on the whole run: past it, the tasks still open are reported.
        seed: Of the faults' moments and victims.
    """

    tasks: int = 24
    workers: int = 3
    faults: int = 2
    lease_s: float = 2.0
    freeze_s: float = 5.0
    within_s: float = 60.0
    seed: int = 11

    def options(self) -> tuple[str, ...]:
        """The workers' options."""
        return ("--lease-s", f"{self.lease_s:g}", "--poll-s", "0.1", "--concurrency", "4")


@dataclass(slots=True)
class FaultReport:
    """What one run under one kind of fault did, and every way it fell short.

    Attributes:
        fault: The kind of fault.
        tasks: Tasks submitted.
        faults: Faults struck (for ``terminate``: backends terminated).
        mid_transaction: Of those, the ones that hit a worker inside a transaction (for
            ``terminate`` and ``freeze``; server faults hit whatever was in flight).
        succeeded: Tasks that ended ``succeeded`` (all of them do without a fault).
        outcomes: ``status/reason`` of each task, counted.
        unsucceeded: Each task that ended otherwise than ``succeeded``, and its failed nodes.
        not_ended: Tasks not ended when the run's bound ran out.
        sent_twice: Keys the other end received more than once, or the tools were called with
            more than once.
        lost_events: Events an index counts that cannot be read back, plus acknowledged writes
            missing from a ledger (a charge sent while its reservation is not recorded done).
        unverified: Ledgers that do not verify, and ``pev ledger verify``'s verdict.
        delivered_unknown: Actions the other end received that the ledger records ``unknown``.
        takeover_s: The slowest takeover of a frozen worker's task, from the SIGSTOP to another
            worker's ``driver_started`` (``None``: no such task, or not ``freeze``).
        frozen_held: Tasks a frozen worker held the live lease of when it was stopped.
        not_taken_over: Of those, the ones nobody else took over.
        back_s: The slowest recovery of a server fault: from the fault to the next event any
            ledger holds (``None`` where the fault is not a server one).
        worker_exits: Workers that exited by themselves (each was replaced, to go on).
        logged_errors: Tracebacks the workers logged, by exception.
        problems: Each check that failed, in words.
        ended_s: From the first worker's start until every task had ended (or the bound).
        wall_s: The whole run, from the first worker's start to the fleet's stop.
    """

    fault: str
    tasks: int
    faults: int = 0
    mid_transaction: int = 0
    succeeded: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    unsucceeded: list[str] = field(default_factory=list)
    not_ended: int = 0
    sent_twice: int = 0
    lost_events: int = 0
    unverified: int = 0
    delivered_unknown: int = 0
    takeover_s: float | None = None
    frozen_held: int = 0
    not_taken_over: int = 0
    back_s: float | None = None
    worker_exits: int = 0
    logged_errors: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    ended_s: float = 0.0
    wall_s: float = 0.0

    def line(self) -> str:
        """The figures on one line."""
        errors = ", ".join(f"{n} {what}" for what, n in self.logged_errors.items()) or "none"
        outcomes = ", ".join(f"{n} {what}" for what, n in self.outcomes.items())
        return (
            f"{self.fault}: {self.faults} faults ({self.mid_transaction} mid-transaction), "
            f"{self.tasks} tasks ({outcomes}), {self.not_ended} not ended; "
            f"{self.sent_twice} sent twice, {self.lost_events} events lost, {self.unverified} "
            f"unverified, {self.delivered_unknown} delivered but unknown; takeover "
            f"{_seconds(self.takeover_s)} ({self.frozen_held} tasks frozen, {self.not_taken_over} "
            f"not taken over), back to "
            f"work {_seconds(self.back_s)}; {self.worker_exits} worker exits; worker errors: "
            f"{errors}; all ended after {self.ended_s:.1f} s, stopped after {self.wall_s:.1f} s"
        )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


@contextlib.contextmanager
def shop_in(folder: Path) -> Iterator[ModuleType]:
    """The fleet's shop as a module of its own in ``folder``, importable here and by workers.

    Its other end is ``folder/other-end.log``; the module and the environment variable naming
    that file are forgotten afterwards.
    """
    name = f"pev_fault_shop_{secrets.token_hex(4)}"
    (folder / f"{name}.py").write_text(textwrap.dedent(SHOP), encoding="utf-8")
    before = os.environ.get("PEV_FLEET_OTHER_END")
    os.environ["PEV_FLEET_OTHER_END"] = str(folder / "other-end.log")
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
        if before is None:
            os.environ.pop("PEV_FLEET_OTHER_END", None)
        else:
            os.environ["PEV_FLEET_OTHER_END"] = before


class NamedFleet(Fleet):
    """A :class:`Fleet` whose workers connect under ``application_name`` ``APPLICATION<n>``.

    The name is how the server's ``pg_stat_activity`` tells the workers' backends apart.
    """

    def __init__(
        self, db: str, folder: Path, env: Mapping[str, str], options: Sequence[str]
    ) -> None:
        super().__init__(db, folder, env, options)
        self._base_env = dict(env)
        self.replaced = 0
        self.exits: list[str] = []

    def start(self) -> None:
        """Start one more worker under the next application name."""
        self._env = {**self._base_env, "PGAPPNAME": f"{APPLICATION}{self.started + 1}"}
        super().start()

    def process(self, number: int) -> subprocess.Popen[bytes]:
        """Worker ``number``'s process (numbered from 1, in start order)."""
        return self._workers[number - 1].process

    def replace_exited(self) -> None:
        """Start a new worker for each that exited by itself, noting how it ended."""
        for worker in self._workers:
            if worker.killed or worker.stopped or worker.process.poll() is None:
                continue
            worker.killed = True  # counted once; not a crash to fail on later
            self.exits.append(f"code {worker.process.returncode}:\n{tail(worker.log, 15)}")
            self.start()


async def run_under(
    fault: str, server: PrivateServer, folder: Path, shop: ModuleType, settings: Settings
) -> FaultReport:
    """Run ``settings.tasks`` shop tasks on a fleet while ``fault`` strikes; the report.

    The ledgers live in a fresh schema of ``server``, dropped afterwards.
    """
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}: pick one of {', '.join(FAULTS)}")
    from pev.stores import PostgresStore  # the postgres extra, only when asked for

    schema = f"pev_fault_{secrets.token_hex(6)}"
    db = server.url(schema=schema)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    report = FaultReport(fault=fault, tasks=settings.tasks)
    store = PostgresStore(server.url(), schema=schema, max_size=4)
    try:
        ids = [
            await pev.submit(f"item {n}", agent=shop.shop, store=store)
            for n in range(settings.tasks)
        ]
        fleet = NamedFleet(db, folder, env, settings.options())
        strike = _Striker(fault, server, store, fleet, settings)
        begun = time.monotonic()
        try:
            for _ in range(settings.workers):
                fleet.start()
            ends = begun + settings.within_s
            chaos = random.Random(f"{settings.seed}:{fault}")  # noqa: S311 - not a secret
            marks = sorted(
                round(chaos.uniform(*FAULT_AT) * settings.tasks) for _ in range(settings.faults)
            )
            for mark in marks:
                if not await _wait_ended(store, ids, fleet, count=mark, until=ends):
                    break
                await asyncio.sleep(chaos.uniform(*FAULT_GAP_S))
                await strike.once(chaos)
            await _wait_ended(store, ids, fleet, count=len(ids), until=ends)
            report.ended_s = time.monotonic() - begun
            try:
                await fleet.stop(timeout_s=STOP_WITHIN_S)
            except AssertionError as exc:
                report.problems.append(f"the fleet did not stop cleanly: {exc}")
        finally:
            fleet.close()
        report.wall_s = time.monotonic() - begun
        await _judge(
            report,
            store=store,
            ids=ids,
            delivered=deliveries(shop.OTHER_END),
            fleet=fleet,
            strike=strike,
            db=db,
            folder=folder,
        )
    finally:
        await store.close()
        server.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return report


async def _wait_ended(
    store: pev.Store, task_ids: Sequence[str], fleet: NamedFleet, *, count: int, until: float
) -> bool:
    """Wait until ``count`` tasks have ended; ``False`` if the bound ran out first.

    The store may be down (a fault): a failed look is tried again. A worker that exited by
    itself is replaced, and noted.
    """
    while True:
        fleet.replace_exited()
        with contextlib.suppress(Exception):  # the server is restarting: look again
            open_ = await store.list_tasks(phases=UNFINISHED, limit=len(task_ids))
            if len(task_ids) - len(open_) >= count:
                return True
        if time.monotonic() > until:
            return False
        await asyncio.sleep(0.05)


class _Striker:
    """Strikes one kind of fault, and remembers what each strike hit."""

    def __init__(
        self,
        fault: str,
        server: PrivateServer,
        store: pev.Store,
        fleet: NamedFleet,
        settings: Settings,
    ) -> None:
        self.fault = fault
        self.store = store
        self.server = server
        self.fleet = fleet
        self.settings = settings
        self.strikes = 0
        self.mid_transaction = 0
        self.outages: list[tuple[datetime, datetime]] = []  # server faults: from, to
        # freeze: when each worker was stopped, and the tasks its leases held then
        self.freezes: list[tuple[datetime, str, frozenset[str]]] = []

    async def once(self, chaos: random.Random) -> None:
        """One fault of this kind."""
        if self.fault == "terminate":
            await self._terminate(chaos)
        elif self.fault == "freeze":
            await self._freeze(chaos)
        else:
            began = datetime.now(UTC)
            if self.fault == "crash":
                await asyncio.to_thread(self.server.crash)
            else:
                await asyncio.to_thread(self.server.restart, self.fault.removeprefix("restart-"))
            self.outages.append((began, datetime.now(UTC)))
            self.strikes += 1

    async def _busy(self, prefix: str, hunt_s: float) -> list[Backend]:
        """The backends under ``prefix`` inside a transaction, looked for up to ``hunt_s``."""
        ends = time.monotonic() + hunt_s
        while True:
            busy = [b for b in self.server.backends(prefix) if b.in_transaction]
            if busy or time.monotonic() > ends:
                return busy
            await asyncio.sleep(0)

    async def _terminate(self, chaos: random.Random) -> None:
        ends = time.monotonic() + TERMINATE_FOR_S
        while time.monotonic() < ends:
            busy = await self._busy(APPLICATION, TERMINATE_HUNT_S)
            if victims := busy or self.server.backends(APPLICATION):
                victim = chaos.choice(victims)
                if self.server.terminate([victim.pid]):
                    self.strikes += 1
                    self.mid_transaction += bool(busy)
            await asyncio.sleep(TERMINATE_EVERY_S * chaos.uniform(0.5, 1.5))

    async def _freeze(self, chaos: random.Random) -> None:
        busy = await self._busy(APPLICATION, FREEZE_HUNT_S)
        live = [n for n in range(1, self.fleet.started + 1) if self.fleet.process(n).poll() is None]
        chosen = int(chaos.choice(busy).application.removeprefix(APPLICATION)) if busy else 0
        if chosen not in live:  # none caught mid-transaction: the one driving the most tasks
            holding = {n: len(await _held_by(self.store, self.fleet.process(n).pid)) for n in live}
            chosen = max(live, key=lambda n: (holding[n], chaos.random()))
        number = chosen
        process = self.fleet.process(number)
        process.send_signal(signal.SIGSTOP)
        stopped_at = datetime.now(UTC)
        self.strikes += 1
        # Caught inside a transaction if, stopped, one of its backends is still in one.
        self.mid_transaction += bool(await self._busy(f"{APPLICATION}{number}", 0.0))
        held = await _held_by(self.store, process.pid)
        self.freezes.append((stopped_at, f":{process.pid}:", held))
        try:
            await asyncio.sleep(self.settings.freeze_s)
        finally:
            process.send_signal(signal.SIGCONT)


async def _held_by(store: pev.Store, pid: int) -> frozenset[str]:
    """The tasks not ended whose live lease a worker of process ``pid`` holds."""
    held = set()
    now = datetime.now(UTC)
    for summary in await store.list_tasks(phases=UNFINISHED, limit=100_000):
        lease = await store.lease(summary.task_id)
        # pev's own owner ids are ``host:pid:space.nonce``
        if lease is not None and f":{pid}:" in lease.owner and lease.expires_at > now:
            held.add(summary.task_id)
    return frozenset(held)


async def _judge(
    report: FaultReport,
    *,
    store: pev.Store,
    ids: Sequence[str],
    delivered: Deliveries,
    fleet: NamedFleet,
    strike: _Striker,
    db: str,
    folder: Path,
) -> None:
    """Fill in the report's figures and problems from the ledgers and the other end."""
    report.faults, report.mid_transaction = strike.strikes, strike.mid_transaction
    report.frozen_held = sum(len(held) for _, _, held in strike.freezes)
    report.worker_exits = len(fleet.exits)
    report.problems += [f"a worker exited by itself ({exit_})" for exit_ in fleet.exits]
    report.logged_errors = dict(sorted(fleet.logged_errors().items()))
    found = await tally(store, ids, delivered, killed=fleet.killed)
    report.problems += found.problems
    report.unverified = sum("does not verify" in problem for problem in found.problems)
    report.lost_events = found.lost_events
    report.outcomes = dict(sorted(found.outcomes.items()))
    twice = {key for key, n in delivered.calls.items() if n > 1}
    report.sent_twice = len(twice)
    if twice:
        report.problems.append(f"keys sent or called more than once: {sorted(twice)[:5]}")
    ledger = Ledger(store)
    times: list[datetime] = []
    for task_id in ids:
        state = await ledger.state(task_id)
        entries = await ledger.entries(task_id)
        times += [entry.at for entry in entries]
        _judge_task(
            report,
            task_id,
            state=state,
            entries=entries,
            delivered=delivered,
            freezes=strike.freezes,
        )
    times.sort()
    for began, back in strike.outages:
        later = [at for at in times if at > back]
        if later:
            report.back_s = max(report.back_s or 0.0, (later[0] - began).total_seconds())
    verified = subprocess.run(
        [str(PEV), "--db", db, "ledger", "verify"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if verified.returncode != 0:
        report.unverified += 1
        report.problems.append(f"pev ledger verify: {(verified.stdout + verified.stderr)[-500:]}")


def _judge_task(
    report: FaultReport,
    task_id: str,
    *,
    state: pev.ledger.TaskState,
    entries: Sequence[pev.ledger.LedgerEntry],
    delivered: Deliveries,
    freezes: Sequence[tuple[datetime, str, frozenset[str]]],
) -> None:
    """Count one task's ending, its delivered unknowns, lost writes and takeovers of it."""
    if state.finished is None:
        report.not_ended += 1
    elif state.finished.status is TaskStatus.SUCCEEDED:
        report.succeeded += 1
    else:
        report.unsucceeded.append(_why(task_id, state))
    report.lost_events += _unrecorded_acknowledgement(state)
    for record in state.records.values():
        if record.effect is not Effect.ACTION or not delivered.sent[record.idempotency_key]:
            continue
        reconciled = state.reconciled.get(record.id)
        result = reconciled.result if reconciled else state.results.get(record.id)
        unknown = isinstance(result, DeviceFailure) and result.outcome_unknown
        if unknown or (record.status is RecordStatus.UNKNOWN and not reconciled):
            report.delivered_unknown += 1
    drivers = [(e.at, e.event.owner) for e in entries if isinstance(e.event, DriverStarted)]
    for stopped_at, owner_part, held in freezes:
        if task_id not in held:
            continue
        after = [at for at, owner in drivers if at > stopped_at and owner_part not in owner]
        if after:
            seconds = (min(after) - stopped_at).total_seconds()
            report.takeover_s = max(report.takeover_s or 0.0, seconds)
        else:
            report.not_taken_over += 1


def _why(task_id: str, state: pev.ledger.TaskState) -> str:
    """How a task ended, and the error of each of its failed records, on one line."""
    ended = state.finished
    failures = [
        f"{record.node_id} ({record.status}): {result.error}"
        for record in state.records.values()
        if isinstance(result := state.results.get(record.id), DeviceFailure)
    ]
    status = f"{ended.status}/{ended.reason}" if ended else "not ended"
    return f"{task_id} {status}: {'; '.join(failures) or 'no failed node'}"


def _unrecorded_acknowledgement(state: pev.ledger.TaskState) -> int:
    """1 if a charge was dispatched while the ledger holds no reservation done, else 0.

    A driver dispatches the charge only once the reservation's end was written and the write
    acknowledged: a ledger with the one and not the other lost an acknowledged event.
    """
    done: set[str] = set()
    for record in state.records.values():
        reconciled = state.reconciled.get(record.id)
        result = reconciled.result if reconciled else state.results.get(record.id)
        if isinstance(result, Success):
            done.add(record.tool or "")
    charged = any(record.tool == "charge" for record in state.records.values())
    return int(charged and "reserve" not in done)
