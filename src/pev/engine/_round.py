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

from pev.engine._compensation import replaced_by
from pev.engine._effects import EffectMatcher, effective_effect, refusal
from pev.engine._failures import Interrupted, carried, noted
from pev.engine._host import TaskHost
from pev.engine._protocols import _NODE_CONTEXT, NodeContext
from pev.engine._recordable import recordable_result
from pev.engine._settle import QUERY_DISPATCHES
from pev.errors import UsageError
from pev.ledger import (
    Event,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeReused,
    NodeSkipped,
    RecordReconciled,
    Refuse,
    Reuse,
    TaskEffect,
    call_name,
    effect_key,
    effects_before,
    lineage_results,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    JsonObject,
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

# A node's record, its terminal status and result, and what a reconcile established at once.
_Outcome = tuple[ExecutionRecord, RecordStatus, NodeResult | None, NodeResult | None]
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

    async def settle_unknown(self, record: ExecutionRecord) -> NodeResult | None:
        """What the executor's ``reconcile`` establishes of a record just ended ``unknown``.

        ``None`` when it cannot tell (or has no ``reconcile``); asked at most once per record.
        """
        ...

    async def supersede(self, effect: TaskEffect, reason: str) -> bool:
        """Supersede an effect a redo node replaces, undoing it if its tool can.

        False when its compensation failed: the effect is left in place, and the task ends.
        """
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
        self._matcher = EffectMatcher(plan, host.tools)
        # The task's effects from before this revision, by call: what its actions match onto.
        self._prior: dict[tuple[str | None, str], list[RecordId]] = {}
        for effect in effects_before(state, number):
            self._prior.setdefault((effect.tool, effect.args_digest), []).append(effect.record_id)
        # The digest of each node's resolved args, for the nodes dispatched in this revision.
        self._resolved: dict[str, str] = {}
        self._done: dict[str, bool] = {}
        for node in plan.nodes:
            if redo and node.id not in redo:
                self._done[node.id] = isinstance(lineage.get(node.id), Success)
        latest: dict[str, ExecutionRecord] = {}
        # How many records each node has in this revision (a query a crash cut short has two).
        self._dispatches: dict[str, int] = {}
        for record in state.records.values():
            if record.revision == number:
                latest[record.node_id] = record
                self._resolved[record.node_id] = record.args_digest
                self._dispatches[record.node_id] = self._dispatches.get(record.node_id, 0) + 1
        for node_id, record in latest.items():
            if record.terminal and not _dispatched_again(record, state.results):
                # A record of unknown outcome that a reconciliation settled counts as settled.
                self._done[node_id] = isinstance(lineage.get(node_id), Success)
        for reuse in state.reused:
            if reuse.revision == number:
                self._done[reuse.node_id] = True
                self._resolved[reuse.node_id] = state.effects[reuse.record_id].args_digest
        self._skip_again(plan, {s.node_id for s in state.skipped if s.revision == number})
        self._order = {node.id: index for index, node in enumerate(plan.nodes)}
        self._plan_nodes = {node.id: node for node in plan.nodes}
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
        # Set when a compensation left an effect in place: nothing more is dispatched.
        self._halted = False
        self._redo = redo  # empty but for a local revision
        # Nodes whose call was not made (its time went before it could start): they are
        # dispatched again, as new records, once their records are written.
        self._again: set[str] = set()

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
                stopping = self._halted or cancel.is_set() or drain.is_set() or deadline.passed()
                starting: list[_Start] = []
                if not stopping and self._ready:
                    room = max(limit - len(running), 0)
                    chosen = sorted(self._ready, key=self._order.__getitem__)[:room]
                    for node_id in chosen:
                        prepared = self._prepare(self._ready.pop(node_id))
                        if isinstance(prepared, TaskEffect):
                            events.extend(self._reused(node_id, prepared))
                        else:
                            starting.append(prepared)
                    replaced = [
                        (item, None if item[3] is not None else self._replaces(item[0]))
                        for item in starting
                    ]
                    if any(old is not None for _, old in replaced):
                        await host.write(events)  # what ended before goes first
                        events = []
                        starting = await self._undo_first(replaced)
                    events.extend(NodeDispatched(record=item[0]) for item in starting)
                if events:
                    await host.write(events)
                    events = []
                for record, node, deps, refused in starting:
                    task = asyncio.create_task(self._run_node(record, node, deps, refused))
                    task.add_done_callback(self._task_done)
                    running[node.id] = task
                if not running:
                    if self._ready and not stopping:
                        continue  # reused nodes made others ready: dispatch them
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
            self._pending
            or self._ready
            or self._halted
            or cancel.is_set()
            or drain.is_set()
            or deadline.passed()
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
        self,
        record: ExecutionRecord,
        status: RecordStatus,
        result: NodeResult | None,
        settled: NodeResult | None = None,
    ) -> list[Event]:
        node_id = record.node_id
        finished: list[Event] = [
            NodeFinished(record_id=record.id, status=status, result=result, at=self._now())
        ]
        if node_id in self._again:
            self._again.discard(node_id)
            self._ready[node_id] = self._plan_nodes[node_id]  # never sent: it goes again
            return finished
        if settled is not None:
            # Reconcile, then go on: what it established stands for the node in this round.
            finished.append(
                RecordReconciled(
                    record_id=record.id,
                    result=settled,
                    note="settled by the tool's reconcile as soon as the call ended unknown",
                )
            )
            result = settled
        if isinstance(result, Success):
            self._done[node_id] = True
            self._outputs[node_id] = result.value
        else:
            self._done[node_id] = False
        return [*finished, *self._wake(list(self._dependents.get(node_id, ())))]

    def _replaces(self, record: ExecutionRecord) -> TaskEffect | None:
        """The effect a redo node's new call replaces: its earlier one in the lineage, if other.

        Only for a local revision's redo nodes; a node whose args were known before the
        revision began was settled then (see :mod:`~pev.engine._compensation`).
        """
        if record.node_id not in self._redo or record.effect is not Effect.ACTION:
            return None
        call = (record.tool, record.args_digest)
        return replaced_by(self._host.state, record.node_id, call)

    async def _undo_first(self, replaced: list[tuple[_Start, TaskEffect | None]]) -> list[_Start]:
        """Supersede (and undo) what each starting node replaces; keep those that may start.

        A compensation that fails halts the round: that node and those after it are not
        dispatched (they go back to ready), and the driver ends the task.
        """
        starting: list[_Start] = []
        for item, old in replaced:
            node_id = item[1].id
            if self._halted:
                self._ready[node_id] = self._plan_nodes[node_id]
                continue
            if old is not None:
                reason = f"revision {self._number} redoes node {node_id!r} with another call"
                if not await self._host.supersede(old, reason):
                    self._halted = True
                    self._ready[node_id] = self._plan_nodes[node_id]
                    continue
            starting.append(item)
        return starting

    def _reused(self, node_id: str, effect: TaskEffect) -> list[Event]:
        """A node satisfied by an effect the task already has: not sent, its dependents go on."""
        self._done[node_id] = True
        if isinstance(effect.result, Success):
            self._outputs[node_id] = effect.result.value
        reused = NodeReused(revision=self._number, node_id=node_id, record_id=effect.record_id)
        return [reused, *self._wake(list(self._dependents.get(node_id, ())))]

    def _skip_again(self, plan: Plan, skipped: set[str]) -> None:
        """Keep skipped the nodes of this revision a failed dependency still blocks.

        A node skipped before (a resumed round) whose dependencies all succeeded since, or may
        yet (a reconciliation settled one as done; a query a crash cut short runs again), is
        left to be dispatched in this round.
        """
        after = {node.id: node.after for node in plan.nodes}
        changed = True
        while changed:
            changed = False
            for node_id in skipped:
                if node_id not in self._done and any(
                    self._done.get(dep) is False for dep in after.get(node_id, ())
                ):
                    self._done[node_id] = False
                    changed = True

    def _prepare(self, node: PlanNode) -> _Start | TaskEffect:
        """The pending record of a node about to start, with its resolved args.

        An action whose intended effect the task already has, settled as done, is not sent:
        that effect is returned instead, and the node reuses it (docs/engine.md, "Effects
        happen once").
        """
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
        self._resolved[node.id] = args_digest
        occurrence: int | None = None
        key: str | None = None
        if effect is Effect.ACTION and refused is None:
            effects = self._host.state.effects  # read now: a compensation may have changed one
            intent = self._matcher.intent(
                node.id,
                args_digest,
                effects=[effects[rid] for rid in self._prior.get((node.tool, args_digest), ())],
                resolved=self._resolved.get,
            )
            match intent:
                case Reuse(effect=done):
                    return done
                case Refuse(effect=unknown):
                    refused = VerifierFailure(node.id, refusal(node, unknown))
                case _:
                    occurrence = intent.occurrence
                    call = call_name(node.tool, node.id)
                    key = effect_key(self._task_id, call, args_digest, occurrence)
        dispatches = self._dispatches.get(node.id, 0) + 1
        self._dispatches[node.id] = dispatches
        # A node is dispatched once per revision, or again when a crash cut a query short.
        record_id = RecordId(
            f"{self._number}:{node.id}" + (f".{dispatches}" if dispatches > 1 else "")
        )
        recorded_args: JsonObject | None = None
        if occurrence is not None and node.id in self._with_refs:
            # Args a $ref filled are recorded; the others are the plan's, already in the ledger.
            recorded_args = freeze_json(args)  # type: ignore[assignment]  # args are an object
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
            idempotency_key=key or f"{self._task_id}/{record_id}",
            at=now,
            occurrence=occurrence,
            args=recorded_args,
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
            return record, record_status_for(refused), refused, None
        host = self._host
        action = record.effect is Effect.ACTION
        timeout = host.node_timeout(node)
        # The call ends by the record's own deadline, its dispatch plus the timeout, however long
        # the pending write took or the driver stalled since: a driver that takes the task over
        # settles the record once that deadline has passed (docs/tools.md), so no call may start
        # or run past it.
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else dispatched + timeout
        if (
            deadline is not None
            and timeout is not None
            and deadline - loop.time() < timeout / 2
            and self._dispatches[node.id] < QUERY_DISPATCHES
        ):
            # The pending write (a store that did not answer for a while) or a stalled driver
            # took half the call's time or more: the call is not made with what is left. It was
            # never sent, so it is dispatched again as a new record, with its whole time
            # (docs/engine.md, "Crash and resume"), up to QUERY_DISPATCHES records in all.
            self._again.add(node.id)
            return record, RecordStatus.CANCELLED, None, None
        if deadline is not None and deadline <= loop.time():
            late = DeviceFailure(
                node.id,
                f"not started: its {timeout:g} s had passed since it was dispatched",
                is_timeout=True,
            )
            return record, record_status_for(late), late, None
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
            cut = describe_exception(interrupted.raised)
            if not action and self._dispatches[node.id] < QUERY_DISPATCHES:
                # A read cut short changed nothing: it runs again when the task is resumed.
                return record, RecordStatus.CANCELLED, None, None
            result = DeviceFailure(
                node.id,
                f"interrupted by {cut}; the action may or may not have taken effect"
                if action
                else f"interrupted by {cut}; this query was cut short {QUERY_DISPATCHES} times",
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
                return record, RecordStatus.CANCELLED, None, None
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
        status = record_status_for(result)
        settled = None
        if status is RecordStatus.UNKNOWN and action:
            try:
                settled = await host.settle_unknown(record)
            except asyncio.CancelledError:
                settled = None  # the round is being stopped: the record stays unknown
        return record, status, result, settled

    async def _report(self, record_id: RecordId, status: RecordStatus) -> None:
        if status not in (RecordStatus.ACCEPTED, RecordStatus.RUNNING):
            raise UsageError(
                f"context.report takes RecordStatus.ACCEPTED or RecordStatus.RUNNING, got "
                f"{status!r}; a tool ends its record by returning or raising"
            )
        event = NodeProgressed(record_id=record_id, status=RecordStatus(status), at=self._now())
        # Shielded: a node cancelled at the deadline must not cut a write in half.
        await asyncio.shield(self._host.write([event]))


def _dispatched_again(record: ExecutionRecord, results: Mapping[RecordId, NodeResult]) -> bool:
    """Whether a terminal record's node is dispatched again in its revision.

    A query that a crash, a takeover or an interrupt cut short, or any call that was never
    made because its record's time had mostly passed before it could start (``cancelled``, no
    result, in a revision still executing), changed nothing, so it runs again as a new record;
    the settling on resume (or the round) ends it ``failed`` instead once it was cut short
    :data:`~pev.engine._settle.QUERY_DISPATCHES` times.
    """
    return record.status is RecordStatus.CANCELLED and record.id not in results


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
