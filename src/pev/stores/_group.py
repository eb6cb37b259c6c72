"""Group commit: appends issued together share one durable commit (docs/ledger.md §9).

Ten thousand tasks in one event loop append in bursts: a hundred of them may append in the same
turn of the loop, and a commit apiece costs a hundred disk flushes one after the other. A
:class:`GroupCommit` gathers the appends issued in one turn and hands them to the store as one
batch, which the store commits in one transaction, each append in a savepoint of its own, so an
append that fails is rolled back alone. No timer is involved: a batch is flushed at the end of
the turn its first append was issued in, so a lone append waits for nothing but that turn.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

J = TypeVar("J")
R = TypeVar("R")


@dataclass(slots=True)
class _Waiting(Generic[J, R]):
    """A job waiting for its batch, and the future its caller awaits."""

    job: J
    future: asyncio.Future[R]


class GroupCommit(Generic[J, R]):
    """Commits the jobs issued together in one batch, and gives each caller its own outcome.

    A job submitted when no batch is waiting starts one, and schedules its flush for the end of
    the current turn of the event loop (a task: its first step runs after every callback that
    was already due); jobs submitted before the flush starts join the batch, up to ``limit``.
    Jobs submitted while a batch commits form the next batch, which the same flush commits once
    the first has ended. Each caller returns only once its batch's commit has ended: with its
    job's result after the commit succeeded, with its job's own error (the job was rolled back
    alone), or with the batch's error when the commit itself failed (nothing was committed).

    A caller cancelled while its job waits leaves the batch unharmed: a job whose batch has not
    started is dropped, one whose batch is committing may still be committed. Its caller cannot
    tell which, as with any write cancelled while it runs.

    Jobs are grouped per event loop: one submitted from another loop (another thread) while a
    batch of this one is pending commits alone.

    Args:
        commit: Commits a batch: one outcome per job, in order (its result, or the exception
            that job raised and was rolled back for). An exception it raises fails every job of
            the batch.
        limit: The most jobs one batch holds, so that a commit does not grow without bound.
    """

    def __init__(
        self, commit: Callable[[Sequence[J]], Awaitable[Sequence[R | BaseException]]], *, limit: int
    ) -> None:
        self._commit = commit
        self._limit = limit
        self._waiting: collections.deque[_Waiting[J, R]] = collections.deque()
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Held only to join or leave the queue: a store may be used from several threads.
        self._guard = threading.Lock()

    async def submit(self, job: J) -> R:
        """Commit ``job`` with the jobs issued in the same turn; its outcome once committed.

        Raises:
            BaseException: The job's own error (it alone was rolled back), or the batch's.
        """
        loop = asyncio.get_running_loop()
        waiting: _Waiting[J, R] = _Waiting(job, loop.create_future())
        with self._guard:
            if self._loop is not None and self._loop is not loop and self._loop.is_closed():
                # A loop that closed with a flush unfinished: its jobs can never be settled.
                self._flusher = None
                self._waiting.clear()
            joined = self._flusher is None or self._loop is loop
            if joined:
                self._waiting.append(waiting)
                if self._flusher is None:
                    self._loop = loop
                    self._flusher = loop.create_task(self._flush(), name="pev-group-commit")
        if not joined:
            (outcome,) = await self._commit([job])
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return await waiting.future

    async def _flush(self) -> None:
        """Commit the waiting jobs, a batch at a time, until none is left."""
        batch: list[_Waiting[J, R]] = []
        try:
            while batch := self._next_batch():
                try:
                    outcomes = await self._commit([waiting.job for waiting in batch])
                except Exception as exc:  # noqa: BLE001 - the batch's error goes to its callers
                    outcomes = [exc] * len(batch)
                for waiting, outcome in zip(batch, outcomes, strict=True):
                    _settle(waiting.future, outcome)
        finally:
            # Only a flush cancelled (its loop closing) or interrupted gets here with a batch
            # unsettled or jobs left waiting: their outcome is unknown, and their callers are
            # told so by a cancellation.
            with self._guard:
                self._flusher = None
                left = [*batch, *self._waiting]
                self._waiting.clear()
            for waiting in left:
                waiting.future.cancel()

    def _next_batch(self) -> list[_Waiting[J, R]]:
        """Up to ``limit`` waiting jobs whose callers still wait; empty when none is left."""
        batch: list[_Waiting[J, R]] = []
        with self._guard:
            while self._waiting and len(batch) < self._limit:
                waiting = self._waiting.popleft()
                if not waiting.future.cancelled():  # a caller that gave up before it started
                    batch.append(waiting)
        return batch


def _settle(future: asyncio.Future[R], outcome: R | BaseException) -> None:
    if future.done():  # its caller was cancelled while the batch committed
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
