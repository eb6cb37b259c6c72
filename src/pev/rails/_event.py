"""What a rail receives: one frozen event per phase boundary of the loop (docs/design.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from pev.ledger import (
    CompensationDispatched,
    CompensationFailed,
    EffectCompensated,
    EffectSuperseded,
    Event,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    RecordReconciled,
    TaskState,
)
from pev.model import ExecutionRecord, Plan, TaskId, VerificationContract

__all__ = ["PHASES_OF_EVENT", "Rail", "RailEvent", "RailPhase", "record_of"]


class RailPhase(StrEnum):
    """A phase boundary of the plan, execute, verify loop that rails are told about."""

    TASK_STARTED = "task_started"
    PLANNED = "planned"
    PLAN_REJECTED = "plan_rejected"
    REVISION_STARTED = "revision_started"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    NODE_STARTED = "node_started"
    NODE_FINISHED = "node_finished"
    RECORD_RECONCILED = "record_reconciled"
    NODE_REUSED = "node_reused"
    EFFECT_SUPERSEDED = "effect_superseded"
    COMPENSATION_STARTED = "compensation_started"
    COMPENSATION_FINISHED = "compensation_finished"
    UNWIND_STARTED = "unwind_started"
    EXECUTED = "executed"
    EVIDENCE_CAPTURED = "evidence_captured"
    VERIFIED = "verified"
    DIAGNOSED = "diagnosed"
    DISPATCHED = "dispatched"
    TASK_FINISHED = "task_finished"


# The phases each ledger event marks, by event kind, in the order rails see them. An accepted plan
# is two boundaries at once: planning ended (planned) and the revision began (revision_started).
# A rejected plan ends a planner call as well, and a revision may stop for a person's decision.
# A reconciliation settles a record that ended unknown: what a rail showed of that node changes.
# What befalls an effect is a boundary too (docs/engine.md, "Effects happen once"): a node
# satisfied by an effect the task already had (reused, never sent), an effect a revision replaces
# (superseded), the call that undoes one (a compensation, started and finished like a node), and
# a failing task that undoes its effects before it ends (unwind_started).
# Every kind missing here (replan_started, node_progressed, node_skipped, capture_failed,
# awaiting_replan, cancel_requested, driver_started, start_failed, and any kind a later pev
# adds) is bookkeeping inside a phase, and no rail hears of it.
PHASES_OF_EVENT: Mapping[str, tuple[RailPhase, ...]] = MappingProxyType(
    {
        "task_created": (RailPhase.TASK_STARTED,),
        "revision_started": (RailPhase.PLANNED, RailPhase.REVISION_STARTED),
        "plan_rejected": (RailPhase.PLAN_REJECTED,),
        "approval_requested": (RailPhase.APPROVAL_REQUESTED,),
        "approved": (RailPhase.APPROVED,),
        "rejected": (RailPhase.REJECTED,),
        "node_dispatched": (RailPhase.NODE_STARTED,),
        "node_finished": (RailPhase.NODE_FINISHED,),
        "record_reconciled": (RailPhase.RECORD_RECONCILED,),
        "node_reused": (RailPhase.NODE_REUSED,),
        "effect_superseded": (RailPhase.EFFECT_SUPERSEDED,),
        "compensation_dispatched": (RailPhase.COMPENSATION_STARTED,),
        "effect_compensated": (RailPhase.COMPENSATION_FINISHED,),
        "compensation_failed": (RailPhase.COMPENSATION_FINISHED,),
        "unwind_started": (RailPhase.UNWIND_STARTED,),
        "round_executed": (RailPhase.EXECUTED,),
        "evidence_captured": (RailPhase.EVIDENCE_CAPTURED,),
        "verdict_recorded": (RailPhase.VERIFIED,),
        "diagnosed": (RailPhase.DIAGNOSED,),
        "dispatched": (RailPhase.DISPATCHED,),
        "task_finished": (RailPhase.TASK_FINISHED,),
    }
)


def record_of(event: Event, state: TaskState) -> ExecutionRecord | None:
    """The execution record ``event`` is about, as ``state`` (written after it) holds it.

    A reused node's, or a superseded effect's, is the effect's own record; a compensation's is
    the compensation's record (its node and tool are the effect's), as it ended for
    ``effect_compensated`` and ``compensation_failed``.
    """
    match event:
        case NodeDispatched(record=record) | CompensationDispatched(record=record):
            return record
        case (
            NodeFinished(record_id=record_id)
            | RecordReconciled(record_id=record_id)
            | NodeReused(record_id=record_id)
            | EffectSuperseded(record_id=record_id)
        ):
            return state.records.get(record_id)
        case EffectCompensated(effect=effect) | CompensationFailed(effect=effect):
            undone = state.effects.get(effect)
            return None if undone is None else undone.compensation
        case _:
            return None


def _no_tools() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class RailEvent:
    """One phase boundary of one task, as a rail sees it.

    Every rail receives its own copy, so a rail that mutates what it is given (even through
    ``object.__setattr__``) misleads only itself.

    Attributes:
        phase: The boundary crossed.
        task_id: The task.
        seq: The sequence number of the ledger entry behind it.
        at: When that entry was written (UTC).
        event: The ledger event behind it.
        contract: The task's verification contract.
        plan: The plan in force once the event was written (``None`` before the first one).
        tools: Node id → tool name for the nodes of ``plan`` that name a tool.
        record: The execution record it is about: for ``node_started``, ``node_finished`` and
            ``record_reconciled``, the node's (``node_finished`` carries it as it ended: node id,
            tool, final status; ``record_reconciled`` the ``unknown`` record the event settles,
            which is never rewritten); for ``node_reused`` and ``effect_superseded``, the
            effect's record (from the revision that sent it); for ``compensation_started`` and
            ``compensation_finished``, the compensation's own record (id ``undo:<effect>``, the
            effect's node and tool; as it ended, for ``compensation_finished``).
    """

    phase: RailPhase
    task_id: TaskId
    seq: int
    at: datetime
    event: Event
    contract: VerificationContract
    plan: Plan | None
    tools: Mapping[str, str] = field(default_factory=_no_tools)
    record: ExecutionRecord | None = None


@runtime_checkable
class Rail(Protocol):
    """Observes the loop. ``on_event`` may be sync or async; whatever it returns is ignored.

    A plain function (or any callable) taking a :class:`RailEvent` is accepted as a rail too.
    """

    def on_event(self, event: RailEvent) -> object:
        """Look at one phase boundary; an exception is logged and counted, never propagated."""
        ...
