"""Control from outside, across real processes (docs/control.md).

A child process runs a payment task whose revisions wait for approval; people decide through the
`pev` command line in other processes; a restart kills the waiting child with SIGKILL; watchers
in two more processes follow the task with `pev events --follow --json`. What the payment tool
did is read from an append-only file the tool itself writes (``PEV_PAYMENTS_LOG``), never from
pev's ledger. Every child is bounded in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support import postgres

from pev.errors import PevError
from pev.ledger import Ledger, TaskPhase, TaskState
from pev.stores import open_store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 60.0  # the most any step waits for a child: far past its real time

RUNNER = """
import asyncio, json, sys
import pev
from tests.support.approval_agent import payments_agent

async def main():
    store = pev.open_store(sys.argv[1])
    try:
        result = await pev.run("pay the invoice", agent=payments_agent, store=store)
    finally:
        await store.close()
    print(json.dumps({"task": result.task_id, "status": result.status, "reason": result.reason}))

asyncio.run(main())
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """What ``--db`` names: an SQLite file, or a schema of its own on the test server."""
    with postgres.ledger_db(request.param, tmp_path) as db:
        yield db


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The children's environment: the test tree importable, the payments log set."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        "PEV_PAYMENTS_LOG": str(tmp_path / "payments.log"),
        "COLUMNS": "200",
    }


def payments(env: dict[str, str]) -> list[str]:
    """The amounts the tool paid, one per line of its own log."""
    log = Path(env["PEV_PAYMENTS_LOG"])
    return [line.split()[-1] for line in log.read_text().splitlines()] if log.exists() else []


def pev_cli(env: dict[str, str], db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the `pev` command line in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "pev", "--db", db, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def runner(env: dict[str, str], db: str) -> subprocess.Popen[str]:
    """A child that runs the payment task to its end and prints its result as JSON."""
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, db],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def state_when(db: str, test: Callable[[TaskState], bool]) -> TaskState:
    """Wait (bounded) until the one task of ``db`` passes ``test``; its state then."""

    async def look() -> TaskState | None:
        store = open_store(db)
        try:
            ledger = Ledger(store)
            tasks = await ledger.tasks()
            return await ledger.state(tasks[0].task_id) if tasks else None
        finally:
            await store.close()

    ends = time.monotonic() + WAIT_S
    while time.monotonic() < ends:
        try:
            state = asyncio.run(look())
        except PevError:  # the child is still creating the file or schema
            state = None
        if state is not None and test(state):
            return state
        time.sleep(0.05)
    raise AssertionError(f"{db}: no task passed the test within {WAIT_S} s")


def awaiting(revision: int) -> Callable[[TaskState], bool]:
    """A test: the task awaits approval of ``revision``."""
    return lambda state: state.awaiting is not None and state.awaiting.revision == revision


def stop(process: subprocess.Popen[str]) -> None:
    """Kill a child (SIGKILL) if it still runs, and close its pipes."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.communicate(timeout=WAIT_S)


def finished(child: subprocess.Popen[str]) -> dict[str, str]:
    """The child's result, once it exits (bounded)."""
    out, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0, err
    result: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return result


def test_approval_from_another_process_through_the_cli(db: str, env: dict[str, str]) -> None:
    """`pev approve` in one process lets the waiting run in another go on; paid exactly once."""
    child = runner(env, db)
    try:
        state = state_when(db, awaiting(1))
        assert payments(env) == []
        shown = pev_cli(env, db, "show", state.task_id)
        assert "approval: asked for actions pay" in shown.stdout
        approved = pev_cli(env, db, "approve", state.task_id[:8], "--by", "ada", "--note", "ok")
        assert approved.returncode == 0, approved.stderr
        assert "revision 1 approved by ada" in approved.stdout
        result = finished(child)
    finally:
        stop(child)
    assert (result["status"], result["reason"]) == ("succeeded", "passed")
    assert payments(env) == ["40"]
    shown = pev_cli(env, db, "show", state.task_id)
    assert "approved by ada: ok" in shown.stdout
    again = pev_cli(env, db, "approve", state.task_id)
    assert again.returncode == 2
    assert "has ended (succeeded/passed): nothing to approve" in again.stderr


def test_rejection_through_the_cli_then_replan(db: str, env: dict[str, str]) -> None:
    """`pev reject --reason` reaches the planner; the next revision waits, is approved, runs."""
    child = runner(env, db)
    try:
        state = state_when(db, awaiting(1))
        rejected = pev_cli(env, db, "reject", state.task_id, "--reason", "pay only 35")
        assert rejected.returncode == 0, rejected.stderr
        assert "planner is told why" in rejected.stdout
        state_when(db, awaiting(2))
        stale = pev_cli(env, db, "approve", state.task_id, "--revision", "1")
        assert stale.returncode == 2
        assert "awaits approval of revision 2, not 1" in stale.stderr
        assert pev_cli(env, db, "approve", state.task_id, "--revision", "2").returncode == 0
        result = finished(child)
    finally:
        stop(child)
    assert result["status"] == "succeeded"
    assert payments(env) == ["35"]  # the rejected 40 was never sent


def test_a_restart_while_awaiting_approval(db: str, env: dict[str, str]) -> None:
    """The waiting run is killed; approved later, `pev resume` finishes it; paid exactly once."""
    child = runner(env, db)
    try:
        state = state_when(db, awaiting(1))
        time.sleep(0.2)
    finally:
        stop(child)  # SIGKILL: no chance to write anything more
    after = state_when(db, lambda s: True)
    assert after.phase is TaskPhase.AWAITING_APPROVAL  # durable: the kill changed nothing
    assert pev_cli(env, db, "approve", state.task_id).returncode == 0
    resumed = pev_cli(env, db, "resume", state.task_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert payments(env) == ["40"]
    final = state_when(db, lambda s: s.terminal)
    assert final.finished is not None
    assert final.finished.status == "succeeded"
    assert [driver.epoch for driver in final.drivers] == [1, 2]


def test_two_watchers_in_two_processes_see_the_ledger_event_for_event(
    db: str, env: dict[str, str]
) -> None:
    """`pev events --follow --json` in two processes print exactly the task's entries, in order."""
    child = runner(env, db)
    watchers: list[subprocess.Popen[str]] = []
    try:
        state = state_when(db, awaiting(1))
        follow = ["events", state.task_id, "--follow", "--json"]
        watchers = [
            subprocess.Popen(
                [sys.executable, "-m", "pev", "--db", db, *follow],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        time.sleep(0.5)  # both are following by now (either way, they read the ledger from seq 1)
        assert pev_cli(env, db, "approve", state.task_id).returncode == 0
        finished(child)
        seen = []
        for watcher in watchers:
            out, err = watcher.communicate(timeout=WAIT_S)
            assert watcher.returncode == 0, err
            seen.append([json.loads(line) for line in out.splitlines()])
    finally:
        for process in (child, *watchers):
            stop(process)

    async def ledger_entries() -> list[tuple[int, str, str]]:
        store = open_store(db)
        try:
            entries = await Ledger(store).entries(state.task_id)
        finally:
            await store.close()
        return [(entry.seq, entry.event.kind, entry.hash) for entry in entries]

    expected = asyncio.run(ledger_entries())
    assert expected[-1][1] == "task_finished"
    for lines in seen:
        assert [(line["seq"], line["kind"], line["hash"]) for line in lines] == expected
