"""Node contexts and plan nodes for the tool executor tests (docs/design.md §6)."""

from __future__ import annotations

import asyncio

from pev.engine import NodeContext
from pev.model import PlanNode, RecordStatus, TaskId

SHORT = 0.05  # a timeout that a call sleeping LONG always misses
LONG = 1.0


def context(
    *, deadline: float | None = None, cancelled: bool = False, key: str = "key-1"
) -> NodeContext:
    """The context of node n1 of task-1, ignoring progress reports; ``cancelled`` sets its event."""
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


def node(tool_name: str | None, node_id: str = "n1", **args: object) -> PlanNode:
    """A plan node that calls ``tool_name`` with ``args``."""
    return PlanNode(node_id, "a step", tool=tool_name, args=args)
