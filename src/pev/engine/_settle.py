"""Settling records whose outcome the engine does not know (docs/engine.md, "Crash and resume").

Three moments call for it. As soon as an action ends ``unknown`` (a call that timed out or
crashed may or may not have taken effect), and after each round for what is left: when the
executor can tell (``reconcile(record)``), what it establishes is a ``record_reconciled``
event, and the record itself is never rewritten; settled as done in the round, the nodes behind
it go on. On resume, records a crash left ``pending``, ``accepted`` or ``running`` are settled
the same way, else an action is marked ``unknown`` and never sent again, while a query (a read,
safe to repeat) is ended ``cancelled`` and dispatched again as a new record, up to
:data:`QUERY_DISPATCHES` times in a revision; the current revision's actions of unknown
outcome are asked about too, so that the round goes on from what they did. The executor is
asked about each record at most once per drive.

A record left unfinished by an earlier driver may still be in flight: fencing stops that driver's
writes, not a tool call it already started. So an unfinished action is asked about only once its
own deadline (its dispatch time plus its tool's timeout, else ``node_timeout_s``) has passed, and
the drive waits for that moment (within the task deadline). Without such a deadline the call
could still land at any time: a reconcile answer that it did *not* happen is then not trusted,
and the record stays ``unknown``; an answer that it did happen always counts (see docs/tools.md,
"Reconciling a call of unknown outcome").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from pev.engine._host import TaskHost
from pev.engine._recordable import recordable_result
from pev.ledger import (
    Event,
    NodeFinished,
    RecordReconciled,
    TaskPhase,
    TaskState,
    unfinished_records,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    RecordId,
    RecordStatus,
    Success,
    VerifierFailure,
    record_status_for,
)

__all__ = ["QUERY_DISPATCHES", "Settler", "unanswered"]

log = logging.getLogger("pev.engine")

QUERY_DISPATCHES = 3
"""How often one query may be dispatched in a revision when crashes keep cutting it short.

A read that a crash, a takeover or an interrupt left unfinished runs again; one that was cut
short this often (a query that brings its process down, say) is settled as a device failure.
"""


class Settler:
    """Asks the executor what unsettled records did, for whatever drives the task.

    It needs no more of that than every step does (a :class:`~pev.engine._host.TaskHost`):
    the task's state, its deadline (and clock), and writing.
    """

    def __init__(
        self,
        host: TaskHost,
        reconcile: Callable[..., Awaitable[Any]] | None,
        *,
        timeout_of: Callable[[ExecutionRecord], float | None] = lambda record: None,
        cancel: asyncio.Event | None = None,
    ) -> None:
        self._host = host
        self._reconcile = reconcile
        self._timeout_of = timeout_of
        self._cancel = cancel or asyncio.Event()
        self._asked: set[RecordId] = set()

    async def after_round(self, number: int, *, unfinished: bool = False) -> None:
        """Settle what the executor can tell of round ``number``'s records of unknown outcome.

        An answer that is itself of unknown outcome, ``None``, or an exception settles nothing.
        With ``unfinished`` (on resume), a record is asked about as one a crash left unfinished
        is: once its call can no longer land.
        """
        if self._reconcile is None:
            return
        state = self._host.state
        events: list[Event] = []
        for record in state.records.values():
            if (
                record.revision != number
                or record.status is not RecordStatus.UNKNOWN
                or record.id in state.reconciled
                or record.id in self._asked
            ):
                continue
            result = _settles(
                await (self._ask_unfinished(record) if unfinished else self._ask(record))
            )
            if result is None:
                continue
            events.append(
                RecordReconciled(
                    record_id=record.id,
                    result=result,
                    note="settled by the executor's reconcile after the round",
                )
            )
        await self._host.write(events)

    async def right_after(self, record: ExecutionRecord) -> NodeResult | None:
        """What ``reconcile`` establishes of an action that just ended ``unknown``, if anything.

        ``None`` when the executor cannot tell (no ``reconcile``, an answer of unknown outcome,
        ``None``, an exception); the record is not asked about again in this drive.
        """
        if self._reconcile is None or record.id in self._asked:
            return None
        return _settles(await self._ask(record))

    async def unfinished(self) -> None:
        """Settle what a crash left unfinished, then what the current revision left unknown.

        An unfinished action is reconciled, else marked ``unknown``: it is never re-sent on
        resume. An unfinished query is reconciled, else ended ``cancelled``: the round
        dispatches it again (a failure once it was cut short :data:`QUERY_DISPATCHES` times).
        """
        state = self._host.state
        events: list[Event] = []
        for record in unfinished_records(state):
            result = await self._ask_unfinished(record)
            at = self._host.deadline.now()
            if result is None and record.effect is Effect.ACTION:
                why = "the process driving this action stopped"
                events.append(unanswered(record, at=at, why=why))
            elif result is None and _cut_short(state, record) >= QUERY_DISPATCHES:
                why = (
                    "the process running this query stopped before it answered, "
                    f"{QUERY_DISPATCHES} times"
                )
                events.append(unanswered(record, at=at, why=why))
            else:  # what reconcile established, or a read that runs again
                status = RecordStatus.CANCELLED if result is None else record_status_for(result)
                events.append(
                    NodeFinished(
                        record_id=record.id,
                        status=status,
                        result=result,
                        at=at,
                        settled_on_resume=True,
                    )
                )
        await self._host.write(events)
        revision = self._host.state.revision
        if revision is not None and self._host.state.phase is TaskPhase.EXECUTING:
            # Reconcile, then go on: the round dispatches what a settled action blocked.
            await self.after_round(revision.number, unfinished=True)

    async def _ask_unfinished(self, record: ExecutionRecord) -> NodeResult | None:
        """What an unfinished record did, asked once the call can no longer land (see above)."""
        if self._reconcile is None or record.effect is not Effect.ACTION:
            return await self._ask(record)
        timeout = self._timeout_of(record)
        if timeout is None:
            answer = await self._ask(record)
            return answer if isinstance(answer, Success) else None
        ends = record.created_at + timedelta(seconds=timeout)
        wait = (ends - self._host.deadline.now()).total_seconds()
        if wait > 0:
            left = self._host.deadline.remaining_s()
            if left is not None and left <= wait:
                return None  # the task ends before the call could be known to be over
            # A cancel cuts the wait short: the record is then settled as unknown, unasked.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cancel.wait(), wait)
            if self._cancel.is_set():
                return None
        return await self._ask(record)

    async def _ask(self, record: ExecutionRecord) -> NodeResult | None:
        """The executor's answer for one record, or ``None``; a reconcile that fails is logged.

        Bounded by ``node_timeout_s`` and the task deadline, whichever comes first.
        """
        if self._reconcile is None:
            return None
        self._asked.add(record.id)
        limit = self._host.deadline.within(self._host.state.policy.node_timeout_s)
        try:
            async with asyncio.timeout(limit):
                answer = await self._reconcile(record)
        except Exception:
            log.exception("pev: reconciling record %s failed", record.id)
            return None
        if isinstance(answer, Success | DeviceFailure | VerifierFailure):
            # What reconcile established is written like a node's result: checked first.
            return recordable_result(
                answer,
                node_id=record.node_id,
                action=record.effect is Effect.ACTION,
                limits=self._host.state.policy.value_limits,
                source="reconcile",
            )
        return None


def unanswered(record: ExecutionRecord, *, at: datetime, why: str) -> NodeFinished:
    """The end of an unfinished call nobody can answer for; ``why`` says what cut it short.

    An action ends ``unknown`` (its outcome unknown, so it is never sent again), a query
    ``failed``.
    """
    action = record.effect is Effect.ACTION
    return NodeFinished(
        record_id=record.id,
        status=RecordStatus.UNKNOWN if action else RecordStatus.FAILED,
        result=DeviceFailure(
            record.node_id,
            f"{why}; its outcome is unknown" if action else why,
            outcome_unknown=action,
        ),
        at=at,
        settled_on_resume=True,
    )


def _cut_short(state: TaskState, record: ExecutionRecord) -> int:
    """How many records the query's node has in its revision: the times it was dispatched."""
    return sum(
        1
        for other in state.records.values()
        if other.revision == record.revision and other.node_id == record.node_id
    )


def _settles(answer: NodeResult | None) -> NodeResult | None:
    """A reconcile's answer, if it settles the record: one of unknown outcome settles nothing."""
    if answer is None or (isinstance(answer, DeviceFailure) and answer.outcome_unknown):
        return None
    return answer
