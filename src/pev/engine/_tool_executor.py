"""The executor that runs tools (docs/tools.md): timeouts, shared resources, failures as values.

:class:`ToolExecutor` runs one node with the tool it names. It applies the timeout (the tool's,
else the policy's, never past the node's deadline), keeps tools that share a resource apart
(through the :class:`Resources` it is given), calls again a tool whose retry policy says so
(:mod:`pev.engine._retry`), and turns everything a tool can do wrong into a
:class:`~pev.model.DeviceFailure`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pev.engine._failures import noted
from pev.engine._protocols import _NODE_CONTEXT, NodeContext, as_async
from pev.engine._retry import AttemptLog, retried_exceptions, retrying
from pev.engine._secret import SecretUnavailable
from pev.engine._signature import ArgumentsRejectedError
from pev.engine._threads import submit, sync_call
from pev.engine._tools import (
    Compensator,
    Reconciler,
    Tool,
    ToolLike,
    ToolRegistry,
    check_timeout,
)
from pev.ledger import TaskEffect
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    PlanNode,
    Success,
    VerifierFailure,
    thaw_json,
)
from pev.model._results import as_node_result

__all__ = ["Resources", "ToolCall", "ToolExecutor"]


class Resources:
    """The locks of named resources: tools that name the same resource never run at once.

    Whoever shares a device owns one: an :class:`~pev.engine.Agent` has its own, so its runs,
    even concurrent ones, keep its resources exclusive; agents that drive the same device are
    given the same ``Resources``. An asyncio lock belongs to one event loop, so the table holds
    one lock per resource name and loop; a loop's locks go when the loop is collected (a loop
    type that refuses weak references is held for the life of this object).
    """

    __slots__ = ("_guard", "_locks", "_strong")

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()
        self._strong: dict[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = {}
        self._guard = threading.Lock()  # executors on several loops may ask at once

    def lock(self, resource: str) -> asyncio.Lock:
        """The lock of ``resource`` on the running event loop."""
        loop = asyncio.get_running_loop()
        with self._guard:
            try:
                locks = self._locks.setdefault(loop, {})
            except TypeError:
                locks = self._strong.setdefault(loop, {})
            lock = locks.get(resource)
            if lock is None:
                lock = locks[resource] = asyncio.Lock()
            return lock

    def __repr__(self) -> str:
        names = sorted(
            {name for locks in (*self._locks.values(), *self._strong.values()) for name in locks}
        )
        return f"Resources({names!r})"


class ToolExecutor:
    """Runs a node with the registered tool it names (the :class:`Executor` for ``tools=``).

    A tool's exception, a timeout and a value JSON cannot hold become a
    :class:`~pev.model.DeviceFailure`; a :class:`~pev.model.NodeResult` the tool returns is
    passed through, and any other value ``v`` is ``Success(v)``. Arrays and objects reach the
    function as plain lists and dicts (copies: the plan's args stay frozen).

    A sync tool runs in the run's bounded thread pool with the caller's context variables, so
    :func:`~pev.engine.current_node_context` works there too. Python cannot stop a thread: a
    sync tool that times out keeps running in it, and keeps its resource until it returns.
    """

    __slots__ = ("_node_timeout_s", "_registry", "_resources")

    def __init__(
        self,
        registry: ToolRegistry | ToolLike | Iterable[ToolLike] | Mapping[str, ToolLike],
        *,
        node_timeout_s: float | None = None,
        resources: Resources | None = None,
    ) -> None:
        """Run the tools of ``registry``.

        Args:
            registry: The tools (anything :meth:`ToolRegistry.of` accepts).
            node_timeout_s: The timeout of a tool that declares none; ``None``: no timeout.
            resources: The locks of the tools' resources, to share them with other executors
                (an agent's runs share the agent's); by default this executor's own.

        Raises:
            ValueError: ``node_timeout_s`` is not a positive number of seconds.
        """
        check_timeout(node_timeout_s, "node_timeout_s")
        self._registry = ToolRegistry.of(registry)
        self._node_timeout_s = node_timeout_s
        self._resources = resources if resources is not None else Resources()

    @property
    def registry(self) -> ToolRegistry:
        """The tools this executor runs."""
        return self._registry

    @property
    def node_timeout_s(self) -> float | None:
        """The timeout of a tool that declares none."""
        return self._node_timeout_s

    async def execute(self, node: PlanNode, context: NodeContext) -> NodeResult:
        """Call the node's tool with its (already resolved) args and return the result.

        The timeout is the tool's ``timeout_s``, else ``node_timeout_s``, and never later than
        ``context.deadline``; waiting for the tool's resource counts against it. A timeout is
        ``DeviceFailure(is_timeout=True)``, with ``outcome_unknown=True`` when an action had
        started. Exceptions that are not ``Exception`` (cancellation, ``KeyboardInterrupt``)
        propagate.

        A tool with a retry policy is called again within that timeout (see
        :class:`~pev.engine.Retry`), and the result then carries each attempt
        (``result.attempts``); the timeout itself is never retried.
        """
        found = self._registry.get(node.tool) if isinstance(node.tool, str) else None
        if found is None:
            registered = ", ".join(sorted(self._registry)) or "none"
            named = (
                "no tool" if node.tool is None else f"tool {node.tool!r}, which is not registered"
            )
            return DeviceFailure(
                node.id, f"node {node.id!r} names {named} (registered: {registered})"
            )
        if context.cancelled.is_set():
            return DeviceFailure(node.id, f"tool {found.name!r} was cancelled before it started")
        loop = asyncio.get_running_loop()
        limit = self._limit(found, context.deadline, loop.time())
        if limit is not None and limit.seconds <= 0:
            return DeviceFailure(
                node.id,
                f"tool {found.name!r} was not started: {limit.source} had already passed",
                is_timeout=True,
            )
        is_action = Effect.ACTION in (node.effect, found.effect)
        call = ToolCall(
            found,
            node,
            context,
            self._resources,
            self._invoke,
            deadline=None if limit is None else limit.deadline,
            action=is_action,
        )
        # No scope without a limit: one that never expires does nothing but cost time.
        scope = None if limit is None else asyncio.timeout_at(limit.deadline)
        token = _NODE_CONTEXT.set(context)
        who = f"tool {found.name!r} of node {node.id!r}"
        result: NodeResult
        try:
            if scope is None:
                value = await call.run()
            else:
                async with scope:
                    value = await call.run()
        except TimeoutError as exc:
            if limit is None or scope is None or not scope.expired():  # the tool's own error
                result = DeviceFailure(node.id, noted(exc, task_id=context.task_id, who=who))
            else:
                result = _timed_out(node.id, call, limit, is_action=is_action)
        except _CancelledBeforeStart:
            result = DeviceFailure(node.id, f"tool {found.name!r} was cancelled before it started")
        except Exception as exc:  # noqa: BLE001 - every tool failure is a value
            result = DeviceFailure(node.id, noted(exc, task_id=context.task_id, who=who))
        else:
            result = as_node_result(node.id, value, source=f"tool {found.name!r}", action=is_action)
        finally:
            _NODE_CONTEXT.reset(token)
        return call.with_attempts(result, loop.time())

    async def reconcile(self, record: ExecutionRecord) -> NodeResult | None:
        """Ask the record's tool what a call whose outcome is unknown really did.

        Calls the tool's ``reconcile`` (see :func:`~pev.engine.tool`), bounded by the tool's
        timeout, else ``node_timeout_s``; a sync one runs in pev's thread pool. Returns its
        result (a plain value ``v`` is ``Success(v)``), or ``None`` when the tool has no
        ``reconcile`` or it cannot tell.

        Raises:
            TimeoutError: The reconcile function ran past the timeout.
            Exception: Whatever the reconcile function raised (the engine logs it and leaves
                the record as it was).
        """
        found = self._registry.get(record.tool) if record.tool is not None else None
        if found is None or found.reconcile is None:
            return None
        timeout = found.timeout_s if found.timeout_s is not None else self._node_timeout_s
        async with asyncio.timeout(timeout):
            value = await self._reconcile(found.reconcile, record)
        if value is None:
            return None
        return as_node_result(record.node_id, value, source=f"tool {found.name!r}'s reconcile")

    def compensates(self, tool: str | None) -> bool:
        """Whether the tool named ``tool`` declares a ``compensate`` for its effects."""
        found = self._registry.get(tool) if tool is not None else None
        return found is not None and found.compensate is not None

    async def compensate(self, effect: TaskEffect) -> object:
        """Undo one effect with its tool's ``compensate`` (see :data:`~pev.engine.Compensator`).

        Bounded by the tool's timeout, else ``node_timeout_s``: one that runs past it may or may
        not have undone the effect (``outcome_unknown``). Returns what the compensation
        returned, which the engine reads as it reads any compensation's answer (returning means
        undone, a failure means not). It is never retried here.

        Raises:
            Exception: Whatever the compensation raised (the effect was not undone).
        """
        found = self._registry.get(effect.tool) if effect.tool is not None else None
        if found is None or found.compensate is None:
            return DeviceFailure(effect.node_id, f"tool {effect.tool!r} declares no compensate")
        timeout = found.timeout_s if found.timeout_s is not None else self._node_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await _undo(found.compensate, effect)
        except TimeoutError:
            return DeviceFailure(
                effect.node_id,
                f"the compensate of tool {found.name!r} (record {effect.record_id}) timed out "
                f"after {timeout:g} s; it may or may not have undone the effect",
                is_timeout=True,
                outcome_unknown=True,
            )

    async def _invoke(
        self, call: ToolCall, handover: list[concurrent.futures.Future[Any]] | None
    ) -> object:
        """Call the tool, here: an async one on this loop, a sync one in the run's threads.

        Executors that run calls elsewhere (``pev.ray.RayExecutor``) override this, and with
        it keep everything else: timeouts, resources, secrets and failures as values. A sync
        call that is still running hands its future to ``handover`` (the resource is released
        when it returns).
        """
        if call.tool.is_async:
            call.started = True
            return await call.tool.fn(**call.kwargs)
        call.left_running = "its thread keeps running (Python cannot stop a thread)"
        run = functools.partial(
            contextvars.copy_context().run, sync_call, call.tool.fn, **call.kwargs
        )
        future = submit(run)
        if handover is not None:
            handover.append(future)
        try:
            result = await asyncio.wrap_future(future)
        finally:
            # A call still queued for a thread can be withdrawn, and then it never started.
            call.started = not future.cancel()
        if inspect.isawaitable(result):
            return await result
        return result

    async def _reconcile(self, reconcile: Reconciler, record: ExecutionRecord) -> object:
        """Call a tool's ``reconcile`` here (a sync one in pev's threads); see :meth:`_invoke`."""
        return await as_async(reconcile)(record)

    def _limit(self, chosen: Tool[..., Any], deadline: float | None, now: float) -> _Limit | None:
        seconds, name = (
            (chosen.timeout_s, "its timeout_s")
            if chosen.timeout_s is not None
            else (self._node_timeout_s, "node_timeout_s")
        )
        limit = (
            None if seconds is None else _Limit(now + seconds, seconds, f"{name} of {seconds:g} s")
        )
        if deadline is not None and (limit is None or deadline < limit.deadline):
            limit = _Limit(deadline, deadline - now, "the node's deadline")
        return limit


@dataclass(frozen=True, slots=True)
class _Limit:
    deadline: float
    seconds: float
    source: str


class _CancelledBeforeStart(Exception):  # noqa: N818 - a private signal, not an error
    """The task was cancelled while the call waited for its resource."""


# pev's own refusals before the tool is called (args its types refuse, a secret with no value, a
# task cancelled) fail the same way each time: never retried, whatever a policy lists.
_NEVER_RETRIED = (ArgumentsRejectedError, SecretUnavailable, _CancelledBeforeStart)


class ToolCall:
    """One call of a tool by an executor; it holds the tool's resource until the tool has stopped.

    Attributes:
        tool: The tool called.
        node: The node it runs.
        context: The node's context (its idempotency key, deadline and cancel signal).
        kwargs: The call's arguments: the node's args as plain values, then its secrets (each
            attempt of a retried call gets them afresh).
        acquired: The tool's resource is held (by the current attempt).
        started: The tool's code may have begun (in the current attempt; one still waiting for
            its resource or a thread has not).
        left_running: What becomes of the call when it is cut short while running (a thread
            that keeps running, a remote task that was cancelled), for the timeout's record.
        deadline: Loop time by which the call must end (its timeout), if any: a retry's wait
            never reaches past it.
        retry_on: The exceptions the tool's retry policy calls it again on (``()``: none).
        log: The attempts made so far.
    """

    __slots__ = (
        "acquired",
        "context",
        "deadline",
        "invoke",
        "kwargs",
        "left_running",
        "log",
        "node",
        "resources",
        "retry_on",
        "started",
        "tool",
    )

    def __init__(
        self,
        chosen: Tool[..., Any],
        node: PlanNode,
        context: NodeContext,
        resources: Resources,
        invoke: Callable[
            [ToolCall, list[concurrent.futures.Future[Any]] | None], Awaitable[object]
        ],
        *,
        deadline: float | None = None,
        action: bool | None = None,
    ) -> None:
        self.tool = chosen
        self.node = node
        self.context = context
        self.resources = resources
        self.invoke = invoke
        self.deadline = deadline
        self.kwargs: dict[str, Any] = _thawed(node)
        self.acquired = False
        self.started = False
        self.left_running = ""
        self.log = AttemptLog()
        is_action = chosen.effect is Effect.ACTION if action is None else action
        self.retry_on = (
            () if chosen.retry is None else retried_exceptions(chosen.retry, action=is_action)
        )

    async def run(self) -> object:
        """Make the call, and again as the tool's retry policy says (see :class:`ToolExecutor`).

        The retries are made here, around :attr:`invoke`, so that an executor that calls tools
        elsewhere (``pev.ray.RayExecutor``) retries them alike.
        """
        retry = self.tool.retry
        if retry is None or retry.attempts == 1:
            return await self._attempt()
        return await retrying(
            self._attempt,
            retry,
            on=self.retry_on,
            never=_NEVER_RETRIED,
            deadline=self.deadline,
            log=self.log,
            stop=self.context.cancelled.is_set,
            who=f"task {self.context.task_id}: tool {self.tool.name!r} of node {self.node.id!r}",
        )

    def with_attempts(self, result: NodeResult, now: float) -> NodeResult:
        """``result`` with the call's attempts, when it was made more than once."""
        error = None if isinstance(result, Success) else _failure_text(result)
        attempts = self.log.attempts(now, error)
        return replace(result, attempts=attempts) if attempts else result

    async def _attempt(self) -> object:
        """Fill the secrets, take the resource, and call the tool once."""
        if self.log.count > 1:
            # A new attempt starts from the plan's args, whatever the last one did to its own.
            self.kwargs = _thawed(self.node)
            self.acquired = self.started = False
            self.left_running = ""
        # Secrets are filled here, and their values kept out of what comes back (see _secret);
        # so each attempt's error is redacted before it is retried, logged or recorded.
        return await self.tool.call_with(self.kwargs, self._run)

    async def _run(self) -> object:
        lock = None if self.tool.resource is None else self.resources.lock(self.tool.resource)
        if lock is None:
            return await self.invoke(self, None)
        await lock.acquire()
        self.acquired = True
        release = True
        try:
            if self.context.cancelled.is_set():
                raise _CancelledBeforeStart
            handover: list[concurrent.futures.Future[Any]] = []
            try:
                return await self.invoke(self, handover)
            finally:
                # A sync tool still running in its thread keeps the resource until it returns.
                if handover and not handover[0].done():
                    release = False
                    _release_when_done(handover[0], lock, asyncio.get_running_loop())
        finally:
            if release:
                lock.release()


async def _undo(undo: Compensator, effect: TaskEffect) -> object:
    """Call a compensation: a tool with the effect's args, typed; a function with the effect."""
    if isinstance(undo, Tool):
        if effect.args is None:
            raise ValueError(
                f"record {effect.record_id} does not hold the args it was sent with, which the "
                f"compensating tool {undo.name!r} needs"
            )
        kwargs: dict[str, object] = {name: thaw_json(value) for name, value in effect.args.items()}
        return await undo.call_with(kwargs, lambda: as_async(undo.fn)(**kwargs))
    return await as_async(undo)(effect)


def _thawed(node: PlanNode) -> dict[str, Any]:
    return {name: thaw_json(value) for name, value in node.args.items()}


def _failure_text(result: DeviceFailure | VerifierFailure) -> str:
    return result.error if isinstance(result, DeviceFailure) else result.reason


def _timed_out(node_id: str, call: ToolCall, limit: _Limit, *, is_action: bool) -> DeviceFailure:
    after = f"tool {call.tool.name!r} timed out after {limit.seconds:.3g} s ({limit.source})"
    if call.log.waiting:
        # Cut short between attempts: the last one failed before the wait, and that is known.
        return DeviceFailure(
            node_id,
            f"{after} while waiting to try again after attempt {call.log.count} failed",
            is_timeout=True,
        )
    if call.log.count > 1:
        after += f" in attempt {call.log.count}"
    if not call.started:
        waiting = (
            f"waiting for resource {call.tool.resource!r}"
            if call.tool.resource is not None and not call.acquired
            else "waiting for a free thread"
        )
        return DeviceFailure(node_id, f"{after} {waiting}; it never started", is_timeout=True)
    note = f"; {call.left_running}" if call.left_running else ""
    if is_action:
        note += "; the action may or may not have taken effect"
    return DeviceFailure(node_id, after + note, is_timeout=True, outcome_unknown=is_action)


def _release_when_done(
    future: concurrent.futures.Future[Any], lock: asyncio.Lock, loop: asyncio.AbstractEventLoop
) -> None:
    def release(_: concurrent.futures.Future[Any]) -> None:
        # A closed loop raises RuntimeError: then nobody is left waiting for the resource.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lock.release)

    future.add_done_callback(release)
