"""Builders of ledger events, execution records, evidence and folded states, without a ledger.

Every builder describes one task, ``TASK``, created at ``T0``; keyword arguments change any
field. A test file that tells its own story binds its plan or contract once, e.g.
``revision = functools.partial(builders.revision, plan=PLAN)``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pev.kernel import GlobalReplan, LocalReplan
from pev.ledger import (
    AwaitingReplan,
    CompensationDispatched,
    CompensationFailed,
    EffectCompensated,
    Event,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskCreated,
    TaskState,
    apply,
    new_task,
    replay,
)
from pev.model import (
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    JsonObject,
    JsonValue,
    NodeResult,
    Plan,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerificationContract,
    VerificationMode,
    digest,
    record_status_for,
)
from pev.policy import RecoveryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TASK = TaskId("task-1")


def contract(
    mode: VerificationMode = VerificationMode.RECOVERY,
    goal: str = "tidy the desk",
    criteria: tuple[str, ...] = ("the cup is in the sink",),
    *,
    required_evidence: tuple[str, ...] = (),
) -> VerificationContract:
    """A contract in ``mode``; an ``off`` contract has no goal and no criteria."""
    if mode is VerificationMode.OFF:
        return VerificationContract(VerificationMode.OFF)
    return VerificationContract(mode, goal, criteria, required_evidence=required_evidence)


CONTRACT = contract()
NO_ARGS = digest({})
UNDONE = Success("undone")


def created(
    contract: VerificationContract = CONTRACT,
    *,
    task_id: str = TASK,
    input: JsonValue = "tidy the desk",  # noqa: A002 - new_task's name
    now: datetime = T0,
    **policy: Any,
) -> TaskCreated:
    """A ``task_created`` event; the keyword arguments left over make its ``RecoveryPolicy``."""
    return new_task(
        TaskId(task_id),
        input=input,
        contract=contract,
        policy=RecoveryPolicy(**policy),
        now=now,
    )


def revision(
    number: int,
    kind: RevisionKind = RevisionKind.INITIAL,
    *,
    plan: Plan,
    redo: frozenset[str] = frozenset(),
    reason: str = "why",
) -> RevisionStarted:
    """A ``revision_started`` event: revision ``number`` of ``plan``."""
    return RevisionStarted(number=number, revision_kind=kind, reason=reason, plan=plan, redo=redo)


def to_planning(
    number: int, kind: RevisionKind, *, redo: frozenset[str] = frozenset()
) -> tuple[Event, ...]:
    """End revision ``number``'s round and start planning a replan of ``kind``."""
    action = LocalReplan(redo) if kind is RevisionKind.LOCAL else GlobalReplan()
    return (
        RoundExecuted(revision=number, executed_ok=False),
        AwaitingReplan(action=action, deadline=T0 + timedelta(seconds=60)),
        ReplanStarted(planning=kind, attempt=number + 1),
    )


def replanned(
    number: int,
    kind: RevisionKind,
    *,
    plan: Plan,
    redo: frozenset[str] = frozenset(),
) -> tuple[Event, ...]:
    """End revision ``number - 1``'s round, replan as ``kind`` and start revision ``number``."""
    return (*to_planning(number - 1, kind, redo=redo), revision(number, kind, plan=plan, redo=redo))


def record(
    rid: str,
    node: str,
    status: RecordStatus = RecordStatus.PENDING,
    *,
    task_id: str = TASK,
    revision: int = 1,
    tool: str | None = "arm",
    args_digest: str = NO_ARGS,
    effect: Effect = Effect.ACTION,
    idempotency_key: str | None = None,
    at: datetime = T0,
    occurrence: int | None = None,
    args: JsonObject | None = None,
) -> ExecutionRecord:
    """Execution record ``rid`` of ``node`` in ``status``, keyed ``<task_id>:<rid>``.

    ``occurrence`` and ``args`` left ``None`` make a record as written before they were kept.
    """
    return ExecutionRecord(
        id=RecordId(rid),
        task_id=TaskId(task_id),
        revision=revision,
        node_id=node,
        tool=tool,
        args_digest=args_digest,
        effect=effect,
        idempotency_key=f"{task_id}:{rid}" if idempotency_key is None else idempotency_key,
        status=status,
        created_at=at,
        updated_at=at,
        occurrence=occurrence,
        args=args,
    )


def dispatched(rid: str, node: str, **options: Any) -> NodeDispatched:
    """A ``node_dispatched`` event for ``record(rid, node, **options)``."""
    return NodeDispatched(record=record(rid, node, **options))


def finished(rid: str, result: NodeResult, *, at: datetime = T0) -> NodeFinished:
    """A ``node_finished`` event: record ``rid`` ended with ``result``, status to match."""
    return NodeFinished(
        record_id=RecordId(rid), status=record_status_for(result), result=result, at=at
    )


def ran(rid: str, node: str, result: NodeResult | None, **options: Any) -> tuple[Event, ...]:
    """A dispatch of ``node`` (``record`` takes the options), finished with ``result``.

    With ``result`` None the record is left pending.
    """
    start = dispatched(rid, node, **options)
    return (start,) if result is None else (start, finished(rid, result))


def reused(node: str, rid: str, *, revision: int = 1) -> NodeReused:
    """A ``node_reused`` event: ``node`` of ``revision`` is satisfied by effect ``rid``."""
    return NodeReused(revision=revision, node_id=node, record_id=RecordId(rid))


def compensating(effect: str, rid: str, node: str, **options: Any) -> CompensationDispatched:
    """A ``compensation_dispatched`` event: pending record ``rid`` of ``node`` undoes ``effect``.

    ``record`` takes the options; the tool is ``undo`` unless they name another.
    """
    options.setdefault("tool", "undo")
    return CompensationDispatched(effect=RecordId(effect), record=record(rid, node, **options))


def compensated(
    effect: str, rid: str, result: NodeResult = UNDONE, *, at: datetime = T0
) -> EffectCompensated:
    """An ``effect_compensated`` event: compensation ``rid`` undid ``effect``."""
    return EffectCompensated(effect=RecordId(effect), record_id=RecordId(rid), result=result, at=at)


def compensation_failed(
    effect: str,
    rid: str,
    result: NodeResult | None,
    *,
    status: RecordStatus | None = None,
    at: datetime = T0,
    settled_on_resume: bool = False,
) -> CompensationFailed:
    """A ``compensation_failed`` event: compensation ``rid`` of ``effect`` ended with ``result``.

    The status is the result's, unless given (it must be, without a result).
    """
    if status is None:
        assert result is not None, "a compensation without a result needs a status"
        status = record_status_for(result)
    return CompensationFailed(
        effect=RecordId(effect),
        record_id=RecordId(rid),
        status=status,
        result=result,
        at=at,
        settled_on_resume=settled_on_resume,
    )


def evidence(
    eid: str = "e1",
    phase: EvidencePhase = EvidencePhase.AFTER,
    *,
    kind: str = "state",
    source: str = "cam",
    revision: int = 1,
    at: datetime = T0,
    **fields: Any,
) -> Evidence:
    """Observation ``eid``; ``fields`` are Evidence's others (payload, artifact, ...)."""
    return Evidence(
        id=EvidenceId(eid),
        phase=phase,
        kind=kind,
        source=source,
        captured_at=at,
        revision=revision,
        **fields,
    )


def captured(eid: str = "e1", phase: EvidencePhase = EvidencePhase.AFTER, **options: Any) -> Event:
    """An ``evidence_captured`` event for ``evidence(eid, phase, **options)``."""
    return EvidenceCaptured(evidence=evidence(eid, phase, **options))


def fold(*events: Event) -> TaskState:
    """The state ``events`` fold to, from the first."""
    return replay(events)


def step(state: TaskState, events: tuple[Event, ...]) -> TaskState:
    """``state`` with ``events`` applied, one by one."""
    for event in events:
        state = apply(state, event)
    return state
