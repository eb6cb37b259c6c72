"""Drivers on Ray under faults: one driver pinned to each node, SIGTERM, a frozen driver.

A real local Ray cluster (tests/support/ray_cluster.py), nodes with a ``pev_driver`` resource
added per test, and a throwaway PostgreSQL schema as the ledger. The tool writes each delivery
to an append-only file of its own (tests/support/ray_fleet_agent.py): "never twice" is counted
there, never in pev's ledger. ``make soak`` runs the fault test PEV_SOAK_FACTOR times as often.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support import postgres, ray_cluster

import pev
from pev.ledger import DriverStarted, Ledger, TaskState
from pev.model import RecordStatus

ray_cluster.require_module()

# After the check that Ray is here:
from tests.support import ray_fleet_agent  # noqa: E402
from tests.support.ray_cluster import node_args  # noqa: E402

from pev.ray import DriversReport, drivers_on_ray  # noqa: E402

PLACED = {"resources": {"pev_driver": 1}}  # drivers only on the nodes that have the resource
LEASE_S = 2.0
# `make soak` runs the frozen-driver fault this many times as often (a few seconds a run).
SOAK_FACTOR = int(os.environ.get("PEV_SOAK_FACTOR", "1"))
DOCS = Path(__file__).resolve().parents[2] / "docs" / "ray.md"


@pytest.fixture
def db() -> Iterator[str]:
    """The ledger: a PostgreSQL URL naming a schema of this test's own."""
    with postgres.throwaway_url() as url:
        yield url


def _other_end(path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Name the tool's append-only file: before nodes start, so their processes know it."""
    monkeypatch.setenv(ray_fleet_agent.OTHER_END, str(path))
    return path


def _add_driver_nodes(cluster: Any, count: int) -> list[Any]:
    """Nodes of one CPU, each able to hold one driver."""
    return [cluster.add_node(**node_args(1, {"pev_driver": 1})) for _ in range(count)]


async def _submit(store: pev.Store, *inputs: str) -> list[str]:
    return [
        await pev.submit(text, agent=ray_fleet_agent.delivering, store=store) for text in inputs
    ]


def _serving(drivers: asyncio.Task[DriversReport]) -> Callable[[], None]:
    """Fails, with what ended them, once ``drivers`` has ended."""

    def check() -> None:
        if drivers.done():
            drivers.result()
            pytest.fail("the drivers ended before they were told to stop")

    return check


async def _until(
    what: str, ready: Callable[[], bool], serving: Callable[[], None], s: float
) -> None:
    deadline = time.monotonic() + s
    while not ready():
        serving()
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def _until_ended(
    store: pev.Store, task_ids: list[str], serving: Callable[[], None], seconds: float
) -> list[TaskState]:
    """Every task's state once all have ended (or as they are, when ``seconds`` have passed)."""
    deadline = time.monotonic() + seconds
    ledger = Ledger(store)
    while True:
        states = [await ledger.state(task_id) for task_id in task_ids]
        if all(state.terminal for state in states) or time.monotonic() > deadline:
            return states
        serving()
        await asyncio.sleep(0.1)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    return True


def _started_on(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The Ray nodes the supervisor has logged a driver started on."""
    found = (re.search(r"started on Ray node (\w+)", r.getMessage()) for r in caplog.records)
    return {match.group(1) for match in found if match}


@pytest.mark.timeout(90)
async def test_drivers_are_pinned_one_to_each_node_and_a_joining_node_gets_one(
    cluster: Any, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two nodes that can hold a driver: one driver on each, every time (pinned, not SPREAD's
    best effort); a third node that joins gets its own; the head, without the resource, none."""
    caplog.set_level("INFO", logger="pev.ray")
    first = {node.node_id for node in _add_driver_nodes(cluster, 2)}
    stop = asyncio.Event()
    running = asyncio.create_task(
        drivers_on_ray(db, poll_s=0.2, actor_options=PLACED, stop=stop, handle_signals=False)
    )
    serving = _serving(running)
    try:
        await _until("a driver on each node", lambda: _started_on(caplog) == first, serving, 40)
        [joined] = _add_driver_nodes(cluster, 1)
        every = {*first, joined.node_id}
        await _until(
            "a driver on the joined node", lambda: _started_on(caplog) == every, serving, 40
        )
    finally:
        stop.set()
        report = await asyncio.wait_for(running, 30)
    placed = [driver.node_id for driver in report.drivers]  # where each actor says it runs
    assert sorted(placed) == sorted(every)  # one on each, none twice, none on the head
    assert (report.lost, report.replaced) == ([], 1)


@dataclass(frozen=True, slots=True)
class FaultRun:
    """What one frozen-driver run found, from the tool's own log and the ledgers."""

    tasks: int
    held: int  # tasks the frozen driver was driving
    not_terminal: int
    actions_twice: int
    events_lost: int
    delivered_unknown: int
    takeover_s: float  # the slowest takeover, from the freeze to the new driver's first write
    lease_left_s: float  # the shortest lease the frozen driver still held when frozen
    # Ray kills a removed node's processes, a frozen one too; on one host, a driver then finds
    # the owner's process gone and frees its lease before it expires.
    survived_removal: bool

    def line(self) -> str:
        """The run's report, in one line."""
        return (
            f"{self.tasks} tasks, {self.held} held by the frozen driver: {self.not_terminal} not "
            f"terminal, {self.actions_twice} actions twice, {self.events_lost} events lost, "
            f"{self.delivered_unknown} delivered-but-unknown, takeover {self.takeover_s:.2f} s "
            f"(its leases had {self.lease_left_s:.2f} s left; its process "
            f"{'outlived' if self.survived_removal else 'died with'} its node)"
        )


async def _freeze_a_driver_and_remove_its_node(
    cluster: Any, db: str, other_end: Path, run: int
) -> FaultRun:
    """Two drivers drive four tasks; once every order is delivered (each call still holding),
    one driver's process is frozen (SIGSTOP) and its node removed."""
    _add_driver_nodes(cluster, 2)
    store = pev.open_store(db)
    frozen: int | None = None
    try:
        task_ids = await _submit(store, *(f"r{run}o{n} 4" for n in range(4)))
        stop = asyncio.Event()
        running = asyncio.create_task(
            drivers_on_ray(
                db,
                lease_s=LEASE_S,
                poll_s=0.2,
                actor_options=PLACED,
                stop=stop,
                handle_signals=False,
            )
        )
        serving = _serving(running)
        try:
            sent = lambda: ray_fleet_agent.deliveries(other_end)  # noqa: E731
            await _until("every order delivered", lambda: len(sent()) >= 4, serving, 40)
            victim = sent()[0]
            frozen = victim.pid
            os.kill(frozen, signal.SIGSTOP)
            frozen_at = time.time()
            leases = [await store.lease(task_id) for task_id in task_ids]
            [node] = [n for n in cluster.worker_nodes if n.node_id == victim.node_id]
            await asyncio.to_thread(cluster.remove_node, node)
            survived = _exists(frozen)
            states = await _until_ended(store, task_ids, serving, seconds=30)
        finally:
            stop.set()
            report = await asyncio.wait_for(running, 30)
        ledger = Ledger(store)
        entries = {task_id: await ledger.entries(task_id) for task_id in task_ids}
        chains = [await ledger.verify(task_id) for task_id in task_ids]
    finally:
        await store.close()
        if frozen is not None:  # gone with its node, or ended here: it never runs again
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
        for node in list(cluster.worker_nodes):  # the survivor: the next run adds its own
            await asyncio.to_thread(cluster.remove_node, node)
    assert [lost.node_id for lost in report.lost] == [victim.node_id]
    sent_lines = ray_fleet_agent.deliveries(other_end)
    keys = {line.key for line in sent_lines}
    recorded = {r.idempotency_key: r for state in states for r in state.records.values()}
    takeovers = []
    for events in entries.values():
        started = [e for e in events if isinstance(e.event, DriverStarted)]
        if started[0].event.process == frozen:
            [again] = [e for e in started if e.event.epoch == 2]
            takeovers.append(again.at.timestamp() - frozen_at)
    return FaultRun(
        tasks=len(task_ids),
        held=len(takeovers),
        not_terminal=sum(not state.terminal for state in states),
        actions_twice=sum(n - 1 for n in Counter(line.order for line in sent_lines).values()),
        events_lost=len(keys - set(recorded)) + sum(not chain.ok for chain in chains),
        delivered_unknown=sum(
            r.status is RecordStatus.UNKNOWN for key, r in recorded.items() if key in keys
        ),
        takeover_s=max(takeovers, default=0.0),
        survived_removal=survived,
        lease_left_s=min(
            (
                lease.expires_at.timestamp() - frozen_at
                for lease in leases
                if lease is not None and lease.owner == report.lost[0].owner
            ),
            default=0.0,
        ),
    )


@pytest.mark.timeout(60 + 45 * SOAK_FACTOR)
async def test_a_frozen_driver_whose_node_is_removed_hands_its_tasks_over(
    cluster: Any, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP a driver with calls in flight and remove its node: the other driver takes its
    tasks over within lease_s + 2 s, settles each call from its reconcile, sends nothing twice;
    every task ends, every delivery has its record, every chain verifies."""
    for run in range(SOAK_FACTOR):
        other_end = _other_end(tmp_path / f"other-end-{run}.log", monkeypatch)
        outcome = await _freeze_a_driver_and_remove_its_node(cluster, db, other_end, run)
        print(f"run {run}: {outcome.line()}")
        assert outcome.held >= 1, outcome.line()
        assert (outcome.not_terminal, outcome.actions_twice) == (0, 0), outcome.line()
        assert (outcome.events_lost, outcome.delivered_unknown) == (0, 0), outcome.line()
        assert outcome.takeover_s <= LEASE_S + 2, outcome.line()


def _docs_example() -> str:
    """The program of docs/ray.md that runs drivers from Python."""
    blocks = re.findall(r"```py\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)
    [program] = [block for block in blocks if "drivers_on_ray(" in block and "report" in block]
    return program


@pytest.mark.timeout(90)
async def test_the_docs_drivers_program_drains_on_sigterm_and_exits_0(
    cluster: Any, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ray.md's program, run as a process and sent SIGTERM with two calls in flight: its
    driver claims nothing more, lets both calls end, releases the leases, prints the report
    and exits 0 (before, Ray's own handler ended it at once with status 15)."""
    other_end = _other_end(tmp_path / "other-end.log", monkeypatch)
    [node] = _add_driver_nodes(cluster, 1)
    program = _docs_example().replace('"postgresql://pev@db.internal/ledgers"', repr(db))
    script = tmp_path / "drivers.py"
    script.write_text(program, encoding="utf-8")
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    store = pev.open_store(db)
    try:
        task_ids = await _submit(store, "a 3", "b 3")
        serving = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def alive() -> None:
                assert serving.poll() is None, serving.communicate()

            sent = lambda: ray_fleet_agent.deliveries(other_end)  # noqa: E731
            await _until("both orders delivered", lambda: len(sent()) == 2, alive, 60)
            serving.send_signal(signal.SIGTERM)
            out, err = await asyncio.to_thread(serving.communicate, timeout=30)
        finally:
            if serving.poll() is None:
                serving.kill()
                serving.communicate()
        ledger = Ledger(store)
        states = [await ledger.state(task_id) for task_id in task_ids]
        leases = [await store.lease(task_id) for task_id in task_ids]
    finally:
        await store.close()
    assert serving.returncode == 0, err
    printed = [line for line in out.splitlines() if not line.startswith("(")]  # not Ray's
    [driver] = [line.split() for line in printed if line.startswith(node.node_id)]
    assert driver[2:] == ["2", "0"]  # claimed both, ended neither: drained, left to another
    assert printed[-1] == "0 driver(s) lost, 0 replaced"
    # Each call in flight reached its record: nothing left for a takeover to settle.
    records = [record for state in states for record in state.records.values()]
    assert [record.status for record in records] == [RecordStatus.SUCCEEDED] * 2
    assert all(lease is not None and lease.expires_at <= datetime.now(UTC) for lease in leases)
    assert sorted(line.order for line in ray_fleet_agent.deliveries(other_end)) == ["a", "b"]
