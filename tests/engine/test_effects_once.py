"""Effects happen once per task (docs/design.md §4.5; docs/engine.md, "Effects happen once").

Every test proves what reached the world from the log the tools write themselves
(tests/support/effects.py), never from pev's ledger: no replan, local or global, sends again an
action whose effect the task already has; a node with the same call reuses it. An action of
unknown outcome is reconciled and the round goes on; a query cut short runs again (three times
at most). A Hypothesis property closes the file. Each run is checked against its ledger (the
``engine`` fixture), on the memory store and on SQLite.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.effects import (
    CONTRACT,
    GOAL,
    PASS,
    STORES,
    Sent,
    World,
    blame,
    kinds_of,
    look,
    on_each_store,
    pay,
    plan,
    post,
    run,
)

import pev
from pev.engine import PlanRequest, VerifyRequest, current_node_context, resume
from pev.ledger import (
    EffectStatus,
    Ledger,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    NodeSkipped,
    PlanRejected,
    Revision,
    RevisionKind,
    RevisionStarted,
    effect_key,
    utc_now,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerifierFailure,
    digest,
)
from pev.testing import ScriptedPlanner, ScriptedVerifier

# `make soak` runs the properties over many more examples (PEV_SOAK_FACTOR times as many).
SOAK_FACTOR = int(os.environ.get("PEV_SOAK_FACTOR", "1"))

if TYPE_CHECKING:
    from conftest import Engine

engine = pytest.fixture(params=STORES)(on_each_store)


PAID = plan(pay(100), post({"$ref": "pay"}, after=("pay",)))


# -- reuse -------------------------------------------------------------------------------------


async def test_a_local_replacement_with_the_same_call_reuses_the_effect(engine: Engine) -> None:
    """A blamed node replaced by the same call is satisfied by its effect: nothing is re-sent."""
    world = World()

    result = await run(engine, world, PAID, PAID, verdicts=(blame("pay"), PASS))

    assert (result.ok, result.revisions) == (True, 2)
    assert world.story() == ["pay 100", "post paid 100"]
    reused = [e for e in await engine.events(result.task_id) if isinstance(e, NodeReused)]
    assert [(e.revision, e.node_id, e.record_id) for e in reused] == [
        (2, "pay", "1:pay"),
        (2, "post", "1:post"),
    ]


async def test_a_local_replacement_with_other_args_is_sent_anew(engine: Engine) -> None:
    """The same node with other args is another intended effect: it is sent, with its own key."""
    world = World()

    result = await run(
        engine, world, plan(post("hi")), plan(post("hello")), verdicts=(blame("post"), PASS)
    )

    assert result.ok
    assert world.story() == ["post hi", "post hello"]
    assert len(set(world.keys("post"))) == 2
    old, new = result.effects
    assert (old.superseded, new.superseded) == (2, None)


async def test_the_feedback_append_path_reuses_the_effect(engine: Engine) -> None:
    """A planner that declines a local replan: the redo node keeps its call, and reuses it."""
    world = World()

    result = await run(engine, world, PAID, None, verdicts=(blame("pay"), PASS))

    assert (result.ok, result.revisions) == (True, 2)
    assert world.story() == ["pay 100", "post paid 100"]
    state = await engine.state(result.task_id)
    assert "[retry after feedback]" in state.revisions[-1].plan.node("pay").description
    assert [(r.node_id, r.record_id) for r in state.reused] == [
        ("pay", "1:pay"),
        ("post", "1:post"),
    ]


async def test_a_global_replan_after_a_verdict_blaming_no_node_sends_nothing_again(
    engine: Engine,
) -> None:
    """No node blamed: a global replan of the same plan reuses every effect."""
    world = World()

    result = await run(engine, world, PAID, PAID, verdicts=(blame(), PASS))

    assert result.ok
    state = await engine.state(result.task_id)
    assert state.revisions[-1].kind is RevisionKind.GLOBAL
    assert world.story() == ["pay 100", "post paid 100"]
    assert {effect.record_id for effect in result.effects} == {"1:pay", "1:post"}


async def test_a_global_replan_reuses_a_blamed_node_that_is_unchanged(engine: Engine) -> None:
    """Three nodes blamed (past the local limit): the global plan repeats them, nothing is sent."""
    world = World()
    three = plan(pay(1, node="a"), pay(2, node="b", after=("a",)), pay(3, node="c", after=("b",)))

    result = await run(engine, world, three, three, verdicts=(blame("a", "b", "c"), PASS))

    assert result.ok
    state = await engine.state(result.task_id)
    assert state.revisions[-1].kind is RevisionKind.GLOBAL
    assert world.story() == ["pay 1", "pay 2", "pay 3"]
    assert not any(effect.superseded or effect.compensation for effect in result.effects)


async def test_two_identical_calls_in_one_plan_are_two_occurrences(engine: Engine) -> None:
    """Two nodes posting "hi" are two intended effects: both are sent, under two keys."""
    world = World()
    twice = plan(post("hi", node="a"), post("hi", node="b"))

    result = await run(engine, world, twice, verdicts=(PASS,))

    assert world.story() == ["post hi", "post hi"]
    assert sorted(key.rsplit("/", 1)[1] for key in world.keys("post")) == ["1", "2"]
    assert [effect.occurrence for effect in result.effects] == [1, 2]


async def test_a_later_plan_with_the_same_two_calls_reuses_both(engine: Engine) -> None:
    """A global replan with the same two posts (under other node ids) reuses both effects."""
    world = World()
    twice = plan(post("hi", node="a"), post("hi", node="b"))
    again = plan(post("hi", node="c"), post("hi", node="d"))

    result = await run(engine, world, twice, again, verdicts=(blame(), PASS))

    assert result.ok
    assert world.story() == ["post hi", "post hi"]
    state = await engine.state(result.task_id)
    assert [(r.node_id, r.record_id) for r in state.reused] == [("c", "1:a"), ("d", "1:b")]


async def test_repeat_sends_a_new_occurrence_with_a_new_key(engine: Engine) -> None:
    """``repeat=True``: posting "hi" again is the intent, a new occurrence under a new key."""
    world = World()

    result = await run(
        engine, world, plan(post("hi")), plan(post("hi", repeat=True)), verdicts=(blame(), PASS)
    )

    assert result.ok
    assert world.story() == ["post hi", "post hi"]
    first, second = world.keys("post")
    assert (first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]) == ("1", "2")


@pytest.mark.parametrize("repeat", [False, True], ids=["same-call", "repeat"])
async def test_a_plan_that_would_resend_an_unknown_effect_is_rejected(
    engine: Engine, repeat: bool
) -> None:
    """A post of unknown outcome: a plan sending it again (``repeat`` or not) is rejected."""
    world = World(posts=deque(["late"]), reconciles=False)
    second = plan(post("hi", repeat=repeat))

    result = await run(
        engine, world, plan(post("hi")), second, plan(look()), verdicts=(blame(), PASS)
    )

    assert result.ok
    assert world.story() == ["post hi"]
    [rejected] = [e for e in await engine.events(result.task_id) if isinstance(e, PlanRejected)]
    [problem] = rejected.problems
    assert "node 'post' would send action 'post' again" in problem
    assert "whose outcome is unknown; observe or reconcile it first" in problem


async def test_a_node_whose_ref_args_resolve_to_an_unknown_effect_is_refused_at_dispatch(
    engine: Engine,
) -> None:
    """Args from a ``$ref`` are checked once resolved: the node is refused, not sent."""
    world = World(posts=deque(["late"]), reconciles=False, looks=deque(["hi"]))
    from_look = plan(look(), post({"$ref": "look"}, after=("look",)))
    other = plan(post("bye"))

    result = await run(
        engine, world, plan(post("hi")), from_look, other, verdicts=(blame(), blame("post"), PASS)
    )

    assert result.ok
    assert world.story() == ["post hi", "post bye"]
    state = await engine.state(result.task_id)
    [refused] = [r for r in state.records.values() if r.id == "2:post"]
    assert refused.status is RecordStatus.FAILED
    failure = state.results[refused.id]
    assert isinstance(failure, VerifierFailure)
    assert "whose outcome is unknown" in failure.reason


async def test_the_key_is_the_same_for_an_intended_effect_in_every_revision(
    engine: Engine,
) -> None:
    """A post reconciled as not done is sent again by a replan under the very same key."""
    world = World(posts=deque(["lost"]))

    result = await run(engine, world, plan(post("hi")), plan(post("hi")), verdicts=(blame(), PASS))

    assert (result.ok, result.revisions) == (True, 2)
    [key] = world.keys("post")
    assert world.calls == [key, key]
    assert key == effect_key(TaskId(result.task_id), "post", digest({"text": "hi"}), 1)
    assert key == f"{result.task_id}/post/{digest({'text': 'hi'})[:16]}/1"


# -- reconcile, then go on ---------------------------------------------------------------------


async def test_a_timed_out_action_reconciled_as_done_lets_its_dependents_run_at_once(
    engine: Engine,
) -> None:
    """Reconciled as done the moment it times out: the nodes behind it run in the same revision."""
    world = World(posts=deque(["late"]))
    chain = plan(post("hi"), pay(5, after=("post",)))

    result = await run(engine, world, chain, verdicts=(PASS,))

    assert (result.ok, result.revisions) == (True, 1)
    assert world.story() == ["post hi", "pay 5"]
    kinds = kinds_of(await engine.events(result.task_id), "node_finished", "record_reconciled")
    assert kinds == ["node_finished", "record_reconciled", "node_finished"]
    assert [effect.status for effect in result.effects] == [EffectStatus.DONE, "succeeded"]


async def test_an_effect_reconciled_as_done_is_reused_by_a_later_plan(engine: Engine) -> None:
    """Settled as done, the post is an effect like any other: a replan of it reuses it."""
    world = World(posts=deque(["late"]))

    result = await run(engine, world, plan(post("hi")), plan(post("hi")), verdicts=(blame(), PASS))

    assert (result.ok, result.revisions) == (True, 2)
    assert world.story() == ["post hi"]
    assert len(world.calls) == 1
    state = await engine.state(result.task_id)
    assert [(r.node_id, r.record_id) for r in state.reused] == [("post", "1:post")]


async def test_a_timed_out_action_reconciled_as_not_done_fails_its_node(engine: Engine) -> None:
    """Reconciled as not done: the node failed (a device failure) and its dependents are skipped."""
    world = World(posts=deque(["lost"]))
    chain = plan(post("hi"), pay(5, after=("post",)))

    result = await run(engine, world, chain, verdicts=(blame("post"),))

    assert (result.status, result.reason) == ("partial", "device_failure")
    assert world.story() == []
    assert [effect.status for effect in (await engine.state(result.task_id)).effects.values()] == [
        EffectStatus.NOT_DONE
    ]


# -- resume ------------------------------------------------------------------------------------


async def _crashed_with_an_unknown_post(engine: Engine, world: World) -> str:
    """A ledger left by a crash right after a post ended unknown and its dependent was skipped.

    The post did reach the world (its line is in the world's log, under its key).
    """
    ledger = Ledger(engine.store)
    chain = plan(post("hi"), pay(5, after=("post",)))
    created = await ledger.create(GOAL, contract=CONTRACT)
    task_id = created.task_id
    now = utc_now()
    key = effect_key(TaskId(task_id), "post", digest({"text": "hi"}), 1)
    record = ExecutionRecord.pending(
        id=RecordId("1:post"),
        task_id=TaskId(task_id),
        revision=1,
        node_id="post",
        tool="post",
        args_digest=digest({"text": "hi"}),
        effect=Effect.ACTION,
        idempotency_key=key,
        at=now,
        occurrence=1,
        args={"text": "hi"},
    )
    await ledger.append(
        task_id,
        [
            RevisionStarted(
                number=1, revision_kind=RevisionKind.INITIAL, reason="initial plan", plan=chain
            ),
            NodeDispatched(record=record),
        ],
    )
    world.log.append(Sent("post", {"text": "hi"}, key))
    await ledger.append(
        task_id,
        [
            NodeFinished(
                record_id=record.id,
                status=RecordStatus.UNKNOWN,
                result=DeviceFailure("post", "timed out", is_timeout=True, outcome_unknown=True),
                at=now,
            ),
            NodeSkipped(revision=1, node_id="pay", blocked_by=("post",)),
        ],
    )
    return task_id


async def test_on_resume_an_unknown_action_is_reconciled_and_its_skipped_dependents_run(
    engine: Engine,
) -> None:
    """Resumed: the post of unknown outcome is reconciled as done; the skipped payment runs."""
    world = World()
    task_id = await _crashed_with_an_unknown_post(engine, world)

    result = await resume(
        task_id,
        store=engine.store,
        planner=ScriptedPlanner(),
        tools=world.tools,
        verifier=ScriptedVerifier(PASS),
    )
    await engine.check(result)

    assert (result.ok, result.revisions) == (True, 1)
    assert [record.id for record in world.asked] == ["1:post"]
    assert world.story() == ["post hi", "pay 5"]
    assert world.calls == [world.keys("pay")[0]]  # the post was never sent again


# -- queries cut short -------------------------------------------------------------------------


WEIGHED = plan(
    PlanNode("weigh", "weigh the parcel", tool="weigh"), pay({"$ref": "weigh"}, after=("weigh",))
)


async def _weigh_through(
    engine: Engine, world: World, *, interrupts: int, verdict: pev.Verdict
) -> tuple[pev.RunResult, list[str]]:
    """Weigh, then pay what was weighed; Ctrl-C in the first ``interrupts`` weighings.

    The task is run, then resumed after each interrupt until it ends.

    Returns:
        The task's result, and the record each weighing ran as.
    """
    weighings: list[str] = []

    @pev.tool(effect="query")
    async def weigh() -> int:
        """Weigh the parcel, unless the operator presses Ctrl-C."""
        weighings.append(current_node_context().record_id)
        if len(weighings) <= interrupts:
            raise KeyboardInterrupt
        return 5

    tools, verifier = [*world.tools, weigh], ScriptedVerifier(verdict)

    async def drive(first: bool) -> pev.RunResult:
        if first:
            return await pev.run(
                GOAL,
                planner=ScriptedPlanner(WEIGHED),
                tools=tools,
                verifier=verifier,
                contract=CONTRACT,
                store=engine.store,
                task_id="weighing",
            )
        return await resume(
            "weighing",
            store=engine.store,
            planner=ScriptedPlanner(),
            tools=tools,
            verifier=verifier,
        )

    for attempt in range(interrupts):
        with pytest.raises(KeyboardInterrupt):
            await drive(first=attempt == 0)
    result = await drive(first=interrupts == 0)
    await engine.check(result)
    return result, weighings


async def test_a_query_an_interrupt_cut_short_is_cancelled_and_runs_again_on_resume(
    engine: Engine,
) -> None:
    """Ctrl-C inside a query: its record ends cancelled; resume runs it again as a new record."""
    world = World()

    result, weighings = await _weigh_through(engine, world, interrupts=1, verdict=PASS)

    assert result.ok
    assert weighings == ["1:weigh", "1:weigh.2"]
    state = await engine.state(result.task_id)
    assert [(r.id, r.status) for r in state.records.values() if r.node_id == "weigh"] == [
        ("1:weigh", RecordStatus.CANCELLED),
        ("1:weigh.2", RecordStatus.SUCCEEDED),
    ]
    assert world.story() == ["pay 5"]


async def test_a_query_interrupted_three_times_is_a_device_failure(engine: Engine) -> None:
    """Ctrl-C in the same query three times: the third ends it failed; it never runs a fourth."""
    world = World()

    result, weighings = await _weigh_through(engine, world, interrupts=3, verdict=blame("weigh"))

    assert weighings == ["1:weigh", "1:weigh.2", "1:weigh.3"]
    assert (result.status, result.reason) == ("partial", "device_failure")
    failure = (await engine.state(result.task_id)).results[RecordId("1:weigh.3")]
    assert isinstance(failure, DeviceFailure)
    assert "this query was cut short 3 times" in failure.error
    assert world.story() == []


# -- a property over random stories ------------------------------------------------------------

Going = Literal["ok", "done", "lost"]
"""How a call goes: it takes effect; it takes effect but ends unknown; it ends unknown, without."""

STEPS = 6  # planner answers and verdicts drawn per story; three replans use at most five


@dataclass
class Wire:
    """The world of the property: each call of ``a`` or ``b``, as the tools themselves note it.

    Attributes:
        goes: How each call goes, in turn (``ok`` once they run out).
        tells: Whether reconcile can tell, for each record it is asked about, in turn.
        calls: ``(tool, x, key, took effect)`` for each call, in order.
        said: What reconcile said of each key it was asked about: done, not done, or None.
    """

    goes: list[Going]
    tells: list[bool]
    calls: list[tuple[str, int, str, bool]] = field(default_factory=list)
    said: list[tuple[str, bool | None]] = field(default_factory=list)

    def tool(self, name: str) -> pev.Tool[..., Any]:
        """An action named ``name`` that notes each call, and can say what a call did."""

        async def act(x: int) -> object:
            key = current_node_context().idempotency_key
            going = self.goes.pop(0) if self.goes else "ok"
            self.calls.append((name, x, key, going != "lost"))
            if going == "ok":
                return f"{name}({x})"
            return DeviceFailure(name, "the line went quiet", outcome_unknown=True)

        def tell(record: ExecutionRecord) -> NodeResult | None:
            took = any(call[2] == record.idempotency_key and call[3] for call in self.calls)
            answer = took if (self.tells.pop(0) if self.tells else True) else None
            self.said.append((record.idempotency_key, answer))
            if answer is None:
                return None
            return Success("reconciled") if answer else DeviceFailure(name, "it never happened")

        return pev.tool(act, name=name, effect="action", reconcile=tell)


NODE = PlanNode("n0", "act", tool="a", args={"x": 0})
"""The plan of last resort: a global replan with nothing drawn and no previous plan."""

NODES = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 1), st.booleans())
"""An action node's tool, its ``x`` and whether it repeats its call on purpose."""


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    """A plan of one to four action nodes, each after any of the nodes before it."""
    nodes = []
    for index in range(draw(st.integers(1, 4))):
        tool, x, repeat = draw(NODES)
        after = tuple(f"n{before}" for before in range(index) if draw(st.booleans()))
        nodes.append(
            PlanNode(f"n{index}", "act", tool=tool, args={"x": x}, after=after, repeat=repeat)
        )
    return plan(*nodes)


@dataclass(frozen=True)
class Story:
    """What the planner, the verifier and the world will do, drawn up front.

    A global plan of ``None`` is the previous plan again; a local replacement of ``None``
    declines (the redo nodes keep their calls); a verdict of ``None`` passes.
    """

    plans: list[Plan | None]
    replacements: list[list[tuple[str, int, bool]] | None]
    verdicts: list[list[int] | None]
    goes: list[Going]
    tells: list[bool]

    def planner(self) -> Callable[[PlanRequest], Plan | None]:
        """New plans in turn; a local replan replaces the redo nodes, or declines (None)."""
        calls = iter(range(STEPS * 2))

        def answer(request: PlanRequest) -> Plan | None:
            step = next(calls) % STEPS
            if request.kind != "local" or request.previous_plan is None:
                return self.plans[step] or request.previous_plan or plan(NODE)
            drawn = self.replacements[step]
            if drawn is None:
                return None
            redo = [n for n in request.previous_plan.nodes if n.id in request.redo_nodes]
            return plan(
                *(
                    replace(node, args={"x": x}, tool=tool, repeat=repeat)
                    for node, (tool, x, repeat) in zip(redo, drawn, strict=False)
                )
            )

        return answer

    def verifier(self) -> Callable[[VerifyRequest], pev.Verdict]:
        """Verdicts in turn: a pass, or blame for the drawn nodes (none: a global replan)."""
        calls = iter(range(STEPS * 2))

        def judge(request: VerifyRequest) -> pev.Verdict:
            drawn = self.verdicts[next(calls) % STEPS]
            if drawn is None:
                return PASS
            ids = [node.id for node in request.plan.nodes]
            return blame(*sorted({ids[index % len(ids)] for index in drawn}))

        return judge


BLAMED = st.lists(st.integers(0, 3), max_size=4)
"""The nodes a verdict blames, by their place in the plan (none: a global replan)."""

STORIES = st.builds(
    Story,
    plans=st.lists(plans() | st.none(), min_size=STEPS, max_size=STEPS),
    replacements=st.lists(
        st.lists(NODES, min_size=4, max_size=4) | st.none(), min_size=STEPS, max_size=STEPS
    ),
    # The first verdict never passes: every story replans at least once.
    verdicts=st.builds(
        lambda first, rest: [first, *rest],
        BLAMED,
        st.lists(BLAMED | st.none(), min_size=STEPS - 1, max_size=STEPS - 1),
    ),
    goes=st.lists(st.sampled_from(["ok", "done", "lost"]), min_size=8, max_size=8),
    tells=st.lists(st.booleans(), min_size=8, max_size=8),
)


@settings(
    max_examples=40 * SOAK_FACTOR,
    deadline=None,
    # Each example is a task of its own on the one store: nothing carries over between them.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(story=STORIES)
async def test_no_intended_effect_is_sent_twice_in_any_story(engine: Engine, story: Story) -> None:
    """Random stories: no intended effect reaches the world twice, nor is resent unless not done."""
    wire = Wire(goes=list(story.goes), tells=list(story.tells))

    result = await engine.run(
        GOAL,
        planner=story.planner(),
        tools=[wire.tool("a"), wire.tool("b")],
        verifier=story.verifier(),
        contract=CONTRACT,
        policy=pev.RecoveryPolicy(max_replans=3),
    )

    took = Counter(key for _, _, key, happened in wire.calls if happened)
    assert max(took.values(), default=0) <= 1, took
    not_done = {key for key, answer in wire.said if answer is False}
    for index, (_, _, key, _) in enumerate(wire.calls):
        earlier = [happened for _, _, same, happened in wire.calls[:index] if same == key]
        # Sent again only when it never happened, and reconcile said so.
        assert not any(earlier), (key, wire.calls)
        assert not earlier or key in not_done, (key, wire.said)
    state = await engine.state(result.task_id)
    event(f"{result.revisions} revisions, {result.status}/{result.reason}")
    event(f"reused: {bool(state.reused)}, rejected: {bool(state.rejections)}")
    event(f"sent again after not done: {len(wire.calls) > len({k for _, _, k, _ in wire.calls})}")
    for tool, x in {(tool, x) for tool, x, _, _ in wire.calls}:
        prefix = f"{result.task_id}/{tool}/{digest({'x': x})[:16]}/"
        keys = {key for t, y, key, happened in wire.calls if (t, y) == (tool, x) and happened}
        assert all(key.startswith(prefix) and key[len(prefix) :].isdigit() for key in keys)
        assert len(keys) <= _asked_for(state.revisions, tool, x), (tool, x, keys)


def _asked_for(revisions: Sequence[Revision], tool: str, x: int) -> int:
    """How many effects of the call the plans asked for: the most plain nodes any plan had, and
    every node that repeats it on purpose."""
    plain, repeats = 0, 0
    for revision in revisions:
        nodes = [n for n in revision.plan.nodes if (n.tool, dict(n.args)) == (tool, {"x": x})]
        plain = max(plain, sum(1 for node in nodes if not node.repeat))
        repeats += sum(1 for node in nodes if node.repeat)
    return plain + repeats
