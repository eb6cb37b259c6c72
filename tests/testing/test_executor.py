"""FunctionExecutor: plan nodes run by plain functions, wrapped the way tools are."""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import pytest
from tests.support.builders import record

from pev.engine import Executor, current_node_context
from pev.model import DeviceFailure, ExecutionRecord, NodeResult, PlanNode, Success, VerifierFailure
from pev.testing import FunctionExecutor, node_context

MOVE = PlanNode("move", tool="arm", args={"cube": "red", "to": [1, 2]})


# The record of node move, as the engine would pass it to reconcile.
_record = functools.partial(record, "r1", "move", args_digest="0" * 64, idempotency_key="task-1/r1")


async def test_function_by_tool_name_gets_the_args_as_keywords() -> None:
    """A function keyed by tool name is called as fn(**args), with plain dicts and lists."""
    seen = {}

    def arm(cube: str, to: list[int]) -> str:
        seen.update(cube=cube, to=to)
        return "moved"

    result = await FunctionExecutor({"arm": arm}).execute(MOVE, node_context())
    assert result == Success("moved")
    assert seen == {"cube": "red", "to": [1, 2]}
    assert type(seen["to"]) is list


async def test_node_id_wins_over_tool_name() -> None:
    """When both match, the function keyed by node id runs."""
    executor = FunctionExecutor({"arm": lambda **_: "by tool", "move": lambda **_: "by id"})
    assert await executor.execute(MOVE, node_context()) == Success("by id")


async def test_async_functions_are_awaited() -> None:
    """An async function's result is awaited and wrapped."""

    async def arm(cube: str, to: list[int]) -> int:
        return sum(to)

    assert await FunctionExecutor({"arm": arm}).execute(MOVE, node_context()) == Success(3)


@pytest.mark.parametrize(
    "result",
    [
        pytest.param(Success({"at": [1, 2]}), id="success"),
        pytest.param(DeviceFailure("move", "gripper jammed", outcome_unknown=True), id="device"),
        pytest.param(VerifierFailure("move", "cube not in view"), id="verifier"),
    ],
)
async def test_node_results_pass_through(result: NodeResult) -> None:
    """A function that returns a node result has it returned unchanged."""
    executor = FunctionExecutor({"move": lambda **_: result})
    assert await executor.execute(MOVE, node_context()) is result


async def test_exceptions_become_device_failures() -> None:
    """An exception becomes DeviceFailure(node.id, "Type: message at file:line in function")."""

    def arm(**_: object) -> None:
        raise ConnectionError("arm offline")

    result = await FunctionExecutor({"arm": arm}).execute(MOVE, node_context())
    assert result == DeviceFailure(
        "move", "ConnectionError: arm offline at test_executor.py:70 in arm"
    )


async def test_wrong_arguments_become_device_failures() -> None:
    """A function whose signature does not fit the node's args fails like a tool would."""
    result = await FunctionExecutor({"arm": lambda cube: cube}).execute(MOVE, node_context())
    assert isinstance(result, DeviceFailure)
    assert result.error.startswith("TypeError: ")


async def test_a_value_json_cannot_hold_becomes_a_device_failure() -> None:
    """A return value that is not JSON (a set, say) is a device failure, not a crash."""
    executor = FunctionExecutor({"move": lambda **_: {1, 2}})
    result = await executor.execute(MOVE, node_context())
    assert isinstance(result, DeviceFailure)
    assert result.error.startswith("the function for 'move' returned a non-JSON value")


async def test_failures_are_stamped_with_the_nodes_id() -> None:
    """A failure returned under another node id is re-stamped with the node's own id."""
    executor = FunctionExecutor({"arm": lambda **_: VerifierFailure("?", "cube not gripped")})
    assert await executor.execute(MOVE, node_context()) == VerifierFailure(
        "move", "cube not gripped"
    )


async def test_functions_see_the_context_through_current_node_context() -> None:
    """Inside a function, current_node_context() returns the context execute() was given."""

    def arm(cube: str, to: list[int]) -> str:
        return current_node_context().idempotency_key

    result = await FunctionExecutor({"arm": arm}).execute(MOVE, node_context(record_id="r9"))
    assert result == Success("task-1/r9")


async def test_assertion_errors_propagate() -> None:
    """An AssertionError in a test function fails the test instead of becoming a result."""

    def arm(cube: str, to: list[int]) -> None:
        assert cube == "blue"

    with pytest.raises(AssertionError):
        await FunctionExecutor({"arm": arm}).execute(MOVE, node_context())


async def test_nodes_without_a_function_succeed_with_none() -> None:
    """With no function and no default, a node succeeds with None."""
    assert await FunctionExecutor().execute(MOVE, node_context()) == Success(None)


async def test_default_gets_the_node_and_context() -> None:
    """The default handler is called as default(node, context) and wrapped like a function."""
    context = node_context(record_id="r7")
    executor = FunctionExecutor(default=lambda node, ctx: f"{node.id}@{ctx.record_id}")
    assert await executor.execute(MOVE, context) == Success("move@r7")


async def test_counts_calls_per_node_id() -> None:
    """calls is a Counter of executions per node id, default-handled nodes included."""
    executor = FunctionExecutor({"arm": lambda **_: None})
    for node in (MOVE, MOVE, PlanNode("look")):
        await executor.execute(node, node_context())
    assert executor.calls == Counter({"move": 2, "look": 1})


async def test_log_keeps_node_ids_and_args_in_call_order() -> None:
    """log lists (node_id, args) for every execution, with plain values."""
    executor = FunctionExecutor()
    await executor.execute(PlanNode("look"), node_context())
    await executor.execute(MOVE, node_context())
    assert executor.log == [("look", {}), ("move", {"cube": "red", "to": [1, 2]})]


async def test_log_is_not_changed_by_a_function_that_mutates_its_args() -> None:
    """The logged args are a copy: a function mutating its args does not rewrite history."""

    def arm(cube: str, to: list[int]) -> None:
        to.append(3)

    executor = FunctionExecutor({"arm": arm})
    await executor.execute(MOVE, node_context())
    assert executor.log == [("move", {"cube": "red", "to": [1, 2]})]


def test_has_no_reconcile_unless_given() -> None:
    """Without reconcile=..., the executor has no reconcile attribute for the engine to find."""
    assert not hasattr(FunctionExecutor(), "reconcile")


def test_reconcile_is_an_async_method_when_given() -> None:
    """With reconcile=..., executor.reconcile is a coroutine function."""
    executor = FunctionExecutor(reconcile=lambda record: None)
    assert inspect.iscoroutinefunction(executor.reconcile)


async def test_reconcile_returns_the_functions_answer_and_records_the_record() -> None:
    """reconcile(record) returns what the function says and keeps the record in reconciled."""
    settled = Success("already moved")
    executor = FunctionExecutor(reconcile=lambda record: settled)
    record = _record()
    assert await executor.reconcile(record) is settled
    assert executor.reconciled == [record]


async def test_reconcile_accepts_an_async_function() -> None:
    """An async reconcile function is awaited; None means the outcome stays unknown."""

    async def ask_robot(record: ExecutionRecord) -> NodeResult | None:
        return None

    assert await FunctionExecutor(reconcile=ask_robot).reconcile(_record()) is None


def test_is_an_executor() -> None:
    """It satisfies the engine's Executor protocol."""
    assert isinstance(FunctionExecutor(), Executor)
