"""Execution records: one per dispatch of a node, with a one-way status (docs/design.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import assert_never

from pev._canonical import ADDED
from pev._json import JsonObject
from pev.errors import StateError
from pev.model._evidence import record_ref
from pev.model._frozen import slot_builder
from pev.model._ids import RecordId, TaskId
from pev.model._plan import Effect
from pev.model._results import DeviceFailure, NodeResult, Success, VerifierFailure

__all__ = [
    "TERMINAL_RECORD_STATUSES",
    "ExecutionRecord",
    "RecordStatus",
    "record_status_for",
]


class RecordStatus(StrEnum):
    """Where one dispatch stands. ``accepted`` is not ``completed``."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


TERMINAL_RECORD_STATUSES = frozenset(
    {RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.CANCELLED, RecordStatus.UNKNOWN}
)

# The one-way ladder: a record only moves to a later rung, and a terminal record never moves.
_RUNG = {RecordStatus.PENDING: 0, RecordStatus.ACCEPTED: 1, RecordStatus.RUNNING: 2}


def _may_move(current: RecordStatus, target: RecordStatus) -> bool:
    if current in TERMINAL_RECORD_STATUSES:
        return False
    if target in TERMINAL_RECORD_STATUSES:
        return True
    return _RUNG[target] > _RUNG[current]


def record_status_for(result: NodeResult) -> RecordStatus:
    """The terminal status a node result gives its record.

    ``Success`` → ``succeeded``; a ``DeviceFailure`` with an unknown outcome → ``unknown``; any
    other failure → ``failed``.
    """
    match result:
        case Success():
            return RecordStatus.SUCCEEDED
        case DeviceFailure(outcome_unknown=True):
            return RecordStatus.UNKNOWN
        case DeviceFailure() | VerifierFailure():
            return RecordStatus.FAILED
        case _:
            assert_never(result)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionRecord:
    """One dispatch of one node, committed as ``pending`` before the tool is called.

    Attributes:
        id: The record id; ``record:<id>`` is its evidence reference.
        task_id: The task it belongs to.
        revision: The revision whose plan dispatched it.
        node_id: The node it ran.
        tool: The tool called, if any.
        args_digest: sha256 of the canonical JSON of the resolved args.
        effect: The effective effect: the node's own, else its tool's (an action without a
            registered tool); a node may only make its tool's effect stricter.
        idempotency_key: Handed to the tool so it can de-duplicate. An action's key is the
            same for every dispatch of the same intended effect (task, tool, canonical args,
            occurrence), in any revision or process; a query's is the record's own.
        status: Where the dispatch stands.
        created_at: When it was committed as ``pending``.
        updated_at: When its status last changed.
        error: What went wrong, for a record that did not succeed.
        occurrence: For an action, which occurrence of its call (tool and canonical args) in
            the task it is: 1 for the first (docs/engine.md, "Effects happen once"); ``None``
            for a query, and for records written before occurrences were recorded.
        args: For an action whose args held a ``$ref``, the resolved args it was called with
            (what a compensation and the planner are shown); ``None`` otherwise: a query, an
            action whose args are its plan node's (the fold takes them from there), and older
            records.
    """

    id: RecordId
    task_id: TaskId
    revision: int
    node_id: str
    tool: str | None
    args_digest: str
    effect: Effect
    idempotency_key: str
    status: RecordStatus = RecordStatus.PENDING
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    # Added after ledgers were written: left out of the JSON while None, so an older record
    # encodes, and hashes, exactly as it did.
    occurrence: int | None = field(default=None, metadata=ADDED)
    args: JsonObject | None = field(default=None, metadata=ADDED)

    @property
    def terminal(self) -> bool:
        """True once the record has reached a terminal status; it never changes again."""
        return self.status in TERMINAL_RECORD_STATUSES

    @property
    def ref(self) -> str:
        """The evidence reference of this record, ``record:<id>``."""
        return record_ref(self.id)

    def advance(
        self, status: RecordStatus, *, at: datetime, error: str | None = None
    ) -> ExecutionRecord:
        """Return this record moved to ``status``.

        Raises:
            StateError: The move goes backwards or starts from a terminal status; a terminal
                record is never rewritten.
        """
        if not _may_move(self.status, status):
            raise StateError(
                f"record {self.id} of node {self.node_id!r} cannot move from {self.status} to "
                f"{status}: records only move forward and a terminal record never changes",
                task_id=self.task_id,
                state=self.status,
            )
        # Built from its slots rather than by `dataclasses.replace` or `__init__`, which cost
        # two and three times as much: every node that finishes moves its record.
        return _build_record(
            self.id,
            self.task_id,
            self.revision,
            self.node_id,
            self.tool,
            self.args_digest,
            self.effect,
            self.idempotency_key,
            status,
            self.created_at,
            at,
            error,
            self.occurrence,
            self.args,
        )

    @staticmethod
    def pending(
        *,
        id: RecordId,  # noqa: A002 - the field's own name
        task_id: TaskId,
        revision: int,
        node_id: str,
        tool: str | None,
        args_digest: str,
        effect: Effect,
        idempotency_key: str,
        at: datetime,
        occurrence: int | None = None,
        args: JsonObject | None = None,
    ) -> ExecutionRecord:
        """A new ``pending`` record, created and updated ``at`` (the engine's hot path)."""
        return _build_record(
            id,
            task_id,
            revision,
            node_id,
            tool,
            args_digest,
            effect,
            idempotency_key,
            RecordStatus.PENDING,
            at,
            at,
            None,
            occurrence,
            args,
        )


_build_record = slot_builder(ExecutionRecord)
