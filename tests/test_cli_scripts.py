"""The command line in scripts (docs/cli.md): --db anywhere, --json, pipes, live progress, times.

Every --json document is checked against the schema pev ships for it (pev.cli.JSON_SCHEMAS).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from rich.console import Console

import pev
from pev.cli import JSON_SCHEMAS, cli
from pev.experience import Episode, Lesson, LessonKey, LessonStatus
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import Ledger, NodeDispatched, NodeFinished
from pev.model import Effect, ExecutionRecord, Plan, PlanNode, RecordId, RecordStatus, TaskId
from pev.rails import ConsoleRail, RailEvent, RailPhase
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d")
LONG_GOAL = "publish the forecast for " + "many cities, " * 6 + "and one more"


@pev.tool(effect="action")
def pay(amount: int) -> str:
    return f"paid {amount}"


BIG_ID = 2**64 + 1  # past 64 bits, and past the integers a double holds exactly


@pev.tool(effect="query")
def next_id(after: int) -> dict[str, int]:
    return {"id": after + 1, "snowflake": 9876543210123457}


PAY = PlanNode("p", "pay", tool="pay", args={"amount": 5})
# Its args and its output hold integers past ±(2**53-1).
NEXT_ID = PlanNode("n", "next id", tool="next_id", args={"after": BIG_ID})


def _ran(db: Path, *, task_id: str = "pay-1", node: PlanNode = PAY) -> str:
    """A one-node task run to its end on ``db``, with a goal far wider than 80 columns."""
    plan = Plan(node.description, (node,))

    async def run() -> str:
        store = SQLiteStore(db)
        try:
            result = await pev.run(
                "pay 5",
                planner=lambda _: plan,
                tools=[pay, next_id],
                store=store,
                task_id=task_id,
                contract=pev.VerificationContract(mode="off", goal=LONG_GOAL),
            )
        finally:
            await store.close()
        return result.task_id

    return asyncio.run(run())


def _pev(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def _valid(command: str, out: str) -> dict[str, object]:
    """``out`` as one JSON document, valid against the schema of ``command``'s --json."""
    assert len(out.splitlines()) == 1, out
    document = json.loads(out)
    schema = JSON_SCHEMAS[command]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(document)
    assert isinstance(document, dict)
    return document


# -- --db before or after the command --------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("tasks",), id="tasks"),
        pytest.param(("show", "pay-1"), id="show"),
        pytest.param(("events", "pay-1"), id="events"),
        pytest.param(("lessons",), id="lessons"),
        pytest.param(("ledger", "verify"), id="ledger-verify"),
        pytest.param(("ledger", "anchor"), id="ledger-anchor"),
        pytest.param(("db", "upgrade"), id="db-upgrade"),
    ],
)
def test_db_works_after_the_command(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`pev tasks --db x` reads x, as `pev --db x tasks` does."""
    db = tmp_path / "ledger.db"
    _ran(db)
    before = _pev("--db", str(db), *args)
    after = _pev(*args, "--db", str(db))
    assert after[0] == before[0] == 0, after
    assert after[1] == before[1]


def test_db_after_the_command_wins(tmp_path: Path) -> None:
    """Given twice, the --db after the command name is the one read."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("--db", str(tmp_path / "other.db"), "tasks", "--db", str(db), "--json")
    assert code == 0
    assert [row["task_id"] for row in json.loads(out)["tasks"]] == ["pay-1"]


def test_every_command_takes_db_after_it() -> None:
    """Each command (nested ones too) lists --db in its own help."""
    for args in (["run"], ["submit"], ["worker"], ["cancel"], ["ledger", "export"], ["demo"]):
        code, out, _ = _pev(*args, "--help")
        assert code == 0
        assert "--db PATH|URL" in out, args


# -- --json ----------------------------------------------------------------------------------


def test_tasks_json(tmp_path: Path) -> None:
    """`pev tasks --json` is one document of the documented fields, times with offsets."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("tasks", "--db", str(db), "--json")
    assert code == 0
    document = _valid("tasks", out)
    (row,) = document["tasks"]  # type: ignore[misc]
    assert row["task_id"] == "pay-1"
    assert row["status"] == "succeeded"
    assert row["title"] == LONG_GOAL
    assert ISO.fullmatch(row["updated_at"])


def test_tasks_json_of_an_empty_ledger(tmp_path: Path) -> None:
    """No task: an empty list, not a sentence."""
    asyncio.run(SQLiteStore(tmp_path / "ledger.db").close())  # reading never creates one
    code, out, _ = _pev("tasks", "--db", str(tmp_path / "ledger.db"), "--json")
    assert code == 0
    assert _valid("tasks", out)["tasks"] == []


def test_show_json(tmp_path: Path) -> None:
    """`pev show --json`: the task, its revision, node, record and decision."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("show", "pay", "--db", str(db), "--json")
    assert code == 0
    document = _valid("show", out)
    assert document["task_id"] == "pay-1"
    assert document["status"] == "succeeded"
    (revision,) = document["revisions"]  # type: ignore[misc]
    (node,) = revision["nodes"]
    assert node["state"] == "succeeded"
    assert node["record"]["status"] == "succeeded"
    assert revision["decisions"][0]["decision"]["kind"] == "finish"
    assert document["outputs"] == {"p": "paid 5"}


def test_show_json_carries_big_integers_exactly(tmp_path: Path) -> None:
    """`pev show --json` writes args and outputs past ±(2**53-1) as their exact digits."""
    db = tmp_path / "ledger.db"
    _ran(db, task_id="big-1", node=NEXT_ID)
    code, out, _ = _pev("show", "big-1", "--db", str(db), "--json")
    assert code == 0
    document = _valid("show", out)
    assert document["outputs"] == {"n": {"id": BIG_ID + 1, "snowflake": 9876543210123457}}
    assert document["revisions"][0]["nodes"][0]["args"] == {"after": BIG_ID}  # type: ignore[index]
    assert '"id":18446744073709551618,' in out


def test_events_json_carries_big_integers_exactly(tmp_path: Path) -> None:
    """`pev events --json` writes the events' integers past ±(2**53-1) as their exact digits."""
    db = tmp_path / "ledger.db"
    _ran(db, task_id="big-1", node=NEXT_ID)
    code, out, _ = _pev("events", "big-1", "--db", str(db), "--json")
    assert code == 0
    _valid("events", out)
    assert '{"after":18446744073709551617}' in out
    assert '"snowflake":9876543210123457' in out


def test_events_json_with_follow_is_json_lines(tmp_path: Path) -> None:
    """--follow --json prints one event object per line, each valid as documented."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("events", "pay-1", "--follow", "--json", "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) > 3
    for line in lines:
        _valid("events --follow", line)
    code, out, _ = _pev("events", "pay-1", "--json", "--db", str(db))
    assert len(_valid("events", out)["events"]) == len(lines)  # type: ignore[arg-type]


def _lesson(db: Path) -> str:
    """One active lesson, supported by one ended task, stored in ``db``; its id."""
    key = LessonKey(cause=RootCause.DEVICE_FAILURE, tool="pay", effect=Effect.ACTION)
    lesson = Lesson(
        id=key.id,
        key=key,
        text="After a pay step fails, check the account first.",
        status=LessonStatus.ACTIVE,
        support=(TaskId("pay-1"),),
        independent=1,
    )
    episode = Episode(
        task_id=TaskId("pay-1"),
        input_digest="0" * 64,
        goal="pay",
        mode=pev.VerificationMode.RECOVERY,
        status=TaskStatus.FAILED,
        reason=TerminalReason.DEVICE_FAILURE,
        ended_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )

    async def save() -> None:
        store = SQLiteStore(db)
        try:
            await store.save_lesson(lesson)
            await store.save_episode(episode, supports=[lesson.id])
        finally:
            await store.close()

    asyncio.run(save())
    return lesson.id


def test_lessons_json(tmp_path: Path) -> None:
    """`pev lessons --json` lists them; `pev lessons ID --json` adds the episodes."""
    db = tmp_path / "ledger.db"
    lesson_id = _lesson(db)
    code, out, _ = _pev("lessons", "--json", "--db", str(db))
    assert code == 0
    (lesson,) = _valid("lessons", out)["lessons"]  # type: ignore[misc]
    assert lesson["id"] == lesson_id
    assert lesson["cause"] == "device_failure"
    code, out, _ = _pev("lessons", lesson_id[:8], "--json", "--db", str(db))
    assert code == 0
    document = _valid("lessons LESSON", out)
    assert [e["task_id"] for e in document["episodes"]] == ["pay-1"]  # type: ignore[attr-defined]


def test_ledger_verify_json(tmp_path: Path) -> None:
    """`pev ledger verify --json`: each task's chain, and ok; the exit code is unchanged."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("ledger", "verify", "--json", "--db", str(db))
    assert code == 0
    document = _valid("ledger verify", out)
    assert document["ok"] is True
    assert [task["task_id"] for task in document["tasks"]] == ["pay-1"]  # type: ignore[attr-defined]


def test_ledger_verify_json_reports_a_bad_anchor(tmp_path: Path) -> None:
    """A dropped anchor is in the document, not ok, and the command exits 1."""
    db = tmp_path / "ledger.db"
    _ran(db)
    anchors = tmp_path / "anchors.jsonl"
    anchors.write_text('{"task_id": "pay-1", "seq": 99, "hash": "00"}\n', encoding="utf-8")
    code, out, _ = _pev("ledger", "verify", "--anchors", str(anchors), "--json", "--db", str(db))
    assert code == 1
    document = _valid("ledger verify", out)
    assert document["ok"] is False
    (anchor,) = document["anchors"]  # type: ignore[misc]
    assert not anchor["ok"]
    assert anchor["problem"]


def test_every_object_in_the_schemas_lists_its_fields() -> None:
    """Every object schema names its fields, all required, and no other (documented names)."""

    def objects(node: object) -> list[dict[str, object]]:
        found = []
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                found.append(node)
            for value in node.values():
                found += objects(value)
        elif isinstance(node, list):
            for value in node:
                found += objects(value)
        return found

    for schema in JSON_SCHEMAS.values():
        for obj in objects(dict(schema)):
            assert obj["additionalProperties"] is False
            assert obj["required"] == sorted(obj["properties"])  # type: ignore[call-overload]


def test_docs_name_every_top_level_field() -> None:
    """docs/cli.md names each field of each --json document."""
    docs = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    for schema in JSON_SCHEMAS.values():
        for field in schema["properties"]:
            assert f"`{field}`" in docs, field


# -- pipes: no wrapping, no colour, a closed pipe stops nothing ------------------------------


def test_piped_output_is_not_wrapped_or_coloured(tmp_path: Path) -> None:
    """Through a pipe, a title wider than 80 columns stays on its line, without ANSI codes."""
    db = tmp_path / "ledger.db"
    _ran(db)
    env = {**os.environ, "COLUMNS": "", "FORCE_COLOR": "", "TERM": "xterm-256color"}
    env.pop("COLUMNS")
    env.pop("FORCE_COLOR")
    for args in (["tasks"], ["show", "pay-1"]):
        done = subprocess.run(
            [sys.executable, "-m", "pev", "--db", str(db), *args],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert "\x1b[" not in done.stdout
        assert any(LONG_GOAL.strip() in line for line in done.stdout.splitlines()), done.stdout


AGENT = """
import time

import pev
from pev.model import Plan, PlanNode, Verdict


@pev.tool(effect="query")
def slow(n: int) -> int:
    time.sleep(0.3)
    return n


def planner(request):
    nodes = tuple(
        PlanNode(f"n{i}", "wait", tool="slow", args={"n": i}, after=(f"n{i - 1}",) if i else ())
        for i in range(4)
    )
    return Plan("wait four times", nodes)


def verifier(request):
    return Verdict.passed(request.contract)
"""

TASK = """
input = "wait"

[components]
planner = "agent:planner"
tools = ["agent:slow"]
verifier = "agent:verifier"
"""


def test_a_closed_pipe_never_kills_a_run(tmp_path: Path) -> None:
    """`pev run task.toml | head -1`: the task still finishes, is recorded, and exits 0."""
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "task.toml").write_text(textwrap.dedent(TASK), encoding="utf-8")
    db = tmp_path / "ledger.db"
    run = subprocess.Popen(
        [sys.executable, "-m", "pev", "--db", str(db), "run", "--task-id", "w-1", "task.toml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None
    assert run.stdout.readline().startswith(b"task w-1 started")
    run.stdout.close()  # the reader goes away, as head -1 does
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err.decode()
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err

    async def state() -> pev.TaskState:
        store = SQLiteStore(db)
        try:
            return await Ledger(store).state("w-1")
        finally:
            await store.close()

    finished = asyncio.run(state()).finished
    assert finished is not None
    assert finished.status is TaskStatus.SUCCEEDED


def test_a_closed_pipe_keeps_the_exit_code_of_a_failed_run(tmp_path: Path) -> None:
    """The exit code is still the task's status after the reader has gone."""
    agent = AGENT.replace(
        "Verdict.passed(request.contract)", "Verdict.failed(request.contract, feedback='no')"
    )
    (tmp_path / "agent.py").write_text(agent, encoding="utf-8")
    task = TASK.replace("[components]", "[policy]\nmax_replans = 0\n\n[components]")
    (tmp_path / "task.toml").write_text(textwrap.dedent(task), encoding="utf-8")
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash, for its PIPESTATUS")
    command = f"{sys.executable} -m pev --db ledger.db run task.toml | head -1"
    done = subprocess.run(
        [bash, "-c", f"{command}; exit ${{PIPESTATUS[0]}}"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr.decode()
    assert done.stdout.decode().startswith("task ")
    assert b"Traceback" not in done.stderr


# -- live progress and the console rail --------------------------------------------------------


def _record(node: str, at: datetime) -> ExecutionRecord:
    return ExecutionRecord(
        id=RecordId(f"r-{node}"),
        task_id=TaskId("t"),
        revision=1,
        node_id=node,
        tool="slow",
        args_digest="0",
        effect=Effect.QUERY,
        idempotency_key="k",
        status=RecordStatus.RUNNING,
        created_at=at,
        updated_at=at,
    )


def _event(phase: RailPhase, record: ExecutionRecord, at: datetime) -> RailEvent:
    event: NodeDispatched | NodeFinished
    if phase is RailPhase.NODE_STARTED:
        event = NodeDispatched(record=record)
    else:
        event = NodeFinished(record_id=record.id, status=RecordStatus.SUCCEEDED, result=None, at=at)
    return RailEvent(
        phase=phase,
        task_id=TaskId("t"),
        seq=1,
        at=at,
        event=event,
        record=record,
        contract=pev.VerificationContract(mode="off"),
        plan=None,
    )


def test_live_progress_shows_each_running_node_with_its_elapsed_time() -> None:
    """On a terminal, a spinner and the elapsed seconds of each running node; cleared after."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    rail = ConsoleRail(console)
    assert rail.live
    started = datetime.now(UTC) - timedelta(seconds=31)
    look, post = _record("look", started), _record("post", started)
    rail.on_event(_event(RailPhase.NODE_STARTED, look, started))
    rail.on_event(_event(RailPhase.NODE_STARTED, post, started + timedelta(seconds=30)))
    time.sleep(0.3)  # a few refreshes
    rail.on_event(_event(RailPhase.NODE_FINISHED, look, datetime.now(UTC)))
    rail.on_event(_event(RailPhase.NODE_FINISHED, post, datetime.now(UTC)))
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # no colours, moves
    assert re.search(r"look \(slow\)\s+3[12]\.\ds", shown), shown
    assert re.search(r"post \(slow\)\s+[12]\.\ds", shown), shown
    assert rail._display is None  # no node runs: the display is gone


def test_no_live_display_off_a_terminal() -> None:
    """Piped, the rail prints plain lines only: no spinner, no cursor movement."""
    out = io.StringIO()
    rail = ConsoleRail(Console(file=out))
    assert not rail.live
    at = datetime.now(UTC)
    rail.on_event(_event(RailPhase.NODE_STARTED, _record("look", at), at))
    rail.on_event(_event(RailPhase.NODE_FINISHED, _record("look", at), at))
    assert out.getvalue().splitlines() == ["  ▶ look (slow)", "  ✓ look succeeded  0.00s"]


def test_the_console_rail_is_public_and_runs_with_the_library() -> None:
    """pev.rails.ConsoleRail prints a run from Python, as `pev run` does."""
    out = io.StringIO()
    plan = Plan("g", (PlanNode("a", "do a", tool="a"),))
    result = pev.run_sync(
        "x",
        planner=lambda _: plan,
        executor=FunctionExecutor({"a": lambda: 1}),
        rails=[ConsoleRail(Console(file=out))],
    )
    assert result.ok
    assert "finished: succeeded/execution_succeeded" in out.getvalue()


def test_task_list_times_carry_year_and_offset(tmp_path: Path) -> None:
    """`pev tasks` prints full ISO 8601 times with their UTC offset."""
    db = tmp_path / "ledger.db"
    _ran(db)
    code, out, _ = _pev("tasks", "--db", str(db))
    assert code == 0
    assert ISO.search(out), out
