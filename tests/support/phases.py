"""The parcel task of the fold tests, with a history that leaves it in each phase.

See docs/design.md §5.1.

Every history holds revision 1 of ``PLAN``, a pending record r1 (node a) and a record r2 (node b)
whose outcome is unknown, so that an event refused in a phase is refused for its phase, not for a
missing record.
"""

from __future__ import annotations

import functools
from datetime import timedelta

from tests.support import builders
from tests.support.builders import T0, dispatched, finished

from pev.kernel import LocalReplan
from pev.ledger import (
    AwaitingReplan,
    CancelRequested,
    Dispatched,
    Event,
    ReplanStarted,
    RevisionKind,
    RoundExecuted,
    TaskPhase,
)
from pev.model import DeviceFailure, Effect, Plan, PlanNode, VerificationContract, VerificationMode

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "ship the parcel", ("parcel shipped",))
PLAN = Plan(
    "ship the parcel",
    (
        PlanNode("a", "look at the shelf", tool="look", effect=Effect.QUERY),
        PlanNode("b", "move the parcel", tool="move"),
        PlanNode("c", "report", tool="report", after=("a", "b")),
    ),
)
UNKNOWN_MOVE = DeviceFailure("b", "timed out", is_timeout=True, outcome_unknown=True)

# The parcel task's task_created and revision_started events.
created = functools.partial(builders.created, contract=CONTRACT, input={"parcel": 7})
revision = functools.partial(builders.revision, plan=PLAN)

EXECUTING: tuple[Event, ...] = (
    created(),
    revision(1),
    dispatched("r1", "a"),
    dispatched("r2", "b"),
    finished("r2", UNKNOWN_MOVE),
)
VERIFYING = (*EXECUTING, RoundExecuted(revision=1, executed_ok=False))
AWAITING_REPLAN = (
    *VERIFYING,
    Dispatched(revision=1, decision=LocalReplan(frozenset({"b"}))),
    AwaitingReplan(action=LocalReplan(frozenset({"b"})), deadline=T0 + timedelta(seconds=120)),
)
PLANNING = (*AWAITING_REPLAN, ReplanStarted(planning=RevisionKind.LOCAL, attempt=2))
CANCELLING = (*EXECUTING, CancelRequested(reason="operator"))

HISTORIES = {
    TaskPhase.PLANNING: PLANNING,
    TaskPhase.EXECUTING: EXECUTING,
    TaskPhase.VERIFYING: VERIFYING,
    TaskPhase.AWAITING_REPLAN: AWAITING_REPLAN,
    TaskPhase.CANCELLING: CANCELLING,
}
ACTIVE = frozenset(HISTORIES)
