"""What a rail receives: one frozen event per phase boundary of the loop (docs/design.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from pev.ledger import Event
from pev.model import ExecutionRecord, Plan, TaskId, VerificationContract

__all__ = ["PHASES_OF_EVENT", "Rail", "RailEvent", "RailPhase"]


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
    EXECUTED = "executed"
    EVIDENCE_CAPTURED = "evidence_captured"
    VERIFIED = "verified"
    DIAGNOSED = "diagnosed"
    DISPATCHED = "dispatched"
    TASK_FINISHED = "task_finished"


# The phases each ledger event marks, by event kind, in the order rails see them. An accepted plan
# is two boundaries at once: planning ended (planned) and the revision began (revision_started).
# A rejected plan ends a planner call as well, and a revision may stop for a person's decision.
# Every kind missing here (replan_started, node_progressed, node_skipped, record_reconciled,
# capture_failed, awaiting_replan, cancel_requested, driver_started) is bookkeeping inside a
# phase, and no rail hears of it.
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
        "round_executed": (RailPhase.EXECUTED,),
        "evidence_captured": (RailPhase.EVIDENCE_CAPTURED,),
        "verdict_recorded": (RailPhase.VERIFIED,),
        "diagnosed": (RailPhase.DIAGNOSED,),
        "dispatched": (RailPhase.DISPATCHED,),
        "task_finished": (RailPhase.TASK_FINISHED,),
    }
)


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
        record: For ``node_started`` and ``node_finished``, the execution record it is about
            (``node_finished`` carries it as it ended: node id, tool, final status).
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
