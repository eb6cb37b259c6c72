"""Tools (SPEC §6): @tool, the registry, and the executor that turns failures into values."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, NewType, Optional, Union

import pytest

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
from pev.model import (
    DeviceFailure,
    Effect,
    Plan,
    PlanNode,
    RecordStatus,
    Success,
    TaskId,
    VerifierFailure,
    validate_plan,
)

SHORT = 0.05  # a timeout that a call sleeping LONG always misses
LONG = 1.0


def _context(
    *, deadline: float | None = None, cancelled: bool = False, key: str = "key-1"
) -> NodeContext:
    event = asyncio.Event()
    if cancelled:
        event.set()

    async def report(status: RecordStatus) -> None:
        del status

    return NodeContext(
        task_id=TaskId("task-1"),
        node_id="n1",
        revision=1,
        record_id="rec-1",
        idempotency_key=key,
        deadline=deadline,
        cancelled=event,
        dependencies={},
        report=report,
    )


def _node(tool_name: str | None, node_id: str = "n1", **args: object) -> PlanNode:
    return PlanNode(node_id, "a step", tool=tool_name, args=args)


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


# --- decoration -------------------------------------------------------------------------------


def test_bare_decorator_makes_an_action_tool_named_after_the_function() -> None:
    """@tool without options: the function's name, effect action, no resource or timeout."""

    @tool
    def grip(force: float) -> str:
        """Close the gripper.

        Longer text that the planner does not need.
        """
        return f"gripped at {force}"

    assert isinstance(grip, Tool)
    assert (grip.name, grip.effect, grip.resource, grip.timeout_s) == (
        "grip",
        Effect.ACTION,
        None,
        None,
    )
    assert grip.description == "Close the gripper."
    assert grip.spec.effect is Effect.ACTION


def test_decorator_with_options_sets_them() -> None:
    """@tool(...) sets name, effect, resource, timeout and description."""

    @tool(name="peek", effect="query", resource="camera", timeout_s=2.0, description="Look.")
    def look() -> str:
        return "a cube"

    assert (look.name, look.effect, look.resource, look.timeout_s, look.description) == (
        "peek",
        Effect.QUERY,
        "camera",
        2.0,
        "Look.",
    )
    assert look.spec.name == "peek"
    assert look.spec.effect is Effect.QUERY
    assert look.spec.description == "Look."


def test_a_tool_is_still_callable_directly() -> None:
    """Calling the Tool calls the function."""

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, b=3) == 5


async def test_an_async_tool_called_directly_returns_its_coroutine() -> None:
    """An async tool called directly is awaited like the function."""

    @tool(effect=Effect.QUERY)
    async def read() -> str:
        return "42"

    assert read.is_async
    assert await read() == "42"


def test_decorating_a_tool_twice_is_refused() -> None:
    """@tool on a Tool is a TypeError, not a silent second wrapper."""

    @tool
    def once() -> None:
        return None

    with pytest.raises(TypeError, match="already a tool"):
        tool(once)


@pytest.mark.parametrize("effect", ["write", "QUERY", ""])
def test_an_unknown_effect_is_refused_naming_the_allowed_values(effect: str) -> None:
    """A bad effect string is a ValueError that names 'query' and 'action'."""
    with pytest.raises(ValueError, match="'query', 'action'"):
        tool(lambda: None, name="x", effect=effect)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout_s", [0, -1.0, math.nan, math.inf])
def test_a_timeout_that_is_not_a_positive_number_is_refused(timeout_s: float) -> None:
    """timeout_s must be positive and finite."""
    with pytest.raises(ValueError, match="timeout_s"):
        tool(lambda: None, name="x", timeout_s=timeout_s)


# --- signature → spec -------------------------------------------------------------------------

UserId = NewType("UserId", str)
_UNANNOTATED = object()


def _json_types(hint: object) -> frozenset[str]:
    def fn(value):  # type: ignore[no-untyped-def]
        return value

    if hint is not _UNANNOTATED:
        fn.__annotations__ = {"value": hint}
    return tool(fn).spec.parameters[0].json_types


# One hint per row, with the JSON types plan validation accepts for it (empty: any value).
HINTS = [
    pytest.param(str, {"string"}, id="str"),
    pytest.param(int, {"integer"}, id="int"),
    pytest.param(float, {"number"}, id="float"),
    pytest.param(bool, {"boolean"}, id="bool"),
    pytest.param(None, {"null"}, id="None"),
    pytest.param(list, {"array"}, id="list"),
    pytest.param(list[int], {"array"}, id="list[int]"),
    pytest.param(tuple[int, ...], {"array"}, id="tuple"),
    pytest.param(Sequence[str], {"array"}, id="Sequence"),
    pytest.param(dict, {"object"}, id="dict"),
    pytest.param(dict[str, int], {"object"}, id="dict[str, int]"),
    pytest.param(Mapping[str, Any], {"object"}, id="Mapping"),
    pytest.param(str | None, {"string", "null"}, id="str|None"),
    pytest.param(Optional[int], {"integer", "null"}, id="Optional"),  # noqa: UP045
    pytest.param(Union[int, str], {"integer", "string"}, id="Union"),  # noqa: UP007
    pytest.param(list[int] | dict[str, int], {"array", "object"}, id="list|dict"),
    pytest.param(Literal["left", "right"], {"string"}, id="Literal-str"),
    pytest.param(Literal[1, "a", None], {"integer", "string", "null"}, id="Literal-mixed"),
    pytest.param(Literal[True], {"boolean"}, id="Literal-bool"),
    pytest.param(Annotated[int, "millimetres"], {"integer"}, id="Annotated"),
    pytest.param(UserId, {"string"}, id="NewType"),
    pytest.param(Any, set(), id="Any"),
    pytest.param(object, set(), id="object"),
    pytest.param(int | Any, set(), id="union-with-Any"),
    pytest.param(_UNANNOTATED, set(), id="unannotated"),
]


@pytest.mark.parametrize(("hint", "expected"), HINTS)
def test_a_type_hint_becomes_the_json_types_of_its_parameter(
    hint: object, expected: set[str]
) -> None:
    """Each supported hint maps to the JSON types a plan arg may have."""
    assert _json_types(hint) == frozenset(expected)


def test_string_annotations_are_resolved() -> None:
    """Hints written as strings (from __future__ annotations) are evaluated."""

    @tool
    def move(x: float, label: str | None = None) -> None:
        del x, label

    assert [(p.name, p.json_types) for p in move.spec.parameters] == [
        ("x", frozenset({"number"})),
        ("label", frozenset({"string", "null"})),
    ]


def test_a_parameter_with_a_default_is_not_required() -> None:
    """Required means: no default."""

    @tool
    def move(x: float, speed: float = 1.0, label: str | None = None) -> None:
        del x, speed, label

    assert [(p.name, p.required) for p in move.spec.parameters] == [
        ("x", True),
        ("speed", False),
        ("label", False),
    ]


def test_keyword_only_parameters_are_plain_parameters() -> None:
    """A keyword-only parameter is passed by name like any other."""

    @tool
    def move(*, x: float) -> None:
        del x

    assert [p.name for p in move.spec.parameters] == ["x"]


def _star_args(*points: float) -> None:
    del points


def _star_kwargs(**options: float) -> None:
    del options


def _positional_only(x: float, /) -> None:
    del x


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        pytest.param(_star_args, r"'points' collects \*args", id="*args"),
        pytest.param(_star_kwargs, r"'options' collects \*\*kwargs", id="**kwargs"),
        pytest.param(_positional_only, "'x' is positional-only", id="positional-only"),
    ],
)
def test_a_signature_plans_cannot_call_by_name_is_refused(fn: Any, why: str) -> None:
    """*args, **kwargs and positional-only parameters are TypeErrors that say why."""
    with pytest.raises(TypeError, match=why) as info:
        tool(fn)
    assert "plan args are named JSON values" in str(info.value)


@dataclass
class _Point:
    x: float


class _Colour(Enum):
    RED = "red"


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(_Point, id="dataclass"),
        pytest.param(_Colour, id="enum"),
        pytest.param(set[int], id="set"),
        pytest.param(Literal[_Colour.RED], id="Literal-enum"),
        pytest.param(int | bytes, id="union-with-bytes"),
    ],
)
def test_a_hint_no_json_value_can_satisfy_is_refused(hint: object) -> None:
    """A hint that plan args (JSON) can never satisfy is a TypeError naming the parameter."""
    with pytest.raises(TypeError, match="parameter 'value'"):
        _json_types(hint)


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
        "node 'n1': argument 'force' of tool '_grip' must be number, got string",
        "node 'n1': tool '_grip' has no parameter 'speed' (parameters: force)",
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
    """A raised exception is DeviceFailure naming its type and message."""

    @tool
    def grip() -> None:
        raise RuntimeError("gripper jammed")

    assert await _run(grip) == DeviceFailure("n1", "RuntimeError: gripper jammed")


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

    assert await _run(fetch) == DeviceFailure("n1", "TimeoutError: socket timed out")


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

    @tool
    def pose() -> object:
        return {"joints": {1, 2}}

    result = await _run(pose)
    assert isinstance(result, DeviceFailure)
    assert "returned a non-JSON value" in result.error
    assert "set" in result.error


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


# --- executor: resources ----------------------------------------------------------------------


async def test_tools_sharing_a_resource_never_overlap() -> None:
    """Sync and async tools on resource 'arm' run one at a time under gather."""
    probe = _Probe()

    @tool(resource="arm")
    async def reach() -> None:
        probe.enter()
        await asyncio.sleep(SHORT / 5)
        probe.leave()

    @tool(resource="arm")
    def grip() -> None:
        probe.enter()
        time.sleep(SHORT / 5)
        probe.leave()

    executor = ToolExecutor([reach, grip])
    nodes = [_node(name, f"n{i}") for i, name in enumerate(["reach", "grip"] * 3)]
    results = await asyncio.gather(*(executor.execute(node, _context()) for node in nodes))
    assert all(isinstance(result, Success) for result in results)
    assert probe.peak == 1


async def test_a_resource_is_shared_across_executors() -> None:
    """Two executors on one loop still keep a resource exclusive."""
    probe = _Probe()

    @tool(resource="arm")
    async def reach() -> None:
        probe.enter()
        await asyncio.sleep(SHORT / 5)
        probe.leave()

    first, second = ToolExecutor([reach]), ToolExecutor([reach])
    await asyncio.gather(
        *(ex.execute(_node("reach"), _context()) for ex in (first, second, first, second))
    )
    assert probe.peak == 1


async def test_tools_without_a_resource_overlap() -> None:
    """Without a resource, calls run at the same time."""
    probe = _Probe()

    @tool
    async def look() -> None:
        probe.enter()
        await asyncio.sleep(SHORT / 5)
        probe.leave()

    executor = ToolExecutor([look])
    await asyncio.gather(*(executor.execute(_node("look"), _context()) for _ in range(3)))
    assert probe.peak == 3


async def test_waiting_for_a_resource_counts_against_the_timeout() -> None:
    """A call that times out in the resource queue never started: outcome known."""
    holding = asyncio.Event()
    release = asyncio.Event()
    calls: list[str] = []

    @tool(resource="arm")
    async def hold() -> None:
        holding.set()
        await release.wait()

    @tool(resource="arm", timeout_s=SHORT)
    async def move() -> None:
        calls.append("move")

    executor = ToolExecutor([hold, move])
    holder = asyncio.create_task(executor.execute(_node("hold"), _context()))
    await holding.wait()
    result = await executor.execute(_node("move"), _context())
    release.set()
    assert await holder == Success(None)
    assert result == DeviceFailure(
        "n1",
        "tool 'move' timed out after 0.05 s (its timeout_s of 0.05 s) waiting for resource "
        "'arm'; it never started",
        is_timeout=True,
    )
    assert calls == []


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
    release = asyncio.Event()
    holding = asyncio.Event()
    calls: list[str] = []

    @tool(resource="arm")
    async def hold() -> None:
        holding.set()
        await release.wait()

    @tool(resource="arm")
    async def move() -> None:
        calls.append("move")

    executor = ToolExecutor([hold, move])
    holder = asyncio.create_task(executor.execute(_node("hold"), _context()))
    await holding.wait()
    context = _context()
    waiter = asyncio.create_task(executor.execute(_node("move"), context))
    await asyncio.sleep(0)
    context.cancelled.set()
    release.set()
    await holder
    assert await waiter == DeviceFailure("n1", "tool 'move' was cancelled before it started")
    assert calls == []
