"""The fold's phase rule is data: every event kind in every phase, against the tables.

``ALLOWED_PHASES`` says where each event kind may be folded and ``LEADS_TO`` where it moves the
task; here each event is applied in each of the ten phases, and ``apply`` must accept it exactly
where its row says, move the task exactly where the tables say, and refuse it everywhere else.
The state machine's steps are checked against the same rows.
"""

from __future__ import annotations

import itertools
import typing

import pytest
from tests.support.builders import T0, TASK
from tests.support.phases import ENDINGS, EVENTS, EXECUTING
from tests.support.phases import HISTORIES as LIVE_HISTORIES

from pev.errors import StateError
from pev.kernel import Finish, TaskStatus, TerminalReason
from pev.ledger import (
    CancelRequested,
    Dispatched,
    Event,
    PlanRejected,
    ReplanStarted,
    RevisionKind,
    TaskFinished,
    TaskPhase,
    TaskState,
    apply,
    begin_replan,
    dispatch,
    reject_plan,
    replay,
    request_cancel,
)
from pev.ledger._phases import (
    ALLOWED_PHASES,
    COMPENSATION_SETTLED_ON_RESUME,
    LEADS_TO,
    PHASE_OF_STATUS,
    SETTLED_ON_RESUME,
    TERMINAL_PHASES,
    allowed,
    rule_of,
)

# The parcel task (tests/support/phases.py) in each of the ten phases: its histories of the live
# phases, and one that ends in each terminal phase. Each holds revision 1 of its plan, a pending
# record r1, a record r2 whose outcome is unknown and two effects (one whose compensation is
# pending), so that an event refused below is refused by the phase rule, not for a missing record,
# effect or revision.
HISTORIES: dict[TaskPhase, tuple[Event, ...]] = {
    **LIVE_HISTORIES,
    **{phase: (*EXECUTING, ending) for phase, ending in ENDINGS.items()},
}


def state_in(phase: TaskPhase) -> TaskState:
    state = replay(HISTORIES[phase])
    assert state.phase is phase
    return state


CASES = [
    pytest.param(rule, phase, id=f"{rule}-in-{phase}")
    for rule, phase in itertools.product(ALLOWED_PHASES, TaskPhase)
]


# --- the tables -------------------------------------------------------------------------------


def test_the_tables_have_a_row_for_every_event_kind() -> None:
    """ALLOWED_PHASES has one row per member of the Event union, plus the two resume rows."""
    kinds = {member.kind for member in typing.get_args(Event)}
    assert set(ALLOWED_PHASES) == kinds | {SETTLED_ON_RESUME, COMPENSATION_SETTLED_ON_RESUME}
    assert set(EVENTS) == set(ALLOWED_PHASES)
    assert {rule_of(event) for event in EVENTS.values()} == set(ALLOWED_PHASES)


def test_a_terminal_phase_allows_nothing() -> None:
    """No row names a terminal phase, and task_created's row names no phase at all."""
    for phases in ALLOWED_PHASES.values():
        assert not phases & TERMINAL_PHASES
    assert ALLOWED_PHASES["task_created"] == frozenset()


def test_an_event_only_leads_to_a_phase_from_where_it_is_allowed() -> None:
    """Every event that moves the task has a row, and none moves it to a terminal phase."""
    assert set(LEADS_TO) <= set(ALLOWED_PHASES)
    assert not set(LEADS_TO.values()) & TERMINAL_PHASES
    assert set(PHASE_OF_STATUS) == set(TaskStatus)
    assert set(PHASE_OF_STATUS.values()) == TERMINAL_PHASES


# --- apply against the tables -----------------------------------------------------------------


@pytest.mark.parametrize(("rule", "phase"), CASES)
def test_apply_accepts_an_event_exactly_where_its_row_allows(rule: str, phase: TaskPhase) -> None:
    """Allowed: it folds and moves the task where LEADS_TO says. Elsewhere: StateError."""
    state = state_in(phase)
    event = EVENTS[rule]
    if allowed(phase, rule):
        after = apply(state, event)
        if isinstance(event, TaskFinished):
            expected = PHASE_OF_STATUS[event.status]
        else:
            expected = LEADS_TO.get(rule, phase)
        assert after.phase is expected
        assert after.event_count == state.event_count + 1
    else:
        with pytest.raises(StateError) as caught:
            apply(state, event)
        assert caught.value.task_id == TASK
        assert caught.value.state == phase
        assert f"not allowed in phase {phase}" in str(caught.value)


# --- the machine asks the same rows -----------------------------------------------------------


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_begin_replan_refuses_where_replan_started_is_not_allowed(phase: TaskPhase) -> None:
    """Valve one is the replan_started row: StateError, naming the phase, wherever it says no."""
    state = state_in(phase)
    if allowed(phase, ReplanStarted.kind):
        assert begin_replan(state, now=T0) == (
            ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
        )
    else:
        with pytest.raises(StateError, match=f"is {phase}, not awaiting_replan") as caught:
            begin_replan(state, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_reject_plan_refuses_where_plan_rejected_is_not_allowed(phase: TaskPhase) -> None:
    """A plan can be rejected exactly where the plan_rejected row allows it."""
    state = state_in(phase)
    if allowed(phase, PlanRejected.kind):
        events = reject_plan(state, problems=("x",), plan=None, now=T0)
        assert isinstance(events[0], PlanRejected)
    else:
        with pytest.raises(StateError, match="only a plan being made") as caught:
            reject_plan(state, problems=("x",), plan=None, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_dispatch_refuses_where_dispatched_is_not_allowed(phase: TaskPhase) -> None:
    """A decision can be dispatched exactly where the dispatched row allows it."""
    state = state_in(phase)
    decision = Finish(TaskStatus.FAILED, TerminalReason.VERIFICATION_FAILED)
    if allowed(phase, Dispatched.kind):
        assert isinstance(dispatch(state, decision, now=T0)[0], Dispatched)
    else:
        with pytest.raises(StateError, match="decisions follow verification") as caught:
            dispatch(state, decision, now=T0)
        assert caught.value.state == phase


@pytest.mark.parametrize("phase", list(TaskPhase))
def test_request_cancel_writes_only_where_cancel_requested_is_allowed(phase: TaskPhase) -> None:
    """Cancelling writes nothing where the cancel_requested row says no; what it writes folds."""
    state = state_in(phase)
    events = request_cancel(state, reason="stop")
    assert bool(events) is allowed(phase, CancelRequested.kind)
    for event in events:
        state = apply(state, event)
