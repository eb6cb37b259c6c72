"""Effects happen once per task (docs/design.md §4.5), as a property over random revisions.

A task runs a random sequence of plans of identical and different calls. Before each revision
its action nodes are matched onto the task's effects with ``intent_of``, as the engine does: a
plan with a refused node is rejected; otherwise each node is reused (``node_reused``) or sent as
the occurrence it names, and ends in a random way (succeeded, failed, unknown, reconciled done or
not done, compensated, or its compensation failing). Everything goes through the fold, so every
intent the engine would act on must also be an event the fold accepts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.builders import (
    TASK,
    compensated,
    compensating,
    compensation_failed,
    created,
    finished,
    record,
    reused,
    to_planning,
)

from pev.ledger import (
    Call,
    EffectStatus,
    Event,
    Intent,
    NodeDispatched,
    PlanRejected,
    RecordReconciled,
    Refuse,
    Reuse,
    RevisionKind,
    RevisionStarted,
    Send,
    TaskPhase,
    TaskState,
    apply,
    call_name,
    effect_key,
    effect_order,
    intent_of,
)
from pev.model import (
    DeviceFailure,
    JsonObject,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    Success,
    digest,
)

# `make soak` runs the properties over many more examples (PEV_SOAK_FACTOR times as many).
SOAK_FACTOR = int(os.environ.get("PEV_SOAK_FACTOR", "1"))

# The calls a plan draws from: two of one tool with other args, another tool, and a node
# without a tool (a call of its own node).
CALLS: tuple[tuple[str | None, JsonObject], ...] = (
    ("post", JsonObject({"to": "ada"})),
    ("post", JsonObject({"to": "bob"})),
    ("phone", JsonObject({"to": "ada"})),
    (None, JsonObject({})),
)
OUTCOMES = ("succeeded", "failed", "unknown", "done", "not_done", "compensated", "undo_failed")
LOST = DeviceFailure("n", "timed out", is_timeout=True, outcome_unknown=True)

Triple = tuple[str, str, int]
"""One intended effect: its call, its args digest and its occurrence."""


@dataclass(frozen=True)
class Round:
    """One plan of the story, how each sent node ends, and whether unknowns are settled first."""

    nodes: tuple[tuple[int, bool], ...]  # (index into CALLS, repeat) per node
    outcomes: tuple[str, ...]  # per node, used if it is sent
    settle: bool | None  # before planning: settle every unknown effect as done, not done, or not


rounds = st.builds(
    Round,
    nodes=st.lists(
        st.tuples(st.integers(0, len(CALLS) - 1), st.booleans()), min_size=1, max_size=4
    ).map(tuple),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=4, max_size=4).map(tuple),
    settle=st.none() | st.booleans(),
)


def plan_of(turn: Round) -> Plan:
    nodes = tuple(
        PlanNode(
            f"n{i}", f"call {index}", tool=CALLS[index][0], args=CALLS[index][1], repeat=repeat
        )
        for i, (index, repeat) in enumerate(turn.nodes)
    )
    return Plan("keep in touch", nodes)


def call_of(node: PlanNode) -> tuple[str, str]:
    return call_name(node.tool, node.id), digest(node.args)


@dataclass
class Task:
    """The task as the story drives it: its state, and every intended effect sent so far."""

    state: TaskState
    keys: dict[str, Triple] = field(default_factory=dict)
    ids: int = 0

    def fold(self, *events: Event) -> None:
        for event in events:
            self.state = apply(self.state, event)

    def new_id(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def intents(self, plan: Plan) -> dict[str, Intent]:
        """What each node of ``plan`` intends, matched against the task's effects so far."""
        nodes = {node.id: node for node in plan.nodes}
        order = [nodes[node_id] for node_id in effect_order(plan)]
        intents: dict[str, Intent] = {}
        for node in order:
            call = call_of(node)
            group = [
                Call(other.id, other.tool, call[1], other.repeat)
                for other in order
                if call_of(other) == call
            ]
            effects = [
                effect
                for effect in self.state.effects.values()
                if (call_name(effect.tool, effect.node_id), effect.args_digest) == call
            ]
            position = [item.node_id for item in group].index(node.id)
            intents[node.id] = intent_of(position, group, effects)
        return intents

    def send(self, node: PlanNode, occurrence: int, outcome: str, revision: int) -> None:
        """Send ``node`` as ``occurrence`` of its call and let it end as ``outcome``."""
        call, args_digest = call_of(node)
        triple = (call, args_digest, occurrence)
        taken = [
            effect.record_id
            for effect in self.state.effects.values()
            if (call_name(effect.tool, effect.node_id), effect.args_digest, effect.occurrence)
            == triple
            and effect.status is not EffectStatus.NOT_DONE
        ]
        assert not taken, f"{triple} is sent again, though {taken} may have done it"
        key = effect_key(TASK, call, args_digest, occurrence)
        assert self.keys.setdefault(key, triple) == triple, f"key {key} names two effects"
        rid = self.new_id("r")
        self.fold(
            NodeDispatched(
                record=record(
                    rid,
                    node.id,
                    revision=revision,
                    tool=node.tool,
                    args_digest=args_digest,
                    idempotency_key=key,
                    occurrence=occurrence,
                    args=node.args,
                )
            ),
            *self.ending(rid, outcome),
        )

    def ending(self, rid: str, outcome: str) -> tuple[Event, ...]:
        """How record ``rid`` ends as ``outcome``, with what settles or undoes it."""
        match outcome:
            case "failed":
                return (finished(rid, DeviceFailure("n", "refused")),)
            case "unknown":
                return (finished(rid, LOST),)
            case "done" | "not_done":
                return (finished(rid, LOST), reconciled(RecordId(rid), done=outcome == "done"))
            case "succeeded":
                return (finished(rid, Success("done")),)
        undo = self.new_id("u")
        if outcome == "compensated":
            end: Event = compensated(rid, undo)
        else:
            end = compensation_failed(rid, undo, DeviceFailure("n", "too late"))
        return (finished(rid, Success("done")), compensating(rid, undo, "n"), end)

    def settle(self, *, done: bool) -> None:
        """Reconcile every effect of unknown outcome as done or not done."""
        for effect in list(self.state.effects.values()):
            if effect.status is EffectStatus.UNKNOWN:
                self.fold(reconciled(effect.record_id, done=done))


def reconciled(rid: RecordId, *, done: bool) -> RecordReconciled:
    """A reconciliation of record ``rid``: it was done, or it never was."""
    truth: NodeResult = Success("it did") if done else DeviceFailure("n", "it did not")
    return RecordReconciled(record_id=rid, result=truth)


def run(story: list[Round]) -> Task:
    """Drive a task through the story; the assertions are made as each node is sent."""
    task = Task(apply(None, created(max_replans=len(story))))
    kind = RevisionKind.INITIAL
    for turn in story:
        if task.state.phase is TaskPhase.EXECUTING:
            kind = RevisionKind.GLOBAL
            task.fold(*to_planning(len(task.state.revisions), kind))
        if turn.settle is not None:
            task.settle(done=turn.settle)
        plan = plan_of(turn)
        intents = task.intents(plan)
        if any(isinstance(intent, Refuse) for intent in intents.values()):
            task.fold(PlanRejected(planning=kind, attempt=1, problems=("unknown outcome",)))
            continue
        number = len(task.state.revisions) + 1
        task.fold(RevisionStarted(number=number, revision_kind=kind, reason="r", plan=plan))
        sent: set[Triple] = set()
        for position, node_id in enumerate(effect_order(plan)):
            node = next(node for node in plan.nodes if node.id == node_id)
            match intents[node_id]:
                case Reuse(effect):
                    task.fold(reused(node_id, effect.record_id, revision=number))
                case Send(occurrence):
                    triple = (*call_of(node), occurrence)
                    assert triple not in sent, f"{triple} is sent twice in one revision"
                    sent.add(triple)
                    task.send(node, occurrence, turn.outcomes[position], number)
    return task


@settings(max_examples=200 * SOAK_FACTOR, deadline=None)
@given(st.lists(rounds, min_size=1, max_size=5))
def test_no_intended_effect_is_sent_twice(story: list[Round]) -> None:
    """No occurrence of a call is sent again once it may have taken effect; one key per effect."""
    task = run(story)
    standing = [
        effect
        for effect in task.state.effects.values()
        if effect.status is not EffectStatus.NOT_DONE
    ]
    assert len({effect.key for effect in standing}) == len(standing)


def test_the_story_sends_reuses_and_refuses() -> None:
    """The simulation exercises each intent: a new send, a refused plan, a reuse, a resend."""
    ada, again = (0, False), (0, True)
    story = [
        Round(nodes=(ada, ada), outcomes=("succeeded", "unknown", "", ""), settle=None),
        # The second node would be matched to the unknown effect: the plan is refused.
        Round(nodes=(ada, ada), outcomes=("",) * 4, settle=None),
        # Settled as not done, occurrence 2 is sent again; the repeat node is a new one.
        Round(nodes=(ada, ada, again), outcomes=("", "succeeded", "succeeded", ""), settle=False),
    ]
    state = run(story).state
    assert [item.occurrence for item in state.records.values()] == [1, 2, 2, 3]
    assert [(item.revision, item.record_id) for item in state.reused] == [(2, "r1")]
    assert len(state.rejections) == 1
