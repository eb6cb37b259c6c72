"""The task index row: what a store lists tasks by, and the head that guards the chain's end."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pev.kernel import TaskStatus, TerminalReason
from pev.ledger._events import TaskCreated
from pev.ledger._phases import REPLAN_DEADLINE_PHASES, TaskPhase
from pev.ledger._state import TaskState
from pev.model import TaskId, canonical_json
from pev.model._frozen import slot_builder

__all__ = ["TaskSummary", "summarize", "task_title"]

_TITLE_LENGTH = 120


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSummary:
    """One task in the index: for listing by status and time, and for checking the chain's head.

    Attributes:
        task_id: The task.
        phase: Where it stands.
        status: Its terminal status, once it has ended.
        reason: Its terminal reason, once it has ended.
        title: The contract's goal, or the start of the input.
        created_at: When it was created.
        updated_at: When its last event was written.
        event_count: How many events its ledger holds.
        head_hash: The hash of its last event.
        replan_deadline: The deadline of what it waits for, if it waits: when a replan must
            begin (``awaiting_replan``, ``planning``), or when an approval must come
            (``awaiting_approval``). Expiry finds overdue tasks by it.
    """

    task_id: TaskId
    phase: TaskPhase
    status: TaskStatus | None
    reason: TerminalReason | None
    title: str
    created_at: datetime
    updated_at: datetime
    event_count: int
    head_hash: str
    replan_deadline: datetime | None


def summarize(state: TaskState, *, head_hash: str, title: str | None = None) -> TaskSummary:
    """The index row for a task's state.

    Args:
        state: The task's state after its last event.
        head_hash: The hash of its last event.
        title: Its :func:`task_title`, when the caller already has it (the ledger keeps the
            titles of recent tasks: the one part of a row that never changes).

    Raises:
        ValueError: The state was folded from bare events, which carry no times.
    """
    if state.created_at is None or state.updated_at is None:
        raise ValueError("a task summary needs the times of stored entries, not bare events")
    in_replan = state.phase in REPLAN_DEADLINE_PHASES
    deadline = state.replan_deadline if in_replan else state.approval_ends
    finished = state.finished
    # From its slots, in field order: every write makes one.
    return _build_summary(
        state.task_id,
        state.phase,
        finished.status if finished else None,
        finished.reason if finished else None,
        title if title is not None else task_title(state.created),
        state.created_at,
        state.updated_at,
        state.event_count,
        head_hash,
        deadline,
    )


_build_summary = slot_builder(TaskSummary)


def task_title(created: TaskCreated) -> str:
    """A task's title: its contract's goal, or the start of its input, on one line."""
    goal = created.contract.goal.strip()
    if goal:
        text = goal
    elif isinstance(created.input, str):
        text = created.input
    else:
        text = canonical_json(created.input)
    text = " ".join(text.split())
    return text if len(text) <= _TITLE_LENGTH else text[: _TITLE_LENGTH - 1] + "…"
