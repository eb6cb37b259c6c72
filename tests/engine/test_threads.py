"""Sync component code runs in a thread pool the run owns: its own, bounded, shut down after it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

import pev
from pev.engine import PlanRequest, VerifyRequest, tool
from pev.engine._protocols import as_async
from pev.engine._threads import THREAD_PREFIX, current_pool
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
        self.pools: set[object] = set()

    def note(self, who: str) -> None:
        self.seen[who] = threading.current_thread()
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


def _wait_until_ended(thread: threading.Thread) -> bool:
    thread.join(WAIT_S)
    return not thread.is_alive()


async def test_sync_components_run_in_threads_of_the_runs_own_pool(engine: Engine) -> None:
    threads = _Threads()
    result = await engine.run(GOAL, task_id="t-own", **_components(threads))
    assert result.ok
    assert set(threads.seen) == {"planner", "tool", "verifier"}
    for thread in threads.seen.values():
        assert thread.name.startswith(f"{THREAD_PREFIX}-t-own_")


async def test_the_pool_is_shut_down_when_the_run_ends(engine: Engine) -> None:
    """It takes no more work, and its idle threads end: nothing is left waiting for work."""
    threads = _Threads()
    assert (await engine.run(GOAL, **_components(threads))).ok
    [pool] = threads.pools
    assert isinstance(pool, ThreadPoolExecutor)
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(print)
    ended = await asyncio.to_thread(lambda: all(map(_wait_until_ended, threads.seen.values())))
    assert ended


async def test_a_sync_tool_that_timed_out_outlives_the_run_in_its_thread(engine: Engine) -> None:
    """The run does not wait for it (Python cannot stop a thread); the thread ends on return."""
    release = threading.Event()
    running: list[threading.Thread] = []

    @pev.tool(effect="query", timeout_s=0.05)
    def stuck() -> None:
        running.append(threading.current_thread())
        release.wait(WAIT_S)

    plan = Plan(GOAL, (PlanNode("look", "look", tool="stuck", effect="query"),))
    try:
        result = await engine.run(GOAL, planner=lambda request: plan, tools=[stuck])
        assert result.status == "failed"
        assert result.failed_nodes == {"look"}
        [thread] = running
        assert thread.is_alive()
    finally:
        release.set()
    assert await asyncio.to_thread(_wait_until_ended, thread)


async def test_two_runs_do_not_share_a_pool(engine: Engine) -> None:
    pools: dict[str, set[object]] = {"first": set(), "second": set()}
    names: dict[str, set[str]] = {"first": set(), "second": set()}
    both_inside = threading.Barrier(2, timeout=WAIT_S)

    def make_tool(run: str) -> object:
        @pev.tool(name="water", effect="query")
        def water() -> str:
            pools[run].add(current_pool())
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
    assert len(pools["first"]) == len(pools["second"]) == 1
    assert pools["first"].isdisjoint(pools["second"])
    assert all(name.startswith(f"{THREAD_PREFIX}-first_") for name in names["first"])
    assert all(name.startswith(f"{THREAD_PREFIX}-second_") for name in names["second"])


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


async def test_a_sync_reconcile_on_resume_runs_in_the_resumed_runs_pool(engine: Engine) -> None:
    """Settling what a crash left unfinished runs sync code in a pool of the resumed run's own."""
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
    [name] = seen
    assert name.startswith(f"{THREAD_PREFIX}-t-crash_")
