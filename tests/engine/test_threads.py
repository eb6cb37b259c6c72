"""Sync component code runs in the process's bounded thread pool, shared by every run.

A run starts no thread of its own; while a thread runs a run's call it is named after the task.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

import pev
from pev.engine import PlanRequest, VerifyRequest, tool
from pev.engine._protocols import as_async
from pev.engine._threads import MAX_THREADS, THREAD_PREFIX, current_pool
from pev.model import ExecutionRecord, Plan, PlanNode, Verdict, VerificationContract

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

GOAL = "water the plants"
CONTRACT = VerificationContract("recovery", GOAL, ("the soil is damp",))
PLAN = Plan(GOAL, (PlanNode("water", "water the plants", tool="water"),))
WAIT_S = 3.0  # longer than any test should take


class _Threads:
    """Records the thread each sync call ran in, by who made it."""

    def __init__(self) -> None:
        self.seen: dict[str, threading.Thread] = {}
        self.names: dict[str, str] = {}
        self.pools: set[object] = set()

    def note(self, who: str) -> None:
        self.seen[who] = threading.current_thread()
        self.names[who] = threading.current_thread().name
        self.pools.add(current_pool())


def _components(threads: _Threads) -> dict[str, object]:
    def plan(request: PlanRequest) -> Plan:
        threads.note("planner")
        return PLAN

    @pev.tool
    def water() -> str:
        threads.note("tool")
        return "damp"

    def verify(request: VerifyRequest) -> Verdict:
        threads.note("verifier")
        return Verdict.passed(request.contract)

    return {"planner": plan, "tools": [water], "verifier": verify, "contract": CONTRACT}


def _back_in_the_pool(thread: threading.Thread) -> bool:
    """Whether the thread is idle in the pool again (its pool name back) within WAIT_S."""
    give_up = time.monotonic() + WAIT_S
    while time.monotonic() < give_up:
        if thread.is_alive() and thread.name.startswith(f"{THREAD_PREFIX}_"):
            return True
        time.sleep(0.01)
    return False


async def test_sync_components_run_in_the_pool_named_after_the_task(engine: Engine) -> None:
    threads = _Threads()
    result = await engine.run(GOAL, task_id="t-own", **_components(threads))
    assert result.ok
    assert set(threads.seen) == {"planner", "tool", "verifier"}
    assert threads.names == {
        "planner": "pev-sync-t-own",
        "tool": "pev-sync-t-own",
        "verifier": "pev-sync-t-own",
    }
    [pool] = threads.pools
    assert isinstance(pool, ThreadPoolExecutor)
    assert pool._max_workers == MAX_THREADS
    # Idle again, each thread has its pool name back.
    assert all(thread.name.startswith(f"{THREAD_PREFIX}_") for thread in threads.seen.values())


async def test_runs_share_the_pool_and_start_no_thread_of_their_own(engine: Engine) -> None:
    """A second run's sync calls reuse the threads of the first: a task costs no thread start."""
    first, second = _Threads(), _Threads()
    assert (await engine.run(GOAL, **_components(first))).ok
    before = threading.active_count()
    assert (await engine.run(GOAL, **_components(second))).ok
    assert first.pools == second.pools
    assert threading.active_count() == before
    assert set(second.seen.values()) <= set(threading.enumerate())


async def test_a_sync_tool_that_timed_out_outlives_the_run_in_its_thread(engine: Engine) -> None:
    """The run does not wait for it (Python cannot stop a thread); on return, the thread goes
    back to the pool."""
    release = threading.Event()
    running: list[threading.Thread] = []

    @pev.tool(effect="query", timeout_s=0.05)
    def stuck() -> None:
        running.append(threading.current_thread())
        release.wait(WAIT_S)

    plan = Plan(GOAL, (PlanNode("look", "look", tool="stuck", effect="query"),))
    try:
        result = await engine.run(GOAL, task_id="t-stuck", planner=lambda r: plan, tools=[stuck])
        assert result.status == "failed"
        assert result.failed_nodes == {"look"}
        [thread] = running
        assert thread.name == "pev-sync-t-stuck"  # still in the call, after the run ended
    finally:
        release.set()
    assert await asyncio.to_thread(_back_in_the_pool, thread)


async def test_two_runs_at_once_name_their_threads_after_their_tasks(engine: Engine) -> None:
    names: dict[str, set[str]] = {"first": set(), "second": set()}
    both_inside = threading.Barrier(2, timeout=WAIT_S)

    def make_tool(run: str) -> object:
        @pev.tool(name="water", effect="query")
        def water() -> str:
            names[run].add(threading.current_thread().name)
            both_inside.wait()  # the two runs overlap: each call holds its thread meanwhile
            return "damp"

        return water

    first, second = await asyncio.gather(
        engine.run(GOAL, task_id="first", planner=lambda r: PLAN, tools=[make_tool("first")]),
        engine.run(GOAL, task_id="second", planner=lambda r: PLAN, tools=[make_tool("second")]),
    )
    assert first.ok
    assert second.ok
    assert names == {"first": {"pev-sync-first"}, "second": {"pev-sync-second"}}


FORKED = textwrap.dedent(
    """
    import asyncio, os, sys, threading
    import pev
    from pev.model import Plan, PlanNode

    @pev.tool(effect="query")
    def look() -> str:
        return threading.current_thread().name

    def plan(request):
        return Plan("look", (PlanNode("look", "look", tool="look"),))

    def run(task_id):
        result = pev.run_sync("look", planner=plan, tools=[look], task_id=task_id)
        assert result.ok, result
        return result.outputs["look"]

    print(run("parent"), flush=True)  # the pool has threads now
    child = os.fork()
    if child == 0:
        print(run("child"), flush=True)  # would wait for ever on the parent's threads
        os._exit(0)
    _, status = os.waitpid(child, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_a_pool_of_its_own() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["pev-sync-parent", "pev-sync-child"]


async def test_outside_a_run_sync_code_runs_in_the_loops_default_executor() -> None:
    """No run, no run pool: ``as_async`` behaves like ``asyncio.to_thread``."""
    seen: list[tuple[object, str]] = []

    def call() -> str:
        seen.append((current_pool(), threading.current_thread().name))
        return "done"

    assert current_pool() is None
    assert await as_async(call)() == "done"
    [(pool, name)] = seen
    assert pool is None
    assert not name.startswith(THREAD_PREFIX)
    assert name != threading.main_thread().name


class _Crash(BaseException):
    """Stands in for the process dying mid-node: no engine code catches it."""


async def test_a_sync_reconcile_on_resume_runs_in_the_pool_as_the_task(engine: Engine) -> None:
    """Settling what a crash left unfinished runs sync code in the pool, named after the task."""
    seen: list[str] = []
    plan = Plan(GOAL, (PlanNode("move", "move the arm", tool="move"),))

    async def crashes() -> None:
        raise _Crash

    def moved(record: ExecutionRecord) -> str:
        seen.append(threading.current_thread().name)
        return "moved"

    with pytest.raises(_Crash):
        await engine.run(
            GOAL, task_id="t-crash", planner=lambda r: plan, tools=[tool(crashes, name="move")]
        )
    result = await pev.resume(
        "t-crash",
        store=engine.store,
        planner=lambda r: plan,
        tools=[tool(crashes, name="move", reconcile=moved)],
    )
    assert result.ok
    assert seen == ["pev-sync-t-crash"]
