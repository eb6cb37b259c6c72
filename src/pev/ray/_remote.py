"""What runs inside a Ray worker: one tool call with its node's context, or one reconcile.

A tool call reaches the worker as its function, its arguments and a :class:`CallContext` (the
node's ids, idempotency key and the seconds left before its deadline); there it runs with
:func:`~pev.engine.current_node_context` answering as it does in-process. A sync tool runs in the
worker's thread, an async one in an event loop of its own. An exception the tool raises carries
back the place it was raised (its traceback stays in the worker), so that the ledger names the
tool's own file and line (docs/engine.md, "Failures that speak").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pev.engine import NodeContext
from pev.engine._protocols import _NODE_CONTEXT
from pev.model import JsonValue, RecordStatus, TaskId
from pev.model._exceptions import REMOTE_PLACE, raised_at

__all__ = ["CallContext", "call_reconcile", "call_tool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """The part of a :class:`~pev.engine.NodeContext` that travels with a call to another host.

    The deadline travels as the seconds left when the call was sent (clocks of two hosts do not
    agree); the cancel signal does not travel: a cancel reaches the call as ``ray.cancel``.
    """

    task_id: str
    node_id: str
    revision: int
    record_id: str
    idempotency_key: str
    remaining_s: float | None
    dependencies: Mapping[str, JsonValue]

    @classmethod
    def of(cls, context: NodeContext, *, now: float) -> CallContext:
        """The travelling part of ``context``, its deadline measured from ``now`` (loop time)."""
        return cls(
            task_id=context.task_id,
            node_id=context.node_id,
            revision=context.revision,
            record_id=context.record_id,
            idempotency_key=context.idempotency_key,
            remaining_s=None if context.deadline is None else context.deadline - now,
            dependencies=dict(context.dependencies),
        )

    def context(self) -> NodeContext:
        """The node's context on this host: its deadline on this host's clock."""
        return NodeContext(
            task_id=TaskId(self.task_id),
            node_id=self.node_id,
            revision=self.revision,
            record_id=self.record_id,
            idempotency_key=self.idempotency_key,
            # asyncio's loop clock is time.monotonic: the same clock on this host.
            deadline=None if self.remaining_s is None else time.monotonic() + self.remaining_s,
            cancelled=asyncio.Event(),
            dependencies=self.dependencies,
            report=_not_recorded,
        )


async def _not_recorded(status: RecordStatus) -> None:
    """``context.report`` on a Ray worker: progress is not recorded from another host."""


def call_tool(fn: Callable[..., Any], kwargs: Mapping[str, Any], call: CallContext) -> object:
    """Run one tool call here, with its node's context; what it returns goes back as it is.

    Raises:
        Exception: What the tool raised, carrying the place it was raised (:data:`REMOTE_PLACE`).
    """
    token = _NODE_CONTEXT.set(call.context())
    try:
        return _settled(fn(**kwargs))
    except Exception as exc:
        _mark(exc)
        raise
    finally:
        _NODE_CONTEXT.reset(token)


def call_reconcile(reconcile: Callable[[Any], Any], record: object) -> object:
    """Run a tool's ``reconcile`` here, as :func:`call_tool` runs the tool."""
    try:
        return _settled(reconcile(record))
    except Exception as exc:
        _mark(exc)
        raise


def _settled(value: object) -> object:
    """``value``, or what it gives when awaited (an async function's coroutine)."""
    if inspect.isawaitable(value):
        return asyncio.run(_awaited(value))
    return value


async def _awaited(value: Awaitable[object]) -> object:
    return await value


def _mark(exc: Exception) -> None:
    """Set on ``exc`` the place it was raised, found here where its traceback is."""
    # An exception class that takes no attributes (slots, a C type) goes back without a place.
    with contextlib.suppress(Exception):
        setattr(exc, REMOTE_PLACE, raised_at(exc))
