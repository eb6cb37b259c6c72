"""`pev show`, `pev resume`, `pev.resume` and workers verify a task's chain before they use it.

A chain that fails verification (an event changed after it was written, here) is refused with
its first bad event: one line and exit 2 on the command line, ``LedgerCorruptError`` from the
API, a one-line log and a skipped task in a worker (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.support.refusals import refusals, waiting_task, worker_until

import pev
from pev.cli import cli
from pev.engine import WorkerReport
from pev.engine._trust import check_chain
from pev.errors import LedgerCorruptError
from pev.ledger import Lease, Ledger, TaskSummary
from pev.model import Plan, PlanNode
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner


def _plan() -> Plan:
    return Plan(
        "look twice", (PlanNode("a", "look", tool="look"), PlanNode("b", "look", tool="look"))
    )


def _agent() -> pev.Agent:
    return pev.Agent(ScriptedPlanner(_plan()), executor=FunctionExecutor({"look": lambda: 1}))


async def _finished_task(db: Path) -> str:
    store = SQLiteStore(db)
    try:
        result = await pev.run("look", agent=_agent(), store=store)
    finally:
        await store.close()
    return result.task_id


def _change_event(db: Path, task_id: str, seq: int) -> None:
    """Change the stored time of one event after the fact, as an edit of the file would."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER pev_events_no_update")
        changed = conn.execute(
            "UPDATE pev_events SET at = replace(at, '20', '19') WHERE task_id = ? AND seq = ?",
            (task_id, seq),
        ).rowcount
    assert changed == 1


def _count_events(db: Path, task_id: str) -> int:
    with sqlite3.connect(db) as conn:
        query = "SELECT count(*) FROM pev_events WHERE task_id = ?"
        return int(conn.execute(query, (task_id,)).fetchone()[0])


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


@pytest.mark.parametrize("command", ["show", "resume"])
def test_the_command_refuses_a_broken_chain_naming_its_first_bad_event(
    tmp_path: Path, command: str
) -> None:
    """`pev show` and `pev resume` of a changed task: one line naming event 2, exit 2."""
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(_finished_task(db))
    _change_event(db, task_id, 2)
    result = CliRunner().invoke(cli, ["--db", str(db), command, task_id])
    assert result.exit_code == 2
    (line,) = _lines(result.output)
    assert f"task {task_id}: its ledger fails verification at event 2" in line
    assert "pev ledger verify" in line


def test_show_still_shows_an_intact_task(tmp_path: Path) -> None:
    """The check lets an intact chain through: `pev show` prints the task."""
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(_finished_task(db))
    result = CliRunner().invoke(cli, ["--db", str(db), "show", task_id])
    assert result.exit_code == 0
    assert "result: succeeded" in result.output


def test_resume_raises_ledger_corrupt_error_with_the_seq(tmp_path: Path) -> None:
    """pev.resume raises LedgerCorruptError naming the task and the first bad event."""
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(_finished_task(db))
    _change_event(db, task_id, 3)

    async def resume() -> None:
        store = SQLiteStore(db)
        try:
            await pev.resume(task_id, store=store, agent=_agent())
        finally:
            await store.close()

    with pytest.raises(LedgerCorruptError) as raised:
        asyncio.run(resume())
    assert (raised.value.task_id, raised.value.seq) == (task_id, 3)
    assert "event 3" in str(raised.value)


class _CountedClaims(SQLiteStore):
    """An SQLite store that counts the worker's looks for tasks."""

    looks = 0

    async def claim(
        self, owner: str, *, now: datetime, lease_s: float, limit: int
    ) -> tuple[Lease, ...]:
        self.looks += 1
        return await super().claim(owner, now=now, lease_s=lease_s, limit=limit)


def test_a_worker_skips_a_broken_task_without_claiming_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker logs one line, drives nothing, and looks on without claiming it again."""
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(waiting_task(db))
    _change_event(db, task_id, 1)
    now = datetime.fromisoformat("2030-01-01T00:00:00+00:00")

    async def work() -> WorkerReport:
        store = _CountedClaims(db)
        looks_at_refusal: list[int] = []

        def ten_more_looks() -> bool:  # after the refusal: each would claim it again, if it could
            if not refusals(caplog):
                return False
            looks_at_refusal[:] = looks_at_refusal or [store.looks]
            return store.looks >= looks_at_refusal[0] + 10

        try:
            return await worker_until(store, ten_more_looks, agent=_agent(), clock=lambda: now)
        finally:
            await store.close()

    with caplog.at_level(logging.INFO, logger="pev.worker"):
        report = asyncio.run(asyncio.wait_for(work(), timeout=30))
    assert (report.claimed, report.failed, report.ended) == (1, 1, 0)
    (refused,) = refusals(caplog)
    assert "fails verification at event 1" in refused.getMessage()
    assert refused.exc_info is None
    assert _count_events(db, task_id) == 1


class _AppendsDuringTheCheck(SQLiteStore):
    """A store where another writer appends right after the check reads the task's index row."""

    races = 1

    async def summary(self, task_id: str) -> TaskSummary | None:
        row = await super().summary(task_id)
        if self.races:
            self.races -= 1
            await Ledger(self).cancel(task_id, reason="from another process")
        return row


def test_an_append_during_the_check_is_not_taken_for_damage(tmp_path: Path) -> None:
    """Index row and events read either side of an honest append disagree once: checked again."""
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(waiting_task(db))

    async def check() -> None:
        store = _AppendsDuringTheCheck(db)
        try:
            await check_chain(Ledger(store), task_id)
        finally:
            await store.close()

    asyncio.run(check())
    assert _count_events(db, task_id) == 2  # the check saw the append happen
