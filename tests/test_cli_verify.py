"""`pev ledger verify` from the events, damage reported task by task, and anchors (security.md).

The ledgers are damaged the way an edit of the database file would damage them: rows changed or
deleted with the append-only triggers dropped, the task index edited to match.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.support import postgres

import pev
from pev.cli import cli
from pev.model import Plan, PlanNode
from pev.testing import FunctionExecutor, ScriptedPlanner

TASKS = ("task-a", "task-b", "task-c")


def _agent() -> pev.Agent:
    plan = Plan(
        "look twice", (PlanNode("a", "look", tool="look"), PlanNode("b", "look", tool="look"))
    )
    return pev.Agent(ScriptedPlanner(plan), executor=FunctionExecutor({"look": lambda: 1}))


async def _write(target: str, task_ids: tuple[str, ...]) -> None:
    store = pev.open_store(target)
    try:
        for task_id in task_ids:
            await pev.run("look", agent=_agent(), store=store, task_id=task_id)
    finally:
        await store.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """An SQLite ledger of three ended tasks, each of several events."""
    path = tmp_path / "ledger.db"
    asyncio.run(_write(str(path), TASKS))
    return path


def _pev(db: Path | str, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin, env={"COLUMNS": "250"})


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def _sql(db: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    """Run statements on the file; ``params`` go to the last one."""
    with sqlite3.connect(db) as conn:
        for index, statement in enumerate(statements, start=1):
            conn.execute(statement, params if index == len(statements) else ())


def _count(db: Path, task_id: str) -> int:
    with sqlite3.connect(db) as conn:
        query = "SELECT count(*) FROM pev_events WHERE task_id = ?"
        return int(conn.execute(query, (task_id,)).fetchone()[0])


def _drop_suffix(db: Path, task_id: str, keep: int) -> None:
    """Delete the task's events after ``keep`` and edit its index row to match: no trace left."""
    _sql(
        db,
        "DROP TRIGGER IF EXISTS pev_events_no_delete",
        "DELETE FROM pev_events WHERE task_id = ? AND seq > ?",
        params=(task_id, keep),
    )
    _sql(
        db,
        "UPDATE pev_tasks SET event_count = ?, head_hash = (SELECT hash FROM pev_events "
        "WHERE task_id = ? AND seq = ?) WHERE task_id = ?",
        params=(keep, task_id, keep, task_id),
    )


def test_an_intact_ledger_verifies_exit_0(db: Path) -> None:
    """Every task is checked and found whole: exit 0."""
    result = _pev(db, "ledger", "verify")
    assert result.exit_code == 0, result.output
    assert _lines(result.output)[-1] == "3 task(s) checked, 0 failed verification"


def test_a_task_whose_index_row_was_deleted_is_still_checked(db: Path) -> None:
    """Tasks are listed from the events: a task without an index row is named as disagreeing."""
    _sql(db, "DELETE FROM pev_tasks WHERE task_id = 'task-b'")
    result = _pev(db, "ledger", "verify")
    assert result.exit_code == 1
    (bad,) = [line for line in _lines(result.output) if line.startswith("BAD")]
    assert "task-b" in bad
    assert "index" in bad
    assert _lines(result.output)[-1] == "3 task(s) checked, 1 failed verification"


def test_each_damaged_task_is_reported_and_the_check_goes_on(db: Path) -> None:
    """Two changed tasks are each named at their first bad event; the third is checked too."""
    _sql(
        db,
        "DROP TRIGGER pev_events_no_update",
        "UPDATE pev_events SET at = replace(at, '20', '19') WHERE task_id = 'task-a' AND seq = 2",
        "UPDATE pev_events SET hash = (CASE WHEN hash LIKE '0%' THEN '1' ELSE '0' END) "
        "|| substr(hash, 2) WHERE task_id = 'task-c' AND seq = 4",
    )
    result = _pev(db, "ledger", "verify")
    assert result.exit_code == 1
    lines = _lines(result.output)
    assert any(line.startswith("BAD task-a") and "event 2" in line for line in lines)
    assert any(line.startswith("BAD task-c") and "event 4" in line for line in lines)
    assert any(line.startswith("ok") and "task-b" in line for line in lines)
    assert lines[-1] == "3 task(s) checked, 2 failed verification"


def test_an_undecodable_event_does_not_abort_the_run(db: Path) -> None:
    """An event whose bytes are not UTF-8 is reported at its seq; every other task is checked."""
    _sql(
        db,
        "DROP TRIGGER pev_events_no_update",
        "UPDATE pev_events SET event = CAST(X'7B22FF22' AS TEXT) "
        "WHERE task_id = 'task-b' AND seq = 3",
    )
    result = _pev(db, "ledger", "verify")
    assert result.exit_code == 1
    lines = _lines(result.output)
    assert any(line.startswith("BAD task-b") and "event 3" in line for line in lines)
    assert sum(line.startswith("ok") for line in lines) == 2
    assert "Traceback" not in result.output


def test_named_tasks_only_are_checked(db: Path) -> None:
    """TASK arguments (ids or prefixes) limit the check to those tasks."""
    result = _pev(db, "ledger", "verify", "task-a", "task-c")
    assert result.exit_code == 0
    assert _lines(result.output)[-1] == "2 task(s) checked, 0 failed verification"


def test_an_unknown_task_is_a_usage_error(db: Path) -> None:
    """A TASK that names no task: one line, exit 2."""
    result = _pev(db, "ledger", "verify", "nope")
    assert result.exit_code == 2
    (line,) = _lines(result.output)
    assert "no task with id 'nope'" in line


@pytest.mark.parametrize("command", ["verify", "anchor"])
def test_an_empty_file_is_an_error_not_an_empty_ledger(tmp_path: Path, command: str) -> None:
    """A 0-byte --db is not "0 tasks checked": one line, exit 2, and the file is left empty."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = _pev(empty, "ledger", command)
    assert result.exit_code == 2
    (line,) = _lines(result.output)
    assert "is an empty file, not a pev ledger" in line
    assert empty.stat().st_size == 0


@pytest.mark.parametrize("command", ["verify", "anchor"])
def test_a_missing_file_is_an_error_and_is_not_created(tmp_path: Path, command: str) -> None:
    """A --db that does not exist: one line, exit 2, and no ledger is created there."""
    missing = tmp_path / "typo.db"
    result = _pev(missing, "ledger", command)
    assert result.exit_code == 2
    assert "there is no ledger at" in result.output
    assert not missing.exists()


def test_anchor_prints_each_head_as_json_lines(db: Path) -> None:
    """One JSON object per task: its id, the seq and the hash of its last stored event."""
    result = _pev(db, "ledger", "anchor")
    assert result.exit_code == 0
    anchors = [json.loads(line) for line in _lines(result.output)]
    with sqlite3.connect(db) as conn:
        heads = [
            {"task_id": task_id, "seq": seq, "hash": digest}
            for task_id, seq, digest in conn.execute(
                "SELECT task_id, seq, hash FROM pev_events e WHERE seq = "
                "(SELECT max(seq) FROM pev_events WHERE task_id = e.task_id) ORDER BY task_id"
            )
        ]
    assert anchors == heads


def test_anchor_refuses_a_broken_task_and_prints_the_others(db: Path) -> None:
    """A task that fails verification is named on stderr, not anchored; exit 1."""
    _sql(
        db,
        "DROP TRIGGER pev_events_no_update",
        "UPDATE pev_events SET at = replace(at, '20', '19') WHERE task_id = 'task-b' AND seq = 2",
    )
    result = _pev(db, "ledger", "anchor")
    assert result.exit_code == 1
    printed = [json.loads(line)["task_id"] for line in _lines(result.stdout)]
    assert printed == ["task-a", "task-c"]
    (line,) = _lines(result.stderr)
    assert "task task-b not anchored: it fails verification at event 2" in line


def test_a_dropped_suffix_passes_verify_but_fails_the_anchors(db: Path, tmp_path: Path) -> None:
    """Events dropped with the index edited to match: plain verify passes, --anchors does not."""
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text(_pev(db, "ledger", "anchor").stdout, encoding="utf-8")
    before = _count(db, "task-b")
    _drop_suffix(db, "task-b", keep=before - 2)
    assert _pev(db, "ledger", "verify").exit_code == 0
    result = _pev(db, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 1
    (bad,) = [line for line in _lines(result.output) if line.startswith("BAD")]
    assert f"task-b  anchor at event {before}: event {before} is gone" in bad
    assert f"the ledger ends at event {before - 2}" in bad
    assert _lines(result.output)[-1].endswith("3 anchor(s) checked, 1 not found as anchored")


def test_anchors_of_an_intact_ledger_are_found(db: Path, tmp_path: Path) -> None:
    """Anchors taken earlier, the tasks unchanged since: every anchor is found, exit 0."""
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text(_pev(db, "ledger", "anchor").stdout, encoding="utf-8")
    result = _pev(db, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 0
    assert _lines(result.output)[-1].endswith("3 anchor(s) checked, 0 not found as anchored")


def test_an_anchor_whose_hash_differs_fails(db: Path, tmp_path: Path) -> None:
    """The anchored seq is there but its hash is another: the chain was rewritten."""
    (first, *_) = _lines(_pev(db, "ledger", "anchor").stdout)
    anchor = json.loads(first)
    anchor["hash"] = "0" * 64
    result = _pev(db, "ledger", "verify", "--anchors", "-", stdin=json.dumps(anchor) + "\n")
    assert result.exit_code == 1
    assert "the chain was rewritten" in result.output


def test_an_anchored_task_that_vanished_is_reported(db: Path, tmp_path: Path) -> None:
    """A task deleted whole (events and index row) is still checked through its anchor."""
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text(_pev(db, "ledger", "anchor").stdout, encoding="utf-8")
    _sql(
        db,
        "DROP TRIGGER pev_events_no_delete",
        "DELETE FROM pev_events WHERE task_id = 'task-c'",
        "DELETE FROM pev_tasks WHERE task_id = 'task-c'",
    )
    result = _pev(db, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 1
    bad = [line for line in _lines(result.output) if line.startswith("BAD")]
    assert any("task-c  anchor at event" in line and "no event" in line for line in bad)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("not json", id="not-json"),
        pytest.param('["task-a", 1, "ab"]', id="not-an-object"),
        pytest.param('{"task_id": "task-a", "seq": 0, "hash": "ab"}', id="seq-below-1"),
        pytest.param('{"task_id": "task-a", "seq": true, "hash": "ab"}', id="seq-a-boolean"),
        pytest.param('{"task_id": "task-a", "seq": 2}', id="no-hash"),
        pytest.param('{"task_id": "", "seq": 2, "hash": "ab"}', id="empty-id"),
        pytest.param("[" * 5000, id="deep"),
    ],
)
def test_a_bad_anchors_line_is_a_usage_error(db: Path, tmp_path: Path, line: str) -> None:
    """A line that is not an anchor: one line naming the file and line number, exit 2."""
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text(f"\n{line}\n", encoding="utf-8")
    result = _pev(db, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 2
    (message,) = _lines(result.output)
    assert f"{anchors} line 2 is not an anchor" in message


def test_an_empty_anchors_file_is_a_usage_error(db: Path, tmp_path: Path) -> None:
    """An anchors file with no anchor in it (a failed redirect, say) is refused: exit 2."""
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text("\n", encoding="utf-8")
    result = _pev(db, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 2
    assert "holds no anchors" in result.output


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL schema (skipped without a server)."""
    with postgres.throwaway_url() as url:
        yield url


def test_postgres_a_dropped_suffix_fails_the_anchors(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL too: a suffix dropped with the index edited passes verify, fails the anchors."""
    asyncio.run(_write(pg_url, ("pg-a",)))
    schema = pg_url.rsplit("schema=", 1)[1]
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text(_pev(pg_url, "ledger", "anchor").stdout, encoding="utf-8")
    (head,) = [json.loads(line) for line in _lines(anchors.read_text(encoding="utf-8"))]
    keep = head["seq"] - 1
    postgres.execute(
        "ALTER TABLE {s}.pev_events DISABLE TRIGGER USER",
        "DELETE FROM {s}.pev_events WHERE task_id = 'pg-a' AND seq > %s",
        schema=schema,
        params=(keep,),
    )
    postgres.execute(
        "UPDATE {s}.pev_tasks SET event_count = %s, head_hash = (SELECT hash FROM "
        "{s}.pev_events WHERE task_id = 'pg-a' AND seq = %s) WHERE task_id = 'pg-a'",
        schema=schema,
        params=(keep, keep),
    )
    assert _pev(pg_url, "ledger", "verify").exit_code == 0
    result = _pev(pg_url, "ledger", "verify", "--anchors", str(anchors))
    assert result.exit_code == 1
    assert f"event {head['seq']} is gone" in result.output


def test_postgres_a_task_without_its_index_row_is_checked(pg_url: str) -> None:
    """On PostgreSQL too, tasks are listed from the events: a deleted index row is reported."""
    asyncio.run(_write(pg_url, ("pg-a", "pg-b")))
    schema = pg_url.rsplit("schema=", 1)[1]
    postgres.execute("DELETE FROM {s}.pev_tasks WHERE task_id = 'pg-b'", schema=schema)
    result = _pev(pg_url, "ledger", "verify")
    assert result.exit_code == 1
    assert any(line.startswith("BAD pg-b") for line in _lines(result.output))


def test_postgres_a_schema_without_a_ledger_is_refused_and_left_empty(pg_url: str) -> None:
    """verify on a schema with no pev tables: one line, exit 2, and no tables are created."""
    result = _pev(pg_url, "ledger", "verify")
    assert result.exit_code == 2
    assert "holds no pev ledger" in result.output
    schema = pg_url.rsplit("schema=", 1)[1]
    rows = postgres.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s", params=(schema,)
    )
    assert rows == [(0,)]


def test_a_keyed_ledger_reports_its_sealed_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PEV_LEDGER_KEY, each task's line counts the events sealed with the key."""
    monkeypatch.setenv("PEV_LEDGER_KEY", "correct horse")
    db = tmp_path / "keyed.db"
    asyncio.run(_write(str(db), ("k-1",)))
    result = _pev(db, "ledger", "verify")
    assert result.exit_code == 0
    events = _count(db, "k-1")
    assert f"ok  k-1  ({events} events, {events} sealed with the key)" in result.output


@pytest.mark.parametrize("command", ["verify", "anchor"])
def test_a_keyed_ledger_checked_without_the_key_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Without the key, keyed events cannot be checked: the message names PEV_LEDGER_KEY."""
    monkeypatch.setenv("PEV_LEDGER_KEY", "correct horse")
    db = tmp_path / "keyed.db"
    asyncio.run(_write(str(db), ("k-1",)))
    monkeypatch.delenv("PEV_LEDGER_KEY")
    result = _pev(db, "ledger", command)
    assert result.exit_code == 1
    assert "PEV_LEDGER_KEY" in result.output


def test_show_of_a_keyed_task_without_the_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pev show` cannot check a keyed chain without the key: one line naming it, exit 2."""
    monkeypatch.setenv("PEV_LEDGER_KEY", "correct horse")
    db = tmp_path / "keyed.db"
    asyncio.run(_write(str(db), ("k-1",)))
    monkeypatch.delenv("PEV_LEDGER_KEY")
    result = _pev(db, "show", "k-1")
    assert result.exit_code == 2
    (line,) = _lines(result.output)
    assert "it was not used: set PEV_LEDGER_KEY to the key the ledger was written with" in line
