"""A task's effects: what its actions did to the world, and how a plan's actions map onto them.

See docs/engine.md, "Effects happen once". An **effect** is an action record of the task that
succeeded, that ended ``unknown``, or that a reconciliation settled; it belongs to the task, not
to a revision or lineage. The fold keeps them (``TaskState.effects``); the rules here say, for
each action node of a plan, whether the task already has the effect it intends (the node is
satisfied from it, or refused while its outcome is unknown) or which new occurrence it sends.

Everything here is pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from pev.model import (
    ExecutionRecord,
    JsonObject,
    NodeResult,
    Plan,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
)

__all__ = [
    "Call",
    "EffectStatus",
    "Intent",
    "Refuse",
    "Reuse",
    "Send",
    "TaskEffect",
    "call_name",
    "effect_key",
    "effect_order",
    "intent_of",
]


class EffectStatus(StrEnum):
    """What is known of an effect."""

    SUCCEEDED = "succeeded"
    """The call returned: it took effect."""
    UNKNOWN = "unknown"
    """The call may or may not have taken effect (a timeout, a crash) and nothing settled it."""
    DONE = "done"
    """A reconciliation established that the call of unknown outcome took effect."""
    NOT_DONE = "not_done"
    """A reconciliation established that it never took effect: it may be sent again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskEffect:
    """One effect of a task: an action that took effect, or may have.

    Attributes:
        record_id: The action's execution record (``record:<id>`` is its reference).
        node_id: The node that sent it.
        revision: The revision that sent it.
        tool: The tool called.
        args: The resolved args it was called with; ``None`` for a record written before
            records kept their args, whose node's args held a ``$ref``.
        args_digest: sha256 of the canonical JSON of the resolved args.
        occurrence: Which occurrence of its call (tool and canonical args) it is, from 1.
        key: Its idempotency key: the same for every dispatch of this intended effect.
        status: What is known of it.
        result: The call's result (or what the reconciliation established).
        superseded: The revision that replaced the node's effect with another, when one did;
            such an effect stays in the world unless it was compensated.
        compensation: The record of the call that undid it, once one was dispatched.
        compensation_result: What that call returned, once it ended.
    """

    record_id: RecordId
    node_id: str
    revision: int
    tool: str | None
    args: JsonObject | None
    args_digest: str
    occurrence: int
    key: str
    status: EffectStatus
    result: NodeResult | None = None
    superseded: int | None = None
    compensation: ExecutionRecord | None = None
    compensation_result: NodeResult | None = None

    @property
    def happened(self) -> bool:
        """True when it is known to have taken effect (succeeded, or reconciled as done)."""
        return self.status in (EffectStatus.SUCCEEDED, EffectStatus.DONE)

    @property
    def compensated(self) -> bool:
        """True once a compensation undid it."""
        return self.compensation is not None and self.compensation.status is RecordStatus.SUCCEEDED

    @property
    def in_world(self) -> bool:
        """True while it is (or may be) in the world: not reconciled as not done, not undone."""
        return self.status is not EffectStatus.NOT_DONE and not self.compensated

    @property
    def value(self) -> object:
        """What the call returned, for an effect that happened; else ``None``."""
        return self.result.value if isinstance(self.result, Success) else None

    @property
    def ref(self) -> str:
        """The evidence reference of its record, ``record:<id>``."""
        return f"record:{self.record_id}"


def effect_key(task_id: TaskId, call: str, args_digest: str, occurrence: int) -> str:
    """The idempotency key of one intended effect: task, call, canonical args and occurrence.

    ``call`` is the tool's name (``@`` and the node id for a node without a tool). Every
    dispatch of the same intended effect, in any revision or process, carries it, so a service
    that de-duplicates by key does so too (docs/ledger-format.md, "Idempotency keys").
    """
    return f"{task_id}/{call}/{args_digest[:16]}/{occurrence}"


def call_name(tool: str | None, node_id: str) -> str:
    """What names a node's call: its tool, or ``@`` and its node id when it has none."""
    return tool if tool is not None else f"@{node_id}"


def effect_order(plan: Plan) -> tuple[str, ...]:
    """The plan's node ids in dependency order, ties broken by node id: occurrences count so.

    The plan must be valid (no cycle); nodes a cycle would leave out are appended by id.
    """
    waiting = {node.id: len(set(node.after)) for node in plan.nodes}
    dependents: dict[str, list[str]] = {node.id: [] for node in plan.nodes}
    for node in plan.nodes:
        for dep in set(node.after):
            dependents.setdefault(dep, []).append(node.id)
    ready = [node_id for node_id, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node_id = heapq.heappop(ready)
        order.append(node_id)
        for dependent in dependents.get(node_id, ()):
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                heapq.heappush(ready, dependent)
    placed = set(order)
    order.extend(sorted(node_id for node_id in waiting if node_id not in placed))
    return tuple(order)


@dataclass(frozen=True, slots=True)
class Call:
    """One action node of a plan, as it is matched against the task's effects.

    Attributes:
        node_id: The node.
        tool: The tool it calls.
        args_digest: sha256 of its canonical args (resolved, once they are known).
        repeat: The node asks for a new occurrence (``PlanNode.repeat``).
    """

    node_id: str
    tool: str | None
    args_digest: str
    repeat: bool = False


@dataclass(frozen=True, slots=True)
class Reuse:
    """The task already has this intended effect, settled as done: the node is satisfied."""

    effect: TaskEffect


@dataclass(frozen=True, slots=True)
class Refuse:
    """Sending it could repeat an effect of unknown outcome: observe or reconcile it first."""

    effect: TaskEffect


@dataclass(frozen=True, slots=True)
class Send:
    """A new intended effect: occurrence ``occurrence`` of its call."""

    occurrence: int


Intent: TypeAlias = Reuse | Refuse | Send
"""What becomes of an action node: satisfied by an effect, refused, or sent."""


def intent_of(position: int, calls: Sequence[Call], effects: Iterable[TaskEffect]) -> Intent:
    """What the node at ``calls[position]`` intends, given the effects the task had before.

    Args:
        position: The node's place in ``calls``.
        calls: Every action node of the plan with the same call (tool and args), in
            :func:`effect_order`.
        effects: The task's effects of that call that existed before the revision began.

    A plain node is matched, in order, onto the call's effects still in the world (compensated
    ones and ones that never happened are skipped): the first plain node onto the first such
    effect, and so on. Matched to an effect that happened, it is reused; to one of unknown
    outcome, refused. Plain nodes past those effects, and ``repeat`` nodes after them, are new
    occurrences numbered after every effect of the call the task has had, compensated ones
    included (an undone effect keeps its occurrence, so its key is never used again). A
    ``repeat`` node is refused while an effect of its call is of unknown outcome.
    """
    prior = sorted(
        (effect for effect in effects if effect.status is not EffectStatus.NOT_DONE),
        key=lambda effect: effect.occurrence,
    )
    live = [effect for effect in prior if not effect.compensated]
    top = max((effect.occurrence for effect in prior), default=0)
    unknown = next((effect for effect in live if effect.status is EffectStatus.UNKNOWN), None)
    node = calls[position]
    if not node.repeat:
        rank = sum(1 for call in calls[:position] if not call.repeat) + 1
        if rank <= len(live):
            matched = live[rank - 1]
            return Refuse(matched) if matched.status is EffectStatus.UNKNOWN else Reuse(matched)
        return Send(top + rank - len(live))
    if unknown is not None:
        return Refuse(unknown)
    plain = sum(1 for call in calls if not call.repeat)
    rank = sum(1 for call in calls[:position] if call.repeat) + 1
    return Send(top + max(plain - len(live), 0) + rank)
