"""The meeting-room example: an MCP server's tools, a typed retrying lookup, one booking each."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("mcp", reason="the rooms example needs pev's `mcp` extra")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rooms"


def _agent() -> ModuleType:
    """examples/rooms/agent.py, under a name of its own."""
    name = "pev_example_rooms_agent"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE / "agent.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _bookings(log: Path) -> list[dict[str, object]]:
    """What the rooms service itself recorded, one line per booking it made."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _environment(log: Path) -> dict[str, str]:
    """This Python first on PATH (the task file's `python`), and where the service logs."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ROOMS_LOG": str(log),
    }


def _run(
    command: list[str], env: dict[str, str], *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (bounded), its output captured as text."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
        env=env,
    )


@pytest.mark.parametrize(
    ("team", "room", "people"),
    [
        pytest.param("platform", "Curie", 5, id="platform"),
        pytest.param("design", "Ada", 2, id="design"),
    ],
)
def test_run_script_books_one_room_after_a_retried_lookup(
    tmp_path: Path, team: str, room: str, people: int
) -> None:
    """`python examples/rooms/run.py` books the smallest free room, once; the lookup retried."""
    log = tmp_path / "bookings.log"
    done = _run([sys.executable, "-W", "error", str(EXAMPLE / "run.py"), team], _environment(log))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "status: succeeded (passed) after 1 revision(s)" in lines
    assert any(line.startswith(f"booked {room} on 2026-12-08 at 10:00") for line in lines), lines
    assert (
        "  team, attempt 1: ConnectionError: the directory closed the connection at agent.py"
        in "\n".join(lines)
    )
    assert "  team, attempt 2: succeeded" in lines
    assert "the rooms service made 1 booking(s)" in lines
    [booking] = _bookings(log)
    assert booking["room"] == room
    assert len(booking["attendees"]) == people  # type: ignore[arg-type]


def test_task_file_runs_through_the_command_line_and_show_lists_the_attempts(
    tmp_path: Path,
) -> None:
    """`pev run task.toml` starts the server from its [[mcp]] table; `pev show` has the attempts."""
    text = (EXAMPLE / "task.toml").read_text(encoding="utf-8")
    text = text.replace("# env = {", "env = {")  # the service's own record of its bookings
    task_file = tmp_path / "task.toml"
    task_file.write_text(text, encoding="utf-8")
    for name in ("agent.py", "server.py"):
        (tmp_path / name).write_text((EXAMPLE / name).read_text(encoding="utf-8"))
    log = tmp_path / "bookings.log"
    db = tmp_path / "ledger.db"
    pev_command = [sys.executable, "-m", "pev", "--db", str(db)]
    ran = _run([*pev_command, "run", str(task_file), "--quiet"], _environment(log), timeout=90)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert len(_bookings(log)) == 1
    task_id = ran.stdout.strip().split()[-2].rstrip(":")
    shown = _run([*pev_command, "show", task_id], {**_environment(log), "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "attempts of team (team_members):" in shown.stdout
    assert "ConnectionError: the directory closed the connection" in shown.stdout


def test_task_file_matches_the_agent() -> None:
    """task.toml's contract is the agent's, word for word, and it names the agent's parts."""
    agent = _agent()
    task = tomllib.loads((EXAMPLE / "task.toml").read_text(encoding="utf-8"))
    contract = task["contract"]
    assert contract["goal"] == agent.CONTRACT.goal
    assert tuple(contract["success_criteria"]) == agent.CONTRACT.success_criteria
    assert task["components"]["tools"] == ["agent:team_members"]
    assert [server["name"] for server in task["mcp"]] == ["rooms"]
    agent.Meeting.model_validate(task["input"])  # the input is a meeting the planner reads


def test_the_lookup_is_a_typed_retrying_query() -> None:
    """team_members: a query, retried on ConnectionError, its schema from its signature."""
    agent = _agent()
    lookup = agent.team_members
    assert lookup.effect.value == "query"
    assert lookup.retry is not None
    assert lookup.schema["properties"]["team"] == {
        "description": "The team's name.",
        "enum": ["platform", "design"],
        "title": "Team",
        "type": "string",
    }
