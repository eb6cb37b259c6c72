"""Workers under faults: drives that cannot start, dead local owners, early signals, races.

Real `pev` processes on an SQLite ledger, each bounded in time. What a tool did is read from the
file the tool itself appends to, never from pev's ledger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

import pev
from pev.engine._tenure import process_space
from pev.errors import LeaseHeld
from pev.ledger import Lease, Ledger, StartFailed, TaskFinished
from pev.model import VerificationContract, VerificationMode
from pev.policy import RecoveryPolicy
from pev.stores import SQLiteStore

PEV = Path(sys.executable).with_name("pev")
T = TypeVar("T")

AGENT = '''
"""An agent whose one action appends to a file, and waits while a hold file exists."""

import os
import time
from pathlib import Path

import pev
from pev.model import Plan, PlanNode

LOG = Path(os.environ["PEV_TEST_SIDE_LOG"])
HOLD = Path(os.environ["PEV_TEST_HOLD"])


@pev.tool(effect="action", timeout_s=5)
def note(text: str) -> str:
    """Write ``text`` down (the side effect)."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"{os.getpid()} {text}\\n")
    while HOLD.exists():
        time.sleep(0.01)
    return text


def planner(request):
    return Plan("note", (PlanNode("note", "note it", tool="note", args={"text": request.input}),))


agent = pev.Agent(planner, tools=[note])
'''


@dataclass(frozen=True)
class Setup:
    """An agent module in a folder of its own, a task file beside it, and a ledger elsewhere."""

    agents: Path
    elsewhere: Path
    module: str
    db: Path
    side_log: Path
    hold: Path

    def env(self) -> dict[str, str]:
        """The environment of a `pev` process: the agent's folder is not on its path."""
        env = dict(os.environ, PEV_TEST_SIDE_LOG=str(self.side_log), PEV_TEST_HOLD=str(self.hold))
        env.pop("PYTHONPATH", None)
        return env

    def task_file(self, text: str, *, lease_s: float = 30) -> Path:
        """A task file beside the agent module asking it to note ``text``."""
        path = self.agents / f"task-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(
            f'input = "{text}"\n[components]\nagent = "{self.module}:agent"\n'
            f"[policy]\nlease_s = {lease_s}\n",
            encoding="utf-8",
        )
        return path

    def pev(self, *args: str) -> subprocess.Popen[str]:
        """A `pev` process on the ledger, started in a folder without the agent."""
        return subprocess.Popen(
            [str(PEV), "--db", str(self.db), *args],
            cwd=self.elsewhere,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def notes(self) -> list[str]:
        """What the tool wrote, from its own file."""
        if not self.side_log.exists():
            return []
        return self.side_log.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """The agent in ``agents/`` (not on any path), the processes started in ``elsewhere/``."""
    agents, elsewhere = tmp_path / "agents", tmp_path / "elsewhere"
    agents.mkdir()
    elsewhere.mkdir()
    module = f"pev_faults_{uuid.uuid4().hex[:8]}"
    (agents / f"{module}.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    return Setup(
        agents, elsewhere, module, tmp_path / "ledger.db", tmp_path / "side.log", tmp_path / "hold"
    )


def _in_store(db: Path, work: Callable[[pev.Store], Awaitable[T]]) -> T:
    async def session() -> T:
        store = SQLiteStore(db)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(session())


def _wait_ended(db: Path, task_id: str, *, seconds: float) -> pev.TaskState:
    async def ended(store: pev.Store) -> pev.TaskState:
        deadline = time.monotonic() + seconds
        while not (state := await Ledger(store).state(task_id)).terminal:
            assert time.monotonic() < deadline, f"task {task_id} did not end in {seconds} s"
            await asyncio.sleep(0.05)
        return state

    return _in_store(db, ended)


def _submit(setup: Setup, text: str) -> str:
    done = setup.pev("submit", str(setup.task_file(text)))
    out, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    return out.strip()


def _until_noted(setup: Setup, process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not setup.notes():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the tool was never called"
        time.sleep(0.02)


def _stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM a worker; its stderr once it exited 0."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return err


def test_a_worker_records_drives_that_cannot_start_and_keeps_serving(setup: Setup) -> None:
    """A task whose agent does not import: three start_failed events naming the worker, each
    lease let go at once, then failed/agent_unavailable; the worker drives another task from a
    task file's folder it was not started in, and `pev show` tells the story."""
    good = _submit(setup, "hello")

    async def broken(store: pev.Store) -> str:
        state = await Ledger(store).create(
            "x",
            contract=VerificationContract(VerificationMode.OFF),
            policy=RecoveryPolicy(start_attempts=3),
            components={"planner": "pev_faults_no_such_module:planner"},
        )
        return state.task_id

    bad = _in_store(setup.db, broken)
    worker = setup.pev("worker", "--poll-s", "0.1", "--lease-s", "20")
    try:
        failed = _wait_ended(setup.db, bad, seconds=90)
        done = _wait_ended(setup.db, good, seconds=90)
        assert worker.poll() is None, "the worker exited"
    finally:
        err = _stop(worker)
    ending = failed.finished
    assert ending is not None
    assert (ending.status, ending.reason) == ("failed", "agent_unavailable")
    assert "pev_faults_no_such_module" in ending.detail
    assert "pass planner=" not in ending.detail  # no hint meant for Python callers
    assert len(failed.start_failures) == 3
    assert failed.drivers == ()
    for event in failed.start_failures:
        assert event.owner.startswith(f"{socket.gethostname()}:{worker.pid}:")
        assert (event.host, event.process) == (socket.gethostname(), worker.pid)
        assert "pev_faults_no_such_module" in event.cause
        assert "\n" not in event.cause
    epochs = [e.epoch for e in failed.start_failures]
    assert epochs == sorted(set(epochs))  # one lease each, each taken anew
    entries = _in_store(setup.db, lambda store: Ledger(store).entries(bad))
    times = [entry.at for entry in entries if isinstance(entry.event, StartFailed)]
    # Each lease was let go at once: the three tries took less than one 20 s lease.
    assert times[-1] - times[0] < timedelta(seconds=20)
    assert isinstance(entries[-1].event, TaskFinished)
    assert done.finished is not None
    assert done.finished.status == "succeeded", (done.finished, done.start_failures, err)
    assert [line.split()[1] for line in setup.notes()] == ["hello"]
    assert "3 not started" in err
    shown = setup.pev("show", bad)
    out, _ = shown.communicate(timeout=60)
    assert "could not start" in out
    assert "agent_unavailable" in out
    shown = setup.pev("show", "--json", bad)
    document = json.loads(shown.communicate(timeout=60)[0])
    assert [f["epoch"] for f in document["start_failures"]] == epochs
    assert all(
        f["cause"] == e.cause
        for f, e in zip(document["start_failures"], failed.start_failures, strict=True)
    )


def test_a_killed_run_is_resumed_at_once_on_its_host(setup: Setup) -> None:
    """SIGKILL a `pev run` mid-action (its lease 60 s): `pev resume` in another folder takes the
    task over at once, and the action is never sent again."""
    setup.hold.touch()
    run = setup.pev("run", "-q", str(setup.task_file("once", lease_s=60)))
    _until_noted(setup, run)
    run.kill()
    run.communicate(timeout=30)  # reaped: the process is gone from this host
    killed_at = time.monotonic()
    setup.hold.unlink()
    (task_id,) = _in_store(setup.db, _task_ids)
    resume = setup.pev("resume", "-q", task_id)
    out, err = resume.communicate(timeout=60)
    took = time.monotonic() - killed_at
    state = _wait_ended(setup.db, task_id, seconds=5)
    assert took < 30, f"resume waited {took:.1f} s: the dead owner's lease was not freed"
    assert resume.returncode in (0, 1), err  # ended (failed: the action's outcome unknown)
    assert [d.epoch for d in state.drivers] == [1, 2]
    assert len(setup.notes()) == 1, out  # never sent twice


def test_a_worker_takes_over_a_killed_run_at_once(setup: Setup) -> None:
    """SIGKILL a `pev run` mid-action (its lease 60 s): a worker on the host frees the dead
    owner's lease at its next look (every lease_s/3 of its own) and ends the task."""
    setup.hold.touch()
    worker = setup.pev("worker", "--poll-s", "0.1", "--lease-s", "3")
    try:
        run = setup.pev("run", "-q", str(setup.task_file("once", lease_s=60)))
        _until_noted(setup, run)
        run.kill()
        run.communicate(timeout=30)  # reaped
        killed_at = time.monotonic()
        setup.hold.unlink()
        (task_id,) = _in_store(setup.db, _task_ids)
        state = _wait_ended(setup.db, task_id, seconds=40)
        took = time.monotonic() - killed_at
    finally:
        err = _stop(worker)
    assert took < 30, f"the worker waited {took:.1f} s for a dead owner's lease"
    assert [d.epoch for d in state.drivers] == [1, 2]
    assert state.drivers[1].process == worker.pid
    assert "1 leases of dead local owners freed" in err
    assert len(setup.notes()) == 1  # never sent twice


async def _task_ids(store: pev.Store) -> list[str]:
    return [summary.task_id for summary in await store.list_tasks()]


def _dead_pid() -> int:
    """The id of a process that ran here and is gone (reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


async def _held_by(store: pev.Store, owner: str, *, lease_s: float = 60) -> str:
    """A task (its agent a test double) whose lease ``owner`` holds for ``lease_s``."""
    ledger = Ledger(store)
    state = await ledger.create("x", contract=VerificationContract(VerificationMode.OFF))
    lease = await store.acquire_lease(
        state.task_id, owner, now=pev.ledger.utc_now(), lease_s=lease_s
    )
    assert lease.owner == owner
    return state.task_id


@pev.tool(effect="query")
def noop() -> str:
    """Do nothing."""
    return "ok"


def _planner(request: object) -> pev.model.Plan:
    return pev.model.Plan("noop", (pev.model.PlanNode("noop", "do nothing", tool="noop"),))


def _local_owner(pid: int) -> str:
    """An owner id of process ``pid`` of this process table, as pev makes them."""
    return f"{socket.gethostname()}:{pid}:{process_space()}.deadbeef"


def _other_space() -> str:
    """A process-table tag that is not this one's."""
    return "000000" if process_space() != "000000" else "111111"


async def test_resume_takes_a_dead_local_owners_task_at_once(tmp_path: Path) -> None:
    """A live lease of a process of this host that is gone: resume frees it and drives."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        task_id = await _held_by(store, _local_owner(_dead_pid()))
        result = await pev.resume(task_id, store=store, planner=_planner, tools=[noop])
        assert result.status == "succeeded"
        state = await Ledger(store).state(task_id)
        assert [d.epoch for d in state.drivers] == [2]
    finally:
        await store.close()


@pytest.mark.parametrize(
    "owner",
    [
        pytest.param(
            lambda: f"another-host-{uuid.uuid4().hex[:6]}:{_dead_pid()}:{process_space()}.cafe",
            id="host",
        ),
        pytest.param(
            # The same host name, another pid namespace: a container sharing the host's name.
            lambda: f"{socket.gethostname()}:{_dead_pid()}:{_other_space()}.cafe",
            id="another-pid-namespace",
        ),
        pytest.param(lambda: f"{socket.gethostname()}:{_dead_pid()}:cafe", id="no-space"),
        pytest.param(lambda: _local_owner(os.getpid()), id="alive"),
        pytest.param(lambda: _local_owner(1), id="another-users"),
        pytest.param(lambda: "worker-a", id="not-an-owner-id"),
    ],
)
async def test_a_live_owner_or_one_elsewhere_is_not_taken_early(
    tmp_path: Path, owner: Callable[[], str]
) -> None:
    """Another host's owner (its pid says nothing here), a live process, or an id of another
    form: resume is refused while the lease lasts, and a worker does not claim the task."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        task_id = await _held_by(store, owner())
        with pytest.raises(LeaseHeld):
            await pev.resume(task_id, store=store, planner=_planner, tools=[noop])
        stop = asyncio.Event()
        agent = pev.Agent(_planner, tools=[noop])
        running = asyncio.create_task(pev.worker(store, agent=agent, poll_s=0.05, stop=stop))
        await asyncio.sleep(0.5)
        stop.set()
        report = await running
        assert (report.claimed, report.freed) == (0, 0)
        assert not (await Ledger(store).state(task_id)).terminal
    finally:
        await store.close()


async def test_a_worker_frees_a_dead_local_owners_task(tmp_path: Path) -> None:
    """A worker's look for dead owners frees the lease, and its claim then drives the task."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        task_id = await _held_by(store, _local_owner(_dead_pid()))
        stop = asyncio.Event()
        agent = pev.Agent(_planner, tools=[noop])
        running = asyncio.create_task(pev.worker(store, agent=agent, poll_s=0.05, stop=stop))
        deadline = time.monotonic() + 10
        while not (await Ledger(store).state(task_id)).terminal:
            assert time.monotonic() < deadline, "the worker never took the task"
            await asyncio.sleep(0.02)
        stop.set()
        report = await running
        assert (report.freed, report.ended) == (1, 1)
    finally:
        await store.close()


async def test_resume_racing_a_driver_that_ends_the_task_returns_its_end(tmp_path: Path) -> None:
    """Another driver ends the task between resume's read and its first write: resume
    returns that end, unchanged, instead of raising."""
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        ledger = Ledger(store)
        state = await ledger.create("x", contract=VerificationContract(VerificationMode.OFF))
        task_id = state.task_id
        original = store.acquire_lease

        async def other_driver_first(
            task: str, owner: str, *, now: datetime, lease_s: float
        ) -> Lease:
            # The other driver takes the lease, ends the task and lets go, just before us.
            store.acquire_lease = original  # type: ignore[method-assign]
            await pev.resume(task, store=store, planner=_planner, tools=[noop])
            return await original(task, owner, now=now, lease_s=lease_s)

        store.acquire_lease = other_driver_first  # type: ignore[method-assign,assignment]
        result = await pev.resume(task_id, store=store, planner=_planner, tools=[noop])
        assert result.status == "succeeded"
        ended = await Ledger(store).state(task_id)
        assert [d.epoch for d in ended.drivers] == [1]  # only the other driver wrote
        again = await pev.resume(task_id, store=store, planner=_planner, tools=[noop])
        assert again == result  # an ended task, returned unchanged
    finally:
        await store.close()


ENDED_FROM_OUTSIDE: list[pev.Store] = []  # the store the tool below ends its task in


@pev.tool(effect="query")
async def end_it_meanwhile() -> str:
    """End this very task from outside while its drive waits on this call (an operator's hand)."""
    (store,) = ENDED_FROM_OUTSIDE
    task_id = pev.engine.current_node_context().task_id
    ended = TaskFinished(
        status=pev.TaskStatus.FAILED,
        reason=pev.kernel.TerminalReason.TASK_DEADLINE_EXPIRED,
        detail="ended from outside",
    )
    await Ledger(store).append(task_id, [ended])
    return "ok"


def _ender_planner(request: object) -> pev.model.Plan:
    node = pev.model.PlanNode("end", "be ended meanwhile", tool="end_it_meanwhile")
    return pev.model.Plan("be ended", (node,))


async def test_a_task_another_writer_ends_under_a_worker_counts_as_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The drive finds the task ended by someone else under its step: the worker counts it
    ended (not failed), logs its end in one line without a traceback, and learns from it."""
    store = SQLiteStore(tmp_path / "ledger.db")
    ENDED_FROM_OUTSIDE[:] = [store]
    try:
        agent = pev.Agent(_ender_planner, tools=[end_it_meanwhile])
        task_id = await pev.submit("x", agent=agent, store=store)
        stop = asyncio.Event()
        learnt: list[str] = []

        class Spy(pev.experience.LessonBook):
            async def record(self, state: pev.ledger.TaskState) -> pev.experience.Episode:
                learnt.append(state.task_id)
                return await super().record(state)

        with caplog.at_level(logging.INFO, logger="pev"):
            running = asyncio.create_task(
                pev.worker(store, agent=agent, poll_s=0.05, stop=stop, experience=Spy(store))
            )
            async with asyncio.timeout(30):
                while not (await Ledger(store).state(task_id)).terminal:
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)  # the worker meets the end and counts it
            stop.set()
            report = await running
        assert (report.ended, report.failed) == (1, 0)
        (said,) = [r for r in caplog.records if f"task {task_id} ended" in r.getMessage()]
        assert said.exc_info is None
        assert "ended failed/task_deadline_expired" in said.getMessage()
        assert learnt == [task_id]
    finally:
        ENDED_FROM_OUTSIDE.clear()
        await store.close()


@pytest.mark.parametrize("after_s", [0.05, 0.2, 0.5])
def test_sigterm_early_in_a_worker_exits_0(tmp_path: Path, after_s: float) -> None:
    """SIGTERM 0.05, 0.2 and 0.5 s after `pev worker` began its command: it stops, exit 0."""
    worker = subprocess.Popen(
        [str(PEV), "--db", str(tmp_path / "ledger.db"), "worker", "--poll-s", "0.1"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert worker.stderr is not None
    first = worker.stderr.readline()  # the command's first log line: its handler is in place
    assert "garbage collector thresholds" in first, first
    time.sleep(after_s)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, first + err
    assert "stopped" in err


# Runs `pev` as its entry point does, with the engine made slow to load: a marker file is touched
# as its import begins, and the import then takes 2 s, a window a signal can be sent into.
_SLOW_ENGINE = """
import importlib.abc, pathlib, sys, time

class SlowEngine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pev.engine":
            pathlib.Path(sys.argv[1]).touch()
            time.sleep(2)
        return None

sys.meta_path.insert(0, SlowEngine())
from pev.cli import main
main(sys.argv[2:])
"""


def test_sigterm_while_the_engine_loads_exits_0(tmp_path: Path) -> None:
    """SIGTERM while pev's engine is still loading: the worker stops cleanly, exit 0.

    The entry point takes SIGTERM before anything loads the engine (docs/cli.md), so the signal
    is noted, not fatal, and the worker stops as soon as it starts.
    """
    marker = tmp_path / "loading"
    worker = subprocess.Popen(
        [sys.executable, "-c", _SLOW_ENGINE, str(marker), "--db", str(tmp_path / "l.db"), "worker"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, "the engine never began to load"
            time.sleep(0.005)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert "stopped: 0 claimed" in err


async def test_a_task_ended_for_want_of_its_agent_leaves_no_record_open() -> None:
    """An earlier driver died mid-call; the task's agent then never starts: the end settles
    the calls it left, the action ``unknown`` (never sent again), the query ``failed``."""
    from tests.support import builders

    from pev.engine._start_failures import Backoff, record_not_started

    store = pev.stores.MemoryStore()
    ledger = Ledger(store)
    task_id = builders.TASK
    await ledger.create("x", task_id=task_id, policy=RecoveryPolicy(start_attempts=1))
    plan = pev.model.Plan(
        "tidy",
        (
            pev.model.PlanNode("move", "move the cup", tool="arm"),
            pev.model.PlanNode("look", "look at the desk", tool="camera"),
        ),
    )
    await ledger.append(
        task_id,
        [
            builders.revision(1, plan=plan),
            builders.dispatched("r1", "move"),
            builders.dispatched("r2", "look", tool="camera", effect=pev.model.Effect.QUERY),
        ],
    )
    claimed = await ledger.acquire(task_id, "worker-b", lease_s=30)
    state = await record_not_started(
        ledger,
        await ledger.state(task_id),
        claimed,
        ModuleNotFoundError("No module named 'agent'"),
        backoff=Backoff(first_s=0.1, most_s=1.0),
    )
    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == ("failed", "agent_unavailable")
    move, look = state.records["r1"], state.records["r2"]
    assert (move.status, look.status) == ("unknown", "failed")
    result = state.results["r1"]
    assert isinstance(result, pev.model.DeviceFailure)
    assert result.outcome_unknown
    assert (await ledger.verify(task_id)).ok
