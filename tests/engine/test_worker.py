"""Submit and workers: a task written now is driven later, by any process, exactly once.

The side effects are counted by the tools themselves (an append-only file), never read back
from pev's own ledger.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest
from tests.support import postgres
from tests.support.modules import log_lines, user_module

import pev
from pev.errors import ComponentError
from pev.ledger import Ledger, TaskPhase
from pev.model import Plan, PlanNode, RecordStatus
from pev.stores import MemoryStore, SQLiteStore

PEV = Path(sys.executable).with_name("pev")
T = TypeVar("T")

AGENT = '''
"""A shop whose tool appends each sale to a file, and can be held mid-sale."""

import asyncio
import os
from pathlib import Path

import pev
from pev.model import Plan, PlanNode

SALES = Path(os.environ["PEV_TEST_SALES"])
HOLD = Path(os.environ["PEV_TEST_HOLD"])


async def sell(item: str) -> str:
    """Sell one item (an action)."""
    key = pev.engine.current_node_context().idempotency_key
    with SALES.open("a", encoding="utf-8") as sales:
        sales.write(key + "\\n")
    while HOLD.exists():
        await asyncio.sleep(0.01)
    return f"sold {item}"


sell_tool = pev.tool(sell, effect="action", timeout_s=2)


def planner(request):
    return Plan("sell", (PlanNode("sell", "sell it", tool="sell", args={"item": request.input}),))


shop = pev.Agent(planner, tools=[sell_tool])
'''


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The shop module under a unique name, on the path, with its own sales file."""
    monkeypatch.setenv("PEV_TEST_SALES", str(tmp_path / "sales.log"))
    monkeypatch.setenv("PEV_TEST_HOLD", str(tmp_path / "hold"))
    with user_module(tmp_path, monkeypatch, AGENT, prefix="pev_shop") as module:
        yield module


def sales(module: ModuleType) -> list[str]:
    """The sales the tool made, from its own append-only file."""
    return log_lines(module.SALES)


async def _until(condition: object, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[pev.Store]:
    """Each store workers share: in memory, one SQLite file, and a PostgreSQL schema."""
    opened: pev.Store
    if request.param == "postgres":
        postgres.require()
        opened = postgres.ThrowawayStore()
    elif request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "ledger.db")
    else:
        opened = MemoryStore()
    yield opened
    await opened.close()


async def test_submitted_tasks_are_driven_by_a_worker_each_once(
    shop: ModuleType, store: pev.Store
) -> None:
    """Five submitted tasks: the worker claims and ends them all, one sale each."""
    threshold = gc.get_threshold()
    ids = [await pev.submit(f"item {n}", agent=shop.shop, store=store) for n in range(5)]
    created = (await Ledger(store).state(ids[0])).created
    assert dict(created.components) == {"agent": f"{shop.__name__}:shop"}
    stop = asyncio.Event()
    working = asyncio.create_task(pev.worker(store, concurrency=2, poll_s=0.05, stop=stop))

    async def all_ended() -> None:
        while not all([(await Ledger(store).state(i)).terminal for i in ids]):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(all_ended(), 10)
    stop.set()
    report = await asyncio.wait_for(working, 10)
    assert (report.claimed, report.ended, report.drained, report.failed) == (5, 5, 0, 0)
    assert len(sales(shop)) == 5
    for task_id in ids:
        state = await Ledger(store).state(task_id)
        assert state.finished is not None
        assert state.finished.status == "succeeded"
        assert [d.owner for d in state.drivers] == [report.owner]
    assert gc.get_threshold() == threshold  # the library leaves the process's collector alone


async def test_a_stopped_worker_drains_and_another_finishes(
    shop: ModuleType, store: pev.Store
) -> None:
    """Stop mid-sale: the sale ends, the task is left for another worker, which never resells."""
    hold: Path = shop.HOLD
    hold.touch()
    task_id = await pev.submit("lamp", agent=shop.shop, store=store)
    stop = asyncio.Event()
    first = asyncio.create_task(pev.worker(store, poll_s=0.05, stop=stop))
    await _until(lambda: len(sales(shop)) == 1)
    stop.set()
    await asyncio.sleep(0.05)
    hold.unlink()  # the sale in flight completes within its timeout
    report = await asyncio.wait_for(first, 10)
    assert (report.claimed, report.ended, report.drained) == (1, 0, 1)
    left = await Ledger(store).state(task_id)
    assert left.phase is TaskPhase.EXECUTING
    assert [r.status for r in left.records.values()] == [RecordStatus.SUCCEEDED]
    lease = await store.lease(task_id)
    assert lease is not None
    assert not lease.live(pev.ledger.utc_now())  # released at once

    stop_again = asyncio.Event()
    second = asyncio.create_task(pev.worker(store, poll_s=0.05, stop=stop_again))
    state = await _ended(store, task_id)
    stop_again.set()
    assert (await second).ended == 1
    assert state.finished is not None
    assert state.finished.status == "succeeded"
    assert len(sales(shop)) == 1  # sold once, whoever drove it
    assert [d.epoch for d in state.drivers] == [1, 2]


async def _ended(store: pev.Store, task_id: str, *, seconds: float = 10) -> pev.TaskState:
    deadline = time.monotonic() + seconds
    while not (state := await Ledger(store).state(task_id)).terminal:
        assert time.monotonic() < deadline, "the task never ended"
        await asyncio.sleep(0.02)
    return state


async def test_a_woken_worker_takes_a_new_task_without_waiting_for_its_poll(
    shop: ModuleType, store: pev.Store
) -> None:
    """Every store wakes its idle workers: a worker that looks only every minute still takes a
    task submitted (through another connection, on SQLite and PostgreSQL) at once."""
    assert isinstance(store, pev.ledger.Wakeups)
    stop = asyncio.Event()
    working = asyncio.create_task(pev.worker(store, poll_s=60, stop=stop))
    await asyncio.sleep(0.2)  # idle: it looked, found nothing, and waits on the store
    submitter: pev.Store = store
    if isinstance(store, SQLiteStore):
        submitter = SQLiteStore(store.location)
    elif not isinstance(store, MemoryStore):
        submitter = postgres.same_schema(store)
    try:
        task_id = await pev.submit("lamp", agent=shop.shop, store=submitter)
        state = await _ended(store, task_id, seconds=20)  # far less than the 60 s poll
    finally:
        stop.set()
        if submitter is not store:
            await submitter.close()
    assert (await asyncio.wait_for(working, 10)).ended == 1
    assert state.finished is not None
    assert state.finished.status == "succeeded"


async def test_tasks_run_in_process_are_never_claimed_by_a_worker_beside(
    shop: ModuleType, store: pev.Store
) -> None:
    """``pev.run`` writes its task with its lease: an idle worker on the same store, looking
    all the time, never takes one from under it (it used to, between create and lease)."""
    stop = asyncio.Event()
    working = asyncio.create_task(pev.worker(store, poll_s=0.01, stop=stop))
    try:
        results = await asyncio.gather(
            *(pev.run(f"item {n}", agent=shop.shop, store=store) for n in range(20))
        )
    finally:
        stop.set()
    assert (await asyncio.wait_for(working, 10)).claimed == 0
    assert [r.status for r in results] == ["succeeded"] * 20
    assert len(sales(shop)) == 20


async def test_an_idle_worker_polls_backing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a store without wake-ups (one of your own), an idle worker looks again after 50 ms,
    then twice as long each time it finds nothing, up to poll_s; a look that finds tasks starts
    it over."""
    from pev.engine import _worker

    waits: list[float] = []

    async def wait(futures: object, *, timeout: float, return_when: str) -> None:
        waits.append(timeout)

    monkeypatch.setattr(_worker.asyncio, "wait", wait)
    idle = _worker._Idle(0.5, None)
    for _ in range(6):
        await idle.wait(set(), looking=True)
    idle.reset()
    await idle.wait(set(), looking=True)
    await idle.wait(set(), looking=False)  # every slot busy: it waits for a drive, or poll_s
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.05, 0.5]


async def test_submit_refuses_an_agent_no_worker_could_rebuild(store: pev.Store) -> None:
    """A lambda planner has no import path: ComponentError naming it, and no task written."""
    plan = Plan("p", (PlanNode("a", "a", tool="t"),))
    with pytest.raises(ComponentError) as refused:
        await pev.submit("x", planner=lambda r: plan, executor=lambda n, c: None, store=store)
    assert refused.value.role == "planner"
    assert await store.list_tasks() == ()


async def test_worker_options_are_checked() -> None:
    """A worker without room to work, or with a non-positive poll, is a ValueError."""
    with pytest.raises(ValueError, match="concurrency"):
        await pev.worker(MemoryStore(), concurrency=0)
    with pytest.raises(ValueError, match="poll_s"):
        await pev.worker(MemoryStore(), poll_s=0)


def test_pev_worker_drives_submitted_tasks_and_stops_on_sigterm(
    shop: ModuleType, tmp_path: Path
) -> None:
    """`pev submit` twice, `pev worker` drives both, SIGTERM: exit 0, claims and ends logged."""
    db = tmp_path / "ledger.db"
    task = tmp_path / "task.toml"
    task.write_text(
        f'input = "kettle"\n[components]\nagent = "{shop.__name__}:shop"\n', encoding="utf-8"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    ids = []
    for _ in range(2):
        done = subprocess.run(
            [str(PEV), "--db", str(db), "submit", str(task)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    serving = subprocess.Popen(
        [str(PEV), "--db", str(db), "worker", "--poll-s", "0.1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while len(sales(shop)) < 2:
            assert serving.poll() is None, serving.communicate()[1]
            assert time.monotonic() < deadline, "the worker did not sell"
            time.sleep(0.05)
        asyncio.run(_wait_ended(db, ids))
    finally:
        serving.send_signal(signal.SIGTERM)
        _, err = serving.communicate(timeout=30)
    assert serving.returncode == 0, err
    assert "claimed task" in err
    assert "2 claimed, 2 ended, 0 drained, 0 awaiting approval, 0 failed, 0 not started" in err
    # The command owns its process, so it tunes the collector for many tasks (docs/performance.md).
    assert "garbage collector thresholds 100000, 50, 100" in err
    assert len(sales(shop)) == 2


async def _wait_ended(db: Path, ids: list[str]) -> None:
    store = SQLiteStore(db)
    try:
        for task_id in ids:
            await _ended(store, task_id)
    finally:
        await store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """What `pev worker --db` names: an SQLite file, or a PostgreSQL URL with its own schema."""
    with postgres.ledger_db(request.param, tmp_path) as db:
        yield db


def _in_store(db: str, work: Callable[[pev.Store], Awaitable[T]]) -> T:
    """Run ``work`` on the store ``db`` names, from this (synchronous) test."""

    async def session() -> T:
        store = pev.open_store(db)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(session())


def _start_worker(db: str, folder: Path, name: str) -> subprocess.Popen[str]:
    """A `pev worker` with a 1 s lease, the shop importable, its log in ``<name>.log``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), *sys.path]))
    command = [str(PEV), "--db", db, "worker", "--poll-s", "0.1", "--lease-s", "1"]
    with (folder / f"{name}.log").open("w", encoding="utf-8") as log:
        return subprocess.Popen(command, cwd=folder, env=env, stderr=log, text=True)


def _log(folder: Path, name: str) -> str:
    return (folder / f"{name}.log").read_text(encoding="utf-8")


def _until_sold(shop: ModuleType, worker: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not sales(shop):
        assert worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, "the worker did not start the sale"
        time.sleep(0.05)


def test_a_killed_workers_task_is_taken_over_and_its_sale_never_resent(
    shop: ModuleType, db: str, tmp_path: Path
) -> None:
    """SIGKILL a `pev worker` mid-sale; another takes the task once the lease expires.

    The sale's outcome is unknown (the tool has no reconcile), so the second worker settles it
    as unknown after the sale's own deadline and never sells again.
    """
    hold: Path = shop.HOLD
    hold.touch()
    task_id = _in_store(db, lambda store: pev.submit("vase", agent=shop.shop, store=store))
    first = _start_worker(db, tmp_path, "first")
    try:
        _until_sold(shop, first)
    finally:
        first.kill()
        first.wait(timeout=30)
    hold.unlink()
    second = _start_worker(db, tmp_path, "second")
    try:
        state = _in_store(db, lambda store: _ended(store, task_id, seconds=30))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    assert second.returncode == 0, _log(tmp_path, "second")
    assert len(sales(shop)) == 1  # one sale, never re-sent
    assert [d.epoch for d in state.drivers] == [1, 2]
    assert [r.status for r in state.records.values()] == [RecordStatus.UNKNOWN]


def test_a_paused_worker_taken_over_writes_and_dispatches_nothing_more(
    shop: ModuleType, db: str, tmp_path: Path
) -> None:
    """The zombie: SIGSTOP a `pev worker` mid-sale, past its lease; another worker takes the
    task over and ends it; SIGCONT: the sale in the zombie's hands completes, but the store
    refuses its next write (a stale epoch), so it records nothing and sells nothing more."""
    hold: Path = shop.HOLD
    hold.touch()
    task_id = _in_store(db, lambda store: pev.submit("clock", agent=shop.shop, store=store))
    zombie = _start_worker(db, tmp_path, "zombie")
    second: subprocess.Popen[str] | None = None
    try:
        _until_sold(shop, zombie)
        os.kill(zombie.pid, signal.SIGSTOP)
        second = _start_worker(db, tmp_path, "second")
        taken_over = _in_store(db, lambda store: _ended(store, task_id, seconds=30))
        events = _in_store(db, lambda store: store.read(task_id))
        hold.unlink()  # the zombie's sale returns as soon as it runs again
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    try:
        deadline = time.monotonic() + 30
        while "lost its lease" not in (log := _log(tmp_path, "zombie")):
            assert time.monotonic() < deadline, f"the zombie never noticed: {log}"
            time.sleep(0.05)
    finally:
        for worker in (zombie, second):
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=30)
    log = _log(tmp_path, "zombie")
    assert zombie.returncode == 0, log  # the worker outlives the drive it lost
    assert "1 claimed, 0 ended, 0 drained, 0 awaiting approval, 0 failed" in log
    assert "1 taken over by another driver" in log  # not this task's fault: no traceback
    assert "Traceback" not in log
    assert _in_store(db, lambda store: store.read(task_id)) == events  # not one event more
    assert len(sales(shop)) == 1
    assert [d.epoch for d in taken_over.drivers] == [1, 2]
    assert [r.status for r in taken_over.records.values()] == [RecordStatus.UNKNOWN]


BROKEN = '''
"""An agent whose planner has a bug: it raises AssertionError every time it is asked."""

import os
from pathlib import Path

import pev

CALLS = Path(os.environ["PEV_TEST_CALLS"])


def planner(request):
    with CALLS.open("a", encoding="utf-8") as calls:
        calls.write("plan\\n")
    raise AssertionError("a planner bug")


async def noop() -> str:
    """Do nothing (a query)."""
    return "nothing"


broken = pev.Agent(planner, tools=[pev.tool(noop, effect="query")])
'''


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The broken agent's module, with its own file of planner calls."""
    monkeypatch.setenv("PEV_TEST_CALLS", str(tmp_path / "calls.log"))
    with user_module(tmp_path, monkeypatch, BROKEN, prefix="pev_broken") as module:
        yield module


async def test_a_task_whose_drive_keeps_failing_is_not_claimed_again_at_once(
    broken: ModuleType, store: pev.Store
) -> None:
    """A drive that raises (any exception) is counted and logged, never raised; its task is
    not re-claimed in a hot loop: its lease is held until it expires."""
    task_id = await pev.submit("x", agent=broken.broken, store=store)
    stop = asyncio.Event()
    working = asyncio.create_task(pev.worker(store, poll_s=0.05, lease_s=30, stop=stop))
    await _until(lambda: log_lines(broken.CALLS))
    await asyncio.sleep(0.3)
    stop.set()
    report = await asyncio.wait_for(working, 10)
    assert (report.claimed, report.ended, report.failed) == (1, 0, 1)
    assert len(log_lines(broken.CALLS)) == 1
    state = await Ledger(store).state(task_id)
    assert len(state.drivers) == 1
    lease = await store.lease(task_id)
    assert lease is not None
    assert lease.live(pev.ledger.utc_now())  # held: no worker takes it again before it expires


def test_pev_worker_restores_the_signal_handlers_it_replaced(tmp_path: Path) -> None:
    """In-process, `pev worker` stops on SIGTERM and leaves the caller's handlers as they were."""
    from click.testing import CliRunner

    from pev.cli import cli

    def mine(signum: int, frame: object) -> None:  # the caller's own handler
        raise AssertionError("the worker's handler should have had this signal")

    before_int = signal.getsignal(signal.SIGINT)
    before_term = signal.signal(signal.SIGTERM, mine)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        done = CliRunner().invoke(
            cli, ["--db", str(tmp_path / "ledger.db"), "worker", "--poll-s", "0.05"]
        )
        assert done.exit_code == 0, done.output
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is before_int
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, before_term)
