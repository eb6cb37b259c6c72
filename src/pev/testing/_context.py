"""A node context for calling an executor or a tool directly, outside the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from pev.engine._protocols import NodeContext
from pev.model import JsonValue, RecordStatus, TaskId, freeze_json

__all__ = ["node_context"]


async def _ignore_report(status: RecordStatus) -> None:
    del status


def node_context(
    *,
    task_id: str = "task-1",
    node_id: str = "n1",
    revision: int = 1,
    record_id: str = "record-1",
    idempotency_key: str | None = None,
    deadline: float | None = None,
    dependencies: Mapping[str, JsonValue] | None = None,
    cancelled: asyncio.Event | None = None,
    report: Callable[[RecordStatus], Awaitable[None]] | None = None,
) -> NodeContext:
    """A :class:`~pev.engine.NodeContext` with test defaults, for ``executor.execute(node, ctx)``.

    Args:
        task_id: The task.
        node_id: The node being run.
        revision: The revision dispatching the node.
        record_id: The execution record.
        idempotency_key: Defaults to ``"<task_id>/<record_id>"``.
        deadline: Loop time by which the node must finish, if any.
        dependencies: Outputs of the node's ``after`` nodes (frozen here).
        cancelled: The cancellation signal; a fresh, unset event by default.
        report: Receives progress reports; by default they are ignored.
    """
    return NodeContext(
        task_id=TaskId(task_id),
        node_id=node_id,
        revision=revision,
        record_id=record_id,
        idempotency_key=idempotency_key or f"{task_id}/{record_id}",
        deadline=deadline,
        cancelled=cancelled if cancelled is not None else asyncio.Event(),
        dependencies=MappingProxyType(
            {key: freeze_json(value) for key, value in (dependencies or {}).items()}
        ),
        report=report or _ignore_report,
    )
