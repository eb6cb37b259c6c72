"""pev.mcp against real MCP servers (tests/mcp/rooms_server.py), over stdio and HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.processes import alive

import pev
import pev.mcp
from pev.ledger import Ledger, PlanRejected
from pev.model import Plan, PlanNode, RecordStatus
from pev.testing import ScriptedPlanner

pytestmark = pytest.mark.timeout(30)

SERVER = Path(__file__).with_name("rooms_server.py")


@dataclass(frozen=True)
class Rooms:
    """The files a rooms server started by a test writes: bookings, its process id."""

    folder: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "ROOMS_LOG": str(self.folder / "bookings.log"),
            "ROOMS_PID": str(self.folder / "server.pid"),
            "ROOMS_HANG": str(self.hang),
        }

    @property
    def hang(self) -> Path:
        return self.folder / "hang"

    def bookings(self) -> list[str]:
        log = self.folder / "bookings.log"
        return log.read_text(encoding="utf-8").splitlines() if log.exists() else []

    def pid(self) -> int:
        return int((self.folder / "server.pid").read_text(encoding="utf-8"))

    def stdio(self, **options: object) -> pev.mcp.MCPServer:
        return pev.mcp.MCPServer.stdio(
            sys.executable, args=[str(SERVER)], env=self.env, name="rooms", **options
        )


@pytest.fixture
def rooms(tmp_path: Path) -> Rooms:
    return Rooms(tmp_path)


@pytest.fixture
def http_rooms(rooms: Rooms) -> Iterator[str]:
    """A rooms server over streamable HTTP on 127.0.0.1, answering: its endpoint."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**os.environ, **rooms.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the HTTP rooms server did not start within 15 s")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


BOOKING = Plan(
    "book a free room",
    (
        PlanNode("free", "find free rooms", tool="free_rooms", args={"floor": 3}),
        PlanNode(
            "book", "book one", tool="book", args={"room": "301", "who": "ann"}, after=("free",)
        ),
    ),
)


async def test_stdio_tools_run_as_queries_and_actions_and_the_server_ends_after(
    rooms: Rooms,
) -> None:
    """readOnlyHint makes a query, else an action; outputs are the structured content."""
    async with rooms.stdio() as server:
        tools = {tool.name: tool for tool in await server.tools()}
        assert tools["free_rooms"].effect is pev.Effect.QUERY
        assert tools["book"].effect is pev.Effect.ACTION
        assert tools["book"].schema["required"] == ["room", "who"]
        result = await pev.run(
            "book a room", planner=ScriptedPlanner(BOOKING), tools=[*tools.values()]
        )
        pid = rooms.pid()
        assert alive(pid)
    assert result.ok, result.detail
    assert result.outputs["free"] == {"result": ["301", "302"]}
    assert result.outputs["book"] == {"room": "301", "booked_for": "ann"}
    assert rooms.bookings() == ["301 ann"]
    assert not alive(pid)  # the session is closed after the task, its process gone


async def test_a_wrong_arg_type_is_rejected_with_the_servers_schema(rooms: Rooms) -> None:
    """Plan validation checks args against the server's input schema and lists each error."""
    bad = Plan("book", (PlanNode("book", "book", tool="book", args={"room": 301}),))
    store = pev.MemoryStore()
    async with rooms.stdio(tools=["book"]) as server:
        result = await pev.run(
            "book", planner=ScriptedPlanner(bad), tools=await server.tools(), store=store
        )
    assert (result.status, result.reason) == ("failed", "invalid_plan")
    (event,) = [
        e.event
        for e in await Ledger(store).entries(result.task_id)
        if isinstance(e.event, PlanRejected)
    ]
    assert (
        "node 'book': tool 'book': argument 'room': 301 is not of type 'string'" in event.problems
    )
    assert any("'who'" in problem and "missing" in problem for problem in event.problems)
    assert rooms.bookings() == []


async def test_is_error_is_a_failure_with_the_servers_text(rooms: Rooms) -> None:
    """A result with isError fails its node, with the server's message, outcome known."""
    plan = Plan("cancel", (PlanNode("cancel", "cancel", tool="cancel", args={"room": "301"}),))
    store = pev.MemoryStore()
    async with rooms.stdio(prefix="rooms") as server:
        tools = await server.tools()
        assert "rooms_cancel" in {tool.name for tool in tools}
        plan = Plan(
            "cancel", (PlanNode("cancel", "cancel", tool="rooms_cancel", args={"room": "301"}),)
        )
        result = await pev.run("cancel", planner=ScriptedPlanner(plan), tools=tools, store=store)
    assert not result.ok
    assert "room 301 is not booked" in result.detail
    state = await Ledger(store).state(result.task_id)
    assert [r.status for r in state.records.values()] == [RecordStatus.FAILED]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_killed_mid_action_leaves_it_unknown_and_never_sent_again(
    rooms: Rooms, transport: str, request: pytest.FixtureRequest
) -> None:
    """SIGKILL of the server during an action, over stdio or HTTP: the record is unknown, and
    the server's own log holds one booking."""
    server = (
        rooms.stdio()
        if transport == "stdio"
        else pev.mcp.MCPServer.http(request.getfixturevalue("http_rooms"), timeout_s=10)
    )
    rooms.hang.touch()
    plan = Plan(
        "book", (PlanNode("book", "book", tool="book", args={"room": "301", "who": "ann"}),)
    )
    store = pev.MemoryStore()
    async with server:
        tools = await server.tools()
        run = asyncio.create_task(
            pev.run(
                "book",
                planner=ScriptedPlanner(plan, repeat_last=True),
                tools=tools,
                store=store,
                policy=pev.RecoveryPolicy(max_replans=2),
            )
        )
        for _ in range(200):
            if rooms.bookings():
                break
            await asyncio.sleep(0.05)
        assert rooms.bookings() == ["301 ann"]
        os.kill(rooms.pid(), signal.SIGKILL)
        result = await asyncio.wait_for(run, 20)
    assert not result.ok
    state = await Ledger(store).state(result.task_id)
    assert [r.status for r in state.records.values()] == [RecordStatus.UNKNOWN]
    assert rooms.bookings() == ["301 ann"]  # never sent twice


async def test_http_tools_run_as_queries_and_actions(
    rooms: Rooms, http_rooms: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same tools over streamable HTTP, with a header sent."""
    monkeypatch.setenv("PEV_TEST_ROOMS_TOKEN", "t0ken")
    server = pev.mcp.MCPServer.http(
        http_rooms, headers={"Authorization": "Bearer ${PEV_TEST_ROOMS_TOKEN}"}, timeout_s=10
    )
    async with server:
        tools = await server.tools()
        result = await pev.run("book a room", planner=ScriptedPlanner(BOOKING), tools=tools)
    assert result.ok, result.detail
    assert result.outputs["book"] == {"room": "301", "booked_for": "ann"}
    assert rooms.bookings() == ["301 ann"]
    assert "t0ken" not in server.config.record()


async def test_a_server_that_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    """A missing program is MCPUnavailable naming the server and the command."""
    with pytest.raises(pev.mcp.MCPUnavailable, match=r"'ghost'.*could not be started or reached"):
        async with pev.mcp.MCPServer.stdio(str(tmp_path / "no-such-program"), name="ghost"):
            pass


async def test_an_unreachable_url_is_one_clear_error() -> None:
    """Nothing listening: MCPUnavailable naming the URL, within connect_timeout_s."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(pev.mcp.MCPUnavailable, match=f"127.0.0.1:{port}/mcp"):
        async with pev.mcp.MCPServer.http(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=5):
            pass


async def test_a_tool_filter_naming_a_missing_tool_says_which(rooms: Rooms) -> None:
    """tools=[...] with a name the server lacks: the closest name is suggested."""
    async with rooms.stdio(tools=["boook"]) as server:
        with pytest.raises(pev.UsageError, match="no tool 'boook'; did you mean 'book'"):
            await server.tools()


def test_a_credential_written_as_a_value_is_refused() -> None:
    """A header naming a credential must reference an environment variable."""
    with pytest.raises(pev.UsageError, match=r"Authorization: write a credential"):
        pev.mcp.MCPServer.http("http://127.0.0.1:1/mcp", headers={"Authorization": "Bearer x"})


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """import pev.mcp without the SDK: an ImportError naming pev-agent[mcp]."""
    for name in [n for n in sys.modules if n == "pev.mcp" or n.startswith("pev.mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(ImportError, match=r"pip install 'pev-agent\[mcp\]'"):
        import pev.mcp  # noqa: F401
