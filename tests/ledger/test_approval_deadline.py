"""The approval deadline's instant (docs/control.md, "Deadlines and cancelling").

A revision not decided in time ends the task ``failed``/``approval_expired``. "In time" means
before the deadline: from its very instant on it has passed, as for every deadline pev keeps, so
an approval that arrives exactly at the deadline is too late.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from tests.support.builders import T0, created, fold, revision

from pev.errors import StateError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    ApprovalRequested,
    TaskFinished,
    TaskPhase,
    TaskState,
    apply,
    approval_request,
    approve,
    expire,
)
from pev.model import Plan, PlanNode
from pev.policy import Approval, RecoveryPolicy

PLAN = Plan("pay", (PlanNode("pay", "pay the supplier", tool="pay"),))
TIMEOUT = timedelta(seconds=600)
DEADLINE = T0 + TIMEOUT
TICK = timedelta(microseconds=1)  # the finest step a datetime takes


def awaiting() -> TaskState:
    """A task whose revision 1 awaits approval until ``DEADLINE``."""
    return fold(
        created(approval="actions", approval_timeout_s=TIMEOUT.total_seconds()),
        revision(1, plan=PLAN),
        ApprovalRequested(revision=1, deadline=DEADLINE, actions=("pay",)),
    )


def test_the_deadline_counts_from_the_revisions_start() -> None:
    """approval_timeout_s after the revision began: that is the deadline recorded."""
    policy = RecoveryPolicy(approval=Approval.ACTIONS, approval_timeout_s=TIMEOUT.total_seconds())
    request = approval_request(policy, revision=1, actions=("pay",), now=T0)
    assert request == ApprovalRequested(revision=1, deadline=DEADLINE, actions=("pay",))


@pytest.mark.parametrize(
    ("now", "expired"),
    [
        pytest.param(DEADLINE - TICK, False, id="just-before"),
        pytest.param(DEADLINE, True, id="at-the-instant"),
        pytest.param(DEADLINE + TICK, True, id="just-after"),
    ],
)
def test_the_approval_expires_from_the_deadlines_very_instant(now: datetime, expired: bool) -> None:
    """Before the deadline nothing ends; at it and after, failed/approval_expired."""
    events = expire(awaiting(), now=now)
    if not expired:
        assert events == ()
        return
    [finished] = events
    assert isinstance(finished, TaskFinished)
    assert (finished.status, finished.reason) == (
        TaskStatus.FAILED,
        TerminalReason.APPROVAL_EXPIRED,
    )
    assert f"by {DEADLINE.isoformat()}" in finished.detail


def test_an_approval_just_before_the_deadline_continues_the_revision() -> None:
    """One tick before the deadline, an approval is still in time."""
    state = awaiting()
    assert expire(state, now=DEADLINE - TICK) == ()
    for event in approve(state, by="ana", note="", revision=1):
        state = apply(state, event)
    assert state.awaiting is None
    assert state.finished is None
    assert state.phase is TaskPhase.EXECUTING


def test_an_approval_at_the_deadline_is_too_late() -> None:
    """At the instant the task has ended: the approval that follows is refused."""
    state = awaiting()
    for event in expire(state, now=DEADLINE):
        state = apply(state, event)
    assert state.finished is not None
    assert state.finished.reason is TerminalReason.APPROVAL_EXPIRED
    with pytest.raises(StateError):
        approve(state, by="ana", note="", revision=1)
