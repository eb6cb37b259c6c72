"""The fold of a task's effects (docs/design.md §4.5, "Effects happen once").

An action record that succeeded, ended ``unknown`` or was reconciled is an effect of the task; a
later revision may reuse it, supersede it or compensate it, and the fold refuses what would break
the rules. The story: a letter is mailed to ada (node ``mail``, record r1) in each of the ways it
can end, then revisions reuse, supersede or undo that effect.
"""

from __future__ import annotations

import functools
import itertools

import pytest
from tests.support import builders
from tests.support.builders import (
    T0,
    TASK,
    compensated,
    compensating,
    compensation_failed,
    fold,
    ran,
    replanned,
    reused,
)

from pev.errors import StateError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    EffectStatus,
    EffectSuperseded,
    Event,
    NodeFinished,
    RecordReconciled,
    RevisionKind,
    TaskEffect,
    TaskPhase,
    UnwindStarted,
    call_name,
    effect_key,
    effects_before,
    lineage_results,
)
from pev.ledger._queries import node_standings
from pev.model import (
    DeviceFailure,
    Effect,
    JsonObject,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    VerifierFailure,
    digest,
)

PLAN = Plan(
    "send the letter",
    (
        PlanNode("look", "read the address book", tool="book", effect=Effect.QUERY),
        PlanNode("mail", "mail the letter to ada", tool="post", args={"to": "ada"}),
        PlanNode("ring", "ring ada", tool="phone", args={"to": "ada"}),
        PlanNode("again", "mail the letter to ada", tool="post", args={"to": "ada"}),
        PlanNode("note", "mail what the book says", tool="post", args={"to": {"$ref": "look"}}),
        # Nodes without a tool: each is a call of its own.
        PlanNode("sign", "sign the letter"),
        PlanNode("seal", "seal the letter"),
    ),
)
NODES = {node.id: node for node in PLAN.nodes}
LOST = DeviceFailure("mail", "timed out", is_timeout=True, outcome_unknown=True)
R1 = RecordId("r1")

created = functools.partial(builders.created, input="send the letter")
START = (created(), builders.revision(1, plan=PLAN))


def sent(
    rid: str,
    node: str,
    result: NodeResult | None,
    *,
    occurrence: int | None = 1,
    revision: int = 1,
) -> tuple[Event, ...]:
    """Node ``node`` of PLAN dispatched as record ``rid`` and ended with ``result``.

    With ``occurrence`` None the record is one written before records kept their occurrence
    and args (and its key is the record's own).
    """
    spec = NODES[node]
    args_digest = digest(spec.args)
    kept = {}
    if occurrence is not None:
        kept = {
            "occurrence": occurrence,
            "args": spec.args,
            "idempotency_key": effect_key(
                TASK, call_name(spec.tool, node), args_digest, occurrence
            ),
        }
    return ran(
        rid,
        node,
        result,
        tool=spec.tool,
        args_digest=args_digest,
        effect=spec.effect or Effect.ACTION,
        revision=revision,
        **kept,
    )


def later(
    number: int, kind: RevisionKind = RevisionKind.GLOBAL, redo: frozenset[str] = frozenset()
) -> tuple[Event, ...]:
    """Replan into revision ``number`` of PLAN (global unless ``kind`` says otherwise)."""
    return replanned(number, kind, plan=PLAN, redo=redo)


# Record r1 (node mail) in each way an action can end, and what became of it since.
SUCCEEDED = (*START, *sent("r1", "mail", Success("posted")))
UNKNOWN = (*START, *sent("r1", "mail", LOST))
# A crash left r1 running; on resume it is settled unknown, with no result.
SETTLED = (
    *START,
    *sent("r1", "mail", None),
    NodeFinished(
        record_id=R1, status=RecordStatus.UNKNOWN, result=None, at=T0, settled_on_resume=True
    ),
)
DONE = (*UNKNOWN, RecordReconciled(record_id=R1, result=Success("it was posted")))
NOT_DONE = (*UNKNOWN, RecordReconciled(record_id=R1, result=DeviceFailure("mail", "never sent")))
UNDOING = (*SUCCEEDED, compensating("r1", "u1", "mail"))
COMPENSATED = (*UNDOING, compensated("r1", "u1"))
UNDO_FAILED = (*UNDOING, compensation_failed("r1", "u1", DeviceFailure("mail", "already read")))
UNDO_UNKNOWN = (
    *UNDOING,
    compensation_failed("r1", "u1", None, status=RecordStatus.UNKNOWN, settled_on_resume=True),
)
QUERIED = (*START, *sent("r1", "look", Success({"ada": "home"}), occurrence=None))

HISTORIES = {
    "succeeded": SUCCEEDED,
    "unknown": UNKNOWN,
    "settled_on_resume": SETTLED,
    "done": DONE,
    "not_done": NOT_DONE,
    "undoing": UNDOING,
    "compensated": COMPENSATED,
    "undo_failed": UNDO_FAILED,
    "undo_unknown": UNDO_UNKNOWN,
    "query": QUERIED,
}


def params(*names: str) -> list[object]:
    """The histories named, as test parameters."""
    return [pytest.param(HISTORIES[name], id=name) for name in names]


def effect(*events: Event, rid: RecordId = R1) -> TaskEffect:
    """The effect of record ``rid`` once ``events`` are folded."""
    return fold(*events).effects[rid]


# --- which records are effects ----------------------------------------------------------------


def test_a_succeeded_action_becomes_an_effect() -> None:
    """An action that succeeds is an effect with its record's occurrence, key, args and result."""
    args_digest = digest({"to": "ada"})
    assert effect(*START, *sent("r1", "mail", Success("posted"), occurrence=3)) == TaskEffect(
        record_id=R1,
        node_id="mail",
        revision=1,
        tool="post",
        args=JsonObject({"to": "ada"}),
        args_digest=args_digest,
        occurrence=3,
        key=effect_key(TASK, "post", args_digest, 3),
        status=EffectStatus.SUCCEEDED,
        result=Success("posted"),
    )


@pytest.mark.parametrize(
    ("history", "status"),
    [
        pytest.param(HISTORIES[name], status, id=name)
        for name, status in [
            ("succeeded", EffectStatus.SUCCEEDED),
            ("unknown", EffectStatus.UNKNOWN),
            ("settled_on_resume", EffectStatus.UNKNOWN),
            ("done", EffectStatus.DONE),
            ("not_done", EffectStatus.NOT_DONE),
        ]
    ],
)
def test_an_effect_status_says_what_is_known(
    history: tuple[Event, ...], status: EffectStatus
) -> None:
    """Succeeded, unknown, reconciled done or not done: the effect's status follows its record."""
    assert effect(*history).status is status


def test_a_reconciliation_gives_the_effect_what_it_established() -> None:
    """A reconciled effect's result is the reconciliation's, not the unknown record's."""
    assert effect(*DONE).result == Success("it was posted")


@pytest.mark.parametrize(
    "ending",
    [
        pytest.param(DeviceFailure("mail", "no stamps"), id="failed"),
        pytest.param(VerifierFailure("mail", "wrong address"), id="verifier-failure"),
        pytest.param(None, id="pending"),
    ],
)
def test_an_action_that_did_not_take_effect_is_no_effect(ending: NodeResult | None) -> None:
    """A failed action, or one still pending, is not an effect."""
    assert R1 not in fold(*START, *sent("r1", "mail", ending)).effects


def test_a_cancelled_action_is_no_effect() -> None:
    """An action cancelled before it was called is not an effect."""
    cancelled = NodeFinished(record_id=R1, status=RecordStatus.CANCELLED, result=None, at=T0)
    assert R1 not in fold(*START, *sent("r1", "mail", None), cancelled).effects


LOOK_LOST = DeviceFailure("look", "timed out", is_timeout=True, outcome_unknown=True)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(sent("r1", "look", Success({"ada": "home"})), id="succeeded"),
        pytest.param(sent("r1", "look", LOOK_LOST), id="unknown"),
        pytest.param(
            (*sent("r1", "look", LOOK_LOST), RecordReconciled(record_id=R1, result=Success("x"))),
            id="reconciled",
        ),
    ],
)
def test_a_query_never_becomes_an_effect(events: tuple[Event, ...]) -> None:
    """A read-only query is never an effect, however it ends."""
    assert fold(*START, *events).effects == {}


# --- node_reused ------------------------------------------------------------------------------


# A compensation that failed or ended unknown leaves its effect in place (docs/design.md §4.5).
@pytest.mark.parametrize("history", params("succeeded", "done", "undo_failed", "undo_unknown"))
def test_a_node_reuses_an_effect_that_stands(history: tuple[Event, ...]) -> None:
    """A node of a later revision is satisfied by an effect that took effect and stands."""
    event = reused("mail", "r1", revision=2)
    assert fold(*history, *later(2), event).reused == (event,)


@pytest.mark.parametrize(
    "history", params("unknown", "settled_on_resume", "not_done", "compensated", "undoing")
)
def test_node_reused_refuses_an_effect_that_does_not_stand(history: tuple[Event, ...]) -> None:
    """Unknown, never done, undone or being undone: there is nothing that stands to reuse."""
    with pytest.raises(StateError, match="took effect and stands"):
        fold(*history, *later(2), reused("mail", "r1", revision=2))


@pytest.mark.parametrize(
    ("events", "message"),
    [
        pytest.param(
            (*later(2), reused("zz", "r1", revision=2)), "not in the current plan", id="no-node"
        ),
        pytest.param(
            (*later(2), *sent("r2", "mail", Success("x"), revision=2, occurrence=2)),
            "already ran in revision 2",
            id="node-sent",
        ),
        pytest.param(
            (*later(2), reused("mail", "r1", revision=2)),
            "already ran in revision 2",
            id="node-reused",
        ),
        pytest.param(
            (*later(2), reused("mail", "r9", revision=2)), "not an effect", id="no-effect"
        ),
        pytest.param((*later(2), reused("mail", "r1")), "names revision 1", id="old-revision"),
    ],
)
def test_node_reused_refuses_a_node_that_cannot_take_it(
    events: tuple[Event, ...], message: str
) -> None:
    """The node must be in the current revision's plan and not yet run or reused there."""
    with pytest.raises(StateError, match=message):
        fold(*SUCCEEDED, *events, reused("mail", "r1", revision=2))


def test_node_reused_refuses_a_query_record() -> None:
    """A query's record is no effect: nothing can reuse it."""
    with pytest.raises(StateError, match="not an effect"):
        fold(*QUERIED, *later(2), reused("look", "r1", revision=2))


def test_reuse_clears_superseded() -> None:
    """An effect a revision superseded is no longer superseded once a later one reuses it."""
    superseded = (*SUCCEEDED, *later(2), EffectSuperseded(record_id=R1, revision=2))
    assert effect(*superseded).superseded == 2
    assert effect(*superseded, *later(3), reused("mail", "r1", revision=3)).superseded is None


# --- effect_superseded ------------------------------------------------------------------------


@pytest.mark.parametrize("history", params("succeeded", "unknown", "done"))
def test_effect_superseded_names_the_revision_and_leaves_it_in_the_world(
    history: tuple[Event, ...],
) -> None:
    """A superseded effect records the revision that replaced it and stays in the world."""
    after = effect(*history, *later(2), EffectSuperseded(record_id=R1, revision=2, reason="x"))
    assert (after.superseded, after.in_world) == (2, True)


@pytest.mark.parametrize("history", params("not_done", "compensated"))
def test_effect_superseded_refuses_an_effect_not_in_the_world(history: tuple[Event, ...]) -> None:
    """An effect that never happened, or was undone, cannot be superseded."""
    with pytest.raises(StateError, match="no longer in the world"):
        fold(*history, *later(2), EffectSuperseded(record_id=R1, revision=2))


def test_effect_superseded_refuses_a_record_that_is_no_effect() -> None:
    """Only an effect can be superseded, not a query's record."""
    with pytest.raises(StateError, match="not an effect"):
        fold(*QUERIED, *later(2), EffectSuperseded(record_id=R1, revision=2))


# --- compensation -----------------------------------------------------------------------------


@pytest.mark.parametrize("history", params("succeeded", "done"))
def test_compensation_dispatched_keeps_its_pending_record(history: tuple[Event, ...]) -> None:
    """The effect holds its compensation's pending record, and stands until it ends."""
    event = compensating("r1", "u1", "mail")
    after = effect(*history, event)
    assert after.compensation == event.record
    assert (after.compensated, after.in_world) == (False, True)


@pytest.mark.parametrize(
    ("history", "message"),
    [
        pytest.param(UNKNOWN, "took effect and stands", id="unknown"),
        pytest.param(NOT_DONE, "took effect and stands", id="not_done"),
        pytest.param(QUERIED, "not an effect", id="query"),
        pytest.param(UNDOING, "already compensated once", id="undoing"),
        pytest.param(COMPENSATED, "took effect and stands", id="compensated"),
        pytest.param(UNDO_FAILED, "already compensated once", id="undo_failed"),
        pytest.param(UNDO_UNKNOWN, "already compensated once", id="undo_unknown"),
    ],
)
def test_compensation_dispatched_at_most_once_and_only_for_a_known_effect(
    history: tuple[Event, ...], message: str
) -> None:
    """Never for an effect of unknown outcome or none, never twice (not even after a failure)."""
    with pytest.raises(StateError, match=message):
        fold(*history, compensating("r1", "u2", "mail"))


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(
            compensating("r1", "u1", "mail", status=RecordStatus.RUNNING),
            "committed as pending",
            id="not-pending",
        ),
        pytest.param(
            compensating("r1", "u1", "mail", task_id="other"),
            "in its own task",
            id="other-task",
        ),
        pytest.param(compensating("r1", "r1", "mail"), "already exists", id="record-id"),
    ],
)
def test_compensation_dispatched_refuses_a_record_that_does_not_fit(
    event: Event, message: str
) -> None:
    """A compensation is a new pending record of the task."""
    with pytest.raises(StateError, match=message):
        fold(*SUCCEEDED, event)


def test_compensation_dispatched_refuses_the_id_of_another_compensation() -> None:
    """Two compensations never share a record id."""
    with pytest.raises(StateError, match="already exists"):
        fold(
            *UNDOING,
            *sent("r2", "ring", Success("rang")),
            compensating("r2", "u1", "ring"),
        )


def test_effect_compensated_undoes_the_effect() -> None:
    """A compensation that succeeds marks the effect compensated: no longer in the world."""
    after = effect(*UNDOING, compensated("r1", "u1", Success("recalled")))
    assert (after.compensated, after.in_world) == (True, False)
    assert after.compensation is not None
    assert after.compensation.status is RecordStatus.SUCCEEDED
    assert after.compensation_result == Success("recalled")


def test_effect_compensated_needs_a_success() -> None:
    """effect_compensated with a failure result is refused."""
    with pytest.raises(StateError, match="has a success result"):
        fold(*UNDOING, compensated("r1", "u1", DeviceFailure("mail", "x")))


@pytest.mark.parametrize(
    ("event", "status"),
    [
        pytest.param(
            compensation_failed("r1", "u1", DeviceFailure("mail", "read")),
            RecordStatus.FAILED,
            id="failed",
        ),
        pytest.param(
            compensation_failed("r1", "u1", DeviceFailure("mail", "?", outcome_unknown=True)),
            RecordStatus.UNKNOWN,
            id="unknown",
        ),
        pytest.param(
            compensation_failed("r1", "u1", None, status=RecordStatus.UNKNOWN),
            RecordStatus.UNKNOWN,
            id="unknown-without-result",
        ),
    ],
)
def test_compensation_failed_leaves_the_effect_in_place(event: Event, status: RecordStatus) -> None:
    """A compensation that fails or ends unknown leaves the effect in the world."""
    after = effect(*UNDOING, event)
    assert (after.compensated, after.in_world) == (False, True)
    assert after.compensation is not None
    assert after.compensation.status is status


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(
            compensation_failed("r1", "u1", Success("x"), status=RecordStatus.SUCCEEDED),
            "failed or unknown",
            id="succeeded",
        ),
        pytest.param(
            compensation_failed("r1", "u1", Success("x"), status=RecordStatus.FAILED),
            "does not give status",
            id="result-mismatch",
        ),
    ],
)
def test_compensation_failed_is_failed_or_unknown(event: Event, message: str) -> None:
    """compensation_failed carries status failed or unknown, matching its result."""
    with pytest.raises(StateError, match=message):
        fold(*UNDOING, event)


ENDS = {
    "compensated": compensated("r1", "u1"),
    "failed": compensation_failed("r1", "u1", DeviceFailure("mail", "read")),
    "unknown": compensation_failed("r1", "u1", None, status=RecordStatus.UNKNOWN),
}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(ENDS[first], ENDS[second], id=f"{first}-then-{second}")
        for first, second in itertools.product(ENDS, ENDS)
    ],
)
def test_a_compensation_ends_once(first: Event, second: Event) -> None:
    """A compensation record that has ended never ends again."""
    with pytest.raises(StateError, match="already ended"):
        fold(*UNDOING, first, second)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param((*SUCCEEDED, compensated("r1", "u1")), id="none-dispatched"),
        pytest.param((*UNDOING, compensated("r1", "u2")), id="another-record"),
    ],
)
def test_a_compensation_ends_only_as_the_record_dispatched(events: tuple[Event, ...]) -> None:
    """Ending a compensation names the record that was dispatched for that effect."""
    with pytest.raises(StateError, match="is not the compensation of this effect"):
        fold(*events)


# --- unwind_started ---------------------------------------------------------------------------


def test_unwind_started_records_how_the_task_will_end() -> None:
    """unwind_started makes the task compensating and keeps the ending it will have."""
    unwind = UnwindStarted(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED)
    state = fold(*SUCCEEDED, unwind)
    assert (state.phase, state.unwinding, state.planning) == (TaskPhase.COMPENSATING, unwind, None)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(TaskStatus.SUCCEEDED, TerminalReason.PASSED, id="succeeded"),
        pytest.param(TaskStatus.FAILED, TerminalReason.PASSED, id="reason-not-allowed"),
    ],
)
def test_unwind_started_refuses_an_ending_a_saga_cannot_have(
    status: TaskStatus, reason: TerminalReason
) -> None:
    """A task unwinds only to an allowed failed, partial or cancelled ending."""
    with pytest.raises(StateError, match="cannot unwind"):
        fold(*SUCCEEDED, UnwindStarted(status=status, reason=reason))


# --- records written before occurrences were kept ---------------------------------------------


def test_older_records_count_occurrences_in_order_of_their_call() -> None:
    """Without occurrences, one call's effects are numbered 1, 2, ...; another call's apart.

    A node without a tool is a call of its own: sign and seal have the same (empty) args.
    """
    state = fold(
        *START,
        *sent("r1", "mail", Success("posted"), occurrence=None),
        *sent("r2", "again", Success("posted"), occurrence=None),
        *sent("r3", "ring", Success("rang"), occurrence=None),
        *sent("r4", "sign", Success("signed"), occurrence=None),
        *sent("r5", "seal", Success("sealed"), occurrence=None),
    )
    numbered = {rid: item.occurrence for rid, item in state.effects.items()}
    assert numbered == {"r1": 1, "r2": 2, "r3": 1, "r4": 1, "r5": 1}


@pytest.mark.parametrize(
    ("history", "occurrence"),
    [
        pytest.param(NOT_DONE, 1, id="not_done-frees-it"),
        pytest.param(COMPENSATED, 2, id="compensated-keeps-it"),
        pytest.param(UNKNOWN, 2, id="unknown-keeps-it"),
    ],
)
def test_older_records_count_every_effect_that_may_have_happened(
    history: tuple[Event, ...], occurrence: int
) -> None:
    """An older record counts every earlier effect of its call except one that never happened."""
    after = effect(
        *history, *sent("r2", "again", Success("posted"), occurrence=None), rid=RecordId("r2")
    )
    assert after.occurrence == occurrence


def test_an_older_record_keeps_its_own_key() -> None:
    """An older record's effect has the key it was sent with."""
    older = effect(*START, *sent("r1", "mail", Success("posted"), occurrence=None))
    assert older.key == f"{TASK}:r1"


@pytest.mark.parametrize(
    ("node", "args"),
    [
        pytest.param("mail", JsonObject({"to": "ada"}), id="plain-args"),
        pytest.param("note", None, id="args-with-a-ref"),
    ],
)
def test_an_older_record_takes_its_args_from_its_node(node: str, args: JsonObject | None) -> None:
    """An older effect's args are its node's, unless they held a $ref the record never kept."""
    older = effect(*START, *sent("r1", node, Success("posted"), occurrence=None))
    assert older.args == args


# --- what the queries make of them ------------------------------------------------------------


def test_lineage_results_give_a_reused_node_its_effect_result() -> None:
    """A reused node's result, in a fresh lineage, is the result of the effect it reuses."""
    state = fold(*SUCCEEDED, *later(2), reused("mail", "r1", revision=2))
    assert lineage_results(state) == {"mail": Success("posted")}


def test_a_later_record_wins_over_an_earlier_reuse() -> None:
    """A node sent in a later revision of the lineage has that record's result."""
    state = fold(
        *SUCCEEDED,
        *later(2),
        reused("mail", "r1", revision=2),
        *later(3, RevisionKind.LOCAL, redo=frozenset({"mail"})),
        *sent("r2", "mail", Success("posted again"), revision=3, occurrence=2),
    )
    assert lineage_results(state)["mail"] == Success("posted again")


def test_a_later_reuse_wins_over_an_earlier_record() -> None:
    """A node that failed and is reused in a later revision of the lineage has the reused result."""
    state = fold(
        *SUCCEEDED,
        *sent("r2", "again", DeviceFailure("again", "no stamps")),
        *later(2, RevisionKind.LOCAL, redo=frozenset({"again"})),
        reused("again", "r1", revision=2),
    )
    assert lineage_results(state)["again"] == Success("posted")


def test_a_reuse_of_an_earlier_lineage_is_forgotten() -> None:
    """After a global replan, a reuse of the old lineage gives no result."""
    state = fold(*SUCCEEDED, *later(2), reused("mail", "r1", revision=2), *later(3))
    assert lineage_results(state) == {}


def test_node_standings_show_a_reused_node_with_its_effect_record() -> None:
    """A reused node stands as ``reused``, with the record of the effect it reuses."""
    state = fold(*SUCCEEDED, *later(2), reused("mail", "r1", revision=2))
    standings = {item.node.id: item for item in node_standings(state, state.revisions[-1])}
    assert (standings["mail"].state, standings["mail"].record) == ("reused", state.records[R1])
    assert standings["ring"].state == "not_dispatched"


def test_effects_before_a_revision_leave_out_its_own() -> None:
    """effects_before(n) holds the effects of revisions before n only."""
    state = fold(
        *SUCCEEDED,
        *later(2),
        *sent("r2", "ring", Success("rang"), revision=2),
    )
    assert [item.record_id for item in effects_before(state, 2)] == ["r1"]
    assert [item.record_id for item in effects_before(state, 3)] == ["r1", "r2"]
