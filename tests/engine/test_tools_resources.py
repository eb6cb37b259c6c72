"""Tools: a resource the executor keeps exclusive, across tools and executors.

See docs/design.md §6.
"""

from __future__ import annotations

import asyncio
import threading
import time

from tests.support.tools import LONG, SHORT
from tests.support.tools import context as _context
from tests.support.tools import node as _node

from pev.engine import Resources, ToolExecutor, tool
from pev.model import DeviceFailure, Success


class _Probe:
    """Counts how many calls are inside at once, from the loop or from threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def enter(self) -> None:
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)

    def leave(self) -> None:
        with self._lock:
            self.active -= 1

    async def visit(self) -> None:
        """One async call: inside for a moment."""
        self.enter()
        await asyncio.sleep(SHORT / 5)
        self.leave()

    def stay(self) -> None:
        """One sync call (in a thread): inside for a moment."""
        self.enter()
        time.sleep(SHORT / 5)
        self.leave()


# --- executor: resources ----------------------------------------------------------------------


async def test_tools_sharing_a_resource_never_overlap() -> None:
    """Sync and async tools on resource 'arm' run one at a time under gather."""
    probe = _Probe()

    @tool(resource="arm")
    async def reach() -> None:
        await probe.visit()

    @tool(resource="arm")
    def grip() -> None:
        probe.stay()

    executor = ToolExecutor([reach, grip])
    nodes = [_node(name, f"n{i}") for i, name in enumerate(["reach", "grip"] * 3)]
    results = await asyncio.gather(*(executor.execute(node, _context()) for node in nodes))
    assert all(isinstance(result, Success) for result in results)
    assert probe.peak == 1


async def test_a_resource_is_shared_across_executors_given_one_table() -> None:
    """Two executors given the same Resources keep a resource exclusive."""
    probe = _Probe()

    @tool(resource="arm")
    async def reach() -> None:
        await probe.visit()

    shared = Resources()
    first = ToolExecutor([reach], resources=shared)
    second = ToolExecutor([reach], resources=shared)
    await asyncio.gather(
        *(ex.execute(_node("reach"), _context()) for ex in (first, second, first, second))
    )
    assert probe.peak == 1


async def test_tools_without_a_resource_overlap() -> None:
    """Without a resource, calls run at the same time."""
    probe = _Probe()

    @tool
    async def look() -> None:
        await probe.visit()

    executor = ToolExecutor([look])
    await asyncio.gather(*(executor.execute(_node("look"), _context()) for _ in range(3)))
    assert probe.peak == 3


class _HeldArm:
    """Tool 'hold' keeps resource 'arm' until released; tool 'move' on the arm notes its calls."""

    def __init__(self, move_timeout_s: float | None = None) -> None:
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[str] = []

        @tool(resource="arm")
        async def hold() -> None:
            self.holding.set()
            await self.release.wait()

        @tool(resource="arm", timeout_s=move_timeout_s)
        async def move() -> None:
            self.calls.append("move")

        self.executor = ToolExecutor([hold, move])

    async def hold(self) -> asyncio.Task[object]:
        """Start 'hold' and return its task once it holds the arm."""
        holder = asyncio.create_task(self.executor.execute(_node("hold"), _context()))
        await self.holding.wait()
        return holder


async def test_waiting_for_a_resource_counts_against_the_timeout() -> None:
    """A call that times out in the resource queue never started: outcome known."""
    arm = _HeldArm(move_timeout_s=SHORT)
    holder = await arm.hold()
    result = await arm.executor.execute(_node("move"), _context())
    arm.release.set()
    assert await holder == Success(None)
    assert result == DeviceFailure(
        "n1",
        "tool 'move' timed out after 0.05 s (its timeout_s of 0.05 s) waiting for resource "
        "'arm'; it never started",
        is_timeout=True,
    )
    assert arm.calls == []


async def test_a_sync_tool_that_timed_out_keeps_its_resource_until_it_returns() -> None:
    """The next call on the resource waits for the stray thread, not just for the timeout."""
    release = threading.Event()

    @tool(resource="arm", timeout_s=SHORT)
    def stuck() -> None:
        release.wait(LONG)

    @tool(resource="arm", timeout_s=SHORT)
    async def move() -> str:
        return "moved"

    executor = ToolExecutor([stuck, move])
    try:
        first = await executor.execute(_node("stuck"), _context())
        assert isinstance(first, DeviceFailure)
        assert first.outcome_unknown
        blocked = await executor.execute(_node("move"), _context())
        assert isinstance(blocked, DeviceFailure)
        assert "waiting for resource 'arm'" in blocked.error
    finally:
        release.set()
    patient = tool(move.fn, name="move", resource="arm")  # no timeout_s of its own
    later = ToolExecutor([patient], node_timeout_s=LONG)
    assert await later.execute(_node("move"), _context()) == Success("moved")


async def test_cancelled_while_waiting_for_a_resource_means_not_called() -> None:
    """Cancellation noticed after the resource wait still stops the call."""
    arm = _HeldArm()
    holder = await arm.hold()
    context = _context()
    waiter = asyncio.create_task(arm.executor.execute(_node("move"), context))
    await asyncio.sleep(0)
    context.cancelled.set()
    arm.release.set()
    await holder
    assert await waiter == DeviceFailure("n1", "tool 'move' was cancelled before it started")
    assert arm.calls == []
