"""``RayExecutor``: each node's tool runs as a Ray task, placed by the tool's resources.

It is :class:`~pev.engine.ToolExecutor` with the call made elsewhere: the timeouts, shared
resources, secrets and failures-as-values are the same (docs/tools.md); what changes is where
the tool's code runs and what can go wrong on the way (docs/ray.md):

* the call is a Ray task with ``max_retries=0`` and ``retry_exceptions=False``, placed by the
  tool's ``placement`` (``num_cpus``, ``num_gpus``, ``memory``, custom resources);
* a call no live node could hold is refused before it is sent;
* a lost worker or node (the worker crashed, the node died, the result was lost) is
  ``DeviceFailure(outcome_unknown=True)`` for an action (it may have taken effect, and is never
  sent again) and a plain failure for a query;
* a timeout or a cancel reaches the running task as ``ray.cancel``;
* an exception the tool raised is recorded as the tool's own, with its file and line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import ray
import ray.exceptions as rex

from pev.engine import Reconciler, Resources, ToolExecutor, ToolRegistry
from pev.engine._tool_executor import ToolCall
from pev.engine._tools import Tool, ToolLike, check_placement
from pev.model import DeviceFailure, Effect, ExecutionRecord
from pev.ray._cluster import NodeView, RayUnavailable, connect, ray_options
from pev.ray._remote import CallContext, call_reconcile, call_tool

__all__ = ["RayExecutor"]

log = logging.getLogger("pev.ray")

# Ray's errors for a call that never began: nothing was sent.
_NOT_STARTED = (rex.RuntimeEnvSetupError, rex.TaskUnschedulableError, rex.TaskPlacementGroupRemoved)
# How long a reconcile waits for a node that can hold it (its host coming back), and how often
# it looks.
_RECONCILE_PLACE_WAIT_S = 30.0
_RECONCILE_PLACE_POLL_S = 0.5
# How long past its grace period a cancelled call is waited for before it is left to Ray.
_CANCEL_WAIT_S = 5.0

_remote_tool = ray.remote(call_tool)
_remote_reconcile = ray.remote(call_reconcile)


class RayExecutor(ToolExecutor):
    """Runs each node's tool as a Ray task (the :class:`~pev.engine.Executor` for a cluster).

    Pass it as ``executor=`` (or an :class:`~pev.engine.Agent`'s ``executor``) with the tools
    as for :class:`~pev.engine.ToolExecutor`. Each call is one Ray task, never retried by Ray,
    placed by the tool's ``placement`` (see :func:`~pev.engine.tool`) or by ``placement=``
    here; the node's context (idempotency key, deadline, ids) travels with it, so
    :func:`~pev.engine.current_node_context` works inside the tool. A tool's ``reconcile`` runs
    as a Ray task with the same placement (the host that has the arm answers for the arm).

    Secrets are read here, in the process that drives the task, and travel to the Ray worker as
    task arguments (never into the ledger).

    Args:
        registry: The tools (anything :meth:`~pev.engine.ToolRegistry.of` accepts).
        node_timeout_s: The timeout of a tool that declares none.
        resources: Locks of the tools' ``resource`` names, as for ``ToolExecutor``: held here,
            around the remote call.
        placement: Tool name → placement, for tools that declare none (plain functions) or to
            place them otherwise on this cluster; it replaces the tool's own.
        address: The Ray cluster to join on first use when this process has not called
            ``ray.init``; ``None``: Ray's default (``RAY_ADDRESS``, a local ``ray start``).
        cancel_grace_s: A cancelled call is first asked to stop (``ray.cancel``, which raises
            ``KeyboardInterrupt`` in the tool at its next Python instruction); one still running
            this many seconds later is stopped by killing its worker
            (``ray.cancel(force=True)``): a tool blocked in a C call never sees the first.
            ``0``: kill at once.

    Raises:
        ValueError: ``placement`` names a tool that is not registered, or holds a bad amount;
            ``cancel_grace_s`` is not a number of seconds.
    """

    __slots__ = ("_address", "_cancel_grace_s", "_nodes", "_placement", "_stopping")

    def __init__(
        self,
        registry: ToolRegistry | ToolLike | Iterable[ToolLike] | Mapping[str, ToolLike],
        *,
        node_timeout_s: float | None = None,
        resources: Resources | None = None,
        placement: Mapping[str, Mapping[str, float]] | None = None,
        address: str | None = None,
        cancel_grace_s: float = 5.0,
    ) -> None:
        super().__init__(registry, node_timeout_s=node_timeout_s, resources=resources)
        chosen = dict(placement or {})
        unknown = sorted(set(chosen) - set(self.registry))
        if unknown:
            raise ValueError(
                f"placement names {', '.join(map(repr, unknown))}, which is not a registered "
                f"tool (registered: {', '.join(sorted(self.registry)) or 'none'})"
            )
        self._placement = {name: check_placement(value, name) for name, value in chosen.items()}
        if not (isinstance(cancel_grace_s, int | float) and 0 <= cancel_grace_s < math.inf):
            raise ValueError(f"cancel_grace_s must be a number of seconds, got {cancel_grace_s!r}")
        self._address = address
        self._cancel_grace_s = float(cancel_grace_s)
        self._stopping: set[asyncio.Task[None]] = set()
        self._nodes = NodeView()

    @property
    def address(self) -> str | None:
        """The Ray cluster joined on first use (``None``: Ray's default)."""
        return self._address

    def placement_of(self, name: str) -> Mapping[str, float]:
        """Where the calls of tool ``name`` may run: this executor's placement, else the tool's.

        Raises:
            KeyError: No tool of that name is registered.
        """
        chosen = self._placement.get(name)
        return chosen if chosen is not None else self.registry[name].placement

    async def _invoke(
        self, call: ToolCall, handover: list[concurrent.futures.Future[Any]] | None
    ) -> object:
        """Send the call to Ray as one task and wait for what it returns (or how it was lost)."""
        tool, node = call.tool, call.node
        placement = self.placement_of(tool.name)
        refused = self._refusal(tool, placement)
        if refused is not None:
            return DeviceFailure(node.id, refused)
        loop = asyncio.get_running_loop()
        options = ray_options(placement)
        options["name"] = f"pev:{tool.name}"
        travelling = CallContext.of(call.context, now=loop.time())
        ref = _remote_tool.options(**options).remote(tool.fn, call.kwargs, travelling)
        call.started = True
        call.left_running = "its Ray task was cancelled (ray.cancel)"
        action = Effect.ACTION in (node.effect, tool.effect)
        return await self._outcome(ref, call.context.cancelled, node.id, tool, action)

    async def _reconcile(self, reconcile: Reconciler, record: ExecutionRecord) -> object:
        """Ask the tool's ``reconcile`` on Ray, placed like the tool's calls."""
        name = record.tool or ""
        placement = self.placement_of(name) if name in self.registry else {}
        connect(self._address)
        waited_until = asyncio.get_running_loop().time() + _RECONCILE_PLACE_WAIT_S
        while (problem := self._nodes.unplaceable(placement)) is not None:
            # The host that can answer (the one with the arm) may be coming back: wait a while.
            if asyncio.get_running_loop().time() > waited_until:
                raise RuntimeError(f"tool {name!r}'s reconcile cannot run: {problem}")
            await asyncio.sleep(_RECONCILE_PLACE_POLL_S)
        options = ray_options(placement)
        options["name"] = f"pev:{name}:reconcile"
        ref = _remote_reconcile.options(**options).remote(reconcile, record)
        try:
            return await ref
        except rex.RayTaskError as exc:
            raise _cause(exc) from exc
        except asyncio.CancelledError:
            self._cancel(ref)
            raise

    def _refusal(self, tool: Tool[..., Any], placement: Mapping[str, float]) -> str | None:
        """Why the call cannot be sent at all (no cluster, no node that fits), or ``None``."""
        try:
            connect(self._address)
        except RayUnavailable as exc:
            return f"tool {tool.name!r} was not sent: {exc}"
        problem = self._nodes.unplaceable(placement)
        if problem is not None:
            return f"tool {tool.name!r} was not sent: {problem}"
        return None

    async def _outcome(
        self,
        ref: ray.ObjectRef[Any],
        cancelled: asyncio.Event,
        node_id: str,
        tool: Tool[..., Any],
        action: bool,
    ) -> object:
        result: asyncio.Future[Any] = asyncio.wrap_future(ref.future())
        cancel = asyncio.ensure_future(cancelled.wait())
        try:
            await asyncio.wait({result, cancel}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # a timeout, or the engine cutting the node short
            self._cancel(ref)
            result.cancel()
            raise
        finally:
            cancel.cancel()
        if not result.done():  # the task is being cancelled: so is the call
            self._cancel(ref)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(result), self._cancel_grace_s + _CANCEL_WAIT_S
                )
            if not result.done() or _was_cancelled(result):
                result.cancel()
                return _unknown(
                    node_id, f"tool {tool.name!r} was cancelled while it ran on Ray", action
                )
        try:
            return result.result()
        except rex.RayTaskError as exc:
            if isinstance(exc, rex.TaskCancelledError):
                return _unknown(node_id, f"tool {tool.name!r} was cancelled on Ray", action)
            raise _cause(exc) from exc
        except rex.UnserializableException as exc:
            raise RuntimeError(
                f"the tool raised an exception Ray could not send back: {exc}"
            ) from None
        except _NOT_STARTED as exc:
            return DeviceFailure(
                node_id, f"tool {tool.name!r} was not started by Ray: {_line(exc)}"
            )
        except rex.RayError as exc:
            # A lost worker or node, a lost result: the call may have run, in part or whole.
            log.warning("tool %r of node %r was lost on Ray: %s", tool.name, node_id, _line(exc))
            return _unknown(
                node_id,
                f"the Ray worker running tool {tool.name!r} was lost ({_line(exc)})",
                action,
            )

    def _cancel(self, ref: ray.ObjectRef[Any]) -> None:
        """Ask the call to stop, and kill its worker if it has not within the grace period."""
        force = self._cancel_grace_s == 0
        if _cancelled(ref, force=force) and not force:
            stopping = asyncio.get_running_loop().create_task(self._stop_after_grace(ref))
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)

    async def _stop_after_grace(self, ref: ray.ObjectRef[Any]) -> None:
        ended = asyncio.wrap_future(ref.future())
        try:
            await asyncio.wait_for(ended, self._cancel_grace_s)
        except TimeoutError:
            log.warning(
                "a cancelled Ray task ran on past %g s: killing its worker", self._cancel_grace_s
            )
            _cancelled(ref, force=True)
        except Exception:  # noqa: BLE001, S110 - it ended (cancelled, failed or lost): done
            pass

    def __repr__(self) -> str:
        return f"RayExecutor({list(self.registry)!r})"


def _cancelled(ref: ray.ObjectRef[Any], *, force: bool) -> bool:
    """Send ``ray.cancel``; False when there is nothing left to cancel (ended, cluster gone)."""
    try:
        ray.cancel(ref, force=force)
    except Exception:  # noqa: BLE001 - a call that already ended cannot be cancelled
        return False
    return True


def _cause(exc: rex.RayTaskError) -> BaseException:
    """The exception the tool raised on the worker (carrying its place), from Ray's wrapper."""
    cause = exc.cause
    return cause if isinstance(cause, Exception) else RuntimeError(_line(exc))


def _was_cancelled(result: asyncio.Future[Any]) -> bool:
    return result.cancelled() or isinstance(result.exception(), rex.TaskCancelledError)


def _unknown(node_id: str, text: str, action: bool) -> DeviceFailure:
    """A call that may have run: for an action, an outcome unknown; for a query, a failure."""
    if action:
        text += "; the action may or may not have taken effect"
    return DeviceFailure(node_id, text, outcome_unknown=action)


def _line(exc: BaseException) -> str:
    """``Type: the first line of its message``: Ray's messages run to many lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
