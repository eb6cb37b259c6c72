"""The transition functions: valves, rejected plans, dispatch, expiry, cancel.

See docs/design.md §4, §5.3.
"""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from tests.support import builders
from tests.support.builders import T0, TASK, contract, fold, ran, record, step

from pev.errors import StateError
from pev.kernel import Diagnosis as KernelDiagnosis
from pev.kernel import (
    Finish,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
    to_replan_action,
)
from pev.ledger import (
    AwaitingReplan,
    CancelRequested,
    Dispatched,
    Ledger,
    NodeDispatched,
    NodeFinished,
    PlanRejected,
    RecordReconciled,
    ReplanStarted,
    RevisionKind,
    RoundExecuted,
    TaskFinished,
    TaskPhase,
    TaskState,
    begin_replan,
    cancel_outcome,
    dispatch,
    expire,
    finish,
    new_task,
    reject_plan,
    request_cancel,
)
from pev.model import (
    DeviceFailure,
    Effect,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    VerificationMode,
    VerifierFailure,
    record_status_for,
)
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore

PLAN = Plan(
    "tidy the desk",
    (
        PlanNode("look", "look at the desk", tool="camera", effect=Effect.QUERY),
        PlanNode("grab", "grab the cup", tool="arm", after=("look",)),
    ),
)
OTHER_PLAN = Plan("tidy the desk", (PlanNode("sweep", "sweep everything", tool="arm"),))
LOCAL = LocalReplan(frozenset({"grab"}), "grab the handle")
GLOBAL = GlobalReplan("start over")

# Tasks created here wait a minute for a replan; revisions are of PLAN unless told.
created = functools.partial(builders.created, replan_timeout_s=60)
revision = functools.partial(builders.revision, plan=PLAN)


def verifying(
    *, mode: VerificationMode = VerificationMode.RECOVERY, max_replans: int = 2
) -> TaskState:
    """Revision 1 ran: look succeeded, grab failed; the task is being verified."""
    return fold(
        created(contract(mode), max_replans=max_replans),
        revision(1),
        *ran("r1", "look", Success({"cups": 1})),
        *ran("r2", "grab", VerifierFailure("grab", "missed the cup")),
        RoundExecuted(revision=1, executed_ok=False),
    )


def awaiting(action: LocalReplan | GlobalReplan = LOCAL, *, max_replans: int = 2) -> TaskState:
    """The kernel decided a replan after revision 1; the deadline is T0 + 60 s."""
    state = verifying(max_replans=max_replans)
    return step(state, dispatch(state, action, now=T0))


def executing() -> TaskState:
    """Revision 1 is running: look succeeded, grab was dispatched and is pending."""
    return fold(
        created(),
        revision(1),
        *ran("r1", "look", Success({"cups": 1})),
        NodeDispatched(record=record("r2", "grab")),
    )


def terminal(status: TaskStatus, reason: TerminalReason) -> TaskState:
    return fold(created(), TaskFinished(status=status, reason=reason))


TERMINALS = [
    pytest.param(terminal(TaskStatus.SUCCEEDED, TerminalReason.PASSED), id="succeeded"),
    pytest.param(terminal(TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE), id="partial"),
    pytest.param(terminal(TaskStatus.FAILED, TerminalReason.INVALID_PLAN), id="failed"),
    pytest.param(terminal(TaskStatus.CANCELLED, TerminalReason.CANCELLED), id="cancelled"),
]

NOT_AWAITING = [
    pytest.param(fold(created()), id="planning"),
    pytest.param(executing(), id="executing"),
    pytest.param(verifying(), id="verifying"),
    pytest.param(step(executing(), (CancelRequested(),)), id="cancelling"),
    *TERMINALS,
]


# --- begin_replan: the three valves, in order -------------------------------------------------


@pytest.mark.parametrize("state", NOT_AWAITING)
def test_valve_one_refuses_a_task_not_awaiting_replan(state: TaskState) -> None:
    """begin_replan on a task that is not awaiting_replan raises StateError."""
    with pytest.raises(StateError, match="not awaiting_replan") as caught:
        begin_replan(state, now=T0)
    assert caught.value.state == state.phase


async def test_valve_one_writes_nothing_to_a_terminal_task() -> None:
    """A terminal task stays exactly as it was: the refused replan writes no event."""
    ledger = Ledger(MemoryStore(), clock=lambda: T0)
    await ledger.create("x", contract=contract(), task_id="t")
    ending = TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.INVALID_PLAN)
    state = await ledger.append("t", [ending])
    before = await ledger.entries("t")
    with pytest.raises(StateError):
        await ledger.append("t", begin_replan(state, now=T0))
    with pytest.raises(StateError):
        await ledger.append("t", [ReplanStarted(planning=RevisionKind.GLOBAL, attempt=2)])
    assert await ledger.entries("t") == before
    assert await ledger.state("t") == state


def test_valve_two_ends_the_task_when_the_budget_is_spent() -> None:
    """With every replan spent, begin_replan ends the task failed/replan_budget_exhausted."""
    state = awaiting(max_replans=0)
    (event,) = begin_replan(state, now=T0)
    assert isinstance(event, TaskFinished)
    assert (event.status, event.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
    )
    assert step(state, (event,)).phase is TaskPhase.FAILED


def test_valve_two_comes_before_valve_three() -> None:
    """A task both out of budget and past its deadline ends for the budget."""
    (event,) = begin_replan(awaiting(max_replans=0), now=T0 + timedelta(hours=1))
    assert isinstance(event, TaskFinished)
    assert event.reason is TerminalReason.REPLAN_BUDGET_EXHAUSTED


@pytest.mark.parametrize("late", [60, 61, 3600], ids=["at-deadline", "just-after", "long-after"])
def test_valve_three_ends_the_task_past_the_replan_deadline(late: int) -> None:
    """At or after the replan deadline, begin_replan ends failed/replan_deadline_expired."""
    state = awaiting()
    (event,) = begin_replan(state, now=T0 + timedelta(seconds=late))
    assert isinstance(event, TaskFinished)
    assert (event.status, event.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    assert step(state, (event,)).phase is TaskPhase.FAILED


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        pytest.param(LOCAL, RevisionKind.LOCAL, id="local"),
        pytest.param(GLOBAL, RevisionKind.GLOBAL, id="global"),
    ],
)
def test_replan_started_asks_for_the_decided_kind(
    action: LocalReplan | GlobalReplan, kind: RevisionKind
) -> None:
    """All valves passing gives replan_started for the kind of replan decided."""
    state = awaiting(action)
    assert begin_replan(state, now=T0 + timedelta(seconds=59)) == (
        ReplanStarted(planning=kind, attempt=2),
    )


def test_replan_after_a_rejected_initial_plan_asks_for_an_initial_plan() -> None:
    """After the initial plan is rejected, the next planner call is again an initial plan."""
    state = fold(created())
    state = step(state, reject_plan(state, problems=("no nodes",), plan=None, now=T0))
    assert begin_replan(state, now=T0) == (ReplanStarted(planning=RevisionKind.INITIAL, attempt=2),)


def test_replan_started_spends_one_replan() -> None:
    """Folding the replan_started that passed the valves spends one replan and plans."""
    state = awaiting()
    state = step(state, begin_replan(state, now=T0))
    assert (state.phase, state.planning, state.replans_used) == (
        TaskPhase.PLANNING,
        RevisionKind.LOCAL,
        1,
    )


# --- reject_plan ------------------------------------------------------------------------------


def test_recovery_rejection_with_budget_left_awaits_a_replan() -> None:
    """In recovery mode a rejection is fed back: plan_rejected, then awaiting_replan."""
    state = fold(created())
    events = reject_plan(state, problems=("cycle a → b → a",), plan=OTHER_PLAN, now=T0)
    assert events == (
        PlanRejected(
            planning=RevisionKind.INITIAL,
            attempt=1,
            problems=("cycle a → b → a",),
            plan=OTHER_PLAN,
        ),
        AwaitingReplan(action=None, deadline=T0 + timedelta(seconds=60)),
    )
    assert step(state, events).phase is TaskPhase.AWAITING_REPLAN


def test_rejected_local_replan_keeps_waiting_for_a_local_replan() -> None:
    """A rejected local plan awaits the same local replan, which is asked for again."""
    state = awaiting(LOCAL)
    state = step(state, begin_replan(state, now=T0))
    events = reject_plan(state, problems=("bad",), plan=None, now=T0)
    assert events[0] == PlanRejected(planning=RevisionKind.LOCAL, attempt=2, problems=("bad",))
    assert events[1] == AwaitingReplan(action=LOCAL, deadline=T0 + timedelta(seconds=60))
    state = step(state, events)
    assert begin_replan(state, now=T0) == (ReplanStarted(planning=RevisionKind.LOCAL, attempt=3),)


def test_recovery_rejection_with_budget_spent_fails_invalid_plan() -> None:
    """In recovery mode with no replan left, a rejection ends failed/invalid_plan."""
    state = fold(created(max_replans=0))
    rejected, ending = reject_plan(state, problems=("no nodes", "cycle"), plan=None, now=T0)
    assert isinstance(rejected, PlanRejected)
    assert ending == TaskFinished(
        status=TaskStatus.FAILED,
        reason=TerminalReason.INVALID_PLAN,
        detail="plan rejected: no nodes; cycle",
    )


@pytest.mark.parametrize(
    "mode",
    [VerificationMode.OFF, VerificationMode.AUDIT, VerificationMode.ENFORCE],
    ids=str,
)
def test_first_rejection_ends_other_modes(mode: VerificationMode) -> None:
    """Outside recovery mode the first rejection ends failed/invalid_plan, budget or not."""
    state = fold(created(contract(mode), max_replans=5))
    events = reject_plan(state, problems=("no nodes",), plan=None, now=T0)
    assert [event.kind for event in events] == ["plan_rejected", "task_finished"]
    ended = step(state, events)
    assert ended.finished is not None
    assert (ended.finished.status, ended.finished.reason) == (
        TaskStatus.FAILED,
        TerminalReason.INVALID_PLAN,
    )


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(executing(), id="executing"),
        pytest.param(awaiting(), id="awaiting_replan"),
        pytest.param(step(fold(created()), (CancelRequested(),)), id="cancelling"),
        *TERMINALS,
    ],
)
def test_reject_plan_needs_a_plan_being_made(state: TaskState) -> None:
    """Rejecting a plan while the task is not planning raises StateError."""
    with pytest.raises(StateError, match="only a plan being made"):
        reject_plan(state, problems=("x",), plan=None, now=T0)


@pytest.mark.parametrize("max_replans", [0, 1, 2, 3])
def test_always_rejected_planner_gets_budget_plus_one_attempts(max_replans: int) -> None:
    """A planner that is always rejected is called max_replans + 1 times, then invalid_plan."""
    state = fold(created(max_replans=max_replans))
    while not state.terminal:
        if state.phase is TaskPhase.PLANNING:
            state = step(state, reject_plan(state, problems=("bad",), plan=None, now=T0))
        else:
            state = step(state, begin_replan(state, now=T0))
    assert [r.attempt for r in state.rejections] == list(range(1, max_replans + 2))
    assert state.replans_used == max_replans
    assert state.finished is not None
    assert state.finished.reason is TerminalReason.INVALID_PLAN


def test_budget_of_two_gives_exactly_three_attempts() -> None:
    """With max_replans=2 an always-rejected planner gets exactly 3 attempts (docs/design.md §4)."""
    state = fold(created(max_replans=2))
    while not state.terminal:
        if state.phase is TaskPhase.PLANNING:
            state = step(state, reject_plan(state, problems=("bad",), plan=None, now=T0))
        else:
            state = step(state, begin_replan(state, now=T0))
    assert len(state.rejections) == 3
    assert state.planner_calls == 3


# --- dispatch ---------------------------------------------------------------------------------


def test_finish_decision_ends_the_task_with_its_outputs() -> None:
    """A Finish decision writes dispatched then task_finished with the succeeded nodes' outputs."""
    state = verifying()
    decision = Finish(TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE, detail="arm offline")
    events = dispatch(state, decision, now=T0)
    assert events == (
        Dispatched(revision=1, decision=decision),
        TaskFinished(
            status=TaskStatus.PARTIAL,
            reason=TerminalReason.DEVICE_FAILURE,
            outputs={"look": {"cups": 1}},
            detail="arm offline",
        ),
    )
    assert step(state, events).phase is TaskPhase.PARTIAL


def test_finish_outputs_come_from_the_final_plan_only() -> None:
    """After a global replan, outputs hold the new plan's succeeded nodes, not the old ones."""
    state = awaiting(GLOBAL)
    state = step(state, begin_replan(state, now=T0))
    state = step(
        state,
        (
            revision(2, RevisionKind.GLOBAL, plan=OTHER_PLAN),
            *ran("r3", "sweep", Success("swept"), revision=2),
            RoundExecuted(revision=2, executed_ok=True),
        ),
    )
    _, ending = dispatch(state, Finish(TaskStatus.SUCCEEDED, TerminalReason.PASSED), now=T0)
    assert isinstance(ending, TaskFinished)
    assert dict(ending.outputs) == {"sweep": "swept"}


def test_audit_shadow_is_kept_in_the_dispatched_event() -> None:
    """In audit mode the decision, shadow action included, is recorded as given."""
    state = verifying(mode=VerificationMode.AUDIT)
    decision = Finish(TaskStatus.FAILED, TerminalReason.EXECUTION_FAILED, shadow=LOCAL)
    dispatched, _ = dispatch(state, decision, now=T0)
    assert dispatched == Dispatched(revision=1, decision=decision)
    assert step(state, dispatch(state, decision, now=T0)).decisions[-1] == dispatched


@pytest.mark.parametrize(
    "decision", [pytest.param(LOCAL, id="local"), pytest.param(GLOBAL, id="global")]
)
def test_replan_decision_awaits_a_replan_until_the_deadline(
    decision: LocalReplan | GlobalReplan,
) -> None:
    """A replan decision writes dispatched then awaiting_replan due now + replan_timeout_s."""
    state = verifying()
    now = T0 + timedelta(seconds=7)
    events = dispatch(state, decision, now=now)
    assert events == (
        Dispatched(revision=1, decision=decision),
        AwaitingReplan(action=decision, deadline=now + timedelta(seconds=60)),
    )
    after = step(state, events)
    assert (after.phase, after.replan_action) == (TaskPhase.AWAITING_REPLAN, decision)


def test_kernel_action_for_a_plan_error_flows_into_dispatch() -> None:
    """A plan error on one node maps to a local replan that dispatch turns into awaiting_replan."""
    diagnosis = KernelDiagnosis(RootCause.PLAN_OR_ANSWER_ERROR, frozenset({"grab"}))
    action = to_replan_action(diagnosis, {"grab"}, "grab the handle")
    assert isinstance(action, LocalReplan)
    assert action == LOCAL
    _, waiting = dispatch(verifying(), action, now=T0)
    assert isinstance(waiting, AwaitingReplan)


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(fold(created()), id="planning"),
        pytest.param(executing(), id="executing"),
        pytest.param(awaiting(), id="awaiting_replan"),
        *TERMINALS,
    ],
)
def test_dispatch_needs_a_verified_revision(state: TaskState) -> None:
    """Dispatching a decision outside the verifying phase raises StateError."""
    with pytest.raises(StateError, match="decisions follow verification"):
        dispatch(state, GLOBAL, now=T0)


# --- expire -----------------------------------------------------------------------------------


@pytest.mark.parametrize("late", [60, 600], ids=["at-deadline", "long-after"])
def test_expire_fails_an_overdue_waiting_task(late: int) -> None:
    """A task awaiting a replan past its deadline ends failed/replan_deadline_expired."""
    state = awaiting()
    (event,) = expire(state, now=T0 + timedelta(seconds=late))
    assert isinstance(event, TaskFinished)
    assert (event.status, event.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    assert dict(event.outputs) == {"look": {"cups": 1}}


def test_expire_fails_a_replan_still_planning_past_its_deadline() -> None:
    """A replan that started but produced no revision by the deadline also expires."""
    state = awaiting()
    state = step(state, begin_replan(state, now=T0))
    (event,) = expire(state, now=T0 + timedelta(seconds=60))
    assert isinstance(event, TaskFinished)
    assert event.reason is TerminalReason.REPLAN_DEADLINE_EXPIRED


def test_expire_leaves_a_task_within_its_deadline() -> None:
    """A waiting task whose deadline has not come yet is left alone."""
    assert expire(awaiting(), now=T0 + timedelta(seconds=59)) == ()


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(fold(created()), id="initial-planning"),
        pytest.param(executing(), id="executing"),
        pytest.param(verifying(), id="verifying"),
        *TERMINALS,
    ],
)
def test_expire_leaves_tasks_that_are_not_waiting(state: TaskState) -> None:
    """Tasks that are not waiting for a replan never expire, however late it is."""
    assert expire(state, now=T0 + timedelta(days=30)) == ()


# --- request_cancel and cancel_outcome --------------------------------------------------------


@pytest.mark.parametrize("state", TERMINALS)
def test_cancel_of_a_terminal_task_writes_nothing(state: TaskState) -> None:
    """Cancelling a task that has ended returns no events."""
    assert request_cancel(state, reason="stop") == ()


def test_cancel_while_cancelling_writes_nothing() -> None:
    """A second cancel request is a no-op."""
    state = step(executing(), request_cancel(executing(), reason="stop"))
    assert request_cancel(state, reason="again") == ()


def test_cancel_of_a_waiting_task_ends_it_at_once() -> None:
    """A task awaiting a replan has nothing in flight: it ends cancelled/cancelled at once."""
    state = awaiting()
    events = request_cancel(state, reason="operator")
    assert [event.kind for event in events] == ["cancel_requested", "task_finished"]
    ended = step(state, events)
    assert ended.finished is not None
    assert (ended.phase, ended.finished.reason, ended.finished.detail) == (
        TaskPhase.CANCELLED,
        TerminalReason.CANCELLED,
        "operator",
    )


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(executing(), id="executing"),
        pytest.param(fold(created()), id="planning"),
        pytest.param(verifying(), id="verifying"),
    ],
)
def test_cancel_of_working_task_only_requests(state: TaskState) -> None:
    """A task with work in flight gets cancel_requested and moves to cancelling."""
    assert request_cancel(state, reason="stop") == (CancelRequested(reason="stop"),)
    assert step(state, request_cancel(state)).phase is TaskPhase.CANCELLING


def _cancelled_while(grab: NodeResult | None, *, effect: Effect = Effect.ACTION) -> TaskState:
    """Cancel arrives while grab runs; grab then ends with ``grab`` (None: cancelled, no result)."""
    state = fold(
        created(),
        revision(1),
        *ran("r1", "look", Success({"cups": 1})),
        NodeDispatched(record=record("r2", "grab", effect=effect)),
        CancelRequested(reason="operator"),
    )
    status = RecordStatus.CANCELLED if grab is None else record_status_for(grab)
    return step(state, (NodeFinished(record_id=RecordId("r2"), status=status, result=grab, at=T0),))


@pytest.mark.parametrize(
    "grab",
    [
        pytest.param(Success("cup in hand"), id="succeeded"),
        pytest.param(DeviceFailure("grab", "arm offline"), id="failed"),
        pytest.param(None, id="cancelled"),
    ],
)
def test_cancel_outcome_is_cancelled_when_nothing_is_left_unknown(
    grab: NodeResult | None,
) -> None:
    """Running nodes that reached a known end give cancelled/cancelled."""
    state = _cancelled_while(grab)
    outcome = cancel_outcome(state)
    assert (outcome.status, outcome.reason, outcome.detail) == (
        TaskStatus.CANCELLED,
        TerminalReason.CANCELLED,
        "operator",
    )
    assert step(state, (outcome,)).phase is TaskPhase.CANCELLED


def test_cancel_outcome_is_failed_when_an_action_ended_unknown() -> None:
    """An action of the current revision left unknown gives failed/cancelled."""
    state = _cancelled_while(DeviceFailure("grab", "timed out", True, outcome_unknown=True))
    outcome = cancel_outcome(state)
    assert (outcome.status, outcome.reason) == (TaskStatus.FAILED, TerminalReason.CANCELLED)
    assert "unknown" in outcome.detail
    assert step(state, (outcome,)).phase is TaskPhase.FAILED


def test_cancel_outcome_ignores_a_query_left_unknown() -> None:
    """A read-only query whose outcome is unknown changed nothing: cancelled/cancelled."""
    state = _cancelled_while(
        DeviceFailure("grab", "timed out", True, outcome_unknown=True), effect=Effect.QUERY
    )
    assert cancel_outcome(state).status is TaskStatus.CANCELLED


def test_cancel_outcome_ignores_a_reconciled_unknown_action() -> None:
    """An unknown action that a reconciliation settled no longer fails the cancel."""
    state = _cancelled_while(DeviceFailure("grab", "timed out", True, outcome_unknown=True))
    state = step(state, (RecordReconciled(record_id=RecordId("r2"), result=Success("held")),))
    assert cancel_outcome(state).status is TaskStatus.CANCELLED


def test_cancel_outcome_ignores_unknown_actions_of_earlier_revisions() -> None:
    """Only records of the current revision were interrupted by the cancel."""
    state = fold(
        created(),
        revision(1),
        *ran("r1", "grab", DeviceFailure("grab", "timed out", True, outcome_unknown=True)),
        RoundExecuted(revision=1, executed_ok=False),
        AwaitingReplan(action=GLOBAL, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=RevisionKind.GLOBAL, attempt=2),
        revision(2, RevisionKind.GLOBAL, plan=OTHER_PLAN),
        CancelRequested(),
    )
    assert cancel_outcome(state).status is TaskStatus.CANCELLED


# --- new_task and finish ----------------------------------------------------------------------


def test_new_task_sets_the_task_deadline_from_the_policy() -> None:
    """task_deadline is now + task_timeout_s when the policy sets one."""
    event = new_task(
        TASK,
        input={"q": [1, 2]},
        contract=contract(),
        policy=RecoveryPolicy(task_timeout_s=30),
        now=T0,
        components={"planner": "agents:planner"},
    )
    assert event.task_deadline == T0 + timedelta(seconds=30)
    assert dict(event.components) == {"planner": "agents:planner"}
    assert event.input == {"q": (1, 2)}


def test_new_task_without_task_timeout_has_no_deadline() -> None:
    """Without task_timeout_s there is no task deadline."""
    assert created().task_deadline is None


def test_finish_before_any_revision_has_no_outputs() -> None:
    """A task that ends before a plan was accepted has empty outputs."""
    event = finish(fold(created()), TaskStatus.FAILED, TerminalReason.INVALID_PLAN)
    assert dict(event.outputs) == {}
