"""One execution round: a revision's nodes dispatched as their dependencies succeed (SPEC §2.2, §6).

The round is the engine's hot path, so it does work in proportion to what changed: a finished
node wakes only its own dependents. Each pass writes one transaction holding the nodes that
finished since the last one, the skips they cause and the pending records of the nodes about to
start, so a chain costs one commit per node and a wave of parallel nodes shares one. A pending
record is always committed before its tool is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from pev.engine._planning import effective_effect
from pev.engine._protocols import _NODE_CONTEXT, NodeContext
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
    VerifierFailure,
    digest,
    freeze_json,
    record_status_for,
)

if TYPE_CHECKING:
    from pev.engine._driver import Driver

__all__ = ["Round"]

# A custom executor gets this much beyond the node's own timeout before the engine stops
# waiting for it: a well-behaved executor reports its own timeout first.
_TIMEOUT_GRACE_S = 0.05

_Outcome = tuple[ExecutionRecord, RecordStatus, NodeResult | None]
_Start = tuple[ExecutionRecord, PlanNode, dict[str, JsonValue], NodeResult | None]


class Round:
    """Runs one revision's round for a :class:`~pev.engine._driver.Driver`."""

    def __init__(self, driver: Driver, plan: Plan, number: int, redo: frozenset[str]) -> None:
        self._d = driver
        self._number = number
        state = driver.state
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

    async def run(self) -> bool:
        """Run the round; True if every node was dispatched or skipped (not cancelled or late)."""
        d = self._d
        limit = d.state.policy.max_parallel
        events: list[Event] = self._wake(list(self._pending))
        running: dict[asyncio.Task[_Outcome], str] = {}
        try:
            while True:
                stopping = d.cancelled or d.past_task_deadline()
                starting: list[_Start] = []
                if not stopping and self._ready:
                    room = max(limit - len(running), 0)
                    chosen = sorted(self._ready, key=self._order.__getitem__)[:room]
                    starting = [self._prepare(self._ready.pop(node_id)) for node_id in chosen]
                    events.extend(NodeDispatched(record=item[0]) for item in starting)
                if events:
                    await d.write(events)
                    events = []
                for record, node, deps, refused in starting:
                    task = asyncio.create_task(self._run_node(record, node, deps, refused))
                    running[task] = node.id
                if not running:
                    break
                finished, _ = await asyncio.wait(
                    running,
                    timeout=d.remaining_s() if not stopping else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not finished and d.past_task_deadline():
                    # The whole-task deadline cancels in-flight work; each node records its end.
                    d.cancel_now()
                    for task in running:
                        task.cancel()
                    await asyncio.wait(running)
                    finished = set(running)
                for task in sorted(finished, key=lambda t: self._order[running[t]]):
                    running.pop(task)
                    events.extend(self._finished(*task.result()))
        except BaseException:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        return not (self._pending or self._ready or d.cancelled or d.past_task_deadline())

    def _wake(self, candidates: list[str]) -> list[Event]:
        """Move candidates whose dependencies settled to ready, or skip them (transitively)."""
        skipped: list[NodeSkipped] = []
        while candidates:
            node = self._pending.get(candidates.pop())
            if node is None:
                continue
            states = [self._done.get(dep) for dep in node.after]
            if any(state is False for state in states):
                del self._pending[node.id]
                self._done[node.id] = False
                blocked = tuple(
                    dep for dep, state in zip(node.after, states, strict=True) if state is False
                )
                skipped.append(
                    NodeSkipped(revision=self._number, node_id=node.id, blocked_by=blocked)
                )
                candidates.extend(self._dependents.get(node.id, ()))
            elif all(state is True for state in states):
                del self._pending[node.id]
                self._ready[node.id] = node
        skipped.sort(key=lambda event: self._order[event.node_id])
        return list[Event](skipped)

    def _finished(
        self, record: ExecutionRecord, status: RecordStatus, result: NodeResult | None
    ) -> list[Event]:
        node_id = record.node_id
        ok = isinstance(result, Success)
        self._done[node_id] = ok
        if isinstance(result, Success):
            self._outputs[node_id] = result.value
        elif status is RecordStatus.UNKNOWN and record.effect is Effect.ACTION:
            self._unknown.add((record.tool, record.args_digest))
        finished: Event = NodeFinished(
            record_id=record.id, status=status, result=result, at=self._d.now()
        )
        return [finished, *self._wake(list(self._dependents.get(node_id, ())))]

    def _prepare(self, node: PlanNode) -> _Start:
        """The pending record of a node about to start, with its resolved args."""
        d = self._d
        deps = {dep: self._outputs.get(dep) for dep in node.after}
        refused: NodeResult | None = None
        try:
            args = resolve_refs(node.args, self._outputs)
        except LookupError as exc:
            args, refused = dict(node.args), VerifierFailure(node.id, str(exc))
        effect = effective_effect(node, d.tools)
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
        now = d.now()
        record = ExecutionRecord(
            id=record_id,
            task_id=d.task_id,
            revision=self._number,
            node_id=node.id,
            tool=node.tool,
            args_digest=args_digest,
            effect=effect,
            idempotency_key=f"{d.task_id}/{record_id}",
            created_at=now,
            updated_at=now,
        )
        return record, replace(node, args=args), deps, refused

    async def _run_node(
        self,
        record: ExecutionRecord,
        node: PlanNode,
        deps: Mapping[str, JsonValue],
        refused: NodeResult | None,
    ) -> _Outcome:
        """Run one dispatched node; the round records how it ended."""
        if refused is not None:
            return record, record_status_for(refused), refused
        d = self._d
        action = record.effect is Effect.ACTION
        timeout = d.node_timeout(node)
        context = NodeContext(
            task_id=d.task_id,
            node_id=node.id,
            revision=record.revision,
            record_id=record.id,
            idempotency_key=record.idempotency_key,
            deadline=asyncio.get_running_loop().time() + timeout if timeout is not None else None,
            cancelled=d.cancel_signal,
            dependencies=deps,
            report=partial(self._report, record.id),
        )
        _NODE_CONTEXT.set(context)  # this task's own context: visible to the executor
        result: NodeResult
        try:
            wait = timeout + _TIMEOUT_GRACE_S if timeout is not None else None
            returned = await asyncio.wait_for(d.execute(node, context), wait)
            result = _as_result(node, returned)
        except TimeoutError:
            result = DeviceFailure(
                node.id, f"timed out after {timeout:g} s", is_timeout=True, outcome_unknown=action
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
            result = DeviceFailure(node.id, f"{type(exc).__name__}: {exc}")
        return record, record_status_for(result), result

    async def _report(self, record_id: RecordId, status: RecordStatus) -> None:
        event = NodeProgressed(record_id=record_id, status=status, at=self._d.now())
        # Shielded: a node cancelled at the deadline must not cut a write in half.
        await asyncio.shield(self._d.write([event]))


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
