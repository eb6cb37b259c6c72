"""One execution round: a revision's nodes dispatched as their dependencies succeed.

The round is the engine's hot path, so it does work in proportion to what changed: a finished
node wakes only its own dependents. Each pass writes one transaction holding the nodes that
finished since the last one, the skips they cause and the pending records of the nodes about to
start, so a chain costs one commit per node and a wave of parallel nodes shares one. A pending
record is always committed before its tool is called.

Each node runs in its own task (its own context, cancelled on its own), and tells the round it
has ended as its last step, so the round wakes in the next turn of the event loop without
registering callbacks on every running task each time it waits (as ``asyncio.wait`` would).

The round sees no driver: it needs a :class:`RoundHost` (see docs/engine.md, "Execution: a DAG,
with every dispatch recorded first", and "Inside the driver").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from pev.engine._failures import Interrupted, carried, noted
from pev.engine._host import TaskHost
from pev.engine._planning import effective_effect
from pev.engine._protocols import _NODE_CONTEXT, NodeContext
from pev.engine._recordable import recordable_result
from pev.errors import UsageError
from pev.ledger import (
    Event,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    lineage_results,
    unsettled_unknown_actions,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    ToolSpec,
    VerifierFailure,
    digest,
    freeze_json,
    iter_refs,
    record_status_for,
)
from pev.model._exceptions import describe_exception

__all__ = ["Round", "RoundHost"]

# A custom executor gets this much beyond the node's own timeout before the engine stops
# waiting for it: a well-behaved executor reports its own timeout first.
_TIMEOUT_GRACE_S = 0.05

_Outcome = tuple[ExecutionRecord, RecordStatus, NodeResult | None]
_Start = tuple[ExecutionRecord, PlanNode, dict[str, JsonValue], NodeResult | None]


class RoundHost(TaskHost, Protocol):
    """What a round needs of whoever drives the task, besides its state, deadline and writes."""

    @property
    def cancel_signal(self) -> asyncio.Event:
        """Set when the task is being cancelled or ran out of time; nodes watch it."""
        ...

    @property
    def drain_signal(self) -> asyncio.Event:
        """Set when the driver is asked to stop (a worker draining): dispatch nothing new."""
        ...

    @property
    def tools(self) -> Mapping[str, ToolSpec] | None:
        """The registered tools' specs, when the run has tools (for a node's effect)."""
        ...

    def node_timeout(self, node: PlanNode) -> float | None:
        """The node's timeout (its tool's own, else the policy's), within the task deadline."""
        ...

    async def execute(self, node: PlanNode, context: NodeContext) -> object:
        """Call the executor."""
        ...


class Round:
    """Runs one revision's round for whatever drives the task (a :class:`RoundHost`)."""

    def __init__(self, host: RoundHost, plan: Plan, number: int, redo: frozenset[str]) -> None:
        self._host = host
        self._number = number
        self._cancel = host.cancel_signal
        self._drain = host.drain_signal
        self._deadline = host.deadline
        self._now = host.deadline.clock
        state = host.state
        self._task_id = state.task_id
        lineage = lineage_results(state)
        self._outputs: dict[str, JsonValue] = {
            node_id: result.value
            for node_id, result in lineage.items()
            if isinstance(result, Success)
        }
        self._unknown = {(r.tool, r.args_digest) for r in unsettled_unknown_actions(state)}
        self._done: dict[str, bool] = {}
        for node in plan.nodes:
            if redo and node.id not in redo:
                self._done[node.id] = isinstance(lineage.get(node.id), Success)
        for record in state.records.values():
            if record.revision == number and record.terminal:
                # A record of unknown outcome that a reconciliation settled counts as settled.
                self._done[record.node_id] = isinstance(lineage.get(record.node_id), Success)
        for skipped in state.skipped:
            if skipped.revision == number:
                self._done[skipped.node_id] = False
        self._order = {node.id: index for index, node in enumerate(plan.nodes)}
        self._pending = {node.id: node for node in plan.nodes if node.id not in self._done}
        self._dependents: dict[str, list[str]] = {node.id: [] for node in plan.nodes}
        for node in plan.nodes:
            for dep in node.after:
                self._dependents.setdefault(dep, []).append(node.id)
        self._ready: dict[str, PlanNode] = {}
        # Nodes whose args hold a $ref: only they need their args resolved at dispatch.
        self._with_refs = {node.id for node in plan.nodes if _has_refs(node.args)}
        self._running: dict[str, asyncio.Task[_Outcome]] = {}
        # When each record was stamped, in loop time: its call's deadline counts from there.
        self._dispatched: dict[RecordId, float] = {}
        self._ended: dict[str, None] = {}  # running nodes whose task has ended, in that order
        self._waiter: asyncio.Future[None] | None = None
        # A KeyboardInterrupt or SystemExit a node raised: the round records and re-raises it.
        self._interrupt: BaseException | None = None

    async def run(self) -> bool:
        """Run the round; True if every node was dispatched or skipped (not cancelled or late).

        A drain (the driver asked to stop) dispatches nothing new and lets the running nodes
        reach their terminal records; the round then ends unfinished, for another driver.
        """
        host, cancel, deadline, drain = self._host, self._cancel, self._deadline, self._drain
        limit = host.state.policy.max_parallel
        events: list[Event] = self._wake(list(self._pending))
        running = self._running
        try:
            while True:
                stopping = cancel.is_set() or drain.is_set() or deadline.passed()
                starting: list[_Start] = []
                if not stopping and self._ready:
                    room = max(limit - len(running), 0)
                    chosen = sorted(self._ready, key=self._order.__getitem__)[:room]
                    starting = [self._prepare(self._ready.pop(node_id)) for node_id in chosen]
                    events.extend(NodeDispatched(record=item[0]) for item in starting)
                if events:
                    await host.write(events)
                    events = []
                for record, node, deps, refused in starting:
                    task = asyncio.create_task(self._run_node(record, node, deps, refused))
                    task.add_done_callback(self._task_done)
                    running[node.id] = task
                if not running:
                    break
                ended = await self._next_ended(deadline.remaining_s() if not stopping else None)
                if not ended and deadline.passed():
                    # The whole-task deadline cancels in-flight work; each node records its end.
                    cancel.set()
                    for task in running.values():
                        task.cancel()
                    await asyncio.wait(running.values())
                    ended = list(running)
                    self._ended.clear()
                for node_id in sorted(ended, key=self._order.__getitem__):
                    events.extend(self._finished(*running.pop(node_id).result()))
                if self._interrupt is not None:
                    await self._halt(self._interrupt, events)
        except BaseException:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            raise
        return not (
            self._pending or self._ready or cancel.is_set() or drain.is_set() or deadline.passed()
        )

    async def _halt(self, interrupt: BaseException, events: list[Event]) -> None:
        """A node raised KeyboardInterrupt or SystemExit: stop, record, and raise it as itself.

        The other running nodes are cancelled (as at the task deadline: an action cut short is
        ``unknown``), every record is written terminal, and nothing more is dispatched; a
        resume continues the round from there.
        """
        running = self._running
        self._cancel.set()
        for task in running.values():
            task.cancel()
        if running:
            await asyncio.wait(running.values())
        for node_id in sorted(running, key=self._order.__getitem__):
            events.extend(self._finished(*running.pop(node_id).result()))
        self._ended.clear()
        await self._host.write(events)
        events.clear()
        raise interrupt

    async def _next_ended(self, timeout: float | None) -> list[str]:
        """The running nodes that ended since the last call; waits (up to ``timeout``) for one.

        An empty list means the timeout passed first.
        """
        if not self._ended:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _release, waiter) if timeout is not None else None
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        ended = list(self._ended)
        self._ended.clear()
        return ended

    def _node_ended(self, node_id: str) -> None:
        """Note that a running node's task has ended, and wake the round if it waits."""
        self._ended[node_id] = None
        if self._waiter is not None:
            _release(self._waiter)

    def _task_done(self, task: asyncio.Task[_Outcome]) -> None:
        """The done callback of a node's task that was cancelled before it ever ran.

        A task that ran tells the round itself and withdraws this callback (see _run_node).
        """
        for node_id, running in self._running.items():
            if running is task and node_id not in self._ended:
                self._node_ended(node_id)

    def _wake(self, candidates: list[str]) -> list[Event]:
        """Move candidates whose dependencies settled to ready, or skip them (transitively)."""
        skipped: list[NodeSkipped] = []
        done = self._done
        while candidates:
            node = self._pending.get(candidates.pop())
            if node is None:
                continue
            # Each dependency is True (succeeded), False (did not) or None (not settled yet).
            states = [done.get(dep) for dep in node.after]
            if False in states:
                del self._pending[node.id]
                done[node.id] = False
                blocked = tuple(
                    dep for dep, state in zip(node.after, states, strict=True) if state is False
                )
                skipped.append(
                    NodeSkipped(revision=self._number, node_id=node.id, blocked_by=blocked)
                )
                candidates.extend(self._dependents.get(node.id, ()))
            elif None not in states:
                del self._pending[node.id]
                self._ready[node.id] = node
        if len(skipped) > 1:
            skipped.sort(key=lambda event: self._order[event.node_id])
        events: list[Event] = [*skipped]
        return events

    def _finished(
        self, record: ExecutionRecord, status: RecordStatus, result: NodeResult | None
    ) -> list[Event]:
        node_id = record.node_id
        if isinstance(result, Success):
            self._done[node_id] = True
            self._outputs[node_id] = result.value
        else:
            self._done[node_id] = False
            if status is RecordStatus.UNKNOWN and record.effect is Effect.ACTION:
                self._unknown.add((record.tool, record.args_digest))
        finished: Event = NodeFinished(
            record_id=record.id, status=status, result=result, at=self._now()
        )
        events = self._wake(list(self._dependents.get(node_id, ())))
        events.insert(0, finished)
        return events

    def _prepare(self, node: PlanNode) -> _Start:
        """The pending record of a node about to start, with its resolved args."""
        deps = {dep: self._outputs.get(dep) for dep in node.after}
        refused: NodeResult | None = None
        args: Mapping[str, JsonValue] = node.args
        if node.id in self._with_refs:
            try:
                args = resolve_refs(node.args, self._outputs)
            except LookupError as exc:
                args, refused = dict(node.args), VerifierFailure(node.id, str(exc))
            node = replace(node, args=args)
        effect = effective_effect(node, self._host.tools)
        args_digest = digest(args)
        if (
            refused is None
            and effect is Effect.ACTION
            and (node.tool, args_digest) in self._unknown
        ):
            refused = VerifierFailure(
                node.id,
                f"refused to repeat action {node.tool!r} with the same args as a record whose "
                "outcome is unknown; observe or reconcile it first, or change the action",
            )
        # A node is dispatched at most once per revision, so this id is unique in the task.
        record_id = RecordId(f"{self._number}:{node.id}")
        now = self._now()
        self._dispatched[record_id] = asyncio.get_running_loop().time()
        record = ExecutionRecord.pending(
            id=record_id,
            task_id=self._task_id,
            revision=self._number,
            node_id=node.id,
            tool=node.tool,
            args_digest=args_digest,
            effect=effect,
            idempotency_key=f"{self._task_id}/{record_id}",
            at=now,
        )
        return record, node, deps, refused

    async def _run_node(
        self,
        record: ExecutionRecord,
        node: PlanNode,
        deps: Mapping[str, JsonValue],
        refused: NodeResult | None,
    ) -> _Outcome:
        """Run one dispatched node (the body of its task); the round records how it ended."""
        try:
            return await self._outcome(record, node, deps, refused)
        finally:
            # Told here, as the task's last step, the round wakes in the next turn of the loop;
            # through the done callback it would take one more.
            self._running[node.id].remove_done_callback(self._task_done)
            self._node_ended(node.id)

    async def _outcome(
        self,
        record: ExecutionRecord,
        node: PlanNode,
        deps: Mapping[str, JsonValue],
        refused: NodeResult | None,
    ) -> _Outcome:
        dispatched = self._dispatched.pop(record.id)
        if refused is not None:
            return record, record_status_for(refused), refused
        host = self._host
        action = record.effect is Effect.ACTION
        timeout = host.node_timeout(node)
        # The call ends by the record's own deadline, its dispatch plus the timeout, however long
        # the pending write took or the driver stalled since: a driver that takes the task over
        # settles the record once that deadline has passed (docs/tools.md), so no call may start
        # or run past it.
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else dispatched + timeout
        if deadline is not None and deadline <= loop.time():
            late = DeviceFailure(
                node.id,
                f"not started: its {timeout:g} s had passed since it was dispatched",
                is_timeout=True,
            )
            return record, record_status_for(late), late
        context = NodeContext(
            task_id=self._task_id,
            node_id=node.id,
            revision=record.revision,
            record_id=record.id,
            idempotency_key=record.idempotency_key,
            deadline=deadline,
            cancelled=self._cancel,
            dependencies=deps,
            report=partial(self._report, record.id),
        )
        _NODE_CONTEXT.set(context)  # this task's own context: visible to the executor
        result: NodeResult
        try:
            # Through `carried`: an interrupt must not leave this task as itself (see _failures).
            if deadline is None:
                returned = await carried(host.execute(node, context))
            else:
                returned = await asyncio.wait_for(
                    carried(host.execute(node, context)), deadline - loop.time() + _TIMEOUT_GRACE_S
                )
            result = _as_result(node, returned)
        except Interrupted as interrupted:
            if self._interrupt is None:
                self._interrupt = interrupted.raised
            note = "; the action may or may not have taken effect" if action else ""
            result = DeviceFailure(
                node.id,
                f"interrupted by {describe_exception(interrupted.raised)}{note}",
                outcome_unknown=action,
            )
        except TimeoutError as exc:
            if deadline is None or timeout is None or loop.time() < deadline:
                # The executor's own TimeoutError, before any deadline of the engine's.
                who = f"the executor, running node {node.id!r}"
                result = DeviceFailure(node.id, noted(exc, task_id=self._task_id, who=who))
            else:
                result = DeviceFailure(
                    node.id,
                    f"timed out after {timeout:g} s",
                    is_timeout=True,
                    outcome_unknown=action,
                )
        except asyncio.CancelledError:
            if not action:
                return record, RecordStatus.CANCELLED, None
            result = DeviceFailure(
                node.id,
                "cancelled while running; the action's outcome is unknown",
                outcome_unknown=True,
            )
        except Exception as exc:  # noqa: BLE001 - an executor that raises is a device failure
            who = f"the executor, running node {node.id!r}"
            result = DeviceFailure(node.id, noted(exc, task_id=self._task_id, who=who))
        result = recordable_result(
            result,
            node_id=node.id,
            action=action,
            limits=host.state.policy.value_limits,
            source=f"tool {node.tool!r}" if node.tool else "the executor",
        )
        return record, record_status_for(result), result

    async def _report(self, record_id: RecordId, status: RecordStatus) -> None:
        if status not in (RecordStatus.ACCEPTED, RecordStatus.RUNNING):
            raise UsageError(
                f"context.report takes RecordStatus.ACCEPTED or RecordStatus.RUNNING, got "
                f"{status!r}; a tool ends its record by returning or raising"
            )
        event = NodeProgressed(record_id=record_id, status=RecordStatus(status), at=self._now())
        # Shielded: a node cancelled at the deadline must not cut a write in half.
        await asyncio.shield(self._host.write([event]))


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _has_refs(args: Mapping[str, JsonValue]) -> bool:
    return next(iter_refs(args), None) is not None


def _as_result(node: PlanNode, value: object) -> NodeResult:
    if isinstance(value, Success | DeviceFailure | VerifierFailure):
        return value
    return DeviceFailure(
        node.id, f"the executor returned a {type(value).__name__}, not a node result"
    )


def resolve_refs(args: Mapping[str, Any], outputs: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """Args with every ``{"$ref": "n1.key"}`` replaced by that dependency's output.

    Raises:
        LookupError: A reference names an output, or a path inside one, that does not exist.
    """

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            if len(value) == 1 and isinstance(value.get("$ref"), str):
                return _follow(value["$ref"], outputs)
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    return {key: walk(value) for key, value in args.items()}


def _follow(ref: str, outputs: Mapping[str, JsonValue]) -> JsonValue:
    node_id, *path = ref.split(".")
    if node_id not in outputs:
        raise LookupError(f"$ref {ref!r}: node {node_id!r} has no output to take")
    value: Any = outputs[node_id]
    for step in path:
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list | tuple) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise LookupError(f"$ref {ref!r}: the output of {node_id!r} has no {step!r}")
    return freeze_json(value)
