"""Tools (docs/design.md §6): the registry, and the executor that turns failures into values.

It calls sync and async tools, gives them their node context, and enforces timeouts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from tests.support.tools import LONG, SHORT
from tests.support.tools import context as _context
from tests.support.tools import node as _node

from pev.engine import (
    Executor,
    NodeContext,
    Tool,
    ToolExecutor,
    ToolRegistry,
    current_node_context,
    tool,
)
from pev.errors import PlanError
from pev.model import DeviceFailure, Effect, Plan, PlanNode, Success, VerifierFailure, validate_plan


async def _run(
    target: Tool[..., Any],
    *,
    node_timeout_s: float | None = None,
    context: NodeContext | None = None,
    node_effect: Effect = Effect.ACTION,
    **args: object,
) -> object:
    executor = ToolExecutor([target], node_timeout_s=node_timeout_s)
    node = PlanNode("n1", "a step", tool=target.name, args=args, effect=node_effect)
    return await executor.execute(node, context or _context())


# --- registry ---------------------------------------------------------------------------------


@tool(effect="query")
def _look() -> str:
    return "a cube"


def _grip(force: float) -> float:
    return force


def test_registry_accepts_tools_functions_and_iterables() -> None:
    """Tools are kept as they are; plain functions get tool()'s defaults."""
    registry = ToolRegistry.of([_look, _grip])
    assert list(registry) == ["_look", "_grip"]
    assert registry["_look"] is _look
    assert registry["_grip"].effect is Effect.ACTION
    assert registry["_grip"].fn is _grip


def test_registry_accepts_a_single_tool_or_function() -> None:
    """One tool or one function is a registry of one."""
    assert list(ToolRegistry.of(_look)) == ["_look"]
    assert list(ToolRegistry.of(_grip)) == ["_grip"]


def test_a_mapping_names_its_tools() -> None:
    """In a mapping, the key is the name plans use, for a Tool and for a function."""
    registry = ToolRegistry.of({"peek": _look, "grab": _grip})
    assert registry["peek"].name == "peek"
    assert registry["peek"].effect is Effect.QUERY
    assert registry["grab"].spec.name == "grab"


def test_duplicate_names_are_refused_naming_the_name() -> None:
    """Two tools with one name are a ValueError that names it."""
    other = tool(lambda: None, name="_look")
    with pytest.raises(ValueError, match="'_look'"):
        ToolRegistry.of([_look, other])


def test_something_that_is_not_a_tool_is_refused() -> None:
    """A non-callable entry is a TypeError."""
    with pytest.raises(TypeError, match="expected a tool or a function"):
        ToolRegistry.of([_look, 42])  # type: ignore[list-item]


def test_of_returns_a_registry_as_it_is() -> None:
    """ToolRegistry.of is idempotent."""
    registry = ToolRegistry.of([_look])
    assert ToolRegistry.of(registry) is registry


def test_the_registry_is_read_only() -> None:
    """A registry cannot be changed after it was built."""
    registry = ToolRegistry.of([_look])
    with pytest.raises(TypeError):
        registry["x"] = _look  # type: ignore[index]


def test_specs_are_what_plan_validation_takes() -> None:
    """registry.specs maps each name to its ToolSpec."""
    registry = ToolRegistry.of([_look, _grip])
    assert registry.specs == {"_look": _look.spec, "_grip": registry["_grip"].spec}


def test_plan_validation_checks_args_against_the_signature() -> None:
    """validate_plan with registry.specs rejects a wrong arg and accepts a right one."""
    registry = ToolRegistry.of([_grip])
    good = Plan("grip", (_node("_grip", force=2),))
    validate_plan(good, tools=registry.specs)
    bad = Plan("grip", (_node("_grip", force="hard", speed=1),))
    with pytest.raises(PlanError) as info:
        validate_plan(bad, tools=registry.specs)
    assert info.value.problems == (
        "node 'n1': tool '_grip' has no parameter 'speed' (parameters: force)",
        (
            "node 'n1': tool '_grip': argument 'force': Input should be a valid number, unable "
            "to parse string as a number (got 'hard')"
        ),
    )


# --- executor: calling tools ------------------------------------------------------------------


def test_the_executor_is_an_executor() -> None:
    """ToolExecutor satisfies the Executor protocol."""
    assert isinstance(ToolExecutor([_look]), Executor)


def test_a_bad_node_timeout_is_refused() -> None:
    """node_timeout_s must be positive."""
    with pytest.raises(ValueError, match="node_timeout_s"):
        ToolExecutor([_look], node_timeout_s=0)


async def test_a_sync_tool_runs_and_its_value_is_a_success() -> None:
    """A sync tool's return value becomes Success(value)."""

    @tool
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    assert await _run(add, a=2, b=3) == Success({"sum": 5})


async def test_a_sync_tool_runs_off_the_event_loop() -> None:
    """A sync tool runs in a worker thread, not on the loop's thread."""
    loop_thread = threading.get_ident()

    @tool
    def where() -> bool:
        return threading.get_ident() != loop_thread

    assert await _run(where) == Success(True)


async def test_an_async_tool_is_awaited() -> None:
    """An async tool's awaited value becomes Success(value)."""

    @tool
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    assert await _run(double, x=21) == Success(42)


async def test_arrays_and_objects_arrive_as_plain_lists_and_dicts() -> None:
    """Frozen plan args are thawed into lists and dicts for the function."""
    seen: list[object] = []

    @tool
    def store(points: list[int], options: dict[str, Any]) -> None:
        points.append(4)
        seen.extend([points, options])

    assert await _run(store, points=[1, 2, 3], options={"fast": True}) == Success(None)
    assert seen == [[1, 2, 3, 4], {"fast": True}]
    assert type(seen[1]) is dict


async def test_an_exception_becomes_a_device_failure() -> None:
    """A raised exception is DeviceFailure naming its type, message and the tool's frame."""

    @tool
    def grip() -> None:
        raise RuntimeError("gripper jammed")

    result = await _run(grip)
    assert isinstance(result, DeviceFailure)
    assert result.error.startswith("RuntimeError: gripper jammed at test_tools_executor.py:")
    assert result.error.endswith(" in grip")


async def test_an_action_that_raised_reported_its_outcome() -> None:
    """A raised exception is a reported failure: outcome_unknown stays False, even for actions."""

    @tool(effect="action")
    async def push() -> None:
        raise ValueError("refused")

    result = await _run(push)
    assert isinstance(result, DeviceFailure)
    assert not result.outcome_unknown
    assert not result.is_timeout


async def test_the_tools_own_timeout_error_is_an_ordinary_failure() -> None:
    """A TimeoutError the tool raises itself is not the executor's timeout."""

    @tool
    async def fetch() -> None:
        raise TimeoutError("socket timed out")

    result = await _run(fetch)
    assert isinstance(result, DeviceFailure)
    assert not result.is_timeout
    assert result.error.startswith("TimeoutError: socket timed out at test_tools_executor.py:")


async def test_an_exception_that_is_not_an_exception_propagates() -> None:
    """BaseExceptions other than Exception are not device failures."""

    class Stop(BaseException):
        pass

    @tool
    async def halt() -> None:
        raise Stop

    with pytest.raises(Stop):
        await _run(halt)


async def test_cancelling_the_executor_cancels_the_tool() -> None:
    """Cancellation propagates out of execute as CancelledError."""
    started = asyncio.Event()

    @tool
    async def wait() -> None:
        started.set()
        await asyncio.sleep(LONG)

    task = asyncio.create_task(_run(wait))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_returned_verifier_failure_passes_through_with_the_nodes_id() -> None:
    """A NodeResult returned by the tool is the result; the executor stamps the node id."""

    @tool
    def weigh() -> VerifierFailure:
        return VerifierFailure("", "the scale reads 0 g: nothing was picked")

    assert await _run(weigh) == VerifierFailure("n1", "the scale reads 0 g: nothing was picked")


async def test_a_returned_device_failure_passes_through() -> None:
    """A tool can report its own device failure, outcome flags included."""

    @tool
    async def send() -> DeviceFailure:
        return DeviceFailure("n1", "no acknowledgement", outcome_unknown=True)

    assert await _run(send) == DeviceFailure("n1", "no acknowledgement", outcome_unknown=True)


async def test_a_non_json_value_is_a_device_failure() -> None:
    """A value JSON cannot hold is a DeviceFailure that says so."""

    class Joints:
        pass

    @tool
    def pose() -> object:
        return {"joints": Joints()}

    result = await _run(pose)
    assert isinstance(result, DeviceFailure)
    assert "returned a non-JSON value" in result.error
    assert "Joints" in result.error


@pytest.mark.parametrize(
    ("tool_name", "message"),
    [
        pytest.param(None, "node 'n1' names no tool (registered: _look)", id="no-tool"),
        pytest.param(
            "fly",
            "node 'n1' names tool 'fly', which is not registered (registered: _look)",
            id="unknown",
        ),
    ],
)
async def test_a_node_without_a_registered_tool_is_a_device_failure(
    tool_name: str | None, message: str
) -> None:
    """No tool, or an unknown one: a DeviceFailure naming the registered tools."""
    result = await ToolExecutor([_look]).execute(_node(tool_name), _context())
    assert result == DeviceFailure("n1", message)


async def test_a_cancelled_context_means_the_tool_is_not_called() -> None:
    """Cancelled before the call: the tool never runs."""
    calls: list[str] = []

    @tool
    def grip() -> None:
        calls.append("grip")

    result = await _run(grip, context=_context(cancelled=True))
    assert result == DeviceFailure("n1", "tool 'grip' was cancelled before it started")
    assert calls == []


# --- executor: node context -------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_the_node_context_is_visible_inside_the_tool(is_async: bool) -> None:
    """current_node_context() inside a sync or async tool returns the node's context."""

    def key() -> str:
        return current_node_context().idempotency_key

    async def key_async() -> str:
        return current_node_context().idempotency_key

    chosen = tool(key_async if is_async else key, name="key")
    assert await _run(chosen, context=_context(key="rec-1:grip")) == Success("rec-1:grip")


async def test_the_node_context_is_gone_after_the_call() -> None:
    """The executor restores the context variable when it returns."""

    @tool
    async def noop() -> None:
        return None

    await _run(noop)
    with pytest.raises(LookupError):
        current_node_context()


# --- executor: timeouts -----------------------------------------------------------------------


async def test_an_async_action_that_times_out_has_an_unknown_outcome() -> None:
    """Timeout of an action: is_timeout and outcome_unknown."""

    @tool(timeout_s=SHORT)
    async def move() -> None:
        await asyncio.sleep(LONG)

    result = await _run(move)
    assert isinstance(result, DeviceFailure)
    assert (result.is_timeout, result.outcome_unknown) == (True, True)
    assert "tool 'move' timed out after 0.05 s (its timeout_s of 0.05 s)" in result.error


async def test_a_query_that_times_out_has_a_known_outcome() -> None:
    """Timeout of a query: is_timeout, but nothing in the world changed."""

    @tool(effect="query", timeout_s=SHORT)
    async def look() -> None:
        await asyncio.sleep(LONG)

    result = await _run(look, node_effect=Effect.QUERY)
    assert isinstance(result, DeviceFailure)
    assert (result.is_timeout, result.outcome_unknown) == (True, False)


async def test_a_node_marking_a_query_tool_as_action_makes_its_timeout_unknown() -> None:
    """The stricter of the node's and the tool's effect decides: action wins."""

    @tool(effect="query", timeout_s=SHORT)
    async def look() -> None:
        await asyncio.sleep(LONG)

    result = await _run(look, node_effect=Effect.ACTION)
    assert isinstance(result, DeviceFailure)
    assert result.outcome_unknown


async def test_a_sync_tool_times_out_while_its_thread_keeps_running() -> None:
    """A sync tool's timeout is a DeviceFailure at once; the thread finishes on its own."""
    release = threading.Event()
    finished = threading.Event()

    @tool(timeout_s=SHORT)
    def move() -> None:
        release.wait(LONG)
        finished.set()

    try:
        result = await _run(move)
        assert isinstance(result, DeviceFailure)
        assert (result.is_timeout, result.outcome_unknown) == (True, True)
        assert "its thread keeps running" in result.error
        assert not finished.is_set()
    finally:
        release.set()
    assert await asyncio.to_thread(finished.wait, LONG)


async def test_node_timeout_s_applies_to_a_tool_without_one() -> None:
    """A tool without timeout_s gets the executor's node_timeout_s."""

    @tool
    async def move() -> None:
        await asyncio.sleep(LONG)

    result = await _run(move, node_timeout_s=SHORT)
    assert isinstance(result, DeviceFailure)
    assert result.is_timeout
    assert "(node_timeout_s of 0.05 s)" in result.error


async def test_the_tools_timeout_wins_over_node_timeout_s() -> None:
    """A tool's own timeout_s replaces the executor's default, even when longer."""

    @tool(timeout_s=LONG)
    async def move() -> str:
        await asyncio.sleep(SHORT)
        return "moved"

    assert await _run(move, node_timeout_s=SHORT / 5) == Success("moved")


async def test_the_context_deadline_caps_the_timeout() -> None:
    """A node deadline earlier than the tool's timeout ends the call at the deadline."""

    @tool(timeout_s=LONG * 10)
    async def move() -> None:
        await asyncio.sleep(LONG)

    deadline = asyncio.get_running_loop().time() + SHORT
    started = time.monotonic()
    result = await _run(move, context=_context(deadline=deadline))
    assert time.monotonic() - started < LONG
    assert isinstance(result, DeviceFailure)
    assert result.is_timeout
    assert "(the node's deadline)" in result.error


async def test_a_deadline_already_passed_means_the_tool_is_not_called() -> None:
    """Past the deadline, the tool never starts, so even an action's outcome is known."""
    calls: list[str] = []

    @tool
    def move() -> None:
        calls.append("move")

    deadline = asyncio.get_running_loop().time() - 1
    result = await _run(move, context=_context(deadline=deadline))
    assert result == DeviceFailure(
        "n1", "tool 'move' was not started: the node's deadline had already passed", is_timeout=True
    )
    assert calls == []
