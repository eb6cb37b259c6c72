"""Properties of the ledger over generated histories: replay, prefixes, codec and hash chain.

Histories come from a small scenario driver: it takes a list of drawn integers and, step by step,
picks one valid move for the phase the task is in (accept or reject a plan, dispatch, progress,
finish or skip nodes, capture evidence, end the round, verify and decide with the kernel, pass
the replan valves, expire, reconcile, cancel). Only the machine functions and the kernel decide
what is written, so every history is one the engine could have written.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pev import codec
from pev.errors import CodecError
from pev.kernel import (
    Budget,
    Diagnosis,
    Finish,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
    decide,
    diagnose,
)
from pev.ledger import (
    GENESIS_HASH,
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Dispatched,
    Event,
    EvidenceCaptured,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskCreated,
    TaskFinished,
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
    replay,
    request_cancel,
    seal,
    unsettled_unknown_actions,
    verify_chain,
)
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    TaskId,
    Verdict,
    VerdictStatus,
    VerificationContract,
    VerificationMode,
    VerifierFailure,
    digest,
    downstream,
    freeze_json,
    passes,
    record_status_for,
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
        if mode is VerificationMode.OFF:
            self.contract = VerificationContract(VerificationMode.OFF)
        else:
            self.contract = VerificationContract(
                mode,
                "tidy the desk",
                ("the cup is in the sink",),
                required_evidence=("state",) if evidence else (),
            )
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
        ran_ok = executed_ok(state)
        if mode is VerificationMode.OFF:
            decision = decide(
                mode,
                executed_ok=ran_ok,
                verdict=None,
                reliability=None,
                diagnosis=None,
                budget=budget,
                now=self.now,
            )
            return dispatch(state, decision, now=self.now)
        missing = bool(missing_evidence(state, revision.number))
        if missing and mode in (VerificationMode.ENFORCE, VerificationMode.RECOVERY):
            recorded = VerdictRecorded(
                revision=revision.number, verdict=None, reliability=None, evidence_missing=True
            )
            decision = decide(
                mode,
                executed_ok=ran_ok,
                verdict=None,
                reliability=None,
                diagnosis=None,
                budget=budget,
                now=self.now,
                evidence_missing=True,
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
        decision = decide(
            mode,
            executed_ok=ran_ok,
            verdict=verdict,
            reliability=reliability,
            diagnosis=diagnosis,
            budget=budget,
            now=self.now,
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
        return ExecutionRecord(
            id=RecordId(rid),
            task_id=TASK,
            revision=revision.number,
            node_id=node.id,
            tool=node.tool,
            args_digest=digest(node.args),
            effect=node.effect,
            idempotency_key=f"{TASK}:{rid}",
            created_at=self.now,
            updated_at=self.now,
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
        result = results[(choice // 3) % len(results)]
        return NodeFinished(
            record_id=record.id, status=record_status_for(result), result=result, at=self.now
        )

    def capture(self, state: TaskState, choice: int) -> tuple[Event, ...]:
        revision = state.revision
        assert revision is not None
        if choice % 8 == 0:
            return (
                CaptureFailed(revision=revision.number, phase=EvidencePhase.AFTER, error="dark"),
            )
        return (
            EvidenceCaptured(
                evidence=Evidence(
                    id=EvidenceId(self.next_id("ev-")),
                    phase=EvidencePhase.AFTER,
                    kind="state",
                    source="camera",
                    captured_at=self.now,
                    revision=revision.number,
                    payload={"cups": choice % 3},
                )
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


# --- the fold ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(stories())
def test_driver_writes_only_histories_the_fold_accepts(story: Story) -> None:
    """Replaying what the machine functions wrote gives the state the driver folded."""
    assert replay(story.entries) == story.states[-1]
    assert story.states[-1].event_count == len(story.entries)
    assert story.states[-1].updated_at == story.entries[-1].at


@HISTORIES
@given(stories())
def test_replay_is_deterministic(story: Story) -> None:
    """Replaying the same entries twice, or their decoded copies, gives equal states."""
    decoded = [codec.loads(codec.dumps(entry), LedgerEntry) for entry in story.entries]
    assert replay(story.entries) == replay(list(story.entries)) == replay(decoded)


@HISTORIES
@given(stories(), st.data())
def test_fold_is_prefix_consistent(story: Story, data: st.DataObject) -> None:
    """replay of the first k entries is the k-th folded state, and folding the rest completes it."""
    k = data.draw(st.integers(min_value=1, max_value=len(story.entries)), label="k")
    prefix = replay(story.entries[:k])
    assert prefix == story.states[k - 1]
    state = prefix
    for entry in story.entries[k:]:
        state = apply(state, entry.event, at=entry.at)
    assert state == replay(story.entries)


@HISTORIES
@given(stories())
def test_terminal_histories_end_with_task_finished(story: Story) -> None:
    """A history whose task ended has task_finished as its last event and nowhere else."""
    kinds = [entry.event.kind for entry in story.entries]
    if story.states[-1].terminal:
        assert kinds[-1] == "task_finished"
    assert "task_finished" not in kinds[:-1]


@HISTORIES
@given(stories())
def test_revisions_are_numbered_one_by_one(story: Story) -> None:
    """Revision numbers in any history are 1, 2, 3, ... and replans stay within the budget."""
    state = story.states[-1]
    assert [r.number for r in state.revisions] == list(range(1, len(state.revisions) + 1))
    assert state.replans_used <= state.policy.max_replans


# --- the codec --------------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - Hypothesis bounds are naive; timezones= adds UTC
    max_value=datetime(2030, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
texts = st.text(max_size=10)
ids = st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
node_sets = st.frozensets(ids, max_size=3)
results: st.SearchStrategy[NodeResult] = st.one_of(
    st.builds(Success, json_values),
    st.builds(DeviceFailure, ids, texts, st.booleans(), st.booleans()),
    st.builds(VerifierFailure, ids, texts),
)
nodes = st.builds(
    PlanNode,
    ids,
    texts,
    tool=st.none() | ids,
    args=st.dictionaries(ids, json_values, max_size=2),
    after=st.lists(ids, max_size=2).map(tuple),
    effect=st.sampled_from(Effect),
)
plans = st.builds(Plan, texts, st.lists(nodes, max_size=3).map(tuple))
contracts = st.one_of(
    st.just(VerificationContract(VerificationMode.OFF)),
    st.builds(
        VerificationContract,
        st.sampled_from([m for m in VerificationMode if m is not VerificationMode.OFF]),
        st.just("reach the goal"),
        st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=3, unique=True),
        constraints=st.lists(texts, max_size=2).map(tuple),
        required_evidence=st.lists(st.sampled_from(["state", "image"]), max_size=2).map(tuple),
    ),
)
policies = st.builds(
    RecoveryPolicy,
    max_replans=st.integers(min_value=0, max_value=5),
    replan_timeout_s=st.integers(min_value=1, max_value=600) | st.floats(0.5, 600.0),
    task_timeout_s=st.none() | st.integers(min_value=1, max_value=9999),
)
usages = st.none() | st.builds(
    Usage, model=ids, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)
)
verdicts = st.builds(
    Verdict,
    st.sampled_from(VerdictStatus),
    failed_nodes=node_sets,
    feedback=texts,
    unmet_criteria=st.lists(texts, max_size=2).map(tuple),
    guidance=texts,
    evidence_refs=st.lists(ids.map("evidence:{}".format), max_size=2).map(tuple),
)
diagnoses = st.builds(Diagnosis, st.sampled_from(RootCause), node_sets, texts)
replans = st.one_of(st.builds(LocalReplan, node_sets, texts), st.builds(GlobalReplan, texts))
finishes = st.builds(
    Finish,
    st.sampled_from(TaskStatus),
    st.sampled_from(TerminalReason),
    shadow=st.none() | replans,
    detail=texts,
)
records = st.builds(
    ExecutionRecord,
    id=ids.map(RecordId),
    task_id=ids.map(TaskId),
    revision=st.integers(1, 9),
    node_id=ids,
    tool=st.none() | ids,
    args_digest=st.just(digest({})),
    effect=st.sampled_from(Effect),
    idempotency_key=ids,
    status=st.sampled_from(RecordStatus),
    created_at=instants,
    updated_at=instants,
    error=st.none() | texts,
)
evidences = st.builds(
    Evidence,
    id=ids.map(EvidenceId),
    phase=st.sampled_from(EvidencePhase),
    kind=st.sampled_from(["state", "image"]),
    source=ids,
    captured_at=instants,
    revision=st.integers(1, 9),
    payload=json_values,
    artifact=st.none() | st.binary(max_size=16),
)
kinds = st.sampled_from(RevisionKind)

EVENT_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    TaskCreated: st.builds(
        TaskCreated,
        task_id=ids.map(TaskId),
        input=json_values.map(freeze_json),
        contract=contracts,
        policy=policies,
        components=st.dictionaries(st.sampled_from(["planner", "executor"]), ids, max_size=2),
        task_deadline=st.none() | instants,
    ),
    ReplanStarted: st.builds(ReplanStarted, planning=kinds, attempt=st.integers(1, 9)),
    RevisionStarted: st.builds(
        RevisionStarted,
        number=st.integers(1, 9),
        revision_kind=kinds,
        reason=texts,
        plan=plans,
        feedback=texts,
        lessons=st.lists(texts, max_size=2).map(tuple),
        redo=node_sets,
        usage=usages,
    ),
    PlanRejected: st.builds(
        PlanRejected,
        planning=kinds,
        attempt=st.integers(1, 9),
        problems=st.lists(texts, max_size=3).map(tuple),
        plan=st.none() | plans,
        usage=usages,
    ),
    NodeDispatched: st.builds(NodeDispatched, record=records),
    NodeProgressed: st.builds(
        NodeProgressed,
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        at=instants,
    ),
    NodeFinished: st.builds(
        NodeFinished,
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        result=st.none() | results,
        at=instants,
        settled_on_resume=st.booleans(),
    ),
    NodeSkipped: st.builds(
        NodeSkipped,
        revision=st.integers(1, 9),
        node_id=ids,
        blocked_by=st.lists(ids, max_size=2).map(tuple),
    ),
    RecordReconciled: st.builds(
        RecordReconciled,
        record_id=ids.map(RecordId),
        result=results,
        evidence_refs=st.lists(ids, max_size=2).map(tuple),
        note=texts,
    ),
    EvidenceCaptured: st.builds(EvidenceCaptured, evidence=evidences),
    CaptureFailed: st.builds(
        CaptureFailed,
        revision=st.integers(1, 9),
        phase=st.sampled_from(EvidencePhase),
        error=texts,
    ),
    RoundExecuted: st.builds(RoundExecuted, revision=st.integers(1, 9), executed_ok=st.booleans()),
    VerdictRecorded: st.builds(
        VerdictRecorded,
        revision=st.integers(1, 9),
        verdict=st.none() | verdicts,
        reliability=st.none() | st.sampled_from(Reliability),
        raw_digest=st.just(digest("raw")),
        problems=st.lists(texts, max_size=2).map(tuple),
        evidence_missing=st.booleans(),
        usage=usages,
    ),
    Diagnosed: st.builds(Diagnosed, revision=st.integers(1, 9), diagnosis=diagnoses),
    Dispatched: st.builds(
        Dispatched, revision=st.integers(1, 9), decision=st.one_of(finishes, replans)
    ),
    AwaitingReplan: st.builds(AwaitingReplan, action=st.none() | replans, deadline=instants),
    CancelRequested: st.builds(CancelRequested, reason=texts),
    TaskFinished: st.builds(
        TaskFinished,
        status=st.sampled_from(TaskStatus),
        reason=st.sampled_from(TerminalReason),
        outputs=st.dictionaries(ids, json_values, max_size=3).map(freeze_json),
        detail=texts,
    ),
}
events = st.one_of(*EVENT_STRATEGIES.values())


def test_codec_strategies_cover_every_event_kind() -> None:
    """There is a generator for every member of the Event union."""
    assert set(EVENT_STRATEGIES) == set(typing.get_args(Event))


@settings(max_examples=300)
@given(events)
def test_every_event_round_trips_through_the_codec(event: Event) -> None:
    """dumps then loads into the Event union gives an equal event with the same encoding."""
    text = codec.dumps(event)
    back = codec.loads(text, Event)
    assert type(back) is type(event)
    assert back == event
    assert codec.dumps(back) == text


@HISTORIES
@given(stories())
def test_ledger_entries_round_trip_through_the_codec(story: Story) -> None:
    """Every stored entry decodes to an equal entry whose encoding is unchanged."""
    for entry in story.entries:
        text = codec.dumps(entry)
        back = codec.loads(text, LedgerEntry)
        assert back == entry
        assert codec.dumps(back) == text


# --- the hash chain ---------------------------------------------------------------------------


def _verify(story_entries: list[LedgerEntry] | tuple[LedgerEntry, ...], story: Story) -> Any:
    return verify_chain(
        TASK,
        list(story_entries),
        head_count=len(story.entries),
        head_hash=story.entries[-1].hash,
    )


@HISTORIES
@given(stories())
def test_written_chain_verifies(story: Story) -> None:
    """A history as written verifies, with and without the index's head."""
    assert verify_chain(TASK, story.entries).ok
    assert _verify(story.entries, story).ok


def _leaves(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))]
    return [] if value is None else [path]


def _edited(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    assert isinstance(value, str)
    return value + "~"


@HISTORIES
@given(stories(), st.data())
def test_edited_field_is_detected(story: Story, data: st.DataObject) -> None:
    """Editing any one field of one stored entry is caught at that entry (or cannot be read)."""
    index = data.draw(st.integers(0, len(story.entries) - 1), label="entry")
    encoded = typing.cast("dict[str, Any]", codec.encode(story.entries[index]))
    leaves = _leaves(encoded)
    path = data.draw(st.sampled_from(leaves), label="field")
    holder: Any = encoded
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = _edited(holder[path[-1]])
    try:
        tampered = codec.decode(encoded, LedgerEntry)
    except CodecError:
        return  # a store reports an entry it cannot read as corrupt
    entries = list(story.entries)
    entries[index] = tampered
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == index + 1


@HISTORIES
@given(stories(), st.data())
def test_dropped_entry_is_detected(story: Story, data: st.DataObject) -> None:
    """Dropping any one entry, the last included, is caught where the gap starts."""
    index = data.draw(st.integers(0, len(story.entries) - 1), label="dropped")
    entries = [e for i, e in enumerate(story.entries) if i != index]
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == index + 1


@HISTORIES
@given(stories(), st.data())
def test_swapped_entries_are_detected(story: Story, data: st.DataObject) -> None:
    """Swapping any two entries is caught at the first of them."""
    if len(story.entries) < 2:
        return
    first = data.draw(st.integers(0, len(story.entries) - 2), label="first")
    second = data.draw(st.integers(first + 1, len(story.entries) - 1), label="second")
    entries = list(story.entries)
    entries[first], entries[second] = entries[second], entries[first]
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == first + 1
