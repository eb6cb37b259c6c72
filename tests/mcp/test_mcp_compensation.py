"""MCP actions undone by a tool of their own server (`compensate`), against a real server.

tests/mcp/bookings_server.py keeps an append-only log of what it did, with the idempotency key
each call carried: the tests read what reached the outside world from it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import pev
import pev.mcp
from pev.cli._mcp import open_recorded
from pev.cli._taskfile import TaskFileError, load_task_file
from pev.engine import VerifyRequest
from pev.ledger import EffectCompensated, Ledger
from pev.mcp._tools import Compensation
from pev.model import Plan, PlanNode, RecordStatus, Verdict, VerificationContract
from pev.stores import SQLiteStore
from pev.testing import ScriptedPlanner

pytestmark = pytest.mark.timeout(40)

SERVER = Path(__file__).with_name("bookings_server.py")
AgentFolder = Callable[[str, str], Path]  # the fixtures of tests/mcp/conftest.py
PevCli = Callable[..., tuple[int, str]]
CONTRACT = VerificationContract("recovery", "book room 302 for ann", ["room 302 is ann's"])
UNDO = {"book_room": "cancel_booking"}


def _booking(room: str) -> Plan:
    return Plan(
        "book room 302 for ann",
        (PlanNode("book", "book the room", tool="book_room", args={"room": room, "who": "ann"}),),
    )


def _room_302(request: VerifyRequest) -> Verdict:
    """Passes once room 302 is ann's; else blames the booking."""
    booked = request.output("book")
    if isinstance(booked, Mapping) and booked.get("room") == "302":
        return Verdict.passed(request.contract)
    return Verdict.failed(request.contract, failed_nodes=["book"], feedback="book 302, not 301")


def _log(folder: Path) -> list[dict[str, Any]]:
    path = folder / "bookings.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _server(folder: Path, compensate: dict[str, str], **options: Any) -> pev.mcp.MCPServer:
    return pev.mcp.MCPServer.stdio(
        sys.executable,
        args=[str(SERVER)],
        env={"BOOKINGS_LOG": str(folder / "bookings.log")},
        name="bookings",
        compensate=compensate,
        **options,
    )


async def _book_wrong_then_right(
    folder: Path, compensate: dict[str, str], store: pev.Store
) -> pev.RunResult:
    async with _server(folder, compensate) as server:
        return await pev.run(
            "book room 302 for ann",
            planner=ScriptedPlanner(_booking("301"), _booking("302")),
            tools=await server.tools(),
            verifier=_room_302,
            contract=CONTRACT,
            store=store,
        )


async def test_a_blamed_booking_is_cancelled_on_the_server_before_the_right_one(
    tmp_path: Path,
) -> None:
    """The server's log: book 301, cancel 301 (the compensation's own key), book 302, once each."""
    store = pev.MemoryStore()
    result = await _book_wrong_then_right(tmp_path, UNDO, store)
    assert result.ok, result.detail
    wrong, right = result.effects
    assert (wrong.compensated, wrong.superseded, right.compensated) == (True, 2, False)
    assert [(e["what"], e["room"], e["key"]) for e in _log(tmp_path)] == [
        ("book", "301", wrong.key),
        ("cancel", "301", f"{wrong.key}/compensate"),
        ("book", "302", right.key),
    ]
    [undone] = [
        e.event
        for e in await Ledger(store).entries(result.task_id)
        if isinstance(e.event, EffectCompensated)
    ]
    assert (undone.effect, undone.record_id) == (wrong.record_id, f"undo:{wrong.record_id}")


async def test_a_compensation_the_server_refuses_leaves_the_effect_in_place(
    tmp_path: Path,
) -> None:
    """isError from the compensating tool: the task ends partial, nothing more is booked."""
    store = pev.MemoryStore()
    result = await _book_wrong_then_right(tmp_path, {"book_room": "cancel_fails"}, store)
    assert (result.status, result.reason) == ("partial", "device_failure")
    assert "is left in place" in result.detail
    assert "cannot be cancelled for ann today" in result.detail
    assert [(e["what"], e["room"]) for e in _log(tmp_path)] == [("book", "301")]
    state = await Ledger(store).state(result.task_id)
    [effect] = state.effects.values()
    assert effect.compensation is not None
    assert effect.compensation.status is RecordStatus.FAILED


async def test_the_action_tool_carries_its_compensation(tmp_path: Path) -> None:
    """Only the action named gets a compensate; it calls the server's compensating tool."""
    async with _server(tmp_path, UNDO) as server:
        tools = {tool.name: tool for tool in await server.tools()}
    assert isinstance(tools["book_room"].compensate, Compensation)
    assert repr(tools["book_room"].compensate) == (
        "Compensation('bookings': 'cancel_booking' undoes 'book_room')"
    )
    assert tools["cancel_booking"].compensate is None
    assert tools["find_rooms"].compensate is None


@pytest.mark.parametrize(
    ("compensate", "message"),
    [
        pytest.param(
            {"book_room": "cancel_bookin"},
            "MCP server 'bookings': compensate book_room = 'cancel_bookin' names "
            "'cancel_bookin', which is no tool of the server (did you mean 'cancel_booking'? ",
            id="unknown-undo",
        ),
        pytest.param(
            {"book": "cancel_booking"},
            "names 'book', which is no tool of the server (did you mean 'book_room'? ",
            id="unknown-action",
        ),
        pytest.param(
            {"find_rooms": "cancel_booking"},
            "'find_rooms' is read-only (readOnlyHint), a query with no effect to undo; "
            "compensate only its actions, or drop the entry",
            id="read-only",
        ),
    ],
)
async def test_a_mapping_the_server_cannot_honour_is_refused_when_it_opens(
    tmp_path: Path, compensate: dict[str, str], message: str
) -> None:
    """Checked against the server's tools as it opens: one line naming the entry and the fix."""
    with pytest.raises(pev.UsageError) as caught:
        async with _server(tmp_path, compensate):
            pytest.fail("opened")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            {"compensate": {"book_room": "book_room"}},
            "compensate book_room: a tool cannot undo its own effect",
            id="itself",
        ),
        pytest.param(
            {"compensate": {"book_room": "cancel_booking"}, "tools": ["find_rooms"]},
            "compensate book_room: tools does not take 'book_room', so nothing would call it; "
            "add it to tools, or drop the entry",
            id="not-taken",
        ),
        pytest.param(
            {"compensate": [("book_room", "cancel_booking")]},
            "compensate must map an action tool to the tool that undoes it",
            id="not-a-mapping",
        ),
        pytest.param(
            {"compensate": {"book_room": ""}}, "must map tool names to tool names", id="empty"
        ),
    ],
)
def test_a_mapping_that_cannot_work_is_refused_when_described(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    """What needs no server is checked at once, naming the server and the entry."""
    with pytest.raises(pev.UsageError, match=r"^MCP server 'bookings': ") as caught:
        pev.mcp.MCPServer.stdio(sys.executable, name="bookings", **options)
    assert message in str(caught.value)


def test_the_mapping_is_recorded_with_the_server() -> None:
    """The record keeps it, and reads back to the same configuration; without one, no key."""
    server = pev.mcp.MCPServer.http("http://127.0.0.1:1/mcp", compensate=UNDO)
    assert json.loads(server.config.record())["compensate"] == UNDO
    assert pev.mcp.MCPServer.from_record(server.config.record()).config == server.config
    plain = pev.mcp.MCPServer.http("http://127.0.0.1:1/mcp")
    assert "compensate" not in json.loads(plain.config.record())
    assert not pev.mcp.MCPServer.from_record(plain.config.record()).config.compensate


# --- task files, `pev submit` and `pev resume` -----------------------------------------------

AGENT = """
from pev.model import Plan, PlanNode, Verdict


def planner(request):
    room = "301" if request.kind == "initial" else "302"
    return Plan(
        "book room 302 for ann",
        (PlanNode("book", "book the room", tool="book_room", args={"room": room, "who": "ann"}),),
    )


def verifier(request):
    booked = request.output("book")
    if booked is not None and booked["room"] == "302":
        return Verdict.passed(request.contract)
    return Verdict.failed(request.contract, failed_nodes=["book"], feedback="book 302, not 301")
"""


def _task(folder: Path, compensate: str = 'compensate = { book_room = "cancel_booking" }') -> Path:
    text = f"""
    input = "book room 302 for ann"

    [contract]
    mode = "recovery"
    goal = "book room 302 for ann"
    success_criteria = ["room 302 is ann's"]

    [components]
    planner = "bookings_agent:planner"
    verifier = "bookings_agent:verifier"

    [[mcp]]
    name = "bookings"
    command = "{sys.executable}"
    args = ["{SERVER}"]
    env = {{ BOOKINGS_LOG = "bookings.log" }}
    {compensate}
    """
    path = folder / "task.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def workdir(agent_folder: AgentFolder) -> Path:
    """A folder with the agent module, the current directory."""
    return agent_folder("bookings_agent", AGENT)


def test_a_resumed_task_compensates_through_the_recorded_mapping(
    workdir: Path, pev_cli: PevCli
) -> None:
    """`pev submit`, then `pev resume` with no task file: the servers and their compensate come
    from the record, and the wrong booking is cancelled before the right one is made."""
    code, task_id = pev_cli(workdir, "submit", str(_task(workdir)))
    assert code == 0, task_id
    (workdir / "task.toml").unlink()
    code, output = pev_cli(workdir, "resume", "-q", task_id.strip())
    assert code == 0, output
    log = _log(workdir)
    assert [(e["what"], e["room"]) for e in log] == [
        ("book", "301"),
        ("cancel", "301"),
        ("book", "302"),
    ]
    assert log[1]["key"] == f"{log[0]['key']}/compensate"


async def test_the_recorded_components_rebuild_the_compensation(
    workdir: Path, pev_cli: PevCli
) -> None:
    """What resume and workers open from a task's components has book_room's compensate."""
    code, task_id = await asyncio.to_thread(pev_cli, workdir, "submit", str(_task(workdir)))
    assert code == 0, task_id
    store = SQLiteStore(workdir / "ledger.db")
    try:
        state = await Ledger(store).state(task_id.strip())
    finally:
        await store.close()
    recorded = json.loads(state.created.components["mcp:bookings"])
    assert recorded["compensate"] == {"book_room": "cancel_booking"}
    async with open_recorded(state.created.components) as tools:
        by_name = {tool.name: tool for tool in tools}
        assert isinstance(by_name["book_room"].compensate, Compensation)


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        pytest.param(
            'compensate = "cancel_booking"',
            "mcp[1] (bookings).compensate",
            "must be a table",
            id="not-a-table",
        ),
        pytest.param(
            "compensate = { book_room = 1 }",
            "mcp[1] (bookings).compensate.book_room",
            "must be a string",
            id="not-a-name",
        ),
        pytest.param(
            'compensate = { book_room = "book_room" }',
            "mcp[1] (bookings).compensate",
            "book_room: a tool cannot undo its own effect",
            id="itself",
        ),
    ],
)
def test_a_bad_compensate_in_a_task_file_names_its_field(
    workdir: Path, table: str, field: str, message: str
) -> None:
    """compensate in an [[mcp]] table is checked with the file, naming the table and field."""
    with pytest.raises(TaskFileError) as caught:
        load_task_file(_task(workdir, table))
    assert caught.value.field == field
    assert message in caught.value.message


def test_a_compensating_tool_the_server_lacks_is_one_line(workdir: Path, pev_cli: PevCli) -> None:
    """`pev run` of a task file naming a tool the server lacks: exit 2, one line, nothing run."""
    path = _task(workdir, 'compensate = { book_room = "cancel_bookin" }')
    code, output = pev_cli(workdir, "run", "-q", str(path))
    assert code == 2, output
    assert "compensate book_room = 'cancel_bookin'" in output
    assert "did you mean 'cancel_booking'?" in output
    assert len(output.strip().splitlines()) == 1
    assert _log(workdir) == []
