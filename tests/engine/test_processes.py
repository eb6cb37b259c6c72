"""Crash, resume and cancel across real processes (docs/design.md §5.4, §6).

A child process runs a task on an SQLite ledger; the test kills it with SIGKILL in the middle of
an action (or of verification), then resumes the task in a fresh process that is given no
components: they are rebuilt from the import paths recorded when the task was created. What the
tools did is counted outside the processes, in files next to the agent module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pev
from pev.ledger import Ledger, LedgerEntry, NodeDispatched, NodeFinished, TaskState
from pev.model import DeviceFailure, RecordStatus, Success
from pev.stores import SQLiteStore

pytestmark = pytest.mark.slow

# The agent lives in a module of its own, imported by name in every child, so that its
# components have import paths (`pev_proc_agent:plan`) a fresh process can rebuild them from.
AGENT = textwrap.dedent(
    '''
    """An agent for pev's multi-process tests; it counts what its tools did in files here."""

    from __future__ import annotations

    import asyncio
    import json
    import os
    import sys
    from pathlib import Path

    import pev
    from pev.engine import current_node_context
    from pev.model import DeviceFailure, Plan, PlanNode, Success, Verdict
    from pev.stores import SQLiteStore

    HERE = Path(__file__).parent
    HANG_S = 120.0  # far longer than any test waits: only a kill ends the hang
    LEASE_S = 1.0  # a killed driver's lease frees this soon after its last heartbeat


    def mark(name, line):
        """Append a line to a log file here, durably; return how many lines it now holds."""
        path = HERE / name
        with path.open("a") as file:
            file.write(line + "\\n")
            file.flush()
            os.fsync(file.fileno())
        return len(path.read_text().splitlines())


    @pev.tool(effect="query")
    def look() -> dict:
        return {"red": "table"}


    @pev.tool
    async def move(cube: str, hang: bool = False) -> dict:
        # The first move hangs when asked to, so that the test can kill the process mid-action;
        # a second call (which must never happen) would return at once and show in the count.
        if mark("moves.log", "moved") == 1 and hang:
            await asyncio.sleep(HANG_S)
        return {"moved": cube}


    @pev.tool(effect="query")
    async def wait_for_cancel() -> str:
        mark("waits.log", "waiting")
        context = current_node_context()
        for _ in range(int(HANG_S / 0.02)):
            if context.cancelled.is_set():
                return "stopped"
            await asyncio.sleep(0.02)
        return "never cancelled"


    def plan(request):
        hang = request.input.get("hang") == "move"
        return Plan(
            "put the red cube on the blue one",
            (
                PlanNode("look", tool="look", effect="query"),
                PlanNode("move", tool="move", args={"cube": "red", "hang": hang}, after=("look",)),
                PlanNode("report", tool="look", effect="query", after=("move",)),
            ),
        )


    def plan_waits(request):
        return Plan(
            "wait",
            (
                PlanNode("w1", tool="wait_for_cancel", effect="query"),
                PlanNode("w2", tool="wait_for_cancel", effect="query", after=("w1",)),
            ),
        )


    async def check(request):
        """Blame every node without a success; the first call hangs when asked to."""
        count = mark("verifies.log", f"revision {request.revision}")
        if count == 1 and request.input.get("hang") == "verify":
            await asyncio.sleep(HANG_S)
        failed = [
            node.id
            for node in request.plan.nodes
            if not isinstance(request.results.get(node.id), Success)
        ]
        if failed:
            return Verdict.failed(request.contract, failed_nodes=failed, feedback="not done")
        return Verdict.passed(request.contract)


    class Arm:
        """An executor for the same plan that can ask the arm what an unfinished move did."""

        async def execute(self, node, context):
            if node.tool == "look":
                return Success({"red": "table"})
            if node.tool == "move":
                if mark("moves.log", "moved") == 1 and node.args.get("hang"):
                    await asyncio.sleep(HANG_S)
                return Success({"moved": node.args["cube"]})
            return DeviceFailure(node.id, f"no tool {node.tool!r}")

        async def reconcile(self, record):
            mark("reconciled.log", f"{record.node_id} {record.status}")
            if record.tool == "move":
                return Success({"moved": "red"})
            return None


    VARIANTS = {
        "tools": lambda: {"planner": plan, "tools": [look, move], "verifier": check},
        "arm": lambda: {"planner": plan, "executor": Arm(), "verifier": check},
        "waits": lambda: {"planner": plan_waits, "tools": [wait_for_cancel]},
    }


    async def resume_when_free(task_id, store):
        """Resume once the killed driver's lease has expired, as an operator would wait."""
        for _ in range(int(20 * LEASE_S / 0.1)):
            try:
                return await pev.resume(task_id, store=store)
            except pev.LeaseHeld:
                await asyncio.sleep(0.1)
        return await pev.resume(task_id, store=store)


    def main():
        command, task_id, db = sys.argv[1:4]
        store = SQLiteStore(db)
        if command == "run":
            variant, given = sys.argv[4], json.loads(sys.argv[5])
            policy = pev.RecoveryPolicy(lease_s=LEASE_S)
            result = pev.run_sync(
                given, store=store, task_id=task_id, policy=policy, **VARIANTS[variant]()
            )
        else:
            result = asyncio.run(resume_when_free(task_id, store))
        print(json.dumps({"status": str(result.status), "reason": str(result.reason)}), flush=True)
    '''
)

START_S = 30.0  # a child's start-up (imports, first writes) on a slow, busy machine
END_S = 60.0  # a child's whole run


@dataclass
class Agent:
    """The agent module's folder, the ledger file, and how to start children."""

    folder: Path
    db: Path

    def start(self, *args: str) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.folder), env.get("PYTHONPATH")]))
        return subprocess.Popen(
            [sys.executable, "-c", "import pev_proc_agent; pev_proc_agent.main()", *args],
            cwd=self.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, task_id: str, variant: str, given: object) -> subprocess.Popen[str]:
        return self.start("run", task_id, str(self.db), variant, json.dumps(given))

    def lines(self, name: str) -> list[str]:
        path = self.folder / name
        return path.read_text().splitlines() if path.exists() else []

    def wait_for_line(self, name: str, child: subprocess.Popen[str]) -> None:
        """Wait until the log file has a line (the component started), or fail."""
        deadline = time.monotonic() + START_S
        while not self.lines(name):
            if child.poll() is not None:
                _, err = child.communicate()
                pytest.fail(f"the child exited ({child.returncode}) before {name}: {err}")
            if time.monotonic() > deadline:
                pytest.fail(f"no line in {name} after {START_S:g} s")
            time.sleep(0.02)

    def history(self, task_id: str) -> tuple[TaskState, tuple[LedgerEntry, ...], bool]:
        """The task's state, its entries, and whether its ledger verifies."""

        async def read() -> tuple[TaskState, tuple[LedgerEntry, ...], bool]:
            store = SQLiteStore(self.db)
            try:
                ledger = Ledger(store)
                report = await ledger.verify(task_id)
                return await ledger.state(task_id), await ledger.entries(task_id), report.ok
            finally:
                await store.close()

        return asyncio.run(read())


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    (tmp_path / "pev_proc_agent.py").write_text(AGENT)
    return Agent(tmp_path, tmp_path / "ledger.db")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Children started by a test; any still alive at the end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.communicate()


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL: no finally block, no atexit, nothing in the process gets to run."""
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=END_S)
    assert child.returncode == -signal.SIGKILL


def outcome(child: subprocess.Popen[str]) -> dict[str, str]:
    """The status and reason a child printed; fails the test with its stderr otherwise."""
    out, err = child.communicate(timeout=END_S)
    assert child.returncode == 0, err
    printed: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return printed


def dispatches(entries: tuple[LedgerEntry, ...], node_id: str) -> list[NodeDispatched]:
    return [
        entry.event
        for entry in entries
        if isinstance(entry.event, NodeDispatched) and entry.event.record.node_id == node_id
    ]


def settled(entries: tuple[LedgerEntry, ...]) -> list[NodeFinished]:
    return [
        entry.event
        for entry in entries
        if isinstance(entry.event, NodeFinished) and entry.event.settled_on_resume
    ]


def test_an_action_killed_mid_flight_runs_once_and_ends_partial(
    agent: Agent, children: list[subprocess.Popen[str]]
) -> None:
    """SIGKILL during an action; a fresh process resumes: the action ran once, outcome unknown."""
    children.append(first := agent.run("t1", "tools", {"hang": "move"}))
    agent.wait_for_line("moves.log", first)
    kill(first)

    crashed, _, crashed_ok = agent.history("t1")
    assert dict(crashed.created.components) == {
        "planner": "pev_proc_agent:plan",
        "tools": "pev_proc_agent:look,pev_proc_agent:move",
        "verifier": "pev_proc_agent:check",
    }
    [pending] = [r for r in crashed.records.values() if r.node_id == "move"]
    assert (str(crashed.phase), pending.status, crashed_ok) == (
        "executing",
        RecordStatus.PENDING,
        True,
    )

    children.append(second := agent.start("resume", "t1", str(agent.db)))
    assert outcome(second) == {"status": "partial", "reason": "device_failure"}

    state, entries, ok = agent.history("t1")
    assert agent.lines("moves.log") == ["moved"]
    assert len(dispatches(entries, "move")) == 1
    [resumed] = settled(entries)
    assert resumed.record_id == pending.id
    assert resumed.status is RecordStatus.UNKNOWN
    assert isinstance(resumed.result, DeviceFailure)
    assert resumed.result.outcome_unknown
    assert [s.node_id for s in state.skipped] == ["report"]
    assert state.diagnoses[-1].diagnosis.nodes == {"move"}
    assert state.replans_used == 0
    assert ok


def test_a_killed_action_that_reconciles_as_done_lets_the_task_succeed(
    agent: Agent, children: list[subprocess.Popen[str]]
) -> None:
    """SIGKILL during an action; on resume the executor's reconcile says it moved: succeeded."""
    children.append(first := agent.run("t1", "arm", {"hang": "move"}))
    agent.wait_for_line("moves.log", first)
    kill(first)
    crashed, _, _ = agent.history("t1")
    assert crashed.created.components["executor"] == "pev_proc_agent:Arm"

    children.append(second := agent.start("resume", "t1", str(agent.db)))
    assert outcome(second) == {"status": "succeeded", "reason": "passed"}

    state, entries, ok = agent.history("t1")
    assert agent.lines("moves.log") == ["moved"]
    assert agent.lines("reconciled.log") == ["move pending"]
    assert len(dispatches(entries, "move")) == 1
    [resumed] = settled(entries)
    assert resumed.status is RecordStatus.SUCCEEDED
    assert resumed.result == Success({"moved": "red"})
    assert len(dispatches(entries, "report")) == 1  # the round went on after the move
    assert state.replans_used == 0
    assert ok


def test_a_process_killed_while_verifying_verifies_again_without_spending_budget(
    agent: Agent, children: list[subprocess.Popen[str]]
) -> None:
    """SIGKILL inside the verifier; resume calls it again, with replans_used unchanged."""
    children.append(first := agent.run("t1", "tools", {"hang": "verify"}))
    agent.wait_for_line("verifies.log", first)
    kill(first)
    crashed, _, _ = agent.history("t1")
    assert (str(crashed.phase), crashed.replans_used) == ("verifying", 0)

    children.append(second := agent.start("resume", "t1", str(agent.db)))
    assert outcome(second) == {"status": "succeeded", "reason": "passed"}

    state, entries, ok = agent.history("t1")
    assert agent.lines("verifies.log") == ["revision 1", "revision 1"]
    assert agent.lines("moves.log") == ["moved"]
    assert settled(entries) == []
    assert (state.replans_used, len(state.revisions), len(state.verdicts)) == (0, 1, 1)
    assert ok


def test_a_cancel_from_another_process_stops_the_run(
    agent: Agent, children: list[subprocess.Popen[str]]
) -> None:
    """pev.cancel in this process ends a run driven by a child: cancelled/cancelled."""
    children.append(child := agent.run("t2", "waits", "wait until cancelled"))
    agent.wait_for_line("waits.log", child)

    async def cancel() -> None:
        store = SQLiteStore(agent.db)
        try:
            await pev.cancel("t2", store=store, reason="operator stop")
        finally:
            await store.close()

    started = time.monotonic()
    asyncio.run(cancel())
    assert outcome(child) == {"status": "cancelled", "reason": "cancelled"}
    assert time.monotonic() - started < 10.0

    state, entries, ok = agent.history("t2")
    assert agent.lines("waits.log") == ["waiting"]  # w2 was never dispatched
    assert dispatches(entries, "w2") == []
    assert state.cancel_reason == "operator stop"
    assert ok


def test_a_paused_driver_taken_over_writes_and_dispatches_nothing_more(
    agent: Agent, children: list[subprocess.Popen[str]]
) -> None:
    """SIGSTOP a driver mid-action past its lease; another takes over; SIGCONT: LeaseLost.

    The zombie's next write is refused by the store (its epoch is stale), so it ends with
    LeaseLost, having written and dispatched nothing after the takeover.
    """
    children.append(zombie := agent.run("t1", "tools", {"hang": "move"}))
    agent.wait_for_line("moves.log", zombie)
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        children.append(second := agent.start("resume", "t1", str(agent.db)))
        assert outcome(second) == {"status": "partial", "reason": "device_failure"}
        taken_over, before, _ = agent.history("t1")
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    _, err = zombie.communicate(timeout=END_S)

    assert zombie.returncode != 0
    assert "LeaseLost" in err
    state, entries, ok = agent.history("t1")
    assert entries == before  # not one event from the zombie after the takeover
    assert [(d.epoch, d.owner != state.drivers[0].owner) for d in state.drivers] == [
        (1, False),
        (2, True),
    ]
    assert taken_over.terminal
    assert agent.lines("moves.log") == ["moved"]
    assert len(dispatches(entries, "move")) == 1
    assert ok
