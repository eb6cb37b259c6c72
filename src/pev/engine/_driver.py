"""The loop that drives one task: Plan → Execute → Verify → Diagnose → Dispatch (SPEC §4-§6).

The driver reads the task's phase from its folded ledger and takes the step that phase calls
for, so the same loop serves a new task and a resumed one. Every step ends in one append: the
ledger alone explains the run. The kernel makes every decision; the driver only calls the
components, measures time, and writes what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from pev.engine._components import Components
from pev.engine._planning import (
    append_feedback,
    merge_local,
    plan_request,
    redo_set,
    review_plan,
)
from pev.engine._protocols import (
    _USAGE,
    NodeContext,
    Observation,
    ObserveContext,
    VerifyRequest,
    merged_usage,
)
from pev.engine._result import RunResult
from pev.engine._round import Round
from pev.engine._settle import Settler
from pev.errors import ConflictError, PevError, StateError, UsageError
from pev.kernel import Budget, TaskStatus, TerminalReason, deadline_passed, decide, diagnose
from pev.ledger import (
    CaptureFailed,
    Diagnosed,
    Event,
    EvidenceCaptured,
    Ledger,
    Revision,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskFinished,
    TaskPhase,
    TaskState,
    Usage,
    VerdictRecorded,
    begin_replan,
    cancel_outcome,
    dispatch,
    executed_ok,
    finish,
    known_refs,
    lineage_records,
    lineage_results,
    missing_evidence,
    reject_plan,
)
from pev.model import (
    Evidence,
    EvidenceId,
    EvidencePhase,
    Plan,
    PlanNode,
    Reliability,
    TaskId,
    ToolSpec,
    VerificationMode,
    classify_verdict,
    passes,
)
from pev.rails import RailBus

__all__ = ["Driver"]

T = TypeVar("T")

log = logging.getLogger("pev.engine")

_CONFLICT_RETRIES = 8
_EXPIRE_EVERY_POLLS = 20

# What a planner or verifier call may raise that is a bug, not a failure to record: a programming
# error, or pev's own misuse errors (a bug in the caller). They propagate out of the run.
_BUGS = (AssertionError, UsageError, StateError)


class Driver:
    """Drives one task from whatever phase its ledger says it is in, to a terminal state."""

    def __init__(
        self,
        ledger: Ledger,
        state: TaskState,
        components: Components,
        *,
        rails: RailBus,
        clock: Callable[[], datetime],
        poll_s: float = 0.25,
        lessons: tuple[str, ...] = (),
    ) -> None:
        self._ledger = ledger
        self._task_id = state.task_id
        self.state = state
        self._c = components
        self._rails = rails
        self._clock = clock
        self._poll_s = poll_s
        self._lessons = lessons
        self._cancel = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._settler = Settler(self, components.reconcile)
        self.last_usage: Usage | None = None

    # -- the loop -------------------------------------------------------------------------

    async def drive(self) -> RunResult:
        """Take steps until the task ends; return its result (rebuilt from the ledger)."""
        watcher = asyncio.create_task(self._watch(), name=f"pev-watch-{self._task_id}")
        try:
            while not self.state.terminal:
                # The deadline comes first: past it, the round sets the cancel signal itself (to
                # stop in-flight work) without any cancel_requested event to refresh towards.
                if self.past_task_deadline():
                    await self.write([self._task_deadline_finish()])
                    continue
                if self._cancel.is_set() and not self.state.cancel_requested:
                    await self._refresh()
                    continue
                try:
                    await self._step()
                except StateError:
                    # Another writer (a cancel, an expiry) moved the task on under this step.
                    await self._refresh()
                    if not (self.state.cancel_requested or self.state.terminal):
                        raise
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        return RunResult.from_state(self.state)

    async def _step(self) -> None:
        match self.state.phase:
            case TaskPhase.PLANNING:
                await self._plan()
            case TaskPhase.EXECUTING:
                await self._execute()
            case TaskPhase.VERIFYING:
                await self._verify()
            case TaskPhase.AWAITING_REPLAN:
                await self.write(begin_replan(self.state, now=self._clock()))
            case TaskPhase.CANCELLING:
                await self.write([cancel_outcome(self.state)])
            case _:  # terminal phases end the loop before a step is taken
                raise AssertionError(f"no step for phase {self.state.phase}")

    # -- writing --------------------------------------------------------------------------

    async def write(self, events: Sequence[Event]) -> TaskState:
        """Append events in one transaction; writers of one task take turns."""
        if not events:
            return self.state
        async with self._write_lock:
            return await self._append(list(events))

    async def _append(self, events: list[Event]) -> TaskState:
        for _ in range(_CONFLICT_RETRIES):
            try:
                state, entries = await self._ledger.write(self._task_id, events)
            except ConflictError:
                await self._refresh()
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
            self._cancel.set()

    async def _watch(self) -> None:
        """Notice a cancel written by another process; expire overdue tasks now and then."""
        watcher = Ledger(self._ledger.store, clock=self._clock)
        polls = 0
        while True:
            await asyncio.sleep(self._poll_s)
            polls += 1
            try:
                if (await watcher.state(self._task_id)).cancel_requested:
                    self._cancel.set()
                if polls % _EXPIRE_EVERY_POLLS == 0:
                    await watcher.expire_overdue(self._clock())
            except PevError:
                log.exception("pev: watching task %s failed", self._task_id)

    # -- time -----------------------------------------------------------------------------

    def remaining_s(self) -> float | None:
        """Seconds left before the task deadline, or ``None`` without one."""
        return self._seconds_until(self.state.created.task_deadline)

    def within_deadline(self, seconds: float | None) -> float | None:
        """``seconds``, cut to the time left before the task deadline; ``None``: no bound."""
        return _earliest(seconds, self.remaining_s())

    def _seconds_until(self, deadline: datetime | None) -> float | None:
        if deadline is None:
            return None
        return max((deadline - self._clock()).total_seconds(), 0.0)

    def past_task_deadline(self) -> bool:
        return deadline_passed(self._clock(), self.state.created.task_deadline)

    def _task_deadline_finish(self) -> TaskFinished:
        return finish(
            self.state,
            TaskStatus.FAILED,
            TerminalReason.TASK_DEADLINE_EXPIRED,
            detail=f"the task deadline {self.state.created.task_deadline} passed",
        )

    async def _call(self, call: Awaitable[T], timeout: float | None) -> T:
        """Await a planner or verifier call; give up on it if the task is cancelled meanwhile.

        Raises:
            TimeoutError: The call ran past ``timeout``.
            _CancelledMeanwhile: A cancel arrived first (the call is cancelled).
        """
        reports: list[Usage] = []
        self.last_usage = None
        token = _USAGE.set(reports)  # the call's task copies the context: reports reach us
        try:
            work = asyncio.ensure_future(call)
        finally:
            _USAGE.reset(token)
        cancelled = asyncio.ensure_future(self._cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {work, cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            cancelled.cancel()
        self.last_usage = merged_usage(reports)
        if work in done:
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await work
        if self._cancel.is_set():
            raise _CancelledMeanwhile
        raise TimeoutError

    # -- what a round uses ----------------------------------------------------------------

    @property
    def task_id(self) -> TaskId:
        """The task being driven."""
        return self._task_id

    @property
    def tools(self) -> Mapping[str, ToolSpec] | None:
        """The registered tools' specs, when the run has tools."""
        return self._c.tools

    @property
    def cancelled(self) -> bool:
        """True once the task is being cancelled or has run out of time."""
        return self._cancel.is_set()

    @property
    def cancel_signal(self) -> asyncio.Event:
        """The event nodes watch to stop early."""
        return self._cancel

    def cancel_now(self) -> None:
        """Tell running nodes to stop (the task deadline passed)."""
        self._cancel.set()

    def now(self) -> datetime:
        """The engine's clock."""
        return self._clock()

    def node_timeout(self, node: PlanNode) -> float | None:
        """The node's timeout: its tool's own, else the policy's, within the task deadline."""
        own = self._c.tool_timeouts.get(node.tool or "") or self.state.policy.node_timeout_s
        return self.within_deadline(own)

    async def execute(self, node: PlanNode, context: NodeContext) -> object:
        """Call the executor."""
        return await self._c.execute(node, context)

    # -- plan -----------------------------------------------------------------------------

    async def _plan(self) -> None:
        state = self.state
        kind = state.planning or RevisionKind.INITIAL
        request = plan_request(state, tools=self._c.tools, lessons=self._lessons)
        replan_left = self._seconds_until(state.replan_deadline)
        remaining = self.remaining_s()
        timeout = _earliest(replan_left, remaining)
        try:
            returned = await self._call(self._c.plan(request), timeout)
        except _CancelledMeanwhile:
            return  # the loop ends the task as cancelled
        except TimeoutError:
            if replan_left is not None and (remaining is None or replan_left <= remaining):
                detail = (
                    f"the planner was still working at the replan deadline {state.replan_deadline}"
                )
                ending = finish(
                    self.state,
                    TaskStatus.FAILED,
                    TerminalReason.REPLAN_DEADLINE_EXPIRED,
                    detail=detail,
                )
            else:
                ending = self._task_deadline_finish()
            await self.write([ending])
            return
        except _BUGS:
            raise
        except Exception as exc:  # noqa: BLE001 - a planner that raises is a rejected plan
            returned = _PlannerFailed(f"the planner raised {type(exc).__name__}: {exc}")
        redo = redo_set(state) if kind is RevisionKind.LOCAL else frozenset()
        plan, problems = self._shape_plan(returned, kind, redo)
        if plan is not None and not problems:
            problems = review_plan(state, plan, kind=kind, redo=redo, tools=self._c.tools)
        if problems:
            await self.write(
                reject_plan(
                    self.state,
                    problems=problems,
                    plan=plan,
                    now=self._clock(),
                    usage=self.last_usage,
                )
            )
            return
        if plan is None:  # pragma: no cover - _shape_plan returns a plan or problems
            raise AssertionError("a plan without problems must exist")
        number = len(state.revisions) + 1
        action = state.replan_action
        feedback = getattr(action, "feedback", "")
        reason = "initial plan" if kind is RevisionKind.INITIAL else feedback or f"{kind} replan"
        await self.write(
            [
                RevisionStarted(
                    number=number,
                    revision_kind=kind,
                    reason=reason,
                    plan=plan,
                    feedback=feedback,
                    lessons=self._lessons,
                    redo=redo,
                    usage=self.last_usage,
                )
            ]
        )

    def _shape_plan(
        self, returned: object, kind: RevisionKind, redo: frozenset[str]
    ) -> tuple[Plan | None, list[str]]:
        if isinstance(returned, _PlannerFailed):
            return None, [returned.problem]
        previous = self.state.plan
        if kind is RevisionKind.LOCAL and previous is not None:
            if returned is None:
                feedback = getattr(self.state.replan_action, "feedback", "")
                return append_feedback(previous, redo, feedback), []
            if isinstance(returned, Plan):
                return merge_local(previous, returned, redo)
        if returned is None:
            return None, ["the planner returned no plan"]
        if not isinstance(returned, Plan):
            return None, [f"the planner returned a {type(returned).__name__}, not a Plan"]
        return returned, []

    # -- execute --------------------------------------------------------------------------

    async def _execute(self) -> None:
        state = self.state
        revision = _current(state)
        number = revision.number
        started = any(record.revision == number for record in state.records.values()) or any(
            e.revision == number and e.phase is EvidencePhase.BEFORE for e in state.evidence
        )
        if self._c.observe is not None and not started:
            await self._observe(EvidencePhase.BEFORE)
        finished = await Round(self, revision.plan, number, revision.redo).run()
        if not self.past_task_deadline():
            await self._settler.after_round(number)
        if not finished:
            return  # cancelled or out of time: the loop ends the task
        if self._c.observe is not None:
            await self._observe(EvidencePhase.AFTER)
        await self.write([RoundExecuted(revision=number, executed_ok=executed_ok(self.state))])

    async def _observe(self, phase: EvidencePhase) -> None:
        observe = self._c.observe
        if observe is None:
            return
        state = self.state
        revision = _current(state)
        context = ObserveContext(
            task_id=self._task_id,
            revision=revision.number,
            plan=revision.plan,
            results=lineage_results(state),
        )
        try:
            returned = await asyncio.wait_for(observe(phase, context), self.remaining_s())
            observations = list(returned) if isinstance(returned, list | tuple) else [returned]
            now = self._clock()
            first = len(state.evidence) + 1
            events: list[Event] = [
                EvidenceCaptured(
                    evidence=_evidence(item, phase, revision.number, now, first + offset)
                )
                for offset, item in enumerate(observations)
            ]
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed capture is recorded, not fatal
            events = [
                CaptureFailed(
                    revision=revision.number, phase=phase, error=f"{type(exc).__name__}: {exc}"
                )
            ]
        await self.write(events)

    # -- verify, diagnose, decide ---------------------------------------------------------

    async def _verify(self) -> None:
        state = self.state
        revision = _current(state)
        mode = state.contract.mode
        events: list[Event] = []
        verdict = None
        reliability: Reliability | None = None
        missing = (
            missing_evidence(state, revision.number) if mode is not VerificationMode.OFF else ()
        )
        # Enforce and recovery stop on missing evidence without asking the verifier. Audit asks
        # it anyway (its outcome follows execution) and records recovery's stop as the shadow.
        stop = bool(missing) and mode in (VerificationMode.ENFORCE, VerificationMode.RECOVERY)
        if stop:
            events.append(
                VerdictRecorded(
                    revision=revision.number,
                    verdict=None,
                    reliability=None,
                    problems=tuple(f"no fresh 'after' evidence of kind {k!r}" for k in missing),
                    evidence_missing=True,
                )
            )
        elif mode is not VerificationMode.OFF:
            recorded = await self._call_verifier(state)
            if recorded is None:
                return  # out of time: the loop ends the task
            events.append(recorded)
            verdict, reliability = recorded.verdict, recorded.reliability
        diagnosis = None
        if mode is not VerificationMode.OFF and not stop and not passes(verdict, reliability):
            diagnosis = diagnose(
                verdict, reliability or Reliability.MALFORMED, lineage_results(state)
            )
            events.append(Diagnosed(revision=revision.number, diagnosis=diagnosis))
        decision = decide(
            mode,
            executed_ok=executed_ok(state),
            verdict=verdict,
            reliability=reliability,
            diagnosis=diagnosis,
            budget=Budget(
                state.replans_used, state.policy.max_replans, state.created.task_deadline
            ),
            now=self._clock(),
            evidence_missing=bool(missing),
            local_limit=state.policy.local_limit,
        )
        events.extend(dispatch(state, decision, now=self._clock()))
        await self.write(events)

    async def _call_verifier(self, state: TaskState) -> VerdictRecorded | None:
        """Call the verifier under the engine's guard; ``None`` if the task ran out of time."""
        verify = self._c.verify
        if verify is None:
            raise UsageError("every verification mode but 'off' needs a verifier")
        revision = _current(state)
        request = VerifyRequest(
            task_id=self._task_id,
            input=state.created.input,
            contract=state.contract,
            plan=revision.plan,
            revision=revision.number,
            results=lineage_results(state),
            records=lineage_records(state),
            evidence=state.evidence,
            lessons=self._lessons,
            reconciled={
                record_id: event.result
                for record_id, event in state.reconciled.items()
                if state.records[record_id].revision >= revision.lineage
            },
        )
        own = state.policy.verify_timeout_s
        remaining = self.remaining_s()
        timeout = _earliest(own, remaining)
        try:
            raw = await self._call(verify(request), timeout)
        except _CancelledMeanwhile:
            return None  # the loop ends the task as cancelled
        except TimeoutError:
            if remaining is not None and (own is None or remaining < own):
                return None
            return _thrown(revision.number, f"the verifier ran past verify_timeout_s={own:g}")
        except _BUGS:
            raise
        except Exception as exc:  # noqa: BLE001 - a verifier that raises is `thrown`
            return _thrown(revision.number, f"{type(exc).__name__}: {exc}")
        check = classify_verdict(
            raw, contract=state.contract, plan=revision.plan, known_refs=known_refs(state)
        )
        return VerdictRecorded(
            revision=revision.number,
            verdict=check.verdict,
            reliability=check.reliability,
            raw_digest=check.raw_digest,
            problems=check.problems,
            usage=self.last_usage,
        )

    # -- resume ---------------------------------------------------------------------------

    async def settle_unfinished(self) -> None:
        """Settle records a crash left unfinished (see :class:`~pev.engine._settle.Settler`)."""
        await self._settler.unfinished()


class _CancelledMeanwhile(Exception):  # noqa: N818 - a private signal, not an error users see
    """A cancel arrived while a planner or verifier call was in flight."""


class _PlannerFailed:
    """A planner call that produced no plan to look at (it raised)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _current(state: TaskState) -> Revision:
    """The task's current revision; executing and verifying always have one."""
    revision = state.revision
    if revision is None:
        raise StateError(
            f"task {state.task_id} is {state.phase} without a revision",
            task_id=state.task_id,
            state=state.phase,
        )
    return revision


def _earliest(*limits: float | None) -> float | None:
    """The smallest of the limits given; ``None`` when none is."""
    present = [limit for limit in limits if limit is not None]
    return min(present) if present else None


def _thrown(revision: int, problem: str) -> VerdictRecorded:
    return VerdictRecorded(
        revision=revision, verdict=None, reliability=Reliability.THROWN, problems=(problem,)
    )


def _evidence(
    item: object, phase: EvidencePhase, revision: int, now: datetime, number: int
) -> Evidence:
    if isinstance(item, Evidence):
        return item
    if not isinstance(item, Observation):
        raise TypeError(f"the observer returned a {type(item).__name__}, not an Observation")
    # Numbered in capture order, so a seeded run writes the same ids every time.
    return Evidence(
        id=EvidenceId(f"{revision}-{phase}-{number}"),
        phase=phase,
        kind=item.kind,
        source=item.source,
        captured_at=now,
        revision=revision,
        payload=item.payload,
        artifact=item.artifact,
        media_type=item.media_type,
    )
