"""A task's state as a pure fold over its events (docs/design.md §5.1, §5.2).

``apply(state, event)`` returns the next state or raises :class:`~pev.errors.StateError` when the
event is not allowed where the task stands; ``replay(entries)`` folds a whole ledger. Nothing here
reads a clock or does I/O: times come from the entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, NoReturn, assert_never

from pev.errors import StateError
from pev.kernel import GlobalReplan, LocalReplan, outcome_allowed
from pev.ledger._effects import EffectStatus, TaskEffect, call_name
from pev.ledger._events import (
    ApprovalRequested,
    Approved,
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    DriverStarted,
    EffectCompensated,
    EffectSuperseded,
    Event,
    EvidenceCaptured,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeReused,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    Rejected,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    StartFailed,
    TaskCreated,
    TaskFinished,
    UnwindStarted,
    VerdictRecorded,
)
from pev.ledger._phases import (
    ALLOWED_PHASES,
    LEADS_TO,
    PHASE_OF_STATUS,
    REFUSALS,
    TERMINAL_PHASES,
    TaskPhase,
    rule_of,
)
from pev.model import (
    TERMINAL_RECORD_STATUSES,
    Effect,
    Evidence,
    ExecutionRecord,
    NodeResult,
    Plan,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerificationContract,
    iter_refs,
    record_status_for,
)
from pev.policy import RecoveryPolicy

__all__ = ["Revision", "TaskState", "apply", "replay"]


def _empty_mapping() -> Mapping[RecordId, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Revision:
    """One immutable revision of a task's plan.

    Attributes:
        number: 1, 2, 3, ...
        kind: ``initial``, ``local`` or ``global``.
        reason: Why it exists.
        plan: The full plan.
        feedback: What the planner was told.
        lessons: Lessons given as advice.
        redo: For a local replan, the nodes dispatched again; empty means all.
        lineage: The number of the initial or global revision its lineage started with.
        started_at: When it started.
        attempt: The planner call that produced its plan (1 for the first call).
        node_ids: The ids of the plan's nodes (derived, for quick membership tests).
        action: The replan decision it answers (``None`` for an initial revision, or one
            planned after a rejected plan); a revision a reviewer rejects is planned again
            for the same decision.
    """

    number: int
    kind: RevisionKind
    reason: str
    plan: Plan
    feedback: str
    lessons: tuple[str, ...]
    redo: frozenset[str]
    lineage: int
    started_at: datetime | None
    attempt: int = 1
    node_ids: frozenset[str] = frozenset()
    action: LocalReplan | GlobalReplan | None = None


# Not slotted, unlike pev's other values: the fold makes a new state per event, and copying an
# instance dict (see _evolve) is several times faster than setting thirty slots one by one.
@dataclass(frozen=True, kw_only=True)
class TaskState:
    """Everything the ledger says about one task, rebuilt by :func:`replay`.

    Attributes:
        task_id: The task's stable id.
        phase: Where it stands.
        created: The creation event (input, contract, policy, components).
        created_at: When it was created.
        updated_at: When its last event was written.
        event_count: Events folded so far.
        revisions: Every revision, in order.
        records: Execution records by id, in dispatch order.
        results: Node results by record id.
        reconciled: Settlements of ``unknown`` records by record id.
        effects: The task's effects by record id, in the order they came about: every action
            record that succeeded, ended ``unknown`` or was reconciled, with what became of it
            (docs/engine.md, "Effects happen once").
        reused: Every action node satisfied by an effect the task already had, in order.
        unwinding: How the task will end once its effects are undone, while it unwinds.
        skipped: Nodes not dispatched because a dependency did not succeed.
        evidence: Every captured observation.
        capture_failures: Every failed capture.
        rounds: Every completed execution round.
        verdicts: Every verdict (or missing-evidence stop) recorded.
        diagnoses: Every diagnosis.
        decisions: Every kernel decision.
        rejections: Every rejected plan.
        replans_used: Replans spent (each started replan, rejected plans included).
        planning: What the planner is being asked for, while planning.
        replan_action: The replan being waited for or planned.
        replan_deadline: When the current replan must have begun.
        cancel_reason: Why a cancel was requested, once one was.
        drivers: Who drove each stretch of the task, in order (one event per lease epoch).
        start_failures: Every drive that could not start, in order.
        failed_starts: How many drives failed to start since the last one that started.
        approvals: Every request for approval, in order (one per revision that asked).
        reviews: Every approval and rejection of a revision, in order.
        finished: The final event, once the task ended.
    """

    task_id: TaskId
    phase: TaskPhase
    created: TaskCreated
    created_at: datetime | None
    updated_at: datetime | None
    event_count: int
    revisions: tuple[Revision, ...] = ()
    records: Mapping[RecordId, ExecutionRecord] = field(default_factory=_empty_mapping)
    results: Mapping[RecordId, NodeResult] = field(default_factory=_empty_mapping)
    reconciled: Mapping[RecordId, RecordReconciled] = field(default_factory=_empty_mapping)
    effects: Mapping[RecordId, TaskEffect] = field(default_factory=_empty_mapping)
    reused: tuple[NodeReused, ...] = ()
    unwinding: UnwindStarted | None = None
    skipped: tuple[NodeSkipped, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    capture_failures: tuple[CaptureFailed, ...] = ()
    rounds: tuple[RoundExecuted, ...] = ()
    verdicts: tuple[VerdictRecorded, ...] = ()
    diagnoses: tuple[Diagnosed, ...] = ()
    decisions: tuple[Dispatched, ...] = ()
    rejections: tuple[PlanRejected, ...] = ()
    replans_used: int = 0
    planning: RevisionKind | None = RevisionKind.INITIAL
    replan_action: LocalReplan | GlobalReplan | None = None
    replan_deadline: datetime | None = None
    cancel_reason: str | None = None
    drivers: tuple[DriverStarted, ...] = ()
    start_failures: tuple[StartFailed, ...] = ()
    failed_starts: int = 0
    approvals: tuple[ApprovalRequested, ...] = ()
    reviews: tuple[Approved | Rejected, ...] = ()
    finished: TaskFinished | None = None

    @property
    def contract(self) -> VerificationContract:
        """The task's verification contract."""
        return self.created.contract

    @property
    def policy(self) -> RecoveryPolicy:
        """The task's recovery policy."""
        return self.created.policy

    @property
    def terminal(self) -> bool:
        """True once the task has ended; a terminal task never changes again."""
        return self.phase in TERMINAL_PHASES

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked for the task to stop."""
        return self.cancel_reason is not None

    @property
    def planner_calls(self) -> int:
        """Planner calls started so far: the first plan, then one per started replan."""
        return self.replans_used + 1

    @property
    def awaiting(self) -> ApprovalRequested | None:
        """The request the task waits on while ``awaiting_approval``; else ``None``."""
        return self.approvals[-1] if self.phase is TaskPhase.AWAITING_APPROVAL else None

    @property
    def approval_ends(self) -> datetime | None:
        """While awaiting approval, when the wait ends by itself (expiry ends the task then).

        The approval's deadline, or the whole task's when that comes first; ``None`` when the
        task does not await approval, or waits without a deadline.
        """
        waiting = self.awaiting
        if waiting is None:
            return None
        ends = [at for at in (waiting.deadline, self.created.task_deadline) if at is not None]
        return min(ends, default=None)

    @property
    def revision(self) -> Revision | None:
        """The latest revision, if any plan was accepted."""
        return self.revisions[-1] if self.revisions else None

    @property
    def plan(self) -> Plan | None:
        """The latest revision's plan."""
        return self.revisions[-1].plan if self.revisions else None


def replay(entries: Iterable[LedgerEntry | Event]) -> TaskState:
    """Fold a task's ledger into its state.

    Args:
        entries: Stored entries (or bare events, which carry no time) in sequence order.

    Raises:
        StateError: The ledger is empty, does not start with ``task_created``, or holds an event
            its task's state does not allow.
    """
    state: TaskState | None = None
    for item in entries:
        if isinstance(item, LedgerEntry):
            state = apply(state, item.event, at=item.at)
        else:
            state = apply(state, item)
    if state is None:
        raise StateError("an empty ledger has no task", task_id="", state="none")
    return state


def apply(state: TaskState | None, event: Event, *, at: datetime | None = None) -> TaskState:
    """Return the state after ``event``; ``state`` is ``None`` before the first event.

    Raises:
        StateError: The event is not allowed where the task stands (nothing changes).
    """
    if state is None:
        if not isinstance(event, TaskCreated):
            raise StateError(
                f"a ledger must start with task_created, not {event.kind}",
                task_id="",
                state="none",
            )
        return TaskState(
            task_id=event.task_id,
            phase=TaskPhase.PLANNING,
            created=event,
            created_at=at,
            updated_at=at,
            event_count=1,
        )
    rule = rule_of(event)
    if state.phase not in ALLOWED_PHASES[rule]:
        if state.phase in TERMINAL_PHASES:
            _refuse(state, event, "the task has ended and never changes again")
        _refuse(state, event, REFUSALS[rule])
    changes = _changes(state, event, at=at)
    phase = LEADS_TO.get(rule)
    if phase is not None:
        changes["phase"] = phase
    elif isinstance(event, TaskFinished):
        changes["phase"] = PHASE_OF_STATUS[event.status]
    changes["event_count"] = state.event_count + 1
    changes["updated_at"] = at if at is not None else state.updated_at
    return _evolve(state, changes)


def _evolve(state: TaskState, changes: dict[str, Any]) -> TaskState:
    """``dataclasses.replace`` without re-running ``__init__``: the fold's hot path.

    The fold already checked every change, so a field-by-field copy is enough; it is several
    times faster than ``replace`` on a state of this many fields.
    """
    new = object.__new__(TaskState)
    object.__setattr__(new, "__dict__", {**state.__dict__, **changes})
    return new


def _refuse(state: TaskState, event: Event, why: str) -> NoReturn:
    raise StateError(
        f"task {state.task_id}: {event.kind} is not allowed in phase {state.phase}: {why}",
        task_id=state.task_id,
        state=state.phase,
    )


def _require_revision(state: TaskState, event: Event, number: int) -> None:
    current = state.revision.number if state.revision else 0
    if number != current:
        _refuse(state, event, f"it names revision {number}, but the current one is {current}")


def _with(mapping: Mapping[RecordId, Any], key: RecordId, value: object) -> Mapping[RecordId, Any]:
    # The fold's mappings are read-only views of dicts it built, and copying the dict behind
    # one (a table copy in C) is over ten times faster than rebuilding it through the view:
    # records grow by one per dispatch, and each node's two events copy them.
    items = mapping.copy() if isinstance(mapping, MappingProxyType) else dict(mapping)
    items[key] = value
    return MappingProxyType(items)


def _changes(state: TaskState, event: Event, *, at: datetime | None) -> dict[str, Any]:
    """The fields an event changes besides the phase, once the phase rule let it through."""
    match event:
        case TaskCreated():  # the phase rule refuses it everywhere
            _refuse(state, event, REFUSALS[event.kind])
        case ReplanStarted():
            if state.replans_used >= state.policy.max_replans:
                _refuse(state, event, f"all {state.policy.max_replans} replans are spent")
            return {"planning": event.planning, "replans_used": state.replans_used + 1}
        case RevisionStarted():
            return _revision_started(state, event, at=at)
        case PlanRejected():
            return {"rejections": (*state.rejections, event)}
        case NodeDispatched():
            return _node_dispatched(state, event)
        case NodeProgressed():
            return _node_progressed(state, event)
        case NodeFinished():
            return _node_finished(state, event)
        case NodeSkipped():
            _require_revision(state, event, event.revision)
            return {"skipped": (*state.skipped, event)}
        case RecordReconciled():
            return _record_reconciled(state, event)
        case NodeReused():
            return _node_reused(state, event)
        case EffectSuperseded():
            return _effect_superseded(state, event)
        case CompensationDispatched():
            return _compensation_dispatched(state, event)
        case EffectCompensated() | CompensationFailed():
            return _compensation_ended(state, event)
        case UnwindStarted():
            return _unwind_started(state, event)
        case EvidenceCaptured():
            if any(item.id == event.evidence.id for item in state.evidence):
                _refuse(state, event, f"evidence {event.evidence.id} was already captured")
            return {"evidence": (*state.evidence, event.evidence)}
        case CaptureFailed():
            return {"capture_failures": (*state.capture_failures, event)}
        case RoundExecuted():
            _require_revision(state, event, event.revision)
            return {"rounds": (*state.rounds, event)}
        case VerdictRecorded() | Diagnosed() | Dispatched():
            _require_revision(state, event, event.revision)
            field_name = _VERIFY_FIELDS[event.kind]
            return {field_name: (*getattr(state, field_name), event)}
        case AwaitingReplan():
            return {
                "replan_action": event.action,
                "replan_deadline": event.deadline,
                "planning": None,
            }
        case CancelRequested():
            return {"cancel_reason": event.reason}
        case DriverStarted():
            if state.drivers and event.epoch <= state.drivers[-1].epoch:
                _refuse(
                    state,
                    event,
                    f"epoch {event.epoch} does not follow epoch {state.drivers[-1].epoch}",
                )
            return {"drivers": (*state.drivers, event), "failed_starts": 0}
        case StartFailed():
            return {
                "start_failures": (*state.start_failures, event),
                "failed_starts": state.failed_starts + 1,
            }
        case ApprovalRequested():
            _require_revision(state, event, event.revision)
            if any(request.revision == event.revision for request in state.approvals):
                _refuse(state, event, f"revision {event.revision} already asked for approval")
            return {"approvals": (*state.approvals, event)}
        case Approved():
            _require_revision(state, event, event.revision)
            return {"reviews": (*state.reviews, event)}
        case Rejected():
            _require_revision(state, event, event.revision)
            revision = state.revisions[-1]
            # Planned again for the decision the rejected revision answered.
            return {
                "reviews": (*state.reviews, event),
                "planning": revision.kind,
                "replan_action": revision.action,
            }
        case TaskFinished():
            if not outcome_allowed(event.status, event.reason):
                _refuse(state, event, f"status {event.status} cannot carry reason {event.reason}")
            return {"finished": event, "planning": None}
        case _:
            assert_never(event)


# Where each verification-phase event is kept in the state.
_VERIFY_FIELDS = {
    "verdict_recorded": "verdicts",
    "diagnosed": "diagnoses",
    "dispatched": "decisions",
}


def _record(state: TaskState, event: Event, record_id: RecordId) -> ExecutionRecord:
    record = state.records.get(record_id)
    if record is None:
        _refuse(state, event, f"there is no record {record_id}")
    return record


def _revision_started(
    state: TaskState, event: RevisionStarted, *, at: datetime | None
) -> dict[str, Any]:
    expected = len(state.revisions) + 1
    if event.number != expected:
        _refuse(state, event, f"the next revision is number {expected}, not {event.number}")
    if event.revision_kind != state.planning:
        _refuse(state, event, f"the planner was asked for a {state.planning} plan")
    if event.revision_kind is RevisionKind.LOCAL:
        if state.revision is None:
            _refuse(state, event, "a local replan needs an earlier revision")
        missing = sorted(event.redo - set(event.plan.node_ids))
        if missing:
            _refuse(state, event, f"redo names nodes that are not in the plan: {missing}")
        lineage = state.revisions[-1].lineage
    else:
        lineage = event.number
    revision = Revision(
        number=event.number,
        kind=event.revision_kind,
        reason=event.reason,
        plan=event.plan,
        feedback=event.feedback,
        lessons=event.lessons,
        redo=event.redo,
        lineage=lineage,
        # The revision started when its own event was written, not when the one before it was.
        started_at=at if at is not None else state.updated_at,
        attempt=state.planner_calls,
        node_ids=frozenset(event.plan.node_ids),
        action=state.replan_action,
    )
    return {
        "revisions": (*state.revisions, revision),
        "planning": None,
        "replan_action": None,
        "replan_deadline": None,
    }


def _node_dispatched(state: TaskState, event: NodeDispatched) -> dict[str, Any]:
    record = event.record
    _require_revision(state, event, record.revision)
    if record.task_id != state.task_id:
        _refuse(state, event, f"record {record.id} belongs to task {record.task_id}")
    if record.status is not RecordStatus.PENDING:
        _refuse(state, event, "a record is committed as pending before the tool is called")
    if record.id in state.records:
        _refuse(state, event, f"record {record.id} already exists")
    revision = state.revision
    if revision is None or record.node_id not in revision.node_ids:
        _refuse(state, event, f"node {record.node_id!r} is not in the current plan")
    return {"records": _with(state.records, record.id, record)}


def _effect(state: TaskState, event: Event, record_id: RecordId) -> TaskEffect:
    effect = state.effects.get(record_id)
    if effect is None:
        _refuse(state, event, f"record {record_id} is not an effect of this task")
    return effect


def _node_progressed(state: TaskState, event: NodeProgressed) -> dict[str, Any]:
    record = _record(state, event, event.record_id)
    if event.status not in (RecordStatus.ACCEPTED, RecordStatus.RUNNING):
        _refuse(state, event, "progress is accepted or running; finishing is node_finished")
    moved = record.advance(event.status, at=event.at)
    return {"records": _with(state.records, record.id, moved)}


def _unwind_started(state: TaskState, event: UnwindStarted) -> dict[str, Any]:
    if not outcome_allowed(event.status, event.reason) or event.status == "succeeded":
        _refuse(state, event, f"a task cannot unwind to {event.status}/{event.reason}")
    return {"unwinding": event, "planning": None}


def _record_reconciled(state: TaskState, event: RecordReconciled) -> dict[str, Any]:
    record = _record(state, event, event.record_id)
    if record.status is not RecordStatus.UNKNOWN or record.id in state.reconciled:
        _refuse(state, event, f"record {record.id} is not an unsettled unknown record")
    changes = {"reconciled": _with(state.reconciled, record.id, event)}
    effect = state.effects.get(record.id)
    if effect is not None:
        done = isinstance(event.result, Success)
        status = EffectStatus.DONE if done else EffectStatus.NOT_DONE
        settled = replace(effect, status=status, result=event.result)
        changes["effects"] = _with(state.effects, record.id, settled)
    return changes


def _effect_superseded(state: TaskState, event: EffectSuperseded) -> dict[str, Any]:
    _require_revision(state, event, event.revision)
    effect = _effect(state, event, event.record_id)
    if not effect.in_world:
        _refuse(state, event, f"effect {effect.record_id} is no longer in the world")
    superseded = replace(effect, superseded=event.revision)
    return {"effects": _with(state.effects, effect.record_id, superseded)}


def _node_reused(state: TaskState, event: NodeReused) -> dict[str, Any]:
    _require_revision(state, event, event.revision)
    revision = state.revisions[-1]
    if event.node_id not in revision.node_ids:
        _refuse(state, event, f"node {event.node_id!r} is not in the current plan")
    effect = _effect(state, event, event.record_id)
    # A compensation still under way may undo it at any moment: it does not stand yet.
    undoing = effect.compensation is not None and not effect.compensation.terminal
    if not (effect.happened and effect.in_world) or undoing:
        _refuse(state, event, f"effect {effect.record_id} is not one that took effect and stands")
    taken = any(
        record.revision == event.revision and record.node_id == event.node_id
        for record in state.records.values()
    ) or any(
        reuse.revision == event.revision and reuse.node_id == event.node_id
        for reuse in state.reused
    )
    if taken:
        _refuse(state, event, f"node {event.node_id!r} already ran in revision {event.revision}")
    changes: dict[str, Any] = {"reused": (*state.reused, event)}
    if effect.superseded is not None:
        # In use again: a later revision's plan wants what it did.
        changes["effects"] = _with(
            state.effects, effect.record_id, replace(effect, superseded=None)
        )
    return changes


def _compensation_dispatched(state: TaskState, event: CompensationDispatched) -> dict[str, Any]:
    effect = _effect(state, event, event.effect)
    record = event.record
    if not (effect.happened and effect.in_world):
        _refuse(state, event, f"effect {effect.record_id} is not one that took effect and stands")
    if effect.compensation is not None:
        _refuse(state, event, f"effect {effect.record_id} was already compensated once")
    if record.status is not RecordStatus.PENDING or record.task_id != state.task_id:
        _refuse(state, event, "a compensation is committed as pending, in its own task")
    if record.id in state.records or any(
        other.compensation is not None and other.compensation.id == record.id
        for other in state.effects.values()
    ):
        _refuse(state, event, f"record {record.id} already exists")
    changed = replace(effect, compensation=record)
    return {"effects": _with(state.effects, effect.record_id, changed)}


def _compensation_ended(
    state: TaskState, event: EffectCompensated | CompensationFailed
) -> dict[str, Any]:
    effect = _effect(state, event, event.effect)
    record = effect.compensation
    if record is None or record.id != event.record_id:
        _refuse(state, event, f"record {event.record_id} is not the compensation of this effect")
    if record.terminal:
        _refuse(state, event, f"the compensation {record.id} has already ended")
    if isinstance(event, EffectCompensated):
        status = RecordStatus.SUCCEEDED
        if not isinstance(event.result, Success):
            _refuse(state, event, "a compensation that undid its effect has a success result")
    else:
        status = event.status
        if status not in (RecordStatus.FAILED, RecordStatus.UNKNOWN):
            _refuse(state, event, f"a failed compensation is failed or unknown, not {status}")
        if event.result is not None and record_status_for(event.result) is not status:
            _refuse(state, event, f"a {event.result.kind} result does not give status {status}")
    moved = record.advance(status, at=event.at, error=_error_of(event.result))
    changed = replace(effect, compensation=moved, compensation_result=event.result)
    return {"effects": _with(state.effects, effect.record_id, changed)}


def _new_effect(
    state: TaskState, record: ExecutionRecord, status: RecordStatus, result: NodeResult | None
) -> TaskEffect:
    """The effect an action record that ended ``succeeded`` or ``unknown`` brings about."""
    occurrence = record.occurrence
    if occurrence is None:  # a record written before occurrences were: counted in order
        call = call_name(record.tool, record.node_id)
        occurrence = 1 + sum(
            1
            for effect in state.effects.values()
            if (call_name(effect.tool, effect.node_id), effect.args_digest)
            == (call, record.args_digest)
            and effect.status is not EffectStatus.NOT_DONE
        )
    args = record.args
    if args is None:  # an older record: its node's args, when no $ref had to be resolved
        plan = state.revisions[record.revision - 1].plan
        node = next((node for node in plan.nodes if node.id == record.node_id), None)
        if node is not None and next(iter_refs(node.args), None) is None:
            args = node.args  # type: ignore[assignment]  # a valid plan's args are a JsonObject
    return TaskEffect(
        record_id=record.id,
        node_id=record.node_id,
        revision=record.revision,
        tool=record.tool,
        args=args,
        args_digest=record.args_digest,
        occurrence=occurrence,
        key=record.idempotency_key,
        status=EffectStatus.SUCCEEDED if status is RecordStatus.SUCCEEDED else EffectStatus.UNKNOWN,
        result=result,
    )


def _node_finished(state: TaskState, event: NodeFinished) -> dict[str, Any]:
    record = _record(state, event, event.record_id)
    if event.status not in TERMINAL_RECORD_STATUSES:
        _refuse(state, event, f"{event.status} is not a terminal record status")
    if event.result is None:
        if event.status not in (RecordStatus.CANCELLED, RecordStatus.UNKNOWN):
            _refuse(state, event, f"a {event.status} record needs the node's result")
    elif record_status_for(event.result) is not event.status:
        _refuse(
            state,
            event,
            f"a {event.result.kind} result gives status {record_status_for(event.result)}, "
            f"not {event.status}",
        )
    moved = record.advance(event.status, at=event.at, error=_error_of(event.result))
    changes: dict[str, Any] = {"records": _with(state.records, record.id, moved)}
    if event.result is not None:
        changes["results"] = _with(state.results, record.id, event.result)
    if record.effect is Effect.ACTION and event.status in _EFFECT_STATUSES:
        effect = _new_effect(state, record, event.status, event.result)
        changes["effects"] = _with(state.effects, record.id, effect)
    return changes


# The record statuses that make an action an effect: it took effect, or may have.
_EFFECT_STATUSES = frozenset({RecordStatus.SUCCEEDED, RecordStatus.UNKNOWN})


def _error_of(result: NodeResult | None) -> str | None:
    if result is None or result.kind == "success":
        return None
    return result.error if result.kind == "device_failure" else result.reason
