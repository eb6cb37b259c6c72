"""The fold of revisions: numbering, kinds, lineages, and the replan budget.

See docs/design.md §5.2.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.support.builders import T0, dispatched, finished, fold
from tests.support.phases import PLAN, PLANNING, VERIFYING, created, revision

from pev.errors import StateError
from pev.kernel import LocalReplan
from pev.ledger import (
    AwaitingReplan,
    Event,
    PlanRejected,
    ReplanStarted,
    RevisionKind,
    RoundExecuted,
    TaskPhase,
    TaskState,
    apply,
    lineage_results,
)
from pev.model import VerifierFailure


def test_first_revision_is_number_one() -> None:
    """The first revision must be number 1."""
    with pytest.raises(StateError, match="next revision is number 1"):
        fold(created(), revision(2))


@pytest.mark.parametrize("number", [1, 3, 4], ids=["repeat", "gap", "far"])
def test_revision_numbers_grow_by_one(number: int) -> None:
    """After revision 1, only number 2 may start; a repeat or a gap is refused."""
    with pytest.raises(StateError, match="next revision is number 2"):
        fold(*PLANNING, revision(number, RevisionKind.LOCAL))


def test_revision_kind_must_be_what_the_planner_was_asked_for() -> None:
    """A global revision while a local one was asked for is refused."""
    with pytest.raises(StateError, match="asked for a local plan"):
        fold(*PLANNING, revision(2, RevisionKind.GLOBAL))


def test_local_revision_needs_an_earlier_revision() -> None:
    """A local revision cannot be the first, even when a local replan was asked for."""
    history = (
        created(),
        PlanRejected(planning=RevisionKind.INITIAL, attempt=1, problems=("no nodes",)),
        AwaitingReplan(action=LocalReplan(frozenset({"b"})), deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=RevisionKind.LOCAL, attempt=2),
    )
    with pytest.raises(StateError, match="needs an earlier revision"):
        fold(*history, revision(1, RevisionKind.LOCAL))


def test_local_revision_redo_must_name_plan_nodes() -> None:
    """A local revision whose redo set names nodes outside its plan is refused."""
    with pytest.raises(StateError, match="not in the plan"):
        fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"zz"})))


def test_revision_clears_the_replan_it_answers() -> None:
    """A started revision clears the planning kind, the replan action and its deadline."""
    state = fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})))
    assert (state.planning, state.replan_action, state.replan_deadline) == (None, None, None)
    assert [r.number for r in state.revisions] == [1, 2]
    assert state.plan == PLAN


def test_local_revision_keeps_the_lineage() -> None:
    """A local revision belongs to the lineage of the revision before it."""
    state = fold(*PLANNING, revision(2, RevisionKind.LOCAL, redo=frozenset({"b"})))
    assert [r.lineage for r in state.revisions] == [1, 1]


def test_global_revision_starts_a_fresh_lineage() -> None:
    """A global revision's lineage starts at its own number."""
    global_planning = (
        *VERIFYING,
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=RevisionKind.GLOBAL, attempt=2),
    )
    state = fold(*global_planning, revision(2, RevisionKind.GLOBAL))
    assert [r.lineage for r in state.revisions] == [1, 2]


def _failed_then_replanned(action: LocalReplan | None, kind: RevisionKind) -> TaskState:
    """Node b fails in revision 1; revision 2 is planned but b is not dispatched again yet."""
    return fold(
        created(),
        revision(1),
        dispatched("r1", "b"),
        finished("r1", VerifierFailure("b", "wrong shelf")),
        RoundExecuted(revision=1, executed_ok=False),
        AwaitingReplan(action=action, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=kind, attempt=2),
        revision(2, kind, redo=frozenset({"b"}) if action else frozenset()),
    )


def test_global_replan_forgets_old_failures_of_reused_node_ids() -> None:
    """After a global revision, lineage_results no longer holds the old failure of node b."""
    state = _failed_then_replanned(None, RevisionKind.GLOBAL)
    assert "b" not in lineage_results(state)


def test_local_replan_remembers_failures_until_the_node_is_redone() -> None:
    """After a local revision, lineage_results still holds node b's failure from revision 1."""
    state = _failed_then_replanned(LocalReplan(frozenset({"b"})), RevisionKind.LOCAL)
    assert lineage_results(state)["b"] == VerifierFailure("b", "wrong shelf")


# --- the replan budget ------------------------------------------------------------------------


def _rejected(attempt: int, planning: RevisionKind = RevisionKind.INITIAL) -> tuple[Event, ...]:
    return (
        PlanRejected(planning=planning, attempt=attempt, problems=("no nodes",)),
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
    )


def test_replan_started_counts_replans_and_planner_calls() -> None:
    """Each replan_started spends one replan and starts one more planner call."""
    state = fold(
        created(),
        *_rejected(1),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=2),
        *_rejected(2),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=3),
    )
    assert (state.replans_used, state.planner_calls) == (2, 3)
    assert (state.phase, state.planning) == (TaskPhase.PLANNING, RevisionKind.INITIAL)
    assert len(state.rejections) == 2


def test_plan_rejected_spends_nothing_by_itself() -> None:
    """A rejection alone does not spend a replan; the replan_started after it does."""
    state = fold(created(), *_rejected(1))
    assert (state.replans_used, state.phase) == (0, TaskPhase.AWAITING_REPLAN)


def test_fold_refuses_a_replan_beyond_the_budget() -> None:
    """With max_replans=1 a second replan_started is a StateError."""
    history = (
        created(max_replans=1),
        *_rejected(1),
        ReplanStarted(planning=RevisionKind.INITIAL, attempt=2),
        *_rejected(2),
    )
    state = fold(*history)
    with pytest.raises(StateError, match="replans are spent"):
        apply(state, ReplanStarted(planning=RevisionKind.INITIAL, attempt=3))


def test_zero_budget_allows_no_replan() -> None:
    """With max_replans=0 even the first replan_started is refused."""
    state = fold(created(max_replans=0), *_rejected(1))
    with pytest.raises(StateError, match="all 0 replans are spent"):
        apply(state, ReplanStarted(planning=RevisionKind.INITIAL, attempt=2))
