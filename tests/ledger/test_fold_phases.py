"""The fold's transition table (docs/design.md §5.1, §5.2): which event each phase allows.

Also how a task starts and how it ends, and what the events that change no phase record.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from tests.support.builders import T0, TASK, evidence, fold
from tests.support.phases import (
    ACTIVE,
    AWAITING_REPLAN,
    CANCELLING,
    CONTRACT,
    ENDINGS,
    EVENTS,
    EXECUTING,
    HISTORIES,
    created,
    revision,
)

from pev.errors import StateError
from pev.kernel import STATUS_REASONS, LocalReplan, TaskStatus, TerminalReason
from pev.ledger import (
    GENESIS_HASH,
    CancelRequested,
    Event,
    EvidenceCaptured,
    LedgerEntry,
    RevisionKind,
    RoundExecuted,
    TaskFinished,
    TaskPhase,
    TaskState,
    apply,
    replay,
    seal,
)
from pev.ledger._phases import COMPENSATION_SETTLED_ON_RESUME, SETTLED_ON_RESUME


@dataclass(frozen=True)
class Row:
    """One event, the phases that allow it, and the phase it moves the task to."""

    event: Event
    allowed: frozenset[TaskPhase]
    moves_to: TaskPhase | None = None  # None: the phase stays as it was


# Where a compensation ends: before a revision dispatches (executing), while the task unwinds
# (compensating), and after a cancel cut in (cancelling); it is dispatched only in the first two.
COMPENSATION_ENDS = frozenset({TaskPhase.EXECUTING, TaskPhase.COMPENSATING, TaskPhase.CANCELLING})

# The transition table of the fold, one row per event kind (NodeFinished and CompensationFailed
# twice: live and resume). The events are the parcel task's (tests/support/phases.py); the phases
# are stated here, apart from the code's own tables.
TABLE = {
    "task_created": Row(EVENTS["task_created"], frozenset()),
    "replan_started": Row(
        EVENTS["replan_started"], frozenset({TaskPhase.AWAITING_REPLAN}), TaskPhase.PLANNING
    ),
    "revision_started": Row(
        EVENTS["revision_started"], frozenset({TaskPhase.PLANNING}), TaskPhase.EXECUTING
    ),
    "plan_rejected": Row(EVENTS["plan_rejected"], frozenset({TaskPhase.PLANNING})),
    "node_dispatched": Row(EVENTS["node_dispatched"], frozenset({TaskPhase.EXECUTING})),
    "node_progressed": Row(
        EVENTS["node_progressed"], frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING})
    ),
    "node_finished": Row(
        EVENTS["node_finished"], frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING})
    ),
    "node_finished_on_resume": Row(EVENTS[SETTLED_ON_RESUME], ACTIVE),
    "node_skipped": Row(
        EVENTS["node_skipped"], frozenset({TaskPhase.EXECUTING, TaskPhase.CANCELLING})
    ),
    "node_reused": Row(EVENTS["node_reused"], frozenset({TaskPhase.EXECUTING})),
    "effect_superseded": Row(EVENTS["effect_superseded"], frozenset({TaskPhase.EXECUTING})),
    "compensation_dispatched": Row(
        EVENTS["compensation_dispatched"],
        frozenset({TaskPhase.EXECUTING, TaskPhase.COMPENSATING}),
    ),
    "effect_compensated": Row(EVENTS["effect_compensated"], COMPENSATION_ENDS),
    "compensation_failed": Row(EVENTS["compensation_failed"], COMPENSATION_ENDS),
    "compensation_failed_on_resume": Row(EVENTS[COMPENSATION_SETTLED_ON_RESUME], ACTIVE),
    "unwind_started": Row(
        EVENTS["unwind_started"], ACTIVE - {TaskPhase.COMPENSATING}, TaskPhase.COMPENSATING
    ),
    "record_reconciled": Row(EVENTS["record_reconciled"], ACTIVE),
    "evidence_captured": Row(EVENTS["evidence_captured"], ACTIVE),
    "capture_failed": Row(EVENTS["capture_failed"], ACTIVE),
    "round_executed": Row(
        EVENTS["round_executed"], frozenset({TaskPhase.EXECUTING}), TaskPhase.VERIFYING
    ),
    "verdict_recorded": Row(EVENTS["verdict_recorded"], frozenset({TaskPhase.VERIFYING})),
    "diagnosed": Row(EVENTS["diagnosed"], frozenset({TaskPhase.VERIFYING})),
    "dispatched": Row(EVENTS["dispatched"], frozenset({TaskPhase.VERIFYING})),
    "awaiting_replan": Row(
        EVENTS["awaiting_replan"],
        frozenset({TaskPhase.VERIFYING, TaskPhase.PLANNING}),
        TaskPhase.AWAITING_REPLAN,
    ),
    # A task is asked to stop once, and one that unwinds its effects is already ending.
    "cancel_requested": Row(
        EVENTS["cancel_requested"],
        ACTIVE - {TaskPhase.CANCELLING, TaskPhase.COMPENSATING},
        TaskPhase.CANCELLING,
    ),
    "driver_started": Row(EVENTS["driver_started"], ACTIVE),
    "start_failed": Row(EVENTS["start_failed"], ACTIVE),
    "approval_requested": Row(
        EVENTS["approval_requested"], frozenset({TaskPhase.EXECUTING}), TaskPhase.AWAITING_APPROVAL
    ),
    "approved": Row(
        EVENTS["approved"], frozenset({TaskPhase.AWAITING_APPROVAL}), TaskPhase.EXECUTING
    ),
    "rejected": Row(
        EVENTS["rejected"], frozenset({TaskPhase.AWAITING_APPROVAL}), TaskPhase.PLANNING
    ),
    "task_finished": Row(EVENTS["task_finished"], ACTIVE, TaskPhase.FAILED),
}

CASES = [
    pytest.param(name, phase, id=f"{name}-in-{phase}")
    for name, phase in itertools.product(TABLE, HISTORIES)
]


def test_table_covers_every_event_kind() -> None:
    """The transition table has a row for every member of the Event union."""
    kinds = {row.event.kind for row in TABLE.values()}
    assert kinds == {member.kind for member in typing.get_args(Event)}


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_event_is_allowed_only_in_its_phases(name: str, phase: TaskPhase) -> None:
    """An event folds in the phases its row allows and is a StateError in every other."""
    row = TABLE[name]
    state = fold(*HISTORIES[phase])
    assert state.phase is phase
    if phase in row.allowed:
        after = apply(state, row.event)
        assert after.phase is (row.moves_to or phase)
        assert after.event_count == state.event_count + 1
    else:
        with pytest.raises(StateError) as caught:
            apply(state, row.event)
        assert caught.value.task_id == TASK
        assert caught.value.state == phase


@pytest.mark.parametrize("name", TABLE)
@pytest.mark.parametrize("terminal", ENDINGS)
def test_terminal_state_is_final(name: str, terminal: TaskPhase) -> None:
    """Any event after task_finished is a StateError, whatever the ending."""
    state = fold(*EXECUTING, ENDINGS[terminal])
    assert state.phase is terminal
    assert state.terminal
    with pytest.raises(StateError, match="has ended"):
        apply(state, TABLE[name].event)


def test_refused_event_leaves_the_state_untouched() -> None:
    """A refused event raises and the state it was applied to is unchanged (values are frozen)."""
    state = fold(*EXECUTING)
    before = fold(*EXECUTING)
    with pytest.raises(StateError):
        apply(state, RoundExecuted(revision=2, executed_ok=True))
    assert state == before


def test_ledger_starts_with_task_created() -> None:
    """A first event other than task_created is a StateError."""
    with pytest.raises(StateError, match="must start with task_created"):
        apply(None, revision(1))


def test_empty_ledger_has_no_task() -> None:
    """Replaying no events is a StateError, not an empty state."""
    with pytest.raises(StateError, match="empty ledger"):
        replay([])


def test_task_is_created_once() -> None:
    """A second task_created is refused."""
    with pytest.raises(StateError, match="created once"):
        fold(created(), created())


def test_created_task_is_planning_its_initial_plan() -> None:
    """task_created starts the task planning an initial plan, with nothing spent."""
    state = fold(created())
    assert (state.phase, state.planning, state.planner_calls, state.replans_used) == (
        TaskPhase.PLANNING,
        RevisionKind.INITIAL,
        1,
        0,
    )
    assert state.contract == CONTRACT
    assert state.revision is None


def test_entry_times_stamp_the_state() -> None:
    """Folding stored entries records the creation time and the time of the last event."""
    events = (created(), revision(1))
    first = seal(TASK, events[:1], after_seq=0, prev_hash=GENESIS_HASH, at=T0)
    later = T0 + timedelta(seconds=5)
    second = seal(TASK, events[1:], after_seq=1, prev_hash=first[-1].hash, at=later)
    entries: tuple[LedgerEntry, ...] = (*first, *second)
    state = replay(entries)
    assert (state.created_at, state.updated_at) == (T0, later)


def test_revision_starts_at_its_own_entry_time() -> None:
    """A revision's started_at is the time of its revision_started entry, not the one before."""
    later = T0 + timedelta(seconds=5)
    state = apply(apply(None, created(), at=T0), revision(1), at=later)
    assert state.revision is not None
    assert state.revision.started_at == later


# --- task_finished ----------------------------------------------------------------------------

ALL_OUTCOMES = list(itertools.product(TaskStatus, TerminalReason))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(status, reason, id=f"{status}-{reason}")
        for status, reason in ALL_OUTCOMES
        if reason not in STATUS_REASONS[status]
    ],
)
def test_task_finished_refuses_a_status_reason_pair_the_kernel_forbids(
    status: TaskStatus, reason: TerminalReason
) -> None:
    """task_finished with a (status, reason) pair outside STATUS_REASONS is a StateError."""
    with pytest.raises(StateError, match="cannot carry reason"):
        fold(*EXECUTING, TaskFinished(status=status, reason=reason))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(status, reason, id=f"{status}-{reason}")
        for status, reason in ALL_OUTCOMES
        if reason in STATUS_REASONS[status]
    ],
)
def test_task_finished_ends_in_the_phase_of_its_status(
    status: TaskStatus, reason: TerminalReason
) -> None:
    """An allowed task_finished ends the task in the phase named like its status."""
    ending = TaskFinished(status=status, reason=reason)
    state = fold(*EXECUTING, ending)
    assert state.phase == TaskPhase(status.value)
    assert state.finished == ending
    assert state.planning is None


# --- what the other events record -------------------------------------------------------------

RECORDED: list[tuple[str, Callable[[TaskState], tuple[object, ...]]]] = [
    ("plan_rejected", lambda s: s.rejections),
    ("node_skipped", lambda s: s.skipped),
    ("capture_failed", lambda s: s.capture_failures),
    ("round_executed", lambda s: s.rounds),
    ("verdict_recorded", lambda s: s.verdicts),
    ("diagnosed", lambda s: s.diagnoses),
    ("dispatched", lambda s: s.decisions),
]


@pytest.mark.parametrize(("name", "field"), RECORDED, ids=[name for name, _ in RECORDED])
def test_event_is_appended_to_its_history(
    name: str, field: Callable[[TaskState], tuple[object, ...]]
) -> None:
    """Each of these events is kept, as given, at the end of its history in the state."""
    row = TABLE[name]
    phase = next(iter(sorted(row.allowed)))
    state = apply(fold(*HISTORIES[phase]), row.event)
    assert field(state)[-1] == row.event


def test_evidence_captured_keeps_the_observation() -> None:
    """evidence_captured appends the observation itself."""
    state = fold(*EXECUTING, EvidenceCaptured(evidence=evidence()))
    assert state.evidence == (evidence(),)


def test_evidence_ids_are_unique() -> None:
    """Capturing the same evidence id twice is refused."""
    again = EvidenceCaptured(evidence=evidence())
    with pytest.raises(StateError, match="already captured"):
        fold(*EXECUTING, again, again)


def test_awaiting_replan_keeps_action_and_deadline() -> None:
    """awaiting_replan records the replan waited for and its deadline, and stops planning."""
    state = fold(*AWAITING_REPLAN)
    assert state.replan_action == LocalReplan(frozenset({"b"}))
    assert state.replan_deadline == T0 + timedelta(seconds=120)
    assert state.planning is None


def test_cancel_requested_is_recorded_once() -> None:
    """cancel_requested keeps its reason; a second request is refused."""
    state = fold(*CANCELLING)
    assert (state.cancel_requested, state.cancel_reason) == (True, "operator")
    with pytest.raises(StateError, match="already requested"):
        apply(state, CancelRequested())
