"""An executor that runs plan nodes with plain functions, keyed by node id or tool name."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

# The context variable behind current_node_context(): set here, as pev's tool executor does.
from pev.engine._protocols import _NODE_CONTEXT, NodeContext
from pev.model import (
    DeviceFailure,
    ExecutionRecord,
    NodeResult,
    PlanNode,
    thaw_json,
)
from pev.model._exceptions import describe_exception
from pev.model._results import as_node_result
from pev.testing._script import settle

__all__ = ["DefaultHandler", "FunctionExecutor", "Reconciler"]

_log = logging.getLogger("pev.testing")

DefaultHandler: TypeAlias = Callable[[PlanNode, NodeContext], object]
"""Runs a node no function is registered for: ``(node, context)``, sync or async."""

Reconciler: TypeAlias = Callable[
    [ExecutionRecord], NodeResult | Awaitable[NodeResult | None] | None
]
"""Settles an unfinished record on resume: ``(record) -> NodeResult | None``, sync or async."""


class FunctionExecutor:
    """An executor that runs each node with a plain function, the way tools run.

    The function for a node is found by node id first, then by the node's tool name, and is
    called as ``fn(**args)`` with the node's args as plain ``dict``/``list`` values; it may be
    sync (run inline, so the run stays deterministic) or async. Its return value is wrapped like
    a tool's: a node result (``Success``, ``DeviceFailure``, ``VerifierFailure``) passes
    through, any other JSON value becomes ``Success(value)``, and an exception becomes
    ``DeviceFailure(node.id, "Type: message at file.py:12 in function")``, logged as a warning
    on ``pev.testing``. ``AssertionError`` is not caught: called directly, an assertion inside
    a test function fails the test instead of turning into a result
    (inside ``pev.run`` the engine decides what an executor's exception becomes).

    Args:
        functions: Functions by node id or tool name.
        default: Runs nodes that have no function, called as ``default(node, context)``; by
            default such a node succeeds with ``None``.
        reconcile: Settles records left unfinished by a crash, ``reconcile(record)``, sync or
            async. Only when it is given does the executor have a ``reconcile`` method, so the
            engine sees an executor without reconciliation otherwise.

    Attributes:
        calls: How many times each node id was executed.
        log: ``(node_id, args)`` for every execution, in call order.
        reconciled: The records passed to ``reconcile``, in call order.
    """

    reconcile: Callable[[ExecutionRecord], Awaitable[NodeResult | None]]
    """Present only when a ``reconcile`` function was given (the engine checks with getattr)."""

    def __init__(
        self,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        *,
        default: DefaultHandler | None = None,
        reconcile: Reconciler | None = None,
    ) -> None:
        self._functions = dict(functions or {})
        self._default = default
        self._reconciler = reconcile
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, dict[str, object]]] = []
        self.reconciled: list[ExecutionRecord] = []
        if reconcile is not None:
            # An instance attribute rather than a class method: the engine tells an executor
            # that can reconcile from one that cannot by whether the attribute exists.
            self.reconcile = self._reconcile

    def function_for(self, node: PlanNode) -> Callable[..., Any] | None:
        """The function that runs ``node``: by node id, else by tool name, else ``None``."""
        function = self._functions.get(node.id)
        if function is None and node.tool is not None:
            function = self._functions.get(node.tool)
        return function

    async def execute(self, node: PlanNode, context: NodeContext) -> NodeResult:
        """Run ``node`` with its function (or the default) and wrap what it returns.

        While it runs, :func:`pev.engine.current_node_context` returns ``context``, as it does
        inside a tool.

        Raises:
            AssertionError: The function asserted something that does not hold.
        """
        self.calls[node.id] += 1
        self.log.append((node.id, {key: thaw_json(value) for key, value in node.args.items()}))
        function = self.function_for(node)
        name = "the default handler" if function is None else f"the function for {node.id!r}"
        token = _NODE_CONTEXT.set(context)
        try:
            if function is not None:
                args = {key: thaw_json(value) for key, value in node.args.items()}
                value = await settle(function(**args))
            elif self._default is not None:
                value = await settle(self._default(node, context))
            else:
                value = None
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's failure is a value, as in pev.tool
            _log.warning("pev: %s raised on node %s", name, node.id, exc_info=exc)
            return DeviceFailure(node.id, describe_exception(exc))
        finally:
            _NODE_CONTEXT.reset(token)
        return as_node_result(node.id, value, source=name)

    async def _reconcile(self, record: ExecutionRecord) -> NodeResult | None:
        """Ask the ``reconcile`` function what an unfinished record really did."""
        assert self._reconciler is not None  # noqa: S101 - only bound when one was given
        self.reconciled.append(record)
        return await settle(self._reconciler(record))

    def __repr__(self) -> str:
        names = ", ".join(sorted(self._functions))
        return f"FunctionExecutor([{names}], calls={sum(self.calls.values())})"
