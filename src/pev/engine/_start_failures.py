"""Drives that cannot start: recorded, their lease let go, tried again later, ended after N.

A worker's drive of a claimed task *cannot start* when something fails after the claim and
before the drive's first step: the task's agent, or a part of it, does not import, is not
rebuildable or lies outside ``PEV_TRUSTED_MODULES``; an MCP server the task recorded does not
start. The store's own trouble (a :class:`~pev.errors.StoreError` or
:class:`~pev.errors.LeaseError`) is not such a failure: the worker handles it as any failed
drive. See docs/workers.md, "Drives that cannot start".

A failed start is a value in the task's ledger, not a crash of the worker:

- :func:`record_not_started` writes a ``start_failed`` event naming the cause (:func:`start_cause`:
  one line, secrets redacted) and the worker (owner, host, process), fenced by the claim's lease,
  then lets the lease go at once, whatever became of that write, so that another worker (one
  where the agent imports) may take the task straight away.
- The worker that failed claims the task again only after a pause (:class:`Backoff`): ``poll_s``
  at first, twice as long after each failure, at most the lease.
- At the policy's ``start_attempts`` failed starts in a row (:class:`pev.policy.RecoveryPolicy`),
  the same write ends the task ``failed``/``agent_unavailable``, the last cause in its detail.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket

from pev._logs import log_failure
from pev.engine._redact import known_redactor
from pev.engine._settle import unanswered
from pev.errors import ConflictError, PevError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    Event,
    Lease,
    Ledger,
    StartFailed,
    TaskFinished,
    TaskState,
    unfinished_records,
    utc_now,
)

__all__ = ["Backoff", "NotStarted", "let_go", "record_not_started", "start_cause"]

# The worker's logger: these records belong to its story.
log = logging.getLogger("pev.worker")

# How a start failure's cause is kept: one line, at most this long.
_CAUSE_CHARS = 500

# The hint the engine adds for Python callers of resume, which a worker's reader cannot follow.
_PYTHON_HINT = re.compile(r"; pass \w+=\.\.\. to resume$")


def start_cause(exc: BaseException) -> str:
    """Why a drive could not start, in one line: the error's type and message, secrets redacted."""
    text = _PYTHON_HINT.sub("", " ".join(str(exc).split()))
    cause = known_redactor().text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    return cause if len(cause) <= _CAUSE_CHARS else cause[: _CAUSE_CHARS - 3] + "..."


class NotStarted(Exception):  # noqa: N818 - a carrier of the task's state, not an error
    """A claimed task's drive could not start; carries the task's state after the record."""

    def __init__(self, state: TaskState) -> None:
        super().__init__(state.task_id)
        self.state = state


class Backoff:
    """When this worker may claim again each task whose drive it could not start.

    After a task's ``n``-th failed start it waits ``first_s * 2 ** (n - 1)``, at most
    ``most_s``: other workers may take the task sooner (a worker where its agent imports).
    """

    def __init__(self, *, first_s: float, most_s: float) -> None:
        self._first_s = first_s
        self._most_s = most_s
        self._due: dict[str, float] = {}

    def note(self, task_id: str, attempts: int) -> None:
        """The task's drive failed to start for the ``attempts``-th time."""
        delay = min(self._first_s * 2 ** min(max(attempts - 1, 0), 30), self._most_s)
        self._due[task_id] = _loop_time() + delay

    def waiting(self) -> frozenset[str]:
        """The tasks not to drive yet."""
        now = _loop_time()
        self._due = {task_id: due for task_id, due in self._due.items() if due > now}
        return frozenset(self._due)

    def next_due_s(self) -> float:
        """Seconds until the first waiting task is due (0 when none waits)."""
        return max((min(self._due.values(), default=0.0) - _loop_time()), 0.0)


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


async def let_go(ledger: Ledger, lease: Lease) -> None:
    """Let a lease go now; a store failure is logged (the lease then expires)."""
    try:
        await ledger.release(lease)
    except PevError:
        log_failure(
            log, "task %s: releasing the lease failed", lease.task_id, then="it expires by itself"
        )


async def record_not_started(
    ledger: Ledger, state: TaskState, claimed: Lease, exc: Exception, *, backoff: Backoff
) -> TaskState:
    """Record a drive that could not start, let its lease go, end the task after N tries.

    The ``start_failed`` event names the cause and this worker; with the policy's
    ``start_attempts`` reached, the task ends ``failed``/``agent_unavailable`` in the same
    write. The lease is released whatever happens to that write, and ``backoff`` notes the
    failure, so that this worker waits before it drives the task again.

    Returns:
        The task's state after the record (as it was, when the write failed).
    """
    task_id = claimed.task_id
    cause = start_cause(exc)
    failed = StartFailed(
        owner=claimed.owner,
        epoch=claimed.epoch,
        host=socket.gethostname(),
        process=os.getpid(),
        cause=cause,
    )
    attempts = state.failed_starts + 1
    try:
        for _ in range(3):  # another writer (a cancel) may move the task on meanwhile
            attempts = state.failed_starts + 1
            try:
                state, _ = await ledger.write(
                    task_id, _start_failure(state, failed, attempts), fence=claimed
                )
                break
            except ConflictError:
                ledger.forget(task_id)
                state = await ledger.state(task_id)
                if state.terminal:
                    break
        else:
            log.warning(
                "task %s: other writers moved it on under every try to record that its drive "
                "could not start; the task is claimed and tried again",
                task_id,
            )
    except PevError:
        log_failure(
            log,
            "task %s: recording that its drive could not start failed",
            task_id,
            then="the task is claimed and tried again",
        )
    finally:
        await let_go(ledger, claimed)
    backoff.note(task_id, attempts)
    ended = state.finished
    log.error(
        "task %s: its drive could not start (attempt %d of %d): %s; %s",
        task_id,
        attempts,
        state.policy.start_attempts,
        cause,
        f"it ended {ended.status}/{ended.reason}"
        if ended is not None
        else "lease released, to be tried again",
    )
    return state


def _start_failure(state: TaskState, failed: StartFailed, attempts: int) -> list[Event]:
    """The events of a failed start: the failure, and the task's end at its last attempt.

    A task that ends so is settled first: a call an earlier driver left unfinished (it died
    mid-call) is ended as resume would without a ``reconcile``, since no agent is there to ask:
    an action ``unknown`` (never sent again), a query ``failed``. No record of an ended task is
    left open.
    """
    if attempts < state.policy.start_attempts:
        return [failed]
    why = (
        "the process driving this call stopped mid-call, and the task ended before another "
        "could settle it (its agent did not start)"
    )
    now = utc_now()
    settled = [unanswered(record, at=now, why=why) for record in unfinished_records(state)]
    return [
        failed,
        *settled,
        TaskFinished(
            status=TaskStatus.FAILED,
            reason=TerminalReason.AGENT_UNAVAILABLE,
            detail=f"its drive could not start {attempts} times; the last time: {failed.cause}",
        ),
    ]
