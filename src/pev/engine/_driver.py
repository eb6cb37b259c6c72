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
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from pev.engine._components import Components
from pev.engine._planning import (
    append_feedback,
    deadline_passed,
    effective_effect,
    merge_local,
    plan_request,
    redo_set,
    review_plan,
)
from pev.engine._protocols import (
    _NODE_CONTEXT,
    NodeContext,
    Observation,
    ObserveContext,
    VerifyRequest,
)
from pev.engine._result import RunResult
from pev.errors import ConflictError, PevError, StateError, UsageError
from pev.kernel import Budget, TaskStatus, TerminalReason, decide, diagnose
from pev.ledger import (
    CaptureFailed,
    Diagnosed,
    Event,
    EvidenceCaptured,
    Ledger,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    Revision,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskPhase,
    TaskState,
    VerdictRecorded,
    begin_replan,
    cancel_outcome,
    dispatch,
    executed_ok,
    expire,
    finish,
    known_refs,
    lineage_records,
    lineage_results,
    missing_evidence,
    reject_plan,
    unfinished_records,
    unsettled_unknown_actions,
)
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    VerificationMode,
    VerifierFailure,
    classify_verdict,
    digest,
    freeze_json,
    passes,
    record_status_for,
)
from pev.rails import RailBus

__all__ = ["Driver"]

log = logging.getLogger("pev.engine")

# A custom executor gets this much beyond the node's own timeout before the engine stops
# waiting for it: a well-behaved executor reports its own timeout first.
_TIMEOUT_GRACE_S = 0.05
_CONFLICT_RETRIES = 8
_EXPIRE_EVERY_POLLS = 20


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
        self._queue: list[Event] = []
        self._waiters: list[asyncio.Future[TaskState]] = []
        self._flusher: asyncio.Task[None] | None = None

    # -- the loop -------------------------------------------------------------------------

    async def drive(self) -> RunResult:
        """Take steps until the task ends; return its result (rebuilt from the ledger)."""
        watcher = asyncio.create_task(self._watch(), name=f"pev-watch-{self._task_id}")
        try:
            while not self.state.terminal:
                if self._cancel.is_set() and not self.state.cancel_requested:
                    await self._refresh()
                    continue
                if self._past_task_deadline():
                    await self._write([self._task_deadline_finish()])
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
            if self._flusher is not None:
                with contextlib.suppress(Exception):
                    await self._flusher
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
                await self._write(begin_replan(self.state, now=self._clock()))
            case TaskPhase.CANCELLING:
                await self._write([cancel_outcome(self.state)])
            case _:  # terminal phases end the loop before a step is taken
                raise AssertionError(f"no step for phase {self.state.phase}")

    # -- writing --------------------------------------------------------------------------

    async def _write(self, events: Sequence[Event]) -> TaskState:
        """Append events; concurrent writers (parallel nodes) share one transaction."""
        if not events:
            return self.state
        future: asyncio.Future[TaskState] = asyncio.get_running_loop().create_future()
        self._queue.extend(events)
        self._waiters.append(future)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        # The write goes on even if the caller is cancelled: a record must reach the ledger.
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._queue:
            events, waiters = self._queue, self._waiters
            self._queue, self._waiters = [], []
            try:
                state = await self._append(events)
            except BaseException as exc:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(state)

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

    def _remaining_s(self) -> float | None:
        """Seconds left before the task deadline, or ``None`` without one."""
        deadline = self.state.created.task_deadline
        if deadline is None:
            return None
        return max((deadline - self._clock()).total_seconds(), 0.0)

    def _past_task_deadline(self) -> bool:
        return deadline_passed(self._clock(), self.state.created.task_deadline)

    def _task_deadline_finish(self) -> Event:
        return finish(
            self.state,
            TaskStatus.FAILED,
            TerminalReason.TASK_DEADLINE_EXPIRED,
            detail=f"the task deadline {self.state.created.task_deadline} passed",
        )

    @staticmethod
    def _bound(*limits: float | None) -> float | None:
        present = [limit for limit in limits if limit is not None]
        return min(present) if present else None

    # -- plan -----------------------------------------------------------------------------

    async def _plan(self) -> None:
        state = self.state
        kind = state.planning or RevisionKind.INITIAL
        request = plan_request(state, tools=self._c.tools, lessons=self._lessons)
        replan_left = (
            max((state.replan_deadline - self._clock()).total_seconds(), 0.0)
            if state.replan_deadline is not None
            else None
        )
        timeout = self._bound(replan_left, self._remaining_s())
        try:
            returned = await asyncio.wait_for(self._c.plan(request), timeout)
        except TimeoutError:
            expired = expire(self.state, now=self._clock())
            await self._write(expired or [self._task_deadline_finish()])
            return
        except AssertionError:
            raise
        except PevError as exc:
            if _is_misuse(exc):
                raise
            returned = _PlannerFailed(f"the planner raised {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a planner that raises is a rejected plan
            returned = _PlannerFailed(f"the planner raised {type(exc).__name__}: {exc}")
        redo = redo_set(state) if kind is RevisionKind.LOCAL else frozenset()
        plan, problems = self._shape_plan(returned, kind, redo)
        if plan is not None and not problems:
            problems = review_plan(state, plan, kind=kind, redo=redo, tools=self._c.tools)
        if problems:
            await self._write(
                reject_plan(
                    self.state,
                    problems=problems,
                    plan=plan,
                    now=self._clock(),
                )
            )
            return
        if plan is None:  # pragma: no cover - _shape_plan returns a plan or problems
            raise AssertionError("a plan without problems must exist")
        number = len(state.revisions) + 1
        action = state.replan_action
        feedback = getattr(action, "feedback", "")
        reason = "initial plan" if kind is RevisionKind.INITIAL else feedback or f"{kind} replan"
        await self._write(
            [
                RevisionStarted(
                    number=number,
                    revision_kind=kind,
                    reason=reason,
                    plan=plan,
                    feedback=feedback,
                    lessons=self._lessons,
                    redo=redo,
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
        finished = await self._run_round(revision.plan, number, revision.redo)
        if not finished:
            return  # cancelled or out of time: the loop ends the task
        if self._c.observe is not None:
            await self._observe(EvidencePhase.AFTER)
        await self._write([RoundExecuted(revision=number, executed_ok=executed_ok(self.state))])

    async def _run_round(self, plan: Plan, number: int, redo: frozenset[str]) -> bool:
        """Dispatch the revision's nodes as their dependencies finish; True if the round ran out."""
        done = self._settled_nodes(plan, number, redo)
        pending = [node for node in plan.nodes if node.id not in done]
        running: dict[asyncio.Task[bool], str] = {}
        limit = self.state.policy.max_parallel
        while pending or running:
            stopping = self._cancel.is_set() or self._past_task_deadline()
            if not stopping:
                pending = await self._skip_blocked(pending, done, number)
                ready = [n for n in pending if all(done.get(d) is True for d in n.after)]
                ready = ready[: max(limit - len(running), 0)]
                if ready:
                    pending = [n for n in pending if n not in ready]
                    started = await self._dispatch(ready, number)
                    running.update({task: node_id for node_id, task in started})
            if not running:
                break
            finished, _ = await asyncio.wait(
                running,
                timeout=self._remaining_s() if not stopping else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not finished and self._past_task_deadline():
                # The whole-task deadline cancels in-flight work; each node records its end.
                self._cancel.set()
                for task in running:
                    task.cancel()
                await asyncio.wait(running)
                finished = set(running)
            for task in finished:
                node_id = running.pop(task)
                try:
                    done[node_id] = task.result()
                except BaseException:
                    # A write failed under the round (the task ended elsewhere): stop the rest.
                    for other in running:
                        other.cancel()
                    await asyncio.gather(*running, return_exceptions=True)
                    raise
        return not (pending or self._cancel.is_set() or self._past_task_deadline())

    def _settled_nodes(self, plan: Plan, number: int, redo: frozenset[str]) -> dict[str, bool]:
        """Nodes that need no dispatch this round, and whether each succeeded."""
        state = self.state
        lineage = lineage_results(state)
        done: dict[str, bool] = {}
        for node in plan.nodes:
            if redo and node.id not in redo:
                done[node.id] = isinstance(lineage.get(node.id), Success)
        for record in state.records.values():
            if record.revision == number and record.terminal:
                done[record.node_id] = record.status is RecordStatus.SUCCEEDED
        for skipped in state.skipped:
            if skipped.revision == number:
                done[skipped.node_id] = False
        return done

    async def _skip_blocked(
        self, pending: list[PlanNode], done: dict[str, bool], number: int
    ) -> list[PlanNode]:
        """Record a skip for each node a failed dependency blocks, transitively."""
        while True:
            blocked = [n for n in pending if any(done.get(d) is False for d in n.after)]
            if not blocked:
                return pending
            await self._write(
                [
                    NodeSkipped(
                        revision=number,
                        node_id=node.id,
                        blocked_by=tuple(d for d in node.after if done.get(d) is False),
                    )
                    for node in blocked
                ]
            )
            for node in blocked:
                done[node.id] = False
            pending = [n for n in pending if n not in blocked]

    async def _dispatch(
        self, nodes: list[PlanNode], number: int
    ) -> list[tuple[str, asyncio.Task[bool]]]:
        """Commit the nodes' pending records (one transaction), then start them."""
        outputs = {
            node_id: result.value
            for node_id, result in lineage_results(self.state).items()
            if isinstance(result, Success)
        }
        unknown = {(r.tool, r.args_digest) for r in unsettled_unknown_actions(self.state)}
        now = self._clock()
        prepared: list[
            tuple[ExecutionRecord, PlanNode, dict[str, JsonValue], NodeResult | None]
        ] = []
        for node in nodes:
            deps = {dep: outputs.get(dep) for dep in node.after}
            refused: NodeResult | None = None
            try:
                args = _resolve(node.args, outputs)
            except LookupError as exc:
                args, refused = dict(node.args), VerifierFailure(node.id, str(exc))
            effect = effective_effect(node, self._c.tools)
            args_digest = digest(args)
            if refused is None and effect is Effect.ACTION and (node.tool, args_digest) in unknown:
                refused = VerifierFailure(
                    node.id,
                    f"refused to repeat action {node.tool!r} with the same args as a record whose "
                    "outcome is unknown; observe or reconcile it first, or change the action",
                )
            record_id = RecordId(uuid.uuid4().hex)
            record = ExecutionRecord(
                id=record_id,
                task_id=self._task_id,
                revision=number,
                node_id=node.id,
                tool=node.tool,
                args_digest=args_digest,
                effect=effect,
                idempotency_key=f"{self._task_id}/{record_id}",
                created_at=now,
                updated_at=now,
            )
            prepared.append((record, replace(node, args=args), deps, refused))
        await self._write([NodeDispatched(record=record) for record, _, _, _ in prepared])
        return [
            (node.id, asyncio.create_task(self._run_node(record, node, deps, refused)))
            for record, node, deps, refused in prepared
        ]

    async def _run_node(
        self,
        record: ExecutionRecord,
        node: PlanNode,
        deps: Mapping[str, JsonValue],
        refused: NodeResult | None,
    ) -> bool:
        """Run one dispatched node and record its end; True if it succeeded."""
        action = record.effect is Effect.ACTION
        status: RecordStatus | None = None
        result: NodeResult | None = refused
        if result is None:
            timeout = self._bound(
                self._c.tool_timeouts.get(node.tool or "") or self.state.policy.node_timeout_s,
                self._remaining_s(),
            )
            loop = asyncio.get_running_loop()
            context = NodeContext(
                task_id=self._task_id,
                node_id=node.id,
                revision=record.revision,
                record_id=record.id,
                idempotency_key=record.idempotency_key,
                deadline=loop.time() + timeout if timeout is not None else None,
                cancelled=self._cancel,
                dependencies=deps,
                report=partial(self._report, record.id),
            )
            _NODE_CONTEXT.set(context)  # this task's own context: visible to the executor
            try:
                wait = timeout + _TIMEOUT_GRACE_S if timeout is not None else None
                result = _as_result(
                    node, await asyncio.wait_for(self._c.execute(node, context), wait)
                )
            except TimeoutError:
                result = DeviceFailure(
                    node.id,
                    f"timed out after {timeout:g} s",
                    is_timeout=True,
                    outcome_unknown=action,
                )
            except asyncio.CancelledError:
                if action:
                    result = DeviceFailure(
                        node.id, "cancelled while running; the action's outcome is unknown",
                        outcome_unknown=True,
                    )  # fmt: skip
                else:
                    status = RecordStatus.CANCELLED
            except Exception as exc:  # noqa: BLE001 - an executor that raises is a device failure
                result = DeviceFailure(node.id, f"{type(exc).__name__}: {exc}")
        if status is None:
            status = record_status_for(result) if result is not None else RecordStatus.CANCELLED
        await self._write(
            [NodeFinished(record_id=record.id, status=status, result=result, at=self._clock())]
        )
        return isinstance(result, Success)

    async def _report(self, record_id: RecordId, status: RecordStatus) -> None:
        await self._write([NodeProgressed(record_id=record_id, status=status, at=self._clock())])

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
            returned = await asyncio.wait_for(observe(phase, context), self._remaining_s())
            observations = list(returned) if isinstance(returned, list | tuple) else [returned]
            now = self._clock()
            events: list[Event] = [
                EvidenceCaptured(evidence=_evidence(item, phase, revision.number, now))
                for item in observations
            ]
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed capture is recorded, not fatal
            events = [
                CaptureFailed(
                    revision=revision.number, phase=phase, error=f"{type(exc).__name__}: {exc}"
                )
            ]
        await self._write(events)

    # -- verify, diagnose, decide ---------------------------------------------------------

    async def _verify(self) -> None:
        state = self.state
        revision = _current(state)
        mode = state.contract.mode
        events: list[Event] = []
        verdict = None
        reliability: Reliability | None = None
        missing = (
            missing_evidence(state, revision.number)
            if mode in (VerificationMode.ENFORCE, VerificationMode.RECOVERY)
            else ()
        )
        if missing:
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
        if mode is not VerificationMode.OFF and not missing and not passes(verdict, reliability):
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
        await self._write(events)

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
        )
        own = state.policy.verify_timeout_s
        remaining = self._remaining_s()
        timeout = self._bound(own, remaining)
        try:
            raw = await asyncio.wait_for(verify(request), timeout)
        except TimeoutError:
            if remaining is not None and (own is None or remaining < own):
                return None
            return _thrown(revision.number, f"the verifier ran past verify_timeout_s={own:g}")
        except AssertionError:
            raise  # a programming error is a bug, not a verdict
        except PevError as exc:
            if _is_misuse(exc):
                raise
            return _thrown(revision.number, f"{type(exc).__name__}: {exc}")
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
        )

    # -- resume ---------------------------------------------------------------------------

    async def settle_unfinished(self) -> None:
        """Settle records a crash left unfinished: reconcile them, else mark them unknown.

        An unfinished node is never dispatched again: an action is never re-sent on resume.
        """
        events: list[Event] = []
        for record in unfinished_records(self.state):
            result: NodeResult | None = None
            if self._c.reconcile is not None:
                try:
                    result = _as_result_or_none(await self._c.reconcile(record))
                except Exception:
                    log.exception("pev: reconciling record %s failed", record.id)
            if result is None and record.effect is Effect.ACTION:
                result = DeviceFailure(
                    record.node_id,
                    "the process driving this action stopped; its outcome is unknown",
                    outcome_unknown=True,
                )
            elif result is None:
                result = DeviceFailure(
                    record.node_id, "the process running this query stopped before it answered"
                )
            events.append(
                NodeFinished(
                    record_id=record.id,
                    status=record_status_for(result),
                    result=result,
                    at=self._clock(),
                    settled_on_resume=True,
                )
            )
        await self._write(events)


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


def _is_misuse(exc: PevError) -> bool:
    """Pev's own misuse errors are bugs in the caller and propagate; others are failures."""
    return isinstance(exc, UsageError | StateError)


def _thrown(revision: int, problem: str) -> VerdictRecorded:
    return VerdictRecorded(
        revision=revision, verdict=None, reliability=Reliability.THROWN, problems=(problem,)
    )


def _as_result(node: PlanNode, value: object) -> NodeResult:
    if isinstance(value, Success | DeviceFailure | VerifierFailure):
        return value
    return DeviceFailure(
        node.id, f"the executor returned a {type(value).__name__}, not a node result"
    )


def _as_result_or_none(value: object) -> NodeResult | None:
    if value is None or isinstance(value, Success | DeviceFailure | VerifierFailure):
        return value
    return None


def _resolve(args: Mapping[str, Any], outputs: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """Args with every ``{"$ref": "n1.key"}`` replaced by that dependency output.

    Raises:
        LookupError: A reference names an output or a path inside it that does not exist.
    """

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            if len(value) == 1 and isinstance(value.get("$ref"), str):
                return _follow(value["$ref"], outputs)
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    return {key: walk(value) for key, value in args.items()}


def _follow(ref: str, outputs: Mapping[str, JsonValue]) -> JsonValue:
    node_id, *path = ref.split(".")
    if node_id not in outputs:
        raise LookupError(f"$ref {ref!r}: node {node_id!r} has no output to take")
    value: Any = outputs[node_id]
    for step in path:
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list | tuple) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise LookupError(f"$ref {ref!r}: the output of {node_id!r} has no {step!r}")
    return freeze_json(value)


def _evidence(item: object, phase: EvidencePhase, revision: int, now: datetime) -> Evidence:
    if isinstance(item, Evidence):
        return item
    if not isinstance(item, Observation):
        raise TypeError(f"the observer returned a {type(item).__name__}, not an Observation")
    return Evidence(
        id=EvidenceId(uuid.uuid4().hex),
        phase=phase,
        kind=item.kind,
        source=item.source,
        captured_at=now,
        revision=revision,
        payload=item.payload,
        artifact=item.artifact,
        media_type=item.media_type,
    )
