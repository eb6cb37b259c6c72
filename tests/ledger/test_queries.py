"""Facts derived from a task's state: lineage, outputs, references, unknown and unfinished work."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from tests.support import builders
from tests.support.builders import T0, captured, contract, fold, ran, replanned, revision

from pev.ledger import (
    Event,
    NodeProgressed,
    RecordReconciled,
    RevisionKind,
    TaskState,
    executed_ok,
    known_refs,
    lineage_records,
    lineage_results,
    missing_evidence,
    outputs,
    unfinished_records,
    unsettled_unknown_actions,
)
from pev.model import (
    DeviceFailure,
    Effect,
    EvidencePhase,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    VerificationMode,
    VerifierFailure,
)

PLAN = Plan(
    "stack the blocks",
    (
        PlanNode("see", "look at the table", tool="camera", effect=Effect.QUERY),
        PlanNode("lift", "lift the red block", tool="arm", after=("see",)),
        PlanNode("place", "place it on the blue one", tool="arm", after=("lift",)),
    ),
)
NEW_PLAN = Plan(
    "stack the blocks",
    (
        PlanNode("lift", "lift the red block by its edge", tool="arm"),
        PlanNode("place", "place it", tool="arm", after=("lift",)),
    ),
)
UNKNOWN = DeviceFailure("lift", "timed out", is_timeout=True, outcome_unknown=True)
CONTRACT = contract(VerificationMode.RECOVERY, "stack the blocks", ("red is on blue",))
# The stacking task's task_created and revision_started events.
created = functools.partial(builders.created, contract=CONTRACT, input="stack")
rev = functools.partial(revision, plan=PLAN)


def first_round() -> tuple[Event, ...]:
    """Revision 1: see succeeded, lift failed a check, place succeeded (on a bad lift)."""
    return (
        created(),
        rev(1, RevisionKind.INITIAL),
        *ran("r1", "see", Success({"blocks": 2}), effect=Effect.QUERY),
        *ran("r2", "lift", VerifierFailure("lift", "held upside down")),
        *ran("r3", "place", Success("placed")),
    )


def after_local_replan() -> tuple[Event, ...]:
    """Revision 2 redoes lift and place; both succeed."""
    return (
        *first_round(),
        *replanned(2, RevisionKind.LOCAL, plan=PLAN, redo=frozenset({"lift", "place"})),
        *ran("r4", "lift", Success("lifted"), revision=2),
        *ran("r5", "place", Success("stacked"), revision=2),
    )


def after_global_replan() -> tuple[Event, ...]:
    """Revision 2 is a fresh plan; only lift has run again, and it succeeded."""
    return (
        *first_round(),
        *replanned(2, RevisionKind.GLOBAL, plan=NEW_PLAN),
        *ran("r4", "lift", Success("lifted by the edge"), revision=2),
    )


# --- lineage ----------------------------------------------------------------------------------


def test_lineage_is_empty_before_any_revision() -> None:
    """A task with no revision has no lineage records or results."""
    state = fold(created())
    assert (lineage_records(state), lineage_results(state)) == ((), {})


def test_local_lineage_spans_both_revisions() -> None:
    """After a local replan the lineage holds the records of revisions 1 and 2."""
    state = fold(*after_local_replan())
    assert [r.id for r in lineage_records(state)] == ["r1", "r2", "r3", "r4", "r5"]


def test_global_lineage_starts_at_the_global_revision() -> None:
    """After a global replan the lineage holds only the new revision's records."""
    state = fold(*after_global_replan())
    assert [r.id for r in lineage_records(state)] == ["r4"]


def test_lineage_results_take_the_latest_result_per_node() -> None:
    """A node redone in a local revision is represented by its latest result."""
    state = fold(*after_local_replan())
    assert lineage_results(state) == {
        "see": Success({"blocks": 2}),
        "lift": Success("lifted"),
        "place": Success("stacked"),
    }


def test_lineage_results_after_a_global_replan_forget_the_old_failure() -> None:
    """A reused node id after a global replan never inherits its old failure."""
    state = fold(*after_global_replan())
    assert lineage_results(state) == {"lift": Success("lifted by the edge")}


def test_lineage_results_skip_records_without_a_result() -> None:
    """A record that is still pending contributes no result."""
    state = fold(created(), rev(1, RevisionKind.INITIAL), *ran("r1", "see", None))
    assert lineage_results(state) == {}


def test_reconciliation_overrides_an_unknown_result() -> None:
    """A record_reconciled result stands in for the unknown record's result."""
    state = fold(
        created(),
        rev(1, RevisionKind.INITIAL),
        *ran("r1", "lift", UNKNOWN),
        RecordReconciled(record_id=RecordId("r1"), result=Success("it did lift")),
    )
    assert lineage_results(state) == {"lift": Success("it did lift")}


# --- executed_ok and outputs ------------------------------------------------------------------


def test_executed_ok_is_false_without_a_plan() -> None:
    """A task with no accepted plan has not executed."""
    assert executed_ok(fold(created())) is False


def test_executed_ok_is_false_with_a_failed_node() -> None:
    """A node whose latest result is a failure makes executed_ok false."""
    assert executed_ok(fold(*first_round())) is False


def test_executed_ok_is_false_with_a_node_not_run() -> None:
    """A node of the plan without any result makes executed_ok false."""
    state = fold(*after_global_replan())
    assert executed_ok(state) is False


def test_executed_ok_counts_kept_successes_of_the_lineage() -> None:
    """After a local replan, successes kept from revision 1 count (see was not redone)."""
    assert executed_ok(fold(*after_local_replan())) is True


def test_outputs_hold_succeeded_nodes_of_the_current_plan() -> None:
    """outputs maps each succeeded node of the current plan to its value; failures are absent."""
    assert outputs(fold(*first_round())) == {"see": {"blocks": 2}, "place": "placed"}


def test_outputs_after_a_global_replan_ignore_the_old_plan() -> None:
    """Nodes of an earlier lineage (see) are not outputs of the new plan."""
    assert outputs(fold(*after_global_replan())) == {"lift": "lifted by the edge"}


def test_outputs_are_empty_without_a_plan() -> None:
    """A task with no accepted plan has no outputs."""
    assert outputs(fold(created())) == {}


# --- references -------------------------------------------------------------------------------


_evidence = functools.partial(captured, source="camera", payload={"seen": True})


def test_known_refs_name_every_observation_and_record() -> None:
    """known_refs holds evidence:<id> for observations and record:<id> for records."""
    state = fold(*first_round(), _evidence("e1", EvidencePhase.BEFORE))
    assert known_refs(state) == {"evidence:e1", "record:r1", "record:r2", "record:r3"}


def test_known_refs_of_a_new_task_are_empty() -> None:
    """A task with no evidence and no records has no references."""
    assert known_refs(fold(created())) == frozenset()


# --- unknown and unfinished records -----------------------------------------------------------


def test_unsettled_unknown_actions_lists_unknown_action_records() -> None:
    """An action record that ended unknown and was not reconciled is listed."""
    state = fold(created(), rev(1, RevisionKind.INITIAL), *ran("r1", "lift", UNKNOWN))
    assert [r.id for r in unsettled_unknown_actions(state)] == ["r1"]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(ran("r1", "see", UNKNOWN, effect=Effect.QUERY), id="query"),
        pytest.param(ran("r1", "lift", DeviceFailure("lift", "offline")), id="failed"),
        pytest.param(ran("r1", "lift", None), id="pending"),
        pytest.param(
            (
                *ran("r1", "lift", UNKNOWN),
                RecordReconciled(record_id=RecordId("r1"), result=Success("lifted")),
            ),
            id="reconciled",
        ),
    ],
)
def test_unsettled_unknown_actions_leaves_out_settled_or_harmless_records(
    events: tuple[Event, ...],
) -> None:
    """Queries, known failures, unfinished and reconciled records are not unsettled actions."""
    state = fold(created(), rev(1, RevisionKind.INITIAL), *events)
    assert unsettled_unknown_actions(state) == ()


def test_unsettled_unknown_actions_span_lineages() -> None:
    """An unknown action of an earlier lineage still blocks a blind repeat after a global replan."""
    state = fold(
        created(),
        rev(1, RevisionKind.INITIAL),
        *ran("r1", "lift", UNKNOWN),
        *replanned(2, RevisionKind.GLOBAL, plan=NEW_PLAN),
    )
    assert [r.id for r in unsettled_unknown_actions(state)] == ["r1"]


def test_unfinished_records_are_those_not_terminal() -> None:
    """Pending, accepted and running records are unfinished; terminal ones are not."""
    state = fold(
        created(),
        rev(1, RevisionKind.INITIAL),
        *ran("r1", "see", None, effect=Effect.QUERY),
        *ran("r2", "lift", None),
        NodeProgressed(record_id=RecordId("r2"), status=RecordStatus.ACCEPTED, at=T0),
        *ran("r3", "place", None),
        NodeProgressed(record_id=RecordId("r3"), status=RecordStatus.RUNNING, at=T0),
        *ran("r4", "place", Success("placed")),
    )
    assert [(r.id, r.status) for r in unfinished_records(state)] == [
        ("r1", RecordStatus.PENDING),
        ("r2", RecordStatus.ACCEPTED),
        ("r3", RecordStatus.RUNNING),
    ]


# --- missing evidence -------------------------------------------------------------------------


def _with_evidence(*captures: Event, required: tuple[str, ...] = ("state", "image")) -> TaskState:
    required_contract = dataclasses.replace(CONTRACT, required_evidence=required)
    return fold(created(contract=required_contract), rev(1, RevisionKind.INITIAL), *captures)


def test_missing_evidence_lists_required_kinds_not_captured() -> None:
    """Every required kind without a fresh after observation is missing, in contract order."""
    assert missing_evidence(_with_evidence(), 1) == ("state", "image")


def test_after_observation_of_the_revision_satisfies_its_kind() -> None:
    """An after observation of the revision removes its kind from the missing ones."""
    state = _with_evidence(_evidence("e1", EvidencePhase.AFTER))
    assert missing_evidence(state, 1) == ("image",)


@pytest.mark.parametrize(
    "capture",
    [
        pytest.param(_evidence("e1", EvidencePhase.BEFORE), id="before-phase"),
        pytest.param(_evidence("e1", EvidencePhase.AFTER, revision=2), id="other-revision"),
    ],
)
def test_stale_observation_does_not_satisfy_required_evidence(capture: Event) -> None:
    """A before observation, or one of another revision, is not fresh evidence."""
    assert missing_evidence(_with_evidence(capture), 1) == ("state", "image")


def test_no_required_evidence_means_none_missing() -> None:
    """A contract that requires no evidence never misses any."""
    assert missing_evidence(_with_evidence(required=()), 1) == ()
