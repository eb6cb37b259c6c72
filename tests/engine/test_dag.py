"""Plans as graphs in a run: parallelism, skips, data flow, node context.

See docs/design.md §2.1, §2.2, §6.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tests.support.watering import GOAL, RECOVERY

import pev
from pev.engine import NodeContext, current_node_context
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import NodeSkipped
from pev.model import DeviceFailure, Plan, PlanNode, RecordStatus, Verdict
from pev.policy import RecoveryPolicy
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine


class InFlight:
    """Counts calls running at once, and the most seen."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    async def during(self, seconds: float) -> None:
        """Count one call in flight for ``seconds``."""
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


def _independent(count: int, tool: str) -> Plan:
    return Plan(
        GOAL,
        tuple(
            PlanNode(f"n{i}", f"step {i}", tool=tool, args={"i": i}, effect="query")
            for i in range(count)
        ),
    )


async def test_independent_nodes_run_in_parallel_up_to_max_parallel(engine: Engine) -> None:
    """Six independent nodes with max_parallel=3: never more than three at once, and three."""
    counter = InFlight()

    @pev.tool(effect="query")
    async def probe(i: int) -> int:
        await counter.during(0.02)
        return i

    result = await engine.run(
        planner=ScriptedPlanner(_independent(6, "probe")),
        tools=[probe],
        policy=RecoveryPolicy(max_parallel=3),
    )

    assert result.ok
    assert counter.peak == 3
    assert dict(result.outputs) == {f"n{i}": i for i in range(6)}


async def test_max_parallel_of_one_runs_nodes_one_at_a_time(engine: Engine) -> None:
    """max_parallel=1 serialises even independent nodes."""
    counter = InFlight()

    @pev.tool(effect="query")
    async def probe(i: int) -> int:
        await counter.during(0.005)
        return i

    await engine.run(
        planner=ScriptedPlanner(_independent(4, "probe")),
        tools=[probe],
        policy=RecoveryPolicy(max_parallel=1),
    )

    assert counter.peak == 1


async def test_tools_sharing_a_resource_never_overlap(engine: Engine) -> None:
    """Two tools on the same resource run one after the other, even as independent nodes."""
    counter = InFlight()

    @pev.tool(effect="action", resource="arm")
    async def lift(i: int) -> int:
        await counter.during(0.01)
        return i

    @pev.tool(effect="action", resource="arm")
    async def lower(i: int) -> int:
        await counter.during(0.01)
        return i

    plan = Plan(
        GOAL,
        (
            PlanNode("up", "lift", tool="lift", args={"i": 1}),
            PlanNode("down", "lower", tool="lower", args={"i": 2}),
        ),
    )

    result = await engine.run(planner=ScriptedPlanner(plan), tools=[lift, lower])

    assert result.ok
    assert counter.peak == 1


async def test_dependents_of_a_failed_node_are_skipped_and_an_independent_branch_runs(
    engine: Engine,
) -> None:
    """a fails: b and c (downstream) get node_skipped and are not called; d still runs."""
    plan = Plan(
        GOAL,
        (
            PlanNode("a", "fetch", effect="query"),
            PlanNode("b", "fill", after=("a",)),
            PlanNode("c", "pour", after=("b",)),
            PlanNode("d", "open the window", effect="query"),
        ),
    )
    executor = FunctionExecutor({"a": lambda: DeviceFailure("a", "no can"), "d": lambda: "open"})

    result = await engine.run(planner=ScriptedPlanner(plan), executor=executor)

    assert executor.calls == {"a": 1, "d": 1}
    skipped = [e for e in await engine.events(result.task_id) if isinstance(e, NodeSkipped)]
    assert {e.node_id: e.blocked_by for e in skipped} == {"b": ("a",), "c": ("b",)}
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED)
    assert dict(result.outputs) == {"d": "open"}
    assert result.failed_nodes == {"a", "b", "c"}


async def test_a_ref_passes_a_dependency_output_into_args(engine: Engine) -> None:
    """{"$ref": "a.city"} becomes a's output at that path; {"$ref": "a"} the whole output."""
    plan = Plan(
        GOAL,
        (
            PlanNode("a", "look up", effect="query"),
            PlanNode(
                "b",
                "report",
                args={"city": {"$ref": "a.city"}, "all": {"$ref": "a"}, "n": 1},
                after=("a",),
            ),
        ),
    )
    executor = FunctionExecutor(
        {"a": lambda: {"city": "Lisbon", "temp": 21}, "b": lambda city, all, n: f"{city} {n}"}  # noqa: A006
    )

    result = await engine.run(planner=ScriptedPlanner(plan), executor=executor)

    assert result.outputs["b"] == "Lisbon 1"
    assert executor.log[1] == (
        "b",
        {"city": "Lisbon", "all": {"city": "Lisbon", "temp": 21}, "n": 1},
    )


async def test_the_executor_context_holds_the_dependency_outputs(engine: Engine) -> None:
    """The NodeContext of a node carries the outputs of its after nodes, by id."""
    seen: dict[str, dict[str, object]] = {}

    def remember(node: PlanNode, context: NodeContext) -> str:
        seen[node.id] = dict(context.dependencies)
        return node.id

    plan = Plan(
        GOAL,
        (
            PlanNode("a", "one", effect="query"),
            PlanNode("b", "two", effect="query"),
            PlanNode("c", "three", effect="query", after=("a", "b")),
        ),
    )

    await engine.run(planner=ScriptedPlanner(plan), executor=FunctionExecutor(default=remember))

    assert seen == {"a": {}, "b": {}, "c": {"a": "a", "b": "b"}}


async def test_the_idempotency_key_is_visible_inside_a_tool_and_stable_per_record(
    engine: Engine,
) -> None:
    """current_node_context() in a tool gives its record's key; a new occurrence has its own."""
    keys: list[tuple[str, str]] = []

    @pev.tool(effect="action")
    def pour(litres: int) -> int:
        context = current_node_context()
        keys.append((context.record_id, context.idempotency_key))
        return litres

    plan = Plan(GOAL, (PlanNode("water", "pour", tool="pour", args={"litres": 1}),))
    again = Plan(GOAL, (PlanNode("water", "pour", tool="pour", args={"litres": 1}, repeat=True),))

    result = await engine.run(
        planner=ScriptedPlanner(plan, again),
        tools=[pour],
        verifier=ScriptedVerifier(
            Verdict.failed(RECOVERY, failed_nodes=["water"]), Verdict.passed(RECOVERY)
        ),
        contract=RECOVERY,
    )

    records = (await engine.state(result.task_id)).records
    assert [(r.id, r.idempotency_key) for r in records.values()] == keys
    assert len({key for _, key in keys}) == 2
    assert [r.occurrence for r in records.values()] == [1, 2]
    assert all(r.status is RecordStatus.SUCCEEDED for r in records.values())


async def test_a_ref_to_a_missing_output_key_fails_the_node_without_calling_it(
    engine: Engine,
) -> None:
    """A $ref whose path is not in the dependency's output: the node fails, its tool unasked."""
    plan = Plan(
        GOAL,
        (
            PlanNode("a", "look up", effect="query"),
            PlanNode("b", "report", args={"city": {"$ref": "a.town"}}, after=("a",)),
        ),
    )
    executor = FunctionExecutor({"a": lambda: {"city": "Lisbon"}, "b": lambda city: city})

    result = await engine.run(planner=ScriptedPlanner(plan), executor=executor)

    assert executor.calls == {"a": 1}
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED)
    records = {r.node_id: r for r in (await engine.state(result.task_id)).records.values()}
    assert records["b"].status is RecordStatus.FAILED
