"""Task drivers on Ray: actors over one PostgreSQL ledger, taken over under leases when lost.

A real local Ray cluster (tests/support/ray_cluster.py): two nodes with a ``pev_driver``
resource each, one driver actor per node. The ledger is a throwaway PostgreSQL schema. The
tools count their side effects in an append-only file of their own (tests/support/ray_agent.py),
never in pev's ledger.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.support import postgres, ray_cluster

import pev
from pev.cli import cli
from pev.ledger import Ledger, NodeFinished, TaskState
from pev.model import RecordStatus

ray_cluster.require_module()

# After the check that Ray is here:
from tests.support import ray_agent  # noqa: E402
from tests.support.ray_cluster import node_args  # noqa: E402

from pev.ray import DriversReport, drivers_on_ray  # noqa: E402

PEV = Path(sys.executable).with_name("pev")
PLACED = {"resources": {"pev_driver": 1}}  # one driver on each node that has the resource


@pytest.fixture
def other_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tools' append-only file; set before the nodes start, so their processes know it."""
    path = tmp_path / "other-end.log"
    monkeypatch.setenv(ray_agent.OTHER_END, str(path))
    return path


@pytest.fixture
def db() -> Iterator[str]:
    """The ledger: a PostgreSQL URL naming a schema of this test's own."""
    with postgres.throwaway_url() as url:
        yield url


def _driver_nodes(cluster: Any) -> list[Any]:
    """Two nodes of one CPU, each able to hold one driver."""
    return [cluster.add_node(**node_args(1, {"pev_driver": 1})) for _ in range(2)]


async def _submit(store: pev.Store, *orders: str) -> list[str]:
    return [await pev.submit(order, agent=ray_agent.shipping, store=store) for order in orders]


async def _until_ended(
    store: pev.Store, task_ids: list[str], serving: Callable[[], None], seconds: float
) -> list[TaskState]:
    """Every task's state once all have ended; ``serving()`` fails if the drivers ended first."""
    deadline = time.monotonic() + seconds
    ledger = Ledger(store)
    while True:
        states = [await ledger.state(task_id) for task_id in task_ids]
        if all(state.terminal for state in states):
            return states
        serving()
        assert time.monotonic() < deadline, [state.phase for state in states]
        await asyncio.sleep(0.1)


def _serving(drivers: asyncio.Task[DriversReport]) -> Callable[[], None]:
    """Fails, with what ended them, once ``drivers`` has ended."""

    def check() -> None:
        if drivers.done():
            drivers.result()
            pytest.fail("the drivers ended before they were told to stop")

    return check


@pytest.mark.timeout(90)
async def test_drivers_on_ray_drive_submitted_tasks_to_their_end(
    cluster: Any, db: str, other_end: Path
) -> None:
    """Four tasks, two drivers on two nodes: each task ends once, shipped once; a clean stop."""
    nodes = {node.node_id for node in _driver_nodes(cluster)}
    store = pev.open_store(db)
    try:
        task_ids = await _submit(store, "a", "b", "c", "d")
        stop = asyncio.Event()
        running = asyncio.create_task(
            drivers_on_ray(db, drivers=2, poll_s=0.2, actor_options=PLACED, stop=stop)
        )
        try:
            states = await _until_ended(store, task_ids, _serving(running), seconds=60)
        finally:
            stop.set()
            report = await asyncio.wait_for(running, 30)
    finally:
        await store.close()
    assert [state.finished.status for state in states if state.finished] == ["succeeded"] * 4
    assert {driver.node_id for driver in report.drivers} == nodes  # one driver on each node
    assert sum(driver.worker.ended for driver in report.drivers) == 4
    assert (report.lost, report.replaced) == ([], 0)
    shipped = ray_agent.deliveries(other_end)
    assert sorted(what for _, _, what in shipped) == [f"shipped {o}" for o in "abcd"]
    assert len({key for key, _, _ in shipped}) == 4  # each order sent once
    assert {node for _, node, _ in shipped} <= nodes  # by the drivers, on their nodes
    owners = {driver.worker.owner for driver in report.drivers}
    assert all(len(state.drivers) == 1 and state.drivers[0].owner in owners for state in states)


@pytest.mark.parametrize(
    ("db", "options", "words"),
    [
        pytest.param("ledger.db", {}, "not the SQLite file 'ledger.db'", id="sqlite-ledger"),
        pytest.param("mysql://u:secret@db/x", {}, "not the URL mysql://u:***@db/x", id="other-url"),
        pytest.param(
            "postgresql://h/x",
            {"drivers": 0},
            "drivers must be at least 1, got 0",
            id="no-drivers",
        ),
        pytest.param(
            "postgresql://h/x",
            {"concurrency": 0},
            "concurrency must be at least 1, got 0",
            id="no-concurrency",
        ),
        pytest.param(
            "postgresql://h/x",
            {"lease_s": 0.0},
            "poll_s and lease_s must be positive",
            id="no-lease",
        ),
        pytest.param(
            "postgresql://h/x",
            {"actor_options": {"max_restarts": 3}},
            "max_restarts=3 is refused; drivers run with max_restarts=0",
            id="ray-restarts",
        ),
        pytest.param(
            "postgresql://h/x",
            {"actor_options": {"max_task_retries": -1}},
            "max_task_retries=-1 is refused",
            id="ray-retries",
        ),
        pytest.param(
            "postgresql://h/x",
            {"actor_options": {"name": "driver"}},
            "'name' is refused",
            id="one-name",
        ),
        pytest.param(
            "postgresql://h/x",
            {"actor_options": {"scheduling_strategy": "SPREAD"}},
            "'scheduling_strategy' is refused; the supervisor pins each driver to one live node",
            id="own-placement",
        ),
        pytest.param(
            "postgresql://h/x",
            {"gc_threshold": (0, 10, 10)},
            "gc_threshold must be three whole numbers (G0, G1, G2) with G0 at least 1",
            id="gc-zero-first",
        ),
    ],
)
async def test_drivers_on_ray_refuse_what_they_cannot_serve(
    db: str, options: dict[str, Any], words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before the ledger or the cluster is touched: a UsageError that says why."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pev.UsageError, match=re.escape(words)):
        await drivers_on_ray(db, **options)
    assert list(tmp_path.iterdir()) == []  # no SQLite file created


@pytest.mark.timeout(60)
async def test_drivers_on_ray_refuse_a_placement_no_node_can_hold(cluster: Any, db: str) -> None:
    """Drivers asking for a resource no live node has would wait for ever: refused at once."""
    with pytest.raises(pev.UsageError, match=r"no live node of the Ray cluster has .*arm7=1"):
        await drivers_on_ray(db, actor_options={"resources": {"arm7": 1}})


async def _until_delivered(
    other_end: Path, serving: Callable[[], None], seconds: float
) -> tuple[str, str, str]:
    """The first delivery the other end receives: (key, node, what)."""
    deadline = time.monotonic() + seconds
    while not (delivered := ray_agent.deliveries(other_end)):
        serving()
        assert time.monotonic() < deadline, "no driver ran the tool"
        await asyncio.sleep(0.05)
    return delivered[0]


async def _until_logged(caplog: pytest.LogCaptureFixture, words: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not any(words in record.getMessage() for record in caplog.records):
        assert time.monotonic() < deadline, f"never logged: {words}"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(90)
async def test_a_driver_whose_node_dies_is_replaced_and_its_action_never_resent(
    cluster: Any, db: str, other_end: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Remove the node of the driver whose action is in flight: the supervisor reports it lost,
    starts no second driver on the survivor, and starts one on a node that joins; a live driver
    takes the task over once its 2 s lease expires, asks the tool's reconcile once the call's
    deadline has passed, and never sends it again."""
    caplog.set_level("INFO", logger="pev.ray")
    nodes = _driver_nodes(cluster)
    store = pev.open_store(db)
    try:
        [task_id] = await _submit(store, "slow order")
        stop = asyncio.Event()
        running = asyncio.create_task(
            drivers_on_ray(db, lease_s=2, poll_s=0.2, actor_options=PLACED, stop=stop)
        )
        try:
            key, sent_from, _ = await _until_delivered(other_end, _serving(running), seconds=60)
            [dead] = [node for node in nodes if node.node_id == sent_from]
            [survivor] = [node for node in nodes if node is not dead]
            await asyncio.to_thread(cluster.remove_node, dead)
            await _until_logged(caplog, f"on Ray node {sent_from} was lost", seconds=30)
            fresh = cluster.add_node(**node_args(1, {"pev_driver": 1}))  # room for a new driver
            [state] = await _until_ended(store, [task_id], _serving(running), seconds=60)
            await _until_logged(caplog, f"started on Ray node {fresh.node_id}", seconds=30)
        finally:
            stop.set()
            report = await asyncio.wait_for(running, 30)
        entries = await Ledger(store).entries(task_id)
    finally:
        await store.close()
    assert ray_agent.deliveries(other_end) == [(key, sent_from, "shipped slow order")]  # once
    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == ("succeeded", "passed")
    [lost] = report.lost
    assert lost.node_id == sent_from
    assert report.replaced == 1
    assert {driver.node_id for driver in report.drivers} == {survivor.node_id, fresh.node_id}
    # The lost driver drove epoch 1; a live one took over with epoch 2: the survivor, or the
    # driver started in the lost one's place, whichever claimed the task first.
    [first, second] = state.drivers
    assert (first.owner, first.epoch) == (lost.owner, 1)
    assert second.epoch == 2
    assert second.owner in {driver.worker.owner for driver in report.drivers}
    assert sum(driver.worker.ended for driver in report.drivers) == 1
    # The call in flight was settled by the driver that took over, from its reconcile, asked
    # once the call's deadline had passed: not dispatched again.
    [record] = state.records.values()
    assert record.status is RecordStatus.SUCCEEDED
    assert (record.updated_at - record.created_at).total_seconds() >= ray_agent.TIMEOUT_S
    [settled] = [e.event for e in entries if isinstance(e.event, NodeFinished)]
    assert settled.settled_on_resume


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(
            ("--db", "ledger.db", "worker", "--ray", "auto"),
            "--db: drivers on Ray need one ledger that every node reaches",
            id="sqlite-ledger",
        ),
        pytest.param(
            ("--db", "postgresql://127.0.0.1:1/none", "worker", "--ray", "127.0.0.1:1"),
            "--ray: cannot join the Ray cluster at '127.0.0.1:1'",
            id="no-cluster-there",
        ),
        pytest.param(
            ("--db", "postgresql://127.0.0.1:1/none", "worker", "--ray", "nowhere"),
            "'nowhere' is not a Ray address",
            id="not-an-address",
        ),
        pytest.param(
            ("--db", "postgresql://127.0.0.1:1/none", "worker", "--drivers", "2"),
            "--drivers counts the drivers of --ray; give --ray ADDRESS too",
            id="drivers-without-ray",
        ),
    ],
)
def test_pev_worker_ray_refuses_what_it_cannot_serve_in_one_line(
    tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    """A SQLite ledger, a cluster that does not answer, --drivers alone: one line, exit 2,
    before anything is created or connected to."""
    done = subprocess.run(
        [str(PEV), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("pev: ")
    assert words in line
    assert not (tmp_path / "ledger.db").exists()


def test_pev_worker_help_documents_its_ray_options() -> None:
    """`pev worker --help` names --ray and --drivers, and what they do."""
    result = CliRunner().invoke(cli, ["worker", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--ray ADDRESS" in text
    assert "Ray actors" in text
    assert "PostgreSQL" in text
    assert "--drivers INTEGER RANGE With --ray: how many drivers to keep running" in text


@pytest.mark.timeout(60)
def test_pev_worker_ray_drives_tasks_and_stops_on_sigterm(
    cluster: Any, db: str, tmp_path: Path
) -> None:
    """`pev worker --ray ADDRESS`: its driver on the cluster drives the submitted tasks, and
    SIGTERM stops it: the driver drains, the process says what it did and exits 0."""

    async def serve() -> list[TaskState]:
        store = pev.open_store(db)
        try:
            task_ids = await _submit(store, "quote a", "quote b")
            return await _until_ended(store, task_ids, alive, seconds=40)
        finally:
            await store.close()

    def alive() -> None:
        assert serving.poll() is None, serving.communicate()[1]

    command = ["--db", db, "worker", "--ray", cluster.address, "--drivers", "1", "--poll-s", "0.2"]
    serving = subprocess.Popen(
        [str(PEV), *command],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        states = asyncio.run(serve())
    finally:
        serving.send_signal(signal.SIGTERM)
        _, err = serving.communicate(timeout=30)
    assert serving.returncode == 0, err
    assert [state.finished.status for state in states if state.finished] == ["succeeded"] * 2
    assert "started on Ray node" in err
    assert "drivers stopped: 2 claimed, 2 ended, 0 drained, 0 failed; 0 lost, 0 replaced" in err


def test_pev_worker_ray_without_ray_says_what_to_install(tmp_path: Path) -> None:
    """Without Ray installed, `pev worker --ray` is one line naming the extra, exit 2."""
    without_ray = (
        "import sys; sys.modules['ray'] = None; from pev.cli import main; "
        "sys.argv = ['pev', '--db', 'postgresql://127.0.0.1:1/none', 'worker', '--ray', 'auto']; "
        "main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", without_ray],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("pev: pev.ray needs Ray")
    assert line.endswith("pip install 'pev-agent[ray]'")
