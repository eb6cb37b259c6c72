"""Task files with [[mcp]] tables: `pev run`, `pev submit` + `pev resume` open the servers."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.processes import alive

import pev
from pev.cli._mcp import recorded_agent
from pev.cli._taskfile import TaskFileError, load_task_file
from pev.ledger import Ledger
from pev.stores import SQLiteStore

pytestmark = pytest.mark.timeout(40)

SERVER = Path(__file__).with_name("rooms_server.py")
AgentFolder = Callable[[str, str], Path]  # the fixtures of tests/mcp/conftest.py
PevCli = Callable[..., tuple[int, str]]

AGENT = """
from pev.model import Plan, PlanNode


def planner(request):
    return Plan(
        "book a free room",
        (
            PlanNode("free", "find free rooms", tool="rooms_free_rooms", args={"floor": 3}),
            PlanNode(
                "book", "book one", tool="rooms_book", args={"room": "301", "who": "ann"},
                after=("free",),
            ),
        ),
    )
"""


def _task(folder: Path, extra: str = "") -> Path:
    text = f"""
    input = "book a room"

    [components]
    planner = "rooms_agent:planner"

    [[mcp]]
    name = "rooms"
    command = "{sys.executable}"
    args = ["{SERVER}"]
    env = {{ ROOMS_LOG = "bookings.log", ROOMS_PID = "server.pid" }}
    prefix = "rooms"
    {extra}
    """
    path = folder / "task.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def workdir(agent_folder: AgentFolder) -> Path:
    """A folder with the agent module, the current directory."""
    return agent_folder("rooms_agent", AGENT)


def _bookings(folder: Path) -> list[str]:
    log = folder / "bookings.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_pev_run_opens_the_servers_of_a_task_file(workdir: Path, pev_cli: PevCli) -> None:
    """The server starts in the task file's folder; its tools run; it is gone after."""
    code, output = pev_cli(workdir, "run", "-q", str(_task(workdir)))
    assert code == 0, output
    assert _bookings(workdir) == ["301 ann"]


def test_a_submitted_task_is_resumed_with_its_servers_rebuilt(
    workdir: Path, pev_cli: PevCli
) -> None:
    """`pev resume` opens the servers the task recorded, with no task file at hand."""
    code, task_id = pev_cli(workdir, "submit", str(_task(workdir)))
    assert code == 0, task_id
    task_id = task_id.strip()
    with sqlite3.connect(workdir / "ledger.db") as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM pev_tasks").fetchone()
    assert count == 1
    assert _bookings(workdir) == []  # submit lists the tools; nothing runs
    (workdir / "task.toml").unlink()
    code, output = pev_cli(workdir, "resume", "-q", task_id)
    assert code == 0, output
    assert _bookings(workdir) == ["301 ann"]


def test_a_server_that_cannot_start_is_one_line(workdir: Path, pev_cli: PevCli) -> None:
    """A task file whose server cannot start: exit 2, one line naming the server."""
    path = _task(workdir)
    path.write_text(
        path.read_text(encoding="utf-8").replace(sys.executable, str(workdir / "nothing")),
        encoding="utf-8",
    )
    code, output = pev_cli(workdir, "run", "-q", str(path))
    assert code == 2
    assert "mcp: MCP server 'rooms'" in output
    assert "could not be started or reached" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        pytest.param('url = "http://127.0.0.1:1/mcp"', "mcp[1] (rooms)", "exactly one", id="both"),
        pytest.param("timeout_s = -1", "mcp[1] (rooms).timeout_s", "positive", id="timeout"),
        pytest.param("tool = ['book']", "mcp[1] (rooms).tool", "did you mean 'tools'", id="typo"),
        pytest.param(
            "headers = { Authorization = 'x' }", "mcp[1] (rooms).headers", "credential", id="secret"
        ),
    ],
)
def test_a_bad_mcp_table_names_its_field(
    workdir: Path, table: str, field: str, message: str
) -> None:
    """Each problem of an [[mcp]] table is a TaskFileError naming the table and field."""
    with pytest.raises(TaskFileError) as caught:
        load_task_file(_task(workdir, table))
    assert caught.value.field == field
    assert message in caught.value.message


def test_mcp_written_as_one_table_says_to_use_two_brackets(workdir: Path) -> None:
    """[mcp] instead of [[mcp]]: the fix is named."""
    path = _task(workdir)
    path.write_text(path.read_text(encoding="utf-8").replace("[[mcp]]", "[mcp]"), encoding="utf-8")
    with pytest.raises(TaskFileError, match=r"write \[\[mcp\]\]"):
        load_task_file(path)


async def test_a_worker_opens_the_servers_a_submitted_task_recorded(
    workdir: Path, pev_cli: PevCli
) -> None:
    """`pev worker`'s agent_for opens the task's servers for its drive, and closes them."""
    code, task_id = await asyncio.to_thread(pev_cli, workdir, "submit", str(_task(workdir)))
    assert code == 0, task_id
    store = SQLiteStore(workdir / "ledger.db")
    stop = asyncio.Event()
    try:
        work = asyncio.create_task(
            pev.worker(store, agent_for=recorded_agent, stop=stop, poll_s=0.1)
        )
        for _ in range(300):
            state = await Ledger(store).state(task_id.strip())
            if state.terminal:
                break
            await asyncio.sleep(0.05)
        stop.set()
        report = await asyncio.wait_for(work, 15)
    finally:
        await store.close()
    assert (report.ended, report.failed) == (1, 0)
    assert _bookings(workdir) == ["301 ann"]
    assert not alive(int((workdir / "server.pid").read_text(encoding="utf-8")))
