"""Histories the engine could have written, as a Hypothesis strategy: ``stories()``.

A small scenario driver takes a list of drawn integers and, step by step, picks one valid move
for the phase the task is in (accept or reject a plan, dispatch, progress, finish or skip nodes,
capture evidence, end the round, verify and decide with the kernel, pass the replan valves,
expire, reconcile, cancel). Only the machine functions and the kernel decide what is written, so
every history is one the engine could have written.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from tests.support.builders import captured, contract, finished, record

from pev.kernel import Budget, LocalReplan, decide, diagnose
from pev.ledger import (
    GENESIS_HASH,
    CaptureFailed,
    Diagnosed,
    Event,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    RecordReconciled,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskPhase,
    TaskState,
    Usage,
    VerdictRecorded,
    apply,
    begin_replan,
    cancel_outcome,
    dispatch,
    executed_ok,
    expire,
    lineage_results,
    missing_evidence,
    new_task,
    reject_plan,
    request_cancel,
    seal,
    unsettled_unknown_actions,
)
from pev.model import (
    DeviceFailure,
    Effect,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordStatus,
    Reliability,
    Success,
    TaskId,
    Verdict,
    VerdictStatus,
    VerificationMode,
    VerifierFailure,
    digest,
    downstream,
    passes,
)
from pev.policy import RecoveryPolicy

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TASK = TaskId("prop-task")
REPLAN_TIMEOUT_S = 60.0

LOOK = PlanNode("look", "look at the desk", tool="camera", effect=Effect.QUERY)
GRAB = PlanNode("grab", "grab the cup", tool="arm", args={"grip": "firm"}, after=("look",))
PLACE = PlanNode("place", "put it in the sink", tool="arm", after=("grab",))
TIDY = PlanNode("tidy", "tidy up", tool="arm")
PLANS = (
    Plan("tidy the desk", (LOOK, GRAB, PLACE)),
    Plan("tidy the desk", (LOOK, GRAB)),
    Plan("tidy the desk", (TIDY,)),
)


@dataclass(frozen=True)
class Story:
    """A generated history and the state the driver folded as it wrote it."""

    entries: tuple[LedgerEntry, ...]
    states: tuple[TaskState, ...]  # states[k] is the state after entries[: k + 1]


class _Driver:
    """Writes one valid step per drawn integer, through the machine functions and the kernel."""

    def __init__(self, mode: VerificationMode, policy: RecoveryPolicy, evidence: bool) -> None:
        self.contract = contract(mode, required_evidence=("state",) if evidence else ())
        self.policy = policy
        self.now = T0
        self.entries: list[LedgerEntry] = []
        self.states: list[TaskState] = []
        self.serial = 0
        self.write((new_task(TASK, input="tidy", contract=self.contract, policy=policy, now=T0),))

    @property
    def state(self) -> TaskState:
        return self.states[-1]

    def write(self, events: tuple[Event, ...]) -> None:
        if not events:
            return
        head = self.entries[-1] if self.entries else None
        sealed = seal(
            TASK,
            events,
            after_seq=len(self.entries),
            prev_hash=head.hash if head else GENESIS_HASH,
            at=self.now,
        )
        state = self.states[-1] if self.states else None
        for entry in sealed:
            state = apply(state, entry.event, at=entry.at)
            self.states.append(state)
        self.entries.extend(sealed)

    def next_id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def run(self, choices: list[int]) -> Story:
        for choice in choices:
            if self.state.terminal:
                break
            # Mostly a second per step; now and then long enough to miss a replan deadline.
            self.now += timedelta(seconds=100 if choice % 11 == 0 else 1)
            self.write(self.step(choice))
        return Story(tuple(self.entries), tuple(self.states))

    def step(self, choice: int) -> tuple[Event, ...]:
        state = self.state
        match state.phase:
            case TaskPhase.PLANNING:
                return self.planning(state, choice)
            case TaskPhase.EXECUTING:
                return self.executing(state, choice)
            case TaskPhase.VERIFYING:
                return self.verifying(state, choice)
            case TaskPhase.AWAITING_REPLAN:
                return self.awaiting(state, choice)
            case TaskPhase.CANCELLING:
                return self.cancelling(state, choice)
            case _:
                return ()

    # -- one method per phase ------------------------------------------------------------------

    def planning(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        if choice % 29 == 0:
            return request_cancel(state, reason="operator")
        if choice % 7 == 0:
            return reject_plan(state, problems=("the plan has a cycle",), plan=None, now=self.now)
        if choice % 5 == 0 and expire(state, now=self.now):
            return expire(state, now=self.now)
        kind = state.planning or RevisionKind.INITIAL
        action = state.replan_action
        if kind is RevisionKind.LOCAL and isinstance(action, LocalReplan) and state.plan:
            plan, redo = state.plan, downstream(state.plan, action.nodes)
        else:
            plan, redo = PLANS[choice % len(PLANS)], frozenset()
        return (
            RevisionStarted(
                number=len(state.revisions) + 1,
                revision_kind=kind,
                reason="initial plan" if kind is RevisionKind.INITIAL else "replan",
                plan=plan,
                redo=redo,
                usage=Usage(model="scripted", input_tokens=choice % 97),
            ),
        )

    def executing(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        revision = state.revision
        assert revision is not None
        current = [r for r in state.records.values() if r.revision == revision.number]
        running = [r for r in current if not r.terminal]
        handled = {r.node_id for r in current} | {
            s.node_id for s in state.skipped if s.revision == revision.number
        }
        todo_ids = revision.redo or frozenset(revision.plan.node_ids)
        todo = [n for n in revision.plan.nodes if n.id in todo_ids and n.id not in handled]
        ok_now = {r.node_id for r in current if r.status is RecordStatus.SUCCEEDED}
        kept = {
            node for node, result in lineage_results(state).items() if isinstance(result, Success)
        } - todo_ids

        def ready(node: PlanNode) -> bool:
            return all(dep in ok_now or dep in kept for dep in node.after)

        def blocked_by(node: PlanNode) -> tuple[str, ...]:
            settled = {r.node_id for r in current if r.terminal} | (
                handled - {r.node_id for r in current}
            )
            return tuple(
                dep
                for dep in node.after
                if dep not in ok_now and dep not in kept and (dep in settled or dep not in todo_ids)
            )

        moves: list[tuple[Event, ...]] = []
        if ready_nodes := [n for n in todo if ready(n)]:
            node = ready_nodes[choice % len(ready_nodes)]
            moves.append((NodeDispatched(record=self.record(state, node)),))
        if blocked := [(n, blocked_by(n)) for n in todo if blocked_by(n)]:
            node, deps = blocked[choice % len(blocked)]
            moves.append((NodeSkipped(revision=revision.number, node_id=node.id, blocked_by=deps),))
        if running:
            target = running[choice % len(running)]
            moves.append((self.finish_record(target, choice),))
            if target.status is not RecordStatus.RUNNING:
                moves.append(
                    (NodeProgressed(record_id=target.id, status=RecordStatus.RUNNING, at=self.now),)
                )
        if not todo and not running:
            moves.append(self.capture(state, choice))
            moves.append((RoundExecuted(revision=revision.number, executed_ok=executed_ok(state)),))
        if choice % 31 == 0 or not moves:
            return request_cancel(state, reason="operator")
        return moves[choice % len(moves)]

    def verifying(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        revision = state.revision
        assert revision is not None
        mode = self.contract.mode
        budget = Budget(state.replans_used, self.policy.max_replans, state.created.task_deadline)
        # The kernel's decision on this round, given the verdict (if any) and its diagnosis.
        decide_round = functools.partial(
            decide, mode, executed_ok=executed_ok(state), budget=budget, now=self.now
        )
        if mode is VerificationMode.OFF:
            decision = decide_round(verdict=None, reliability=None, diagnosis=None)
            return dispatch(state, decision, now=self.now)
        missing = bool(missing_evidence(state, revision.number))
        if missing and mode in (VerificationMode.ENFORCE, VerificationMode.RECOVERY):
            recorded = VerdictRecorded(
                revision=revision.number, verdict=None, reliability=None, evidence_missing=True
            )
            decision = decide_round(
                verdict=None, reliability=None, diagnosis=None, evidence_missing=True
            )
            return (recorded, *dispatch(state, decision, now=self.now))
        verdict, reliability = self.verdict(revision.plan, choice)
        events: list[Event] = [
            VerdictRecorded(
                revision=revision.number,
                verdict=verdict,
                reliability=reliability,
                raw_digest=digest({"choice": choice}),
            )
        ]
        diagnosis = None
        if not passes(verdict, reliability):
            diagnosis = diagnose(verdict, reliability, lineage_results(state))
            events.append(Diagnosed(revision=revision.number, diagnosis=diagnosis))
        decision = decide_round(
            verdict=verdict,
            reliability=reliability,
            diagnosis=diagnosis,
            local_limit=self.policy.local_limit,
        )
        return (*events, *dispatch(state, decision, now=self.now))

    def awaiting(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        if choice % 19 == 0:
            return request_cancel(state, reason="operator")
        if choice % 5 == 1 and expire(state, now=self.now):
            return expire(state, now=self.now)
        if choice % 3 == 2 and (unknown := unsettled_unknown_actions(state)):
            settled = unknown[choice % len(unknown)]
            return (
                RecordReconciled(
                    record_id=settled.id,
                    result=Success({"observed": settled.node_id}),
                    evidence_refs=(f"record:{settled.id}",),
                    note="seen on camera",
                ),
            )
        return begin_replan(state, now=self.now)

    def cancelling(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        running = [r for r in state.records.values() if not r.terminal]
        if not running:
            return (cancel_outcome(state),)
        target = running[choice % len(running)]
        if choice % 2:
            return (self.finish_record(target, choice),)
        return (
            NodeFinished(
                record_id=target.id, status=RecordStatus.CANCELLED, result=None, at=self.now
            ),
        )

    # -- building blocks -----------------------------------------------------------------------

    def record(self, state: TaskState, node: PlanNode) -> ExecutionRecord:
        rid = self.next_id("rec-")
        revision = state.revision
        assert revision is not None
        return record(
            rid,
            node.id,
            task_id=TASK,
            revision=revision.number,
            tool=node.tool,
            args_digest=digest(node.args),
            effect=node.effect or Effect.ACTION,
            at=self.now,
        )

    def finish_record(self, record: ExecutionRecord, choice: int) -> NodeFinished:
        node = record.node_id
        results: list[NodeResult] = [
            Success({"node": node, "n": choice % 3}),
            Success(choice % 5),
            Success(f"{node} done"),
            Success(None),
            DeviceFailure(node, "device offline"),
            DeviceFailure(
                node, "timed out", is_timeout=True, outcome_unknown=record.effect is Effect.ACTION
            ),
            VerifierFailure(node, "output out of range"),
        ]
        return finished(record.id, results[(choice // 3) % len(results)], at=self.now)

    def capture(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        revision = state.revision
        assert revision is not None
        if choice % 8 == 0:
            return (
                CaptureFailed(revision=revision.number, phase=EvidencePhase.AFTER, error="dark"),
            )
        return (
            captured(
                self.next_id("ev-"),
                source="camera",
                at=self.now,
                revision=revision.number,
                payload={"cups": choice % 3},
            ),
        )

    def verdict(self, plan: Plan, choice: int) -> tuple[Verdict | None, Reliability]:
        blamed = [n for i, n in enumerate(plan.node_ids) if (choice >> i) & 1]
        match choice % 9:
            case 0 | 1 | 2:
                return Verdict.passed(self.contract), Reliability.OK
            case 3 | 4 | 5:
                return Verdict.failed(self.contract, failed_nodes=blamed, feedback="no"), (
                    Reliability.OK
                )
            case 6:
                return Verdict.failed(self.contract, failed_nodes=blamed, unreachable=True), (
                    Reliability.OK
                )
            case 7:
                return None, Reliability.THROWN
            case _:
                return Verdict(VerdictStatus.INCONCLUSIVE), Reliability.INCONCLUSIVE


# Histories vary in length; a slow machine must not turn that into a flaky deadline error.
HISTORIES = settings(deadline=None)


@st.composite
def stories(draw: st.DrawFn) -> Story:
    """A history written by the scenario driver."""
    policy = RecoveryPolicy(
        max_replans=draw(st.integers(min_value=0, max_value=3)),
        local_limit=draw(st.integers(min_value=1, max_value=2)),
        replan_timeout_s=REPLAN_TIMEOUT_S,
        task_timeout_s=draw(st.sampled_from([None, 250.0])),
    )
    # Recovery is drawn more often: it is the mode with replans, rejections and the valves.
    mode = draw(st.sampled_from([*VerificationMode, *[VerificationMode.RECOVERY] * 3]))
    driver = _Driver(mode, policy, draw(st.booleans()))
    choices = draw(st.lists(st.integers(min_value=0, max_value=10_000), max_size=70))
    return driver.run(choices)
