"""What every step of the loop needs of whoever drives it, and the helpers the steps share.

A step (a round, settling, planning, verifying, observing) never sees the driver: it depends on
:class:`TaskHost`, the task's state as of the last write, its deadline, and the one way to
write, or on a protocol that adds exactly what that step needs besides (see docs/engine.md,
"Inside the driver").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pev.engine._deadline import Deadline
from pev.errors import StateError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import Event, Revision, TaskFinished, TaskState, UnwindStarted, finish

__all__ = ["TaskHost", "current", "task_deadline_finish"]


class TaskHost(Protocol):
    """The task being driven: its state, its deadline, and writing to its ledger."""

    @property
    def state(self) -> TaskState:
        """The task's state as of the last write."""
        ...

    @property
    def deadline(self) -> Deadline:
        """The task deadline, read against the engine's clock."""
        ...

    async def write(self, events: Sequence[Event]) -> TaskState:
        """Append ``events`` in one transaction; return the new state."""
        ...


def current(state: TaskState) -> Revision:
    """The task's current revision; executing and verifying always have one."""
    revision = state.revision
    if revision is None:
        raise StateError(
            f"task {state.task_id} is {state.phase} without a revision",
            task_id=state.task_id,
            state=state.phase,
        )
    return revision


def task_deadline_finish(state: TaskState) -> TaskFinished | UnwindStarted:
    """The event that ends a task whose deadline passed."""
    return finish(
        state,
        TaskStatus.FAILED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
        detail=f"the task deadline {state.created.task_deadline} passed",
    )
