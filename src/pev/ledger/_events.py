"""The events of a task's ledger (docs/design.md §5.2).

Each event is a frozen value carrying everything it is about in full, so that :func:`replay`
alone rebuilds the task. Events are wrapped in a :class:`LedgerEntry` (sequence number, time,
schema version, hash chain) when they are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import ClassVar, Literal, TypeAlias

from pev._canonical import ADDED
from pev.kernel import Decision, Diagnosis, GlobalReplan, LocalReplan, TaskStatus, TerminalReason
from pev.model import (
    Evidence,
    EvidencePhase,
    ExecutionRecord,
    JsonObject,
    JsonValue,
    NodeResult,
    Plan,
    RecordId,
    RecordStatus,
    Reliability,
    TaskId,
    Verdict,
    VerificationContract,
)
from pev.policy import RecoveryPolicy

__all__ = [
    "SCHEMA_VERSION",
    "ApprovalRequested",
    "Approved",
    "AwaitingReplan",
    "CancelRequested",
    "CaptureFailed",
    "CompensationDispatched",
    "CompensationFailed",
    "Diagnosed",
    "Dispatched",
    "DriverStarted",
    "EffectCompensated",
    "EffectSuperseded",
    "Event",
    "EventSchema",
    "EvidenceCaptured",
    "LedgerEntry",
    "NodeDispatched",
    "NodeFinished",
    "NodeProgressed",
    "NodeReused",
    "NodeSkipped",
    "PlanRejected",
    "RawEntry",
    "RecordReconciled",
    "Rejected",
    "ReplanStarted",
    "RevisionKind",
    "RevisionStarted",
    "RoundExecuted",
    "StartFailed",
    "TaskCreated",
    "TaskFinished",
    "UnwindStarted",
    "Usage",
    "VerdictRecorded",
]

SCHEMA_VERSION = 1
"""The version of the stored layout of ledgers: the tables and the entry envelope.

An SQLite ledger file records it. It does not change with the event schemas: each entry
records its own, an :class:`EventSchema`, and a store reads every one this pev knows.
"""


class EventSchema(IntEnum):
    """How an entry's event is written and sealed: the entry's ``schema`` (docs/ledger-format.md).

    Attributes:
        PEV_SHA256: pev's own canonical JSON (``1.0`` stays ``1.0``), sealed with sha256; what
            every event written before RFC 8785 holds.
        JCS_SHA256: RFC 8785 (JCS) canonical JSON, sealed with sha256: new events without a key.
        JCS_HMAC_SHA256: RFC 8785 canonical JSON, sealed with HMAC-SHA256 under the ledger key
            (``PEV_LEDGER_KEY``): new events with a key.
    """

    PEV_SHA256 = 1
    JCS_SHA256 = 2
    JCS_HMAC_SHA256 = 3


class RevisionKind(StrEnum):
    """How a revision's plan came about."""

    INITIAL = "initial"
    LOCAL = "local"
    GLOBAL = "global"


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Which model produced a plan or verdict, and what it cost (never credentials)."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCreated:
    """A task exists: its input, contract and policy, and how to rebuild its components.

    Attributes:
        task_id: The task's one stable id.
        input: What the task was asked to do (JSON).
        contract: The verification contract.
        policy: The recovery policy.
        components: Import paths (``module:attribute``) of the planner, executor, verifier and
            observer where they have them, so another process can resume the task.
        task_deadline: When the whole task must be over, if ``task_timeout_s`` is set.
    """

    kind: ClassVar[Literal["task_created"]] = "task_created"
    task_id: TaskId
    input: JsonValue
    contract: VerificationContract
    policy: RecoveryPolicy
    components: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    task_deadline: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanStarted:
    """A replan passed the three valves and the planner is asked again; consumes one replan."""

    kind: ClassVar[Literal["replan_started"]] = "replan_started"
    planning: RevisionKind
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisionStarted:
    """A plan was accepted and becomes revision ``number`` (immutable from now on).

    Attributes:
        number: 1, 2, 3, ... with no gaps.
        revision_kind: ``initial``, ``local`` or ``global``.
        reason: Why this revision exists (the diagnosis detail, or "initial plan").
        plan: The full plan: for a local replan, kept nodes plus redone ones.
        feedback: The feedback the planner was given.
        lessons: The lessons given to the planner as advice.
        redo: For a local replan, the nodes to dispatch again; empty means all of them.
        usage: The model behind the plan, when an LLM produced it.
    """

    kind: ClassVar[Literal["revision_started"]] = "revision_started"
    number: int
    revision_kind: RevisionKind
    reason: str
    plan: Plan
    feedback: str = ""
    lessons: tuple[str, ...] = ()
    redo: frozenset[str] = frozenset()
    usage: Usage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRejected:
    """A plan was refused before anything ran; it is not a revision.

    Attributes:
        planning: What the planner was asked for.
        attempt: Which planner call this was (1 for the first).
        problems: Every problem found.
        plan: The plan as returned, when there was one.
        usage: The model behind the plan, when an LLM produced it.
    """

    kind: ClassVar[Literal["plan_rejected"]] = "plan_rejected"
    planning: RevisionKind
    attempt: int
    problems: tuple[str, ...]
    plan: Plan | None = None
    usage: Usage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDispatched:
    """A ``pending`` execution record, committed before the tool is called."""

    kind: ClassVar[Literal["node_dispatched"]] = "node_dispatched"
    record: ExecutionRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeProgressed:
    """The tool reported progress: ``accepted`` (not completed!) or ``running``."""

    kind: ClassVar[Literal["node_progressed"]] = "node_progressed"
    record_id: RecordId
    status: RecordStatus
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFinished:
    """A record reached its terminal status; it never changes again.

    Attributes:
        record_id: The record.
        status: ``succeeded``, ``failed``, ``cancelled`` or ``unknown``.
        result: The node's result; ``None`` only for a record cancelled before it produced one.
        at: When.
        settled_on_resume: The record was left unfinished by a crash and settled on resume.
    """

    kind: ClassVar[Literal["node_finished"]] = "node_finished"
    record_id: RecordId
    status: RecordStatus
    result: NodeResult | None
    at: datetime
    settled_on_resume: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSkipped:
    """A node was not dispatched this round because a dependency did not succeed."""

    kind: ClassVar[Literal["node_skipped"]] = "node_skipped"
    revision: int
    node_id: str
    blocked_by: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordReconciled:
    """A later observation established what an ``unknown`` record really did.

    The record itself is never rewritten; this event settles it.
    """

    kind: ClassVar[Literal["record_reconciled"]] = "record_reconciled"
    record_id: RecordId
    result: NodeResult
    evidence_refs: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeReused:
    """An action node is satisfied by an effect the task already has: it is not sent again.

    The task had this intended effect (the same tool, canonical args and occurrence) from an
    earlier revision, lineage or process, settled as done; the node takes that record's result
    and its dependents run (docs/engine.md, "Effects happen once").

    Attributes:
        revision: The revision whose node it is.
        node_id: The node.
        record_id: The record of the effect it reuses.
    """

    kind: ClassVar[Literal["node_reused"]] = "node_reused"
    revision: int
    node_id: str
    record_id: RecordId


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectSuperseded:
    """A revision replaced an effect: its node is redone with other args, or the plan names it.

    The effect stays in the world unless a compensation follows (written with this event when
    its tool has one).

    Attributes:
        record_id: The effect's record.
        revision: The revision that replaces it.
        reason: Why, in words.
    """

    kind: ClassVar[Literal["effect_superseded"]] = "effect_superseded"
    record_id: RecordId
    revision: int
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationDispatched:
    """A ``pending`` record of the call that undoes an effect, committed before it is made.

    A compensation is itself an action: at most one per effect, never repeated; one a crash
    leaves unfinished is settled ``unknown``.

    Attributes:
        effect: The record id of the effect it undoes.
        record: The compensation's own record (its node is the effect's node).
    """

    kind: ClassVar[Literal["compensation_dispatched"]] = "compensation_dispatched"
    effect: RecordId
    record: ExecutionRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectCompensated:
    """A compensation succeeded: the effect it cites is undone.

    Attributes:
        effect: The record id of the effect undone.
        record_id: The compensation's record.
        result: What the compensation returned.
        at: When it ended.
    """

    kind: ClassVar[Literal["effect_compensated"]] = "effect_compensated"
    effect: RecordId
    record_id: RecordId
    result: NodeResult
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationFailed:
    """A compensation failed or its outcome is unknown: the effect it cites is left in place.

    Attributes:
        effect: The record id of the effect.
        record_id: The compensation's record.
        status: ``failed`` or ``unknown``.
        result: What the compensation returned, if anything.
        at: When it ended.
        settled_on_resume: A crash left it unfinished and it was settled on resume.
    """

    kind: ClassVar[Literal["compensation_failed"]] = "compensation_failed"
    effect: RecordId
    record_id: RecordId
    status: RecordStatus
    result: NodeResult | None
    at: datetime
    settled_on_resume: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class UnwindStarted:
    """A task ending ``failed``, ``partial`` or ``cancelled`` undoes its effects first (a saga).

    Written instead of the ``task_finished`` it would have written, when the policy asks for it
    (``compensate_on_failure``) and the task has effects to undo; the task is ``compensating``
    until each is undone, newest first, and then ends with this status and reason (``partial``
    if an effect is left in place).

    Attributes:
        status: How the task ends once its effects are undone.
        reason: Why it ends.
        detail: The detail behind the reason.
    """

    kind: ClassVar[Literal["unwind_started"]] = "unwind_started"
    status: TaskStatus
    reason: TerminalReason
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceCaptured:
    """An observer captured an observation."""

    kind: ClassVar[Literal["evidence_captured"]] = "evidence_captured"
    evidence: Evidence


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureFailed:
    """An observer failed to capture an observation."""

    kind: ClassVar[Literal["capture_failed"]] = "capture_failed"
    revision: int
    phase: EvidencePhase
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundExecuted:
    """Every dispatchable node of the revision reached a terminal record (or was skipped)."""

    kind: ClassVar[Literal["round_executed"]] = "round_executed"
    revision: int
    executed_ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class VerdictRecorded:
    """What the verifier returned and how far the engine trusts it.

    Attributes:
        revision: The revision verified.
        verdict: The verdict, when one could be read.
        reliability: ``ok``, ``thrown``, ``malformed`` or ``inconclusive``.
        raw_digest: sha256 of the raw return ("" when the verifier raised).
        problems: Why it is malformed, or the exception when it was thrown.
        evidence_missing: Required evidence was missing, so the verifier was not called.
        usage: The model behind the verdict, when an LLM produced it.
    """

    kind: ClassVar[Literal["verdict_recorded"]] = "verdict_recorded"
    revision: int
    verdict: Verdict | None
    reliability: Reliability | None
    raw_digest: str = ""
    problems: tuple[str, ...] = ()
    evidence_missing: bool = False
    usage: Usage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosed:
    """The root cause of a verdict that did not pass."""

    kind: ClassVar[Literal["diagnosed"]] = "diagnosed"
    revision: int
    diagnosis: Diagnosis


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatched:
    """The kernel's decision (with, in audit mode, the shadow recovery decision inside)."""

    kind: ClassVar[Literal["dispatched"]] = "dispatched"
    revision: int
    decision: Decision


@dataclass(frozen=True, slots=True, kw_only=True)
class AwaitingReplan:
    """The task waits for a replan, which must begin before ``deadline``.

    Attributes:
        action: The replan decided on, or ``None`` after a rejected plan.
        deadline: The replan deadline (now + ``replan_timeout_s``).
    """

    kind: ClassVar[Literal["awaiting_replan"]] = "awaiting_replan"
    action: LocalReplan | GlobalReplan | None
    deadline: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested:
    """Someone asked for the task to stop (possibly from another process)."""

    kind: ClassVar[Literal["cancel_requested"]] = "cancel_requested"
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverStarted:
    """A driver took the task's lease and starts driving it: its first write under that epoch.

    Attributes:
        owner: The driver's lease owner id.
        epoch: The lease's fencing epoch (one more than the last driver's).
        host: The machine it runs on.
        process: Its process id.
    """

    kind: ClassVar[Literal["driver_started"]] = "driver_started"
    owner: str
    epoch: int
    host: str = ""
    process: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StartFailed:
    """A driver took the task's lease but could not start driving it; it let the lease go.

    Its agent could not be rebuilt (a module that does not import, a path that names nothing),
    an MCP server of the task would not start, or anything else failed before the drive's first
    step. After the policy's ``start_attempts`` such failures in a row (with no drive started
    between them), the task ends ``failed``/``agent_unavailable`` in the same write.

    Attributes:
        owner: The driver's lease owner id.
        epoch: The fencing epoch of the lease it held.
        host: The machine it runs on.
        process: Its process id.
        cause: What failed, in one line (the error's type and message, never a traceback).
    """

    kind: ClassVar[Literal["start_failed"]] = "start_failed"
    owner: str
    epoch: int
    host: str = ""
    process: int = 0
    cause: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested:
    """A revision waits for a person's approval before anything of it is dispatched.

    Written with the ``revision_started`` it is about, when the policy asks for approval
    (docs/control.md): with ``approval="actions"`` for a revision that would dispatch an action,
    with ``"always"`` for every revision.

    Attributes:
        revision: The revision awaiting approval.
        deadline: When the task ends ``failed``/``approval_expired`` unless it was decided
            (``approval_timeout_s`` after the request), or ``None`` to wait for ever.
        actions: The ids of the nodes the revision would dispatch that are actions.
    """

    kind: ClassVar[Literal["approval_requested"]] = "approval_requested"
    revision: int
    deadline: datetime | None = None
    actions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Approved:
    """A person approved the revision awaiting approval: it is dispatched as it is.

    Attributes:
        revision: The revision approved.
        by: Who approved it.
        note: What they said, if anything.
    """

    kind: ClassVar[Literal["approved"]] = "approved"
    revision: int
    by: str
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """A person rejected the revision awaiting approval: none of it is dispatched.

    The reason is fed back to the planner as a rejected plan's problems are (docs/design.md §4):
    an ``awaiting_replan`` follows in the same write, or the task's end (``failed``/``rejected``)
    when no replan is left or the mode is not ``recovery``.

    Attributes:
        revision: The revision rejected.
        by: Who rejected it.
        reason: Why, in their words: what the planner is told.
    """

    kind: ClassVar[Literal["rejected"]] = "rejected"
    revision: int
    by: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFinished:
    """The task ended; nothing follows this event.

    Attributes:
        status: ``succeeded``, ``partial``, ``failed`` or ``cancelled``.
        reason: Why, one of the terminal reasons allowed for the status.
        outputs: Node id → value of every succeeded node of the final plan.
        detail: The diagnosis or valve detail behind the reason; for a success whose agent
            could not make its output, why not.
        output: A succeeded task's output, made by its agent's ``output=`` (docs/engine.md,
            "Typed agents"), as JSON; ``None`` without one.
    """

    kind: ClassVar[Literal["task_finished"]] = "task_finished"
    status: TaskStatus
    reason: TerminalReason
    outputs: Mapping[str, JsonValue] = field(default_factory=JsonObject)
    detail: str = ""
    output: JsonValue = field(default=None, metadata=ADDED)


Event: TypeAlias = (
    TaskCreated
    | ReplanStarted
    | RevisionStarted
    | PlanRejected
    | NodeDispatched
    | NodeProgressed
    | NodeFinished
    | NodeSkipped
    | NodeReused
    | RecordReconciled
    | EffectSuperseded
    | CompensationDispatched
    | EffectCompensated
    | CompensationFailed
    | UnwindStarted
    | EvidenceCaptured
    | CaptureFailed
    | RoundExecuted
    | VerdictRecorded
    | Diagnosed
    | Dispatched
    | AwaitingReplan
    | CancelRequested
    | DriverStarted
    | StartFailed
    | ApprovalRequested
    | Approved
    | Rejected
    | TaskFinished
)
"""Every event a ledger can hold."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry:
    """One stored event: its place in the task's log and its link in the hash chain.

    Attributes:
        task_id: The task.
        seq: 1, 2, 3, ... per task, with no gaps.
        at: When it was written (UTC).
        schema: How the event is written and sealed (an :class:`EventSchema`).
        event: The event.
        prev_hash: The previous entry's hash (64 zeros for the first).
        hash: The seal over this entry's fields and ``prev_hash``: sha256, or HMAC-SHA256.
    """

    task_id: TaskId
    seq: int
    at: datetime
    schema: int
    event: Event
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RawEntry:
    """One stored entry exactly as the store holds it: nothing decoded, nothing checked.

    What :meth:`pev.ledger.Store.read_raw` returns, so that a chain can be checked from the
    stored texts themselves (and a damaged one reported, not raised).

    Attributes:
        task_id: The task.
        seq: The stored sequence number.
        at: The stored time: its JSON text, quotes included, as it was sealed.
        schema: The stored event schema version (an :class:`EventSchema` when known).
        event: The stored event: its canonical JSON text, as it was sealed.
        prev_hash: The stored hash of the entry before.
        hash: The stored seal of this entry.
    """

    task_id: str
    seq: int
    at: str
    schema: int
    event: str
    prev_hash: str
    hash: str
