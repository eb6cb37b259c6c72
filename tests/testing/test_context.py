"""node_context: a NodeContext for calling an executor or a tool directly."""

from __future__ import annotations

from pev.engine import NodeContext
from pev.model import PlanNode, RecordStatus
from pev.testing import FunctionExecutor, node_context


def test_defaults_are_test_friendly() -> None:
    """By default: task-1, revision 1, record-1, a derived idempotency key, no deadline."""
    context = node_context()
    assert (context.task_id, context.revision, context.record_id) == ("task-1", 1, "record-1")
    assert context.idempotency_key == "task-1/record-1"
    assert context.deadline is None
    assert not context.cancelled.is_set()
    assert dict(context.dependencies) == {}


def test_dependencies_are_frozen() -> None:
    """Dependency outputs are stored frozen, as the engine would hand them over."""
    context = node_context(dependencies={"look": {"cubes": ["red"]}})
    assert context.dependencies["look"] == {"cubes": ("red",)}
    assert isinstance(context.dependencies["look"]["cubes"], tuple)  # type: ignore[index]


async def test_report_goes_to_the_given_function() -> None:
    """A report function receives the statuses an executor reports."""
    reported: list[RecordStatus] = []

    async def report(status: RecordStatus) -> None:
        reported.append(status)

    async def slow_arm(node: PlanNode, context: NodeContext) -> str:
        await context.report(RecordStatus.ACCEPTED)
        return "done"

    executor = FunctionExecutor(default=slow_arm)
    await executor.execute(PlanNode("move"), node_context(report=report))
    assert reported == [RecordStatus.ACCEPTED]


async def test_report_is_ignored_by_default() -> None:
    """Without a report function, reporting progress does nothing and does not fail."""
    await node_context().report(RecordStatus.RUNNING)
