"""`pev events`, `pev approve`, `pev reject` and `pev demo --approve` (docs/control.md).

The cross-process cases (a run waiting in one process, decided from another) are in
tests/test_control_processes.py; these check the commands' output and their errors.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import pev
from pev.cli import cli
from pev.ledger import Ledger, TaskState
from pev.model import Plan, PlanNode
from pev.stores import SQLiteStore


@pev.tool(effect="action")
def pay(amount: int) -> str:
    return f"paid {amount}"


PAYING = Plan("pay", (PlanNode("p", "pay", tool="pay", args={"amount": 5}),))


def _invoke(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    return result.exit_code, result.stdout, result.stderr


def _ran(db: Path, **options: object) -> str:
    """Run a one-payment task to its end on ``db``; its id."""

    async def run() -> str:
        store = SQLiteStore(db)
        try:
            result = await pev.run(
                "pay 5",
                planner=lambda _: PAYING,
                tools=[pay],
                store=store,
                **options,  # type: ignore[arg-type]
            )
        finally:
            await store.close()
        return result.task_id

    return asyncio.run(run())


@pytest.fixture
def waiting(tmp_path: Path) -> Iterator[tuple[Path, str, threading.Thread]]:
    """A task awaiting approval, its run waiting in a thread: the ledger, its id, the thread.

    Whatever the test does, the task is cancelled after it and the thread joined.
    """
    db = tmp_path / "ledger.db"
    ids: list[str] = []

    def run() -> None:
        async def go() -> None:
            store = SQLiteStore(db)
            try:
                async with pev.start(
                    "pay 5",
                    planner=lambda _: PAYING,
                    tools=[pay],
                    store=store,
                    policy=pev.RecoveryPolicy(approval="actions", approval_timeout_s=60),
                ) as handle:
                    ids.append(handle.task_id)
            finally:
                await store.close()

        asyncio.run(go())

    thread = threading.Thread(target=run)
    thread.start()
    ends = time.monotonic() + 30
    while time.monotonic() < ends:
        if ids and _state(db, ids[0]).awaiting is not None:
            break
        time.sleep(0.02)
    try:
        assert ids, "the task never awaited approval"
        yield db, ids[0], thread
    finally:
        if ids:
            _invoke(db, "cancel", ids[0])
        thread.join(timeout=30)


def _state(db: Path, task_id: str) -> TaskState:
    async def read() -> TaskState:
        store = SQLiteStore(db)
        try:
            return await Ledger(store).state(task_id)
        finally:
            await store.close()

    return asyncio.run(read())


def test_events_prints_one_line_per_entry(tmp_path: Path) -> None:
    """Sequence number, UTC time, kind, and what the entry says, oldest first."""
    db = tmp_path / "ledger.db"
    task_id = _ran(db)
    code, out, _ = _invoke(db, "events", task_id[:8])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[0] == "1"
    assert lines[0].split()[2] == "task_created"
    assert "+00:00" in lines[0].split()[1]
    assert any("revision_started  revision 1 (initial)" in line for line in lines)
    assert lines[-1].split()[2] == "task_finished"
    assert "finished: succeeded/execution_succeeded" in lines[-1]
    code, followed, _ = _invoke(db, "events", task_id, "--follow")
    assert (code, followed) == (0, out)  # an ended task: its whole history, then the end


def test_events_json_holds_the_stored_entries(tmp_path: Path) -> None:
    """--json: one document of the entries, with the fields docs/cli.md names; --after skips."""
    db = tmp_path / "ledger.db"
    task_id = _ran(db)
    code, out, _ = _invoke(db, "events", task_id, "--json", "--after", "2")
    assert code == 0
    assert len(out.splitlines()) == 1
    document = json.loads(out)
    assert document["task_id"] == task_id
    lines = document["events"]
    assert [line["seq"] for line in lines] == list(range(3, len(lines) + 3))
    assert set(lines[0]) == {"task_id", "seq", "at", "kind", "event", "hash"}
    assert lines[-1]["kind"] == "task_finished"
    assert lines[-1]["event"]["status"] == "succeeded"


def test_events_of_an_unknown_task_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    _ran(db)
    code, _, err = _invoke(db, "events", "zzzz")
    assert code == 2
    assert "zzzz" in err


def test_approve_and_reject_refuse_a_task_that_is_not_awaiting_approval(tmp_path: Path) -> None:
    """An ended task, a missing or empty reason: exit 2 with one line, nothing written."""
    db = tmp_path / "ledger.db"
    task_id = _ran(db)
    code, _, err = _invoke(db, "approve", task_id)
    assert code == 2
    assert "has ended (succeeded/execution_succeeded): nothing to approve" in err
    code, _, err = _invoke(db, "reject", task_id)
    assert code == 2
    assert "--reason" in err
    code, _, err = _invoke(db, "reject", task_id, "--reason", "no")
    assert code == 2
    assert "nothing to reject" in err
    code, _, err = _invoke(db, "reject", task_id, "--reason", "  ")
    assert code == 2
    assert "must not be empty" in err


def test_approve_a_waiting_task_from_the_command_line(
    waiting: tuple[Path, str, threading.Thread],
) -> None:
    """The run waiting in another thread goes on; `pev show` says who approved, with the note."""
    db, task_id, thread = waiting
    code, out, err = _invoke(db, "show", task_id)
    assert code == 0, err
    assert "approval: asked for actions p" in out
    assert f"pev approve {task_id}" in " ".join(out.split())
    # A run waiting for a person is not a dead one, though it holds no lease while it waits.
    assert "waiting for a person's decision, holding no lease" in " ".join(out.split())
    assert "no live driver" not in out
    # The reviewer sees what would be sent: the action to approve stands out, with its args.
    row = next(line for line in out.splitlines() if "action: to approve" in line)
    assert '{"amount":5}' in row
    code, _, err = _invoke(db, "reject", task_id, "--reason", "  ")
    assert code == 2
    assert "must not be empty" in err
    code, out, err = _invoke(db, "approve", task_id, "--by", "ada", "--note", "checked")
    assert code == 0, err
    assert "revision 1 approved by ada" in out
    thread.join(timeout=30)
    assert not thread.is_alive()
    code, out, _ = _invoke(db, "show", task_id)
    assert "approved by ada: checked" in out
    assert "result: succeeded/execution_succeeded" in out


def test_reject_stop_ends_the_task_with_replans_left(
    waiting: tuple[Path, str, threading.Thread],
) -> None:
    """`pev reject --stop`: failed/rejected at once, though recovery mode has replans left."""
    db, task_id, thread = waiting
    code, out, err = _invoke(db, "reject", task_id, "--reason", "wrong vendor", "--stop")
    assert code == 0, err
    assert "revision 1 rejected by" in out
    thread.join(timeout=30)
    state = _state(db, task_id)
    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == ("failed", "rejected")
    assert "the reviewer stopped the task" in state.finished.detail


def test_reject_ends_a_task_outside_recovery_mode(
    waiting: tuple[Path, str, threading.Thread],
) -> None:
    """A rejection with no replan to make ends the task failed/rejected, and says so."""
    db, task_id, thread = waiting
    code, out, err = _invoke(db, "reject", task_id, "--reason", "not today", "--by", "bob")
    assert code == 0, err
    assert "revision 1 rejected by bob; failed/rejected" in out
    thread.join(timeout=30)
    assert not thread.is_alive()
    code, out, _ = _invoke(db, "events", task_id)
    assert "rejected by bob: not today" in out


def test_demo_approve_waits_for_the_arm_plan(tmp_path: Path) -> None:
    """`pev demo --approve` stops before the arm moves; approving each revision finishes it."""
    pytest.importorskip("pev.sim", reason="`pev demo` needs the sim extra", exc_type=ImportError)
    db = tmp_path / "ledger.db"
    outcome: list[tuple[int, str, str]] = []
    thread = threading.Thread(
        target=lambda: outcome.append(_invoke(db, "demo", "--fault", "slip", "--approve"))
    )
    thread.start()
    approved = 0
    ends = time.monotonic() + 120
    while thread.is_alive() and time.monotonic() < ends:
        time.sleep(0.05)
        if not db.exists():
            continue
        try:
            tasks = asyncio.run(_tasks(db))
        except pev.PevError:
            continue
        if tasks and (state := _state(db, tasks[0])).awaiting is not None:
            assert _invoke(db, "approve", state.task_id)[0] == 0
            approved += 1
    thread.join(timeout=5)
    code, out, _ = outcome[0]
    assert code == 0
    assert approved == 2  # the initial plan, then the local replan of the slipped cube
    assert "awaiting approval of revision 1" in out
    assert "approved by" in out
    assert "as documented: plan_or_answer_error → local replan → succeeded/passed" in out


async def _tasks(db: Path) -> list[str]:
    store = SQLiteStore(db)
    try:
        return [summary.task_id for summary in await Ledger(store).tasks()]
    finally:
        await store.close()
