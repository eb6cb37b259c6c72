"""The loop that drives one task: Plan → Execute → Verify → Diagnose → Dispatch (docs/engine.md).

The driver reads the task's phase from its folded ledger and takes the step that phase calls
for, so the same loop serves a new task and a resumed one. Every step ends in one append: the
ledger alone explains the run. The kernel makes every decision; the steps call the components
and measure time; the driver owns what they share: the task's state, the one way to write it,
the cancel signal, the deadline, and the drive's thread pool for sync code.

The steps live beside it, each depending on a narrow protocol rather than on the driver:
planning (:mod:`~pev.engine._plan_step`), a round (:mod:`~pev.engine._round`), settling
(:mod:`~pev.engine._settle`), observing (:mod:`~pev.engine._observe_step`) and verifying
(:mod:`~pev.engine._verify_step`). A drive holds the task's lease throughout
(:mod:`~pev.engine._tenure`): every write carries it as a fence, except while the task awaits a
person's approval: then it holds nothing, and either waits for the decision (``run``,
``resume``) or leaves the task to whichever driver comes once it is decided (a worker's).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from pev._json import ValueLimits, value_problem
from pev.engine._compensation import Compensations, left_in_place, not_undone
from pev.engine._components import Components
from pev.engine._deadline import Deadline
from pev.engine._host import TaskHost, current, task_deadline_finish
from pev.engine._observe_step import ObserveStep
from pev.engine._outage import Outage
from pev.engine._plan_step import PlanStep
from pev.engine._protocols import NodeContext
from pev.engine._result import RunResult
from pev.engine._round import Round
from pev.engine._settle import Settler
from pev.engine._tenure import Tenure, new_owner
from pev.engine._threads import run_threads
from pev.engine._typed import AgentTypes
from pev.engine._verify_step import VerifyStep
from pev.errors import ConflictError, LeaseHeld, StateError
from pev.kernel import TaskStatus
from pev.ledger import (
    DriverStarted,
    Event,
    Lease,
    Ledger,
    LedgerEntry,
    RoundExecuted,
    Tail,
    TaskEffect,
    TaskFinished,
    TaskPhase,
    TaskState,
    apply,
    begin_replan,
    cancel_outcome,
    executed_ok,
)
from pev.ledger._lease import is_free
from pev.ledger._watch import Follower, TaskWatch, watch_of
from pev.model import EvidencePhase, ExecutionRecord, NodeResult, PlanNode
from pev.rails import RailBus

__all__ = ["Driver"]

log = logging.getLogger("pev.engine")

_CONFLICT_RETRIES = 8


class Driver:
    """Drives one task from whatever phase its ledger says it is in, to a terminal state.

    It is the host every step depends on (:class:`~pev.engine._round.RoundHost` and the smaller
    :class:`~pev.engine._host.TaskHost`).

    Attributes:
        state: The task's state as of the last write.
        deadline: The task deadline, read against the engine's clock.
        cancel_signal: Set when the task is being cancelled or ran out of time; nodes watch it.
        drain_signal: Set to stop driving without ending the task (a worker draining).
        tools: The registered tools' specs, when the run has tools.

    With ``waits`` (``run`` and ``resume``), a drive that reaches ``awaiting_approval`` releases
    the lease, waits for the decision, and drives on under a new lease; without it (a worker),
    it stops there and leaves the task to whoever claims it once it is decided.
    """

    def __init__(
        self,
        ledger: Ledger,
        state: TaskState,
        components: Components,
        *,
        rails: RailBus,
        clock: Callable[[], datetime],
        lessons: tuple[str, ...] = (),
        owner: str | None = None,
        lease_s: float | None = None,
        lease: Lease | None = None,
        drain: asyncio.Event | None = None,
        hold_on_error: bool = False,
        announce: Sequence[LedgerEntry] = (),
        waits: bool = True,
    ) -> None:
        self._ledger = ledger
        self._task_id = state.task_id
        self.state = state
        self._c = components
        self._rails = rails
        self._clock = clock
        self.deadline = Deadline(state.created.task_deadline, clock)
        self.cancel_signal = asyncio.Event()
        self.tools = components.tools
        self._write_lock = asyncio.Lock()
        self._owner = lease.owner if lease is not None else owner or new_owner()
        self._lease_s = lease_s if lease_s is not None else state.policy.lease_s
        self._tenure = Tenure(
            ledger,
            state.task_id,
            owner=self._owner,
            lease_s=self._lease_s,
            lease=lease,
            clock=clock,
        )
        self._waits = waits
        if components.types.typed:
            # A recorded input the agent's input type no longer accepts stops the drive here,
            # before it takes the lease: the planner would get what it cannot read.
            components.types.typed_input(state.created.input)
        self.drain_signal = drain or asyncio.Event()
        self._outage = Outage(state.task_id, give_up=self.drain_signal)
        self._hold_on_error = hold_on_error
        self._announce = tuple(announce)
        cancel = self.cancel_signal
        # The steps see the driver through a weak proxy: a driver and its steps make no cycle,
        # so an ended task's objects are freed as its run returns, not by the garbage collector.
        host = cast("TaskHost", weakref.proxy(self))
        self._planning = PlanStep(
            host,
            components.plan,
            cancel=cancel,
            tools=components.tools,
            lessons=lessons,
            compensates=components.compensates,
            types=components.types,
        )
        self._verifying = VerifyStep(
            host, components.verify, cancel=cancel, lessons=lessons, types=components.types
        )
        observe = components.observe
        self._observing = None if observe is None else ObserveStep(host, observe)
        self._settler = Settler(
            host,
            components.reconcile,
            timeout_of=functools.partial(
                _record_timeout, components.tool_timeouts, state.policy.node_timeout_s
            ),
            cancel=cancel,
        )
        self._compensations = Compensations(
            host, components.compensate, components.compensates, tools=components.tools
        )

    # -- the loop -------------------------------------------------------------------------

    async def drive(self) -> RunResult[Any]:
        """Take the task's lease, settle what a crash left unfinished, step until the task ends.

        Returns:
            The task's result, rebuilt from the ledger.

        Raises:
            LeaseHeld: Another live driver holds the task (nothing was written).
            LeaseLost: Another driver took the task over while this one drove it; this one
                dispatched nothing more.
        """
        return RunResult.from_state(await self.steps()).typed(self._c.types)

    async def steps(self) -> TaskState:
        """:meth:`drive`, returning the task's state: ended, or as a drain left it.

        Once :attr:`drain_signal` is set, the driver dispatches nothing new, lets running nodes
        reach their terminal records, finishes the step it is in, and stops; the task stays in
        its phase for another driver, and the lease is released. A drive that raises releases
        the lease too, unless the driver was made with ``hold_on_error`` (a worker's): then the
        lease is left to expire, so that no worker takes the task straight back.

        A task that comes to await approval is left there, its lease released, by a driver
        made without ``waits``; one made with it waits (holding nothing) for the decision, or
        for the task to end, and drives on: should another driver (a worker) take the task
        first, it waits for that one to end it or to let it go.

        Raises:
            LeaseHeld: Another live driver holds the task (nothing was written).
            LeaseLost: Another driver took the task over while this one drove it; this one
                dispatched nothing more.
        """
        state = await self._tenure_steps()
        while self._waits and not state.terminal and not self.drain_signal.is_set():
            state = await self._wait_turn()
            if state.terminal:
                break
            self.state = state
            self._tenure = Tenure(
                self._ledger,
                self._task_id,
                owner=self._owner,
                lease_s=self._lease_s,
                clock=self._clock,
            )
            try:
                state = await self._tenure_steps()
            except LeaseHeld:
                # Another driver took the task as soon as it was decided: wait for it.
                state = await self._ledger.state(self._task_id)
            except StateError:
                # Someone ended it (a cancel written while nobody held the lease) between the
                # decision and this driver's first write: the task's end is the drive's.
                state = await self._ledger.state(self._task_id)
                if not state.terminal:
                    raise
        return state

    async def _wait_turn(self) -> TaskState:
        """Wait, holding no lease, until the task ends or is this driver's to drive again.

        That is: until it is decided (approved, rejected) and nobody holds its lease. Its
        deadlines are enforced meanwhile: the approval's, and the task's own.
        """
        ledger, task_id = self._ledger, self._task_id
        state = await ledger.state(task_id)
        if state.awaiting is not None:
            log.info(
                "task %s awaits approval of revision %d (pev approve %s / pev reject %s)",
                task_id,
                state.awaiting.revision,
                task_id,
                task_id,
            )
        async with Tail(ledger.store, task_id, after=state.event_count) as tail:
            try:
                while not state.terminal:
                    now = self._clock()
                    if state.awaiting is not None:
                        timeout = state.approval_ends
                        if timeout is not None and timeout <= now:
                            await ledger.expire(task_id, now=now)  # read back below
                            timeout = None
                    else:
                        lease = await ledger.store.lease(task_id)
                        if is_free(lease, now):
                            break
                        timeout = lease.expires_at if lease is not None else None
                    wait = None if timeout is None else max((timeout - now).total_seconds(), 0.01)
                    entries = await tail.read(wait)
                    # What others wrote meanwhile (the decision, above all) is the run's too:
                    # its rails hear it as they hear the driver's own writes.
                    for entry in entries:
                        state = apply(state, entry.event, at=entry.at)
                    if entries:
                        await self._rails.emit(entries, state)
            finally:
                await self._rails.drain()
        return await ledger.state(task_id)

    async def _tenure_steps(self) -> TaskState:
        """One tenure: take the lease, step until the task ends, awaits approval or drains."""
        tenure = self._tenure
        started = await tenure.take()
        main = asyncio.current_task()
        stop = main.cancel if main is not None else _nothing
        # Cancels and takeovers written by other processes, seen through the store's one watch.
        follower = Follower(
            tenure.lease,
            on_cancel=self.cancel_signal.set,
            on_lost=functools.partial(tenure.taken_over, stop),
        )
        # Sync code the drive calls runs in the process's pool, in threads named after the task.
        with run_threads(self._task_id):
            held = False
            try:
                async with tenure.heartbeat(on_lost=stop), self._watch().follow(follower):
                    if self._announce:  # a new task's creation, for its rails
                        await self._rails.emit(self._announce, self.state)
                        self._announce = ()
                    if not _recorded(self.state, started):  # a new task's creation holds it
                        await self.write([started])
                    await self._settler.unfinished()
                    await self._compensations.unfinished()
                    await self._loop()
            except asyncio.CancelledError:
                if not tenure.lost or main is None:
                    raise
                # Withdraw only the lease's own cancel: one asked for by the caller as well
                # still ends the drive as cancelled.
                if main.uncancel() > 0:
                    raise
                raise tenure.lost_error() from None
            except Exception:
                held = self._hold_on_error
                raise
            finally:
                if not held:
                    await tenure.release()
                await self._rails.drain()
        return self.state

    async def _loop(self) -> None:
        while (
            not self.state.terminal
            and not self.drain_signal.is_set()
            and self.state.phase is not TaskPhase.AWAITING_APPROVAL
        ):
            # The deadline comes first: past it, the round sets the cancel signal itself (to
            # stop in-flight work) without any cancel_requested event to refresh towards. A
            # task that unwinds is ending already: its compensations run past the deadline.
            if self.deadline.passed() and self.state.phase is not TaskPhase.COMPENSATING:
                await self.write([task_deadline_finish(self.state)])
                continue
            if self.cancel_signal.is_set() and not self.state.cancel_requested:
                await self._refresh()
                continue
            try:
                await self._step()
            except StateError:
                # Another writer (a cancel, an expiry) moved the task on under this step.
                await self._refresh()
                if not (self.state.cancel_requested or self.state.terminal):
                    raise

    async def _step(self) -> None:
        match self.state.phase:
            case TaskPhase.PLANNING:
                await self._planning.run()
            case TaskPhase.EXECUTING:
                await self._execute()
            case TaskPhase.VERIFYING:
                await self._verifying.run()
            case TaskPhase.AWAITING_REPLAN:
                await self.write(begin_replan(self.state, now=self._clock()))
            case TaskPhase.CANCELLING:
                await self.write([cancel_outcome(self.state)])
            case TaskPhase.COMPENSATING:
                await self._compensations.unwind()
            case _:  # terminal phases end the loop before a step is taken
                raise AssertionError(f"no step for phase {self.state.phase}")

    async def _execute(self) -> None:
        """Evidence before the revision's first dispatch, its round, settling, evidence after."""
        state = self.state
        revision = current(state)
        number = revision.number
        started = any(record.revision == number for record in state.records.values()) or any(
            e.revision == number and e.phase is EvidencePhase.BEFORE for e in state.evidence
        )
        if not started:
            # What the revision replaces is undone before it dispatches anything.
            await self._compensations.before_revision()
        if await self._left_in_place():
            return
        if self._observing is not None and not started:
            await self._observing.run(EvidencePhase.BEFORE)
        finished = await Round(self, revision.plan, number, revision.redo).run()
        if not self.deadline.passed():
            await self._settler.after_round(number)
        if await self._left_in_place() or not finished:
            return  # cancelled, out of time, or ended: the loop ends the task
        if self._observing is not None:
            await self._observing.run(EvidencePhase.AFTER)
        await self.write([RoundExecuted(revision=number, executed_ok=executed_ok(self.state))])

    async def _left_in_place(self) -> bool:
        """End the task ``partial`` if a compensation of this revision left its effect."""
        effect = left_in_place(self.state)
        if effect is None:
            return False
        await self.write([not_undone(self.state, effect)])
        return True

    # -- writing --------------------------------------------------------------------------

    async def write(self, events: Sequence[Event]) -> TaskState:
        """Append events in one transaction; writers of one task take turns.

        A succeeded ending gets the task's output, made by the agent's ``output=``.
        """
        if not events:
            return self.state
        types = self._c.types
        if types.has_output:
            limits = self.state.policy.value_limits
            events = [_with_output(event, types, limits) for event in events]
        async with self._write_lock:
            return await self._append(list(events))

    async def _append(self, events: list[Event]) -> TaskState:
        for _ in range(_CONFLICT_RETRIES):
            try:
                state, entries = await self._outage.outlast(
                    lambda: self._ledger.write(self._task_id, events, fence=self._tenure.lease)
                )
            except ConflictError:
                await self._outage.outlast(self._refresh)
                drivers = self.state.drivers
                if drivers and drivers[-1].epoch > self._tenure.lease.epoch:
                    # Another driver took the task over meanwhile: this one's writes are stale.
                    raise self._tenure.lost_error() from None
                if self.state.terminal:
                    raise StateError(
                        f"task {self._task_id} ended while this step ran",
                        task_id=self._task_id,
                        state=self.state.phase,
                    ) from None
                continue
            self.state = state
            await self._rails.emit(entries, state)
            return state
        raise ConflictError(self._task_id, self.state.event_count + 1)

    async def _refresh(self) -> None:
        self._ledger.forget(self._task_id)
        self.state = await self._ledger.state(self._task_id)
        if self.state.cancel_requested:
            self.cancel_signal.set()

    def _watch(self) -> TaskWatch:
        """The store's watch for this event loop, shared by every task it drives."""
        store = self._ledger.store
        clock = self._clock

        def make() -> TaskWatch:
            return TaskWatch(store, expire=lambda: Ledger(store, clock=clock).expire_overdue())

        return watch_of(store, make)

    # -- what a round uses besides the attributes -------------------------------------------

    def node_timeout(self, node: PlanNode) -> float | None:
        """The node's timeout: its tool's own, else the policy's, within the task deadline."""
        own = self._c.tool_timeouts.get(node.tool or "") or self.state.policy.node_timeout_s
        return self.deadline.within(own)

    async def execute(self, node: PlanNode, context: NodeContext) -> object:
        """Call the executor."""
        return await self._c.execute(node, context)

    async def settle_unknown(self, record: ExecutionRecord) -> NodeResult | None:
        """What the executor's ``reconcile`` establishes of a record just ended ``unknown``."""
        return await self._settler.right_after(record)

    async def supersede(self, effect: TaskEffect, reason: str) -> bool:
        """Supersede an effect of a node redone with another call, undoing it if its tool can."""
        return await self._compensations.supersede(effect, reason)


def _nothing() -> None:
    """Nothing to tell: the drive runs outside any task."""


def _recorded(state: TaskState, started: DriverStarted) -> bool:
    """Whether ``started`` is the task's last ``driver_started`` already (written with it)."""
    last = state.drivers[-1] if state.drivers else None
    return last is not None and (last.owner, last.epoch) == (started.owner, started.epoch)


def _record_timeout(
    tool_timeouts: Mapping[str, float], policy_s: float | None, record: ExecutionRecord
) -> float | None:
    """How long the call behind a record could run: its tool's timeout, else the policy's."""
    return tool_timeouts.get(record.tool or "") or policy_s


def _with_output(event: Event, types: AgentTypes, limits: ValueLimits) -> Event:
    """A succeeded ending with the task's output made by the agent; any other event as it is.

    An output that cannot be made (the function raised, its value does not fit its annotation
    or the policy's value limits) leaves the task succeeded, without an output: its detail
    says why.
    """
    if not isinstance(event, TaskFinished) or event.status is not TaskStatus.SUCCEEDED:
        return event
    output, problem = types.recorded_output(event.outputs)
    if not problem and (too_big := value_problem(output, limits, path="output")) is not None:
        output, problem = None, f"the agent's output cannot be recorded: {too_big}"
    if problem:
        log.warning("the task's output was not made: %s", problem)
    detail = "; ".join(part for part in (event.detail, problem) if part)
    return replace(event, output=output, detail=detail)
