"""A fleet of `pev worker` processes under fire, and the shop their tasks run.

- :data:`SHOP`: the source of the agent module the fleet's tasks name. Its two actions deliver
  to "the other end", an append-only file that only the tools and their ``reconcile`` write.
- :func:`deliveries`: what the other end received, read from that file (never from pev's ledger).
- :class:`Fleet`: the worker processes; it starts them, SIGKILLs one at random, stops them all
  with SIGTERM, and kills whatever is left when the test ends.
- :func:`wait_until_ended`, :func:`tally` and :class:`Figures`: the end of a run, its checks
  and its figures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pev
from pev.ledger import TERMINAL_PHASES, Ledger, NodeFinished, TaskPhase, TaskState
from pev.model import DeviceFailure, Effect, ExecutionRecord, RecordStatus, Success

PEV = Path(sys.executable).with_name("pev")
UNFINISHED = tuple(phase for phase in TaskPhase if phase not in TERMINAL_PHASES)

# The tools deliver to the other end under an exclusive lock on its file, so that delivering a
# key and revoking it are atomic with respect to each other: a reconcile that revokes a key it
# has not seen makes "it did not happen" true for good, whatever the call still in flight does
# (docs/tools.md, "When 'it did not happen' can be trusted"). Each line is one os.write on an
# O_APPEND descriptor: a SIGKILL leaves a whole line or none.
SHOP = '''
"""A shop for the fleet test: each task reserves an item, then charges for it (two actions)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pev
from pev.engine import current_node_context
from pev.model import DeviceFailure, Plan, PlanNode, Verdict, VerificationContract

OTHER_END = Path(os.environ["PEV_FLEET_OTHER_END"])
TIMEOUT_S = 1.0  # far above a call's own time (under 0.1 s), so a timeout is a rare event


@contextmanager
def other_end() -> Iterator[tuple[set[str], Callable[[str], None]]]:
    """The lines the other end holds, and a function appending one, under its lock."""
    fd = os.open(OTHER_END, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        seen = set(OTHER_END.read_text(encoding="utf-8").splitlines())
        yield seen, lambda line: os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)  # and with it the lock


async def deliver(what: str, item: str) -> str:
    """Prepare, deliver once by idempotency key, wait for the answer: a few ms to 100 ms."""
    key = current_node_context().idempotency_key
    pace = random.Random(key)
    await asyncio.sleep(pace.uniform(0.002, 0.05))
    with other_end() as (seen, append):
        if f"revoked {key}" in seen:
            append(f"refused {key}")
            raise RuntimeError(f"the other end refused {key}: a reconcile revoked it")
        append(f"sent {key}")
    await asyncio.sleep(pace.uniform(0.002, 0.05))
    return f"{what} {item}"


async def reserve(item: str) -> str:
    """Reserve the item."""
    return await deliver("reserved", item)


async def charge(item: str) -> str:
    """Charge for the item."""
    return await deliver("charged", item)


def delivered(record: pev.model.ExecutionRecord) -> object:
    """What the other end did with the record's key; ``None`` while the call could still land.

    "Not done" is answered only after the record's deadline, and only once the key is revoked,
    so that no late call can deliver it afterwards.
    """
    key = record.idempotency_key
    with other_end() as (seen, append):
        if f"sent {key}" in seen:
            return f"{record.tool} (reconciled)"
        if datetime.now(UTC) < record.created_at + timedelta(seconds=TIMEOUT_S):
            return None
        if f"revoked {key}" not in seen:
            append(f"revoked {key}")
    return DeviceFailure(record.node_id, f"{key} never reached the other end; it is revoked")


reserve_tool = pev.tool(reserve, effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
charge_tool = pev.tool(charge, effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)

CONTRACT = VerificationContract(
    goal="sell the item", success_criteria=("the item is reserved and charged",)
)


def planner(request: pev.engine.PlanRequest) -> Plan:
    """Reserve, then charge."""
    item = str(request.input)
    return Plan(
        "sell",
        (
            PlanNode("reserve", "reserve it", tool="reserve", args={"item": item}),
            PlanNode("charge", "charge it", tool="charge", args={"item": item}, after=("reserve",)),
        ),
    )


def verify(request: pev.engine.VerifyRequest) -> Verdict:
    """Pass when both actions succeeded; otherwise blame the ones that did not."""
    missing = [node for node in ("reserve", "charge") if request.output(node) is None]
    if not missing:
        return Verdict.passed(request.contract)
    return Verdict.failed(request.contract, failed_nodes=missing, feedback="not sold")


shop = pev.Agent(planner, verifier=verify, tools=[reserve_tool, charge_tool], contract=CONTRACT)
'''


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliveries:
    """What the other end received, by idempotency key.

    Attributes:
        sent: How many times each key was delivered.
        refused: How many calls of each key came after a reconcile had revoked it.
        revoked: The keys a reconcile revoked (it found them not delivered, past their deadline).
    """

    sent: Counter[str]
    refused: Counter[str]
    revoked: frozenset[str]

    @property
    def calls(self) -> Counter[str]:
        """How many times the tools were called with each key (delivered or refused)."""
        return self.sent + self.refused


def deliveries(path: Path) -> Deliveries:
    """The other end's file, read back (an empty one if nothing was delivered)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    words = [line.split(" ", 1) for line in lines]
    return Deliveries(
        sent=Counter(key for what, key in words if what == "sent"),
        refused=Counter(key for what, key in words if what == "refused"),
        revoked=frozenset(key for what, key in words if what == "revoked"),
    )


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes]
    log: Path
    killed: bool = False
    stopped: bool = False

    def up(self) -> bool:
        """Whether it said it started: its signal handlers are in place, it claims tasks."""
        return " started (concurrency" in self.log.read_text(encoding="utf-8", errors="replace")


class Fleet:
    """`pev worker` processes on one store; whatever is left is killed by :meth:`close`.

    Args:
        db: What ``--db`` names: an SQLite path or a ``postgresql://`` URL.
        folder: The working folder of the workers (where the agent module is), and their logs.
        env: The workers' environment.
        options: More ``pev worker`` options (lease, poll, concurrency).
    """

    def __init__(
        self, db: str, folder: Path, env: Mapping[str, str], options: Sequence[str]
    ) -> None:
        self._command = [str(PEV), "--db", db, "worker", *options]
        self._folder = folder
        self._env = dict(env)
        self._workers: list[_Worker] = []

    @property
    def started(self) -> int:
        """How many workers were started."""
        return len(self._workers)

    @property
    def kills(self) -> int:
        """How many workers were killed with SIGKILL."""
        return sum(worker.killed for worker in self._workers)

    @property
    def killed(self) -> frozenset[int]:
        """The process ids of the workers killed with SIGKILL."""
        return frozenset(w.process.pid for w in self._workers if w.killed)

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers if not w.killed and w.process.poll() is None]

    def start(self) -> None:
        """Start one more worker, its stderr to a log file of its own."""
        log = self._folder / f"worker-{len(self._workers) + 1}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                self._command,
                cwd=self._folder,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        self._workers.append(_Worker(process, log))

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a worker picked by ``rng``, and wait for it to be gone.

        The victim is one that is up, if any is: a worker still importing pev has nothing to
        lose yet.
        """
        live = self._live()
        victim = rng.choice([worker for worker in live if worker.up()] or live)
        victim.killed = True
        victim.process.kill()
        victim.process.wait(timeout=30)

    def check(self) -> None:
        """Fail if a worker ended that nobody killed or stopped (it crashed)."""
        for worker in self._workers:
            if not (worker.killed or worker.stopped) and worker.process.poll() is not None:
                raise AssertionError(
                    f"a worker exited by itself (code {worker.process.returncode}):\n"
                    f"{tail(worker.log)}"
                )

    async def stop(self, *, timeout_s: float) -> None:
        """SIGTERM every live worker; each must drain and exit 0 within ``timeout_s``.

        A worker is signalled once it has said it started: before that, Python has not yet
        installed the worker's handler, and SIGTERM would end it as the default action does.
        """
        ends = time.monotonic() + timeout_s
        live = self._live()
        for worker in live:
            while not worker.up():
                self.check()
                assert time.monotonic() < ends, f"a worker never started:\n{tail(worker.log)}"
                await asyncio.sleep(0.05)
            worker.stopped = True
            worker.process.send_signal(signal.SIGTERM)
        for worker in live:
            while (code := worker.process.poll()) is None:
                assert time.monotonic() < ends, (
                    f"a worker did not stop within {timeout_s:g} s of SIGTERM:\n{tail(worker.log)}"
                )
                await asyncio.sleep(0.05)
            assert code == 0, f"a worker stopped with code {code}:\n{tail(worker.log)}"

    def close(self) -> None:
        """Kill and reap every worker still running (no orphans, whatever happened)."""
        for worker in self._workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait(timeout=30)

    def logged_errors(self) -> Counter[str]:
        """The exception ending each traceback the workers logged (its class name), counted.

        Of a chain ("During handling of the above exception ..."), only the last one counts.
        """
        errors: Counter[str] = Counter()
        for worker in self._workers:
            ending: str | None = None  # the exception of the last traceback, once it is over
            inside = False
            for line in worker.log.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Traceback (most recent call last):"):
                    inside = True
                elif line.startswith(("During handling of the above", "The above exception")):
                    ending = None
                elif inside and line and not line[0].isspace():
                    inside, ending = False, line.split(":", 1)[0].rsplit(".", 1)[-1]
                elif line and not line[0].isspace() and not inside and ending is not None:
                    # The next line that is not the message's own (a message may run over
                    # indented lines, libpq's do): the traceback is over, its ending counted.
                    errors[ending] += 1
                    ending = None
            if ending is not None:
                errors[ending] += 1
        return errors


def tail(log: Path, lines: int = 30) -> str:
    """The last lines of a worker's log."""
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


async def wait_until_ended(
    store: pev.Store,
    task_ids: Sequence[str],
    fleet: Fleet,
    *,
    timeout_s: float,
    count: int | None = None,
) -> None:
    """Poll the index until ``count`` of the store's tasks (default: all) have ended.

    Fails after ``timeout_s``, naming the tasks still open, or at once if a worker crashes.
    """
    ends = time.monotonic() + timeout_s
    wanted = len(task_ids) if count is None else count
    while True:
        fleet.check()
        open_ = await store.list_tasks(phases=UNFINISHED, limit=len(task_ids))
        if len(task_ids) - len(open_) >= wanted:
            return
        if time.monotonic() > ends:
            stuck = [await _stuck(store, summary.task_id) for summary in open_[:20]]
            raise AssertionError(
                f"{len(open_)} of {len(task_ids)} tasks open after {timeout_s:g} s (waiting for "
                f"{wanted} to end):\n" + "\n".join(stuck)
            )
        await asyncio.sleep(0.05)


async def _stuck(store: pev.Store, task_id: str) -> str:
    """One line about a task that did not end: phase, records, lease, last event."""
    state = await Ledger(store).state(task_id)
    lease = await store.lease(task_id)
    entries = await store.read(task_id)
    records = ", ".join(f"{r.node_id}={r.status}" for r in state.records.values())
    held = (
        f"{lease.owner} epoch {lease.epoch} until {lease.expires_at:%H:%M:%S.%f}"
        if lease
        else "none"
    )
    return (
        f"  {task_id}: {state.phase}; records [{records}]; lease {held}; "
        f"last event {entries[-1].event.kind} at {entries[-1].at:%H:%M:%S.%f}"
    )


@dataclass(slots=True)
class Tally:
    """What the ledgers hold, counted, and every way they disagree with the other end.

    An action is *in doubt* when its driver never saw how it ended: it was killed mid-call (the
    next driver settles the record on takeover) or the call timed out (``unknown``). Each in
    doubt is reconciled done, reconciled not done, or left unknown. A takeover follows a kill
    when the driver before it was a killed worker; otherwise that driver was alive and lost its
    lease (it renewed too late on a busy machine).
    """

    outcomes: Counter[str] = field(default_factory=Counter)
    actions: int = 0
    in_doubt: int = 0
    done: int = 0
    not_done: int = 0
    left_unknown: int = 0
    settled_on_takeover: int = 0
    takeovers: int = 0
    after_kill: int = 0
    kills_mid_drive: int = 0
    events: int = 0
    lost_events: int = 0
    problems: list[str] = field(default_factory=list)


async def tally(
    store: pev.Store, task_ids: Sequence[str], delivered: Deliveries, *, killed: frozenset[int]
) -> Tally:
    """Count what the ledgers of ``task_ids`` hold, and check them.

    ``killed`` holds the process ids of the workers killed with SIGKILL.

    Each ledger must verify (chain, index head and fold), hold every event its index counts,
    and agree with the other end: a successful action was delivered, one reconciled as not done
    was revoked and never delivered, and every delivered key has a record.
    """
    ledger = Ledger(store)
    found = Tally()
    keys: set[str] = set()
    orphaning: set[int] = set()  # killed workers that left a task for another driver
    for task_id in task_ids:
        report = await ledger.verify(task_id)
        if not report.ok:
            found.problems.append(f"{task_id}: its ledger does not verify: {report.problem}")
        entries = await ledger.entries(task_id)
        summary = await store.summary(task_id)
        found.events += len(entries)
        found.lost_events += max(0, (summary.event_count if summary else 0) - len(entries))
        state = await ledger.state(task_id)
        ended = state.finished
        found.outcomes[f"{ended.status}/{ended.reason}" if ended else "not ended"] += 1
        for before, _ in itertools.pairwise(state.drivers):
            found.takeovers += 1
            if before.process in killed:
                found.after_kill += 1
                orphaning.add(before.process)
        on_takeover = {
            e.event.record_id
            for e in entries
            if isinstance(e.event, NodeFinished) and e.event.settled_on_resume
        }
        for record in state.records.values():
            if record.effect is Effect.ACTION:
                keys.add(record.idempotency_key)
                _count_action(state, record, record.id in on_takeover, delivered, found)
    found.kills_mid_drive = len(orphaning)
    strays = sorted(set(delivered.sent) - keys)
    if strays:
        found.problems.append(f"keys delivered that no ledger has a record of: {strays[:5]}")
    return found


def _count_action(
    state: TaskState,
    record: ExecutionRecord,
    on_takeover: bool,
    delivered: Deliveries,
    found: Tally,
) -> None:
    """Count one action record, and check what the ledger says of it against the other end."""
    found.actions += 1
    found.settled_on_takeover += on_takeover
    key = record.idempotency_key
    reconciled = state.reconciled.get(record.id)
    result = reconciled.result if reconciled else state.results.get(record.id)
    if isinstance(result, Success) and not delivered.sent[key]:
        found.problems.append(f"{key}: the ledger says it succeeded; it was never delivered")
    if not (on_takeover or record.status is RecordStatus.UNKNOWN):
        return
    found.in_doubt += 1
    if isinstance(result, Success):
        found.done += 1
    elif result is None or (isinstance(result, DeviceFailure) and result.outcome_unknown):
        found.left_unknown += 1
    else:
        found.not_done += 1
        if delivered.sent[key] or key not in delivered.revoked:
            found.problems.append(f"{key}: reconciled as not done, yet delivered or not revoked")


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What one fleet run did, for the report.

    Attributes:
        store: Which store the fleet shared.
        seed: The seed of the kills (each call paces itself by its own key).
        wall_s: From the first worker's start to the last one's exit.
        workers: Workers started.
        kills: Workers killed with SIGKILL.
        kills_mid_drive: Kills of a worker that was driving a task (another driver took it over).
        tasks: Tasks submitted.
        outcomes: ``status/reason`` of each task, counted.
        actions: Action records in the ledgers (one per dispatch of an action).
        sent: Keys the other end received.
        resent: Keys it received more than once (must be 0).
        called_twice: Keys the tools were called with more than once, delivered or not (0).
        refused: Calls that came after a reconcile had revoked their key (the other end refused).
        in_doubt: Actions whose driver never saw them end (see :class:`Tally`).
        reconciled_done: Of those, settled by ``reconcile`` as delivered.
        reconciled_not_done: Of those, settled by ``reconcile`` as never delivered.
        left_unknown: Of those, left ``unknown``.
        settled_on_takeover: Action records a killed driver left unfinished.
        takeovers: ``driver_started`` events after the first of each task.
        takeovers_after_kill: Of those, the ones whose previous driver had been killed.
        events: Events in all the ledgers.
        lost_events: Events an index counts that could not be read back (must be 0).
        logged_errors: Tracebacks the workers logged, by exception (a lost lease, say).
    """

    store: str
    seed: int
    wall_s: float
    workers: int
    kills: int
    kills_mid_drive: int
    tasks: int
    outcomes: dict[str, int]
    actions: int
    sent: int
    resent: int
    called_twice: int
    refused: int
    in_doubt: int
    reconciled_done: int
    reconciled_not_done: int
    left_unknown: int
    settled_on_takeover: int
    takeovers: int
    takeovers_after_kill: int
    events: int
    lost_events: int
    logged_errors: dict[str, int]

    @classmethod
    def of(
        cls,
        store: str,
        *,
        seed: int,
        wall_s: float,
        fleet: Fleet,
        delivered: Deliveries,
        found: Tally,
    ) -> Figures:
        """The figures of a run, from its fleet, its other end and its ledgers."""
        return cls(
            store=store,
            seed=seed,
            wall_s=round(wall_s, 1),
            workers=fleet.started,
            kills=fleet.kills,
            kills_mid_drive=found.kills_mid_drive,
            tasks=sum(found.outcomes.values()),
            outcomes=dict(sorted(found.outcomes.items())),
            actions=found.actions,
            sent=len(delivered.sent),
            resent=sum(n > 1 for n in delivered.sent.values()),
            called_twice=sum(n > 1 for n in delivered.calls.values()),
            refused=sum(delivered.refused.values()),
            in_doubt=found.in_doubt,
            reconciled_done=found.done,
            reconciled_not_done=found.not_done,
            left_unknown=found.left_unknown,
            settled_on_takeover=found.settled_on_takeover,
            takeovers=found.takeovers,
            takeovers_after_kill=found.after_kill,
            events=found.events,
            lost_events=found.lost_events,
            logged_errors=dict(sorted(fleet.logged_errors().items())),
        )

    def line(self) -> str:
        """The figures on one line."""
        outcomes = ", ".join(f"{n} {what}" for what, n in self.outcomes.items())
        errors = ", ".join(f"{n} {what}" for what, n in self.logged_errors.items())
        return (
            f"fleet on {self.store} (seed {self.seed}): {self.wall_s:.1f} s, {self.workers} "
            f"workers started, {self.kills} killed ({self.kills_mid_drive} mid-drive), "
            f"{self.takeovers} takeovers ({self.takeovers_after_kill} after a kill); {self.tasks} "
            f"tasks ({outcomes}); {self.actions} actions, {self.sent} sent, {self.resent} re-sent, "
            f"{self.called_twice} called twice, {self.refused} refused late; {self.in_doubt} in "
            f"doubt ({self.settled_on_takeover} settled on takeover): {self.reconciled_done} "
            f"reconciled done, {self.reconciled_not_done} not done, {self.left_unknown} left "
            f"unknown; {self.events} events, {self.lost_events} lost; worker errors: "
            f"{errors or 'none'}"
        )

    def save(self, path: Path) -> None:
        """Add these figures to the JSON report at ``path``, keyed by store."""
        report = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        report[self.store] = asdict(self)
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
