"""Builders of ledger events, execution records, evidence and folded states, without a ledger.

Every builder describes one task, ``TASK``, created at ``T0``; keyword arguments change any
field. A test file that tells its own story binds its plan or contract once, e.g.
``revision = functools.partial(builders.revision, plan=PLAN)``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pev.ledger import (
    Event,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    RevisionKind,
    RevisionStarted,
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
    JsonValue,
    NodeResult,
    Plan,
    RecordId,
    RecordStatus,
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
) -> ExecutionRecord:
    """Execution record ``rid`` of ``node`` in ``status``, keyed ``<task_id>:<rid>``."""
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
