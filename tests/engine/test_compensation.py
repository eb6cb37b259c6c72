"""Compensation: undoing the effects a replan replaces, and a failing task's (docs/design.md §4.5).

What reached the world, refunds included, is read from the log the tools write themselves
(tests/support/effects.py), never from pev's ledger. Each run is checked against its ledger
(the ``engine`` fixture), on the memory store and on SQLite.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

import pytest
from tests.support.effects import (
    CONTRACT,
    GOAL,
    PASS,
    STORES,
    World,
    blame,
    book,
    kinds_of,
    look,
    on_each_store,
    pay,
    plan,
    post,
    run,
)

import pev
from pev.engine import current_node_context
from pev.ledger import CompensationFailed, EffectStatus, Event, PlanRejected, RevisionStarted
from pev.model import DeviceFailure, RecordStatus
from pev.testing import ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import Engine

engine = pytest.fixture(params=STORES)(on_each_store)

UNDOING = ("effect_superseded", "compensation_dispatched", "effect_compensated")
"""The events of a compensation that undid its effect, in order."""


async def _rejections(engine: Engine, task_id: str) -> list[str]:
    return [
        problem
        for event in await engine.events(task_id)
        if isinstance(event, PlanRejected)
        for problem in event.problems
    ]


def _before_dispatch(events: list[Event], number: int) -> list[str]:
    """The kinds of the events from revision ``number``'s start to its first dispatch."""
    start = next(
        index
        for index, event in enumerate(events)
        if isinstance(event, RevisionStarted) and event.number == number
    )
    kinds = [event.kind for event in events]
    return kinds[start + 1 : kinds.index("node_dispatched", start)]


# -- a replan replaces an effect ---------------------------------------------------------------


async def test_a_local_redo_repeating_the_same_call_keeps_the_old_effect(engine: Engine) -> None:
    """repeat=True on a redo node pays once more: the first payment stands, nothing refunded."""
    world = World()

    result = await run(
        engine, world, plan(pay(100)), plan(pay(100, repeat=True)), verdicts=(blame("pay"), PASS)
    )

    assert result.ok
    assert world.story() == ["pay 100", "pay 100"]
    first, second = result.effects
    assert (first.superseded, first.compensation, second.occurrence) == (None, None, 2)


async def test_a_local_redo_with_other_args_refunds_before_the_new_payment(engine: Engine) -> None:
    """The old payment is refunded before anything of the new revision is dispatched."""
    world = World()

    result = await run(engine, world, plan(pay(100)), plan(pay(50)), verdicts=(blame("pay"), PASS))

    assert result.ok
    assert world.story() == ["pay 100", "refund 100", "pay 50"]
    assert _before_dispatch(await engine.events(result.task_id), 2) == list(UNDOING)
    state = await engine.state(result.task_id)
    old = state.effects["1:pay"]
    assert (old.superseded, old.compensated, old.in_world) == (2, True, False)


async def test_a_compensating_function_is_given_the_effect(engine: Engine) -> None:
    """``compensate=fn`` gets the effect: its args, its result and its key."""
    world = World()

    await run(engine, world, plan(pay(100)), plan(pay(50)), verdicts=(blame("pay"), PASS))

    [effect] = world.undoing
    assert (dict(effect.args or {}), effect.value, effect.key) == (
        {"amount": 100},
        "paid 100",
        world.keys("pay")[0],
    )


async def test_a_compensating_tool_is_called_with_the_effects_args(engine: Engine) -> None:
    """``compensate=tool``: the booking is cancelled with the args it was made with."""
    world = World()

    result = await run(
        engine, world, plan(book("blue")), plan(book("red")), verdicts=(blame("book"), PASS)
    )

    assert result.ok
    assert world.story() == ["book blue", "cancel blue", "book red"]


async def test_the_compensations_key_is_the_effects_key_and_compensate(engine: Engine) -> None:
    """The refund carries ``<payment's key>/compensate``."""
    world = World()

    await run(engine, world, plan(pay(100)), plan(pay(50)), verdicts=(blame("pay"), PASS))

    assert world.keys("refund") == [f"{world.keys('pay')[0]}/compensate"]


async def test_a_compensated_call_proposed_again_is_a_new_occurrence(engine: Engine) -> None:
    """Refunded, then paid again: a new key; no refund is ever made twice."""
    world = World()

    result = await run(
        engine,
        world,
        plan(pay(100)),
        plan(pay(50)),
        plan(pay(100)),
        verdicts=(blame("pay"), blame("pay"), PASS),
    )

    assert result.ok
    assert world.story() == ["pay 100", "refund 100", "pay 50", "refund 50", "pay 100"]
    first, _, again = world.keys("pay")
    assert (first.rsplit("/", 1)[1], again.rsplit("/", 1)[1]) == ("1", "2")
    assert len(set(world.keys("refund"))) == 2


@pytest.mark.parametrize(
    ("second_look", "story"),
    [
        pytest.param(100, ["pay 100"], id="same-call-reused"),
        pytest.param(50, ["pay 100", "refund 100", "pay 50"], id="other-call-compensated"),
    ],
)
async def test_a_redo_node_with_ref_args_is_compensated_at_dispatch_only_if_its_call_changed(
    engine: Engine, second_look: int, story: list[str]
) -> None:
    """Args from a ``$ref`` are known at dispatch: the same amount reuses, another refunds first."""
    world = World(looks=deque([{"amount": 100}, {"amount": second_look}]))
    looked = plan(look(), pay({"$ref": "look.amount"}, after=("look",)))

    result = await run(engine, world, looked, looked, verdicts=(blame("look"), PASS))

    assert result.ok
    assert world.story() == story


async def test_a_global_plan_naming_an_effect_compensates_it_before_dispatch(
    engine: Engine,
) -> None:
    """``Plan(compensate=("1:pay",))``: the payment is refunded before the new plan runs."""
    world = World()
    instead = plan(book("blue"), compensate=("1:pay",))

    result = await run(engine, world, plan(pay(100)), instead, verdicts=(blame(), PASS))

    assert result.ok
    assert world.story() == ["pay 100", "refund 100", "book blue"]
    assert _before_dispatch(await engine.events(result.task_id), 2) == list(UNDOING)


@pytest.mark.parametrize(
    ("verdict", "named", "problem"),
    [
        pytest.param(blame(), "9:ghost", "which is no effect of this task", id="unknown-id"),
        pytest.param(blame(), "1:post", "declares no compensate", id="no-compensate"),
        pytest.param(
            blame("pay"), "1:pay", "only a global replan names effects", id="local-replan"
        ),
    ],
)
async def test_a_plan_naming_an_effect_it_cannot_compensate_is_rejected(
    engine: Engine, verdict: pev.Verdict, named: str, problem: str
) -> None:
    """The plan is rejected with a clear problem, and nothing is undone."""
    world = World()
    both = plan(pay(100), post("hi", after=("pay",)))

    result = await run(
        engine, world, both, plan(*both.nodes, compensate=(named,)), both, verdicts=(verdict, PASS)
    )

    assert result.ok
    assert world.story() == ["pay 100", "post hi"]
    [rejection] = await _rejections(engine, result.task_id)
    assert problem in rejection


async def test_a_plan_naming_an_effect_compensated_already_is_rejected(engine: Engine) -> None:
    """An effect undone once cannot be named again: nothing to undo."""
    world = World()
    refund = plan(book("blue"), compensate=("1:pay",))

    result = await run(
        engine,
        world,
        plan(pay(100)),
        refund,
        refund,
        plan(book("blue")),
        verdicts=(blame(), blame(), PASS),
    )

    assert result.ok
    assert world.story() == ["pay 100", "refund 100", "book blue"]
    [rejection] = await _rejections(engine, result.task_id)
    assert "compensate names '1:pay'" in rejection
    assert "compensated already" in rejection


async def test_a_blamed_effect_a_global_plan_neither_reuses_nor_names_is_compensated(
    engine: Engine,
) -> None:
    """Three nodes blamed (a global replan) and the payment changed: the old one is refunded."""
    world = World()
    first = plan(pay(100), post("a", node="a", after=("pay",)), post("b", node="b", after=("a",)))
    second = plan(pay(50), post("a", node="a", after=("pay",)), post("b", node="b", after=("a",)))

    result = await run(engine, world, first, second, verdicts=(blame("pay", "a", "b"), PASS))

    assert result.ok
    assert world.story() == ["pay 100", "post a", "post b", "refund 100", "pay 50"]


async def test_an_effect_a_global_plan_merely_leaves_out_stays(engine: Engine) -> None:
    """Not named, not blamed: the payment stands, neither superseded nor undone."""
    world = World()

    result = await run(
        engine,
        world,
        plan(pay(100), post("hi", after=("pay",))),
        plan(post("hi")),
        verdicts=(blame(), PASS),
    )

    assert result.ok
    assert world.story() == ["pay 100", "post hi"]
    paid = next(effect for effect in result.effects if effect.tool == "pay")
    assert (paid.status, paid.superseded, paid.compensation) == (EffectStatus.SUCCEEDED, None, None)


async def test_a_superseded_effect_without_compensate_stays_listed_as_superseded(
    engine: Engine,
) -> None:
    """A post replaced by another stays in the world: superseded in the result and the request."""
    world = World()
    planner = ScriptedPlanner(plan(post("hi")), plan(post("hello")), plan(post("hey")))

    result = await engine.run(
        GOAL,
        planner=planner,
        tools=world.tools,
        verifier=ScriptedVerifier(blame("post"), blame("post"), PASS),
        contract=CONTRACT,
    )

    assert result.ok
    assert world.story() == ["post hi", "post hello", "post hey"]
    [hi] = [e for e in result.effects if e.args == {"text": "hi"}]
    assert (hi.superseded, hi.compensated, hi.status) == (2, False, EffectStatus.SUCCEEDED)
    asked = {effect.record_id: effect.superseded for effect in planner.requests[2].effects}
    assert asked == {"1:post": 2, "2:post": None}  # revision 3 supersedes "2:post" once it begins
    ended = {effect.record_id: effect.superseded for effect in result.effects}
    assert ended == {"1:post": 2, "2:post": 3, "3:post": None}


# -- a compensation that does not undo ---------------------------------------------------------


async def test_a_compensation_that_raises_ends_the_task_partial_naming_the_effect(
    engine: Engine,
) -> None:
    """The refund raises: partial, the payment named as left in place, nothing new dispatched."""
    world = World(undo="raises")

    result = await run(engine, world, plan(pay(100)), plan(pay(50)), verdicts=(blame("pay"), PASS))

    assert (result.status, result.reason) == ("partial", "device_failure")
    assert "the effect of record 1:pay (pay) is left in place" in result.detail
    assert "the bank refused the refund" in result.detail
    assert world.story() == ["pay 100"]
    state = await engine.state(result.task_id)
    assert all(record.revision == 1 for record in state.records.values())
    undo = state.effects["1:pay"].compensation
    assert undo is not None
    assert undo.status is RecordStatus.FAILED


async def test_a_compensation_that_times_out_leaves_it_unknown_and_the_task_partial(
    engine: Engine,
) -> None:
    """The refund hangs past its timeout: its outcome is unknown, the task partial."""
    world = World(undo="hangs")

    result = await run(
        engine,
        world,
        plan(pay(100)),
        plan(pay(50)),
        verdicts=(blame("pay"), PASS),
        node_timeout_s=0.2,
    )

    assert (result.status, result.reason) == ("partial", "device_failure")
    assert world.story() == ["pay 100"]
    [failed] = [e for e in await engine.events(result.task_id) if isinstance(e, CompensationFailed)]
    assert failed.status is RecordStatus.UNKNOWN
    assert isinstance(failed.result, DeviceFailure)
    assert failed.result.outcome_unknown


# -- a saga: the effects of a failing task undone ----------------------------------------------


@pev.tool(effect="action")
async def receipt() -> str:
    """Print the receipt: the printer jams."""
    raise RuntimeError("the printer jammed")


async def _saga(
    engine: Engine,
    world: World,
    verdict: pev.Verdict,
    *,
    task_id: str | None = None,
    **policy: object,
) -> pev.RunResult:
    """Pay, book, post, then print a receipt (the printer jams); no replan is allowed."""
    steps = plan(
        pay(100),
        book("blue", after=("pay",)),
        post("hi", after=("book",)),
        pev.PlanNode("receipt", "print it", tool="receipt", after=("post",)),
    )
    return await engine.run(
        GOAL,
        planner=ScriptedPlanner(steps),
        tools=[*world.tools, receipt],
        verifier=ScriptedVerifier(verdict),
        contract=CONTRACT,
        policy=pev.RecoveryPolicy(max_replans=0, **policy),  # type: ignore[arg-type]
        task_id=task_id,
    )


@pytest.mark.parametrize(
    ("verdict", "ending"),
    [
        pytest.param(blame("pay"), ("failed", "replan_budget_exhausted"), id="failed"),
        pytest.param(blame("receipt"), ("partial", "device_failure"), id="partial"),
    ],
)
async def test_a_failing_task_undoes_its_effects_newest_first(
    engine: Engine, verdict: pev.Verdict, ending: tuple[str, str]
) -> None:
    """``compensate_on_failure``: the booking is cancelled, then the payment refunded."""
    world = World()

    result = await _saga(engine, world, verdict, compensate_on_failure=True)

    assert (result.status, result.reason) == ending
    assert world.story() == ["pay 100", "book blue", "post hi", "cancel blue", "refund 100"]
    assert "compensated: 1:pay, 1:book" in result.detail
    assert "1:post (post, succeeded)" in result.detail  # named as left: it has no compensate
    kinds = kinds_of(await engine.events(result.task_id), "unwind_started", "task_finished")
    assert kinds == ["unwind_started", "task_finished"]


async def test_a_saga_whose_compensation_fails_ends_partial(engine: Engine) -> None:
    """A refund that raises while unwinding: partial, the payment named as left in place."""
    world = World(undo="raises")

    result = await _saga(engine, world, blame("pay"), compensate_on_failure=True)

    assert (result.status, result.reason) == ("partial", "device_failure")
    assert world.story() == ["pay 100", "book blue", "post hi", "cancel blue"]
    assert "1:pay (pay) is left in place" in result.detail


async def test_without_compensate_on_failure_nothing_is_undone(engine: Engine) -> None:
    """The default: a failing task leaves its effects as they are."""
    world = World()

    result = await _saga(engine, world, blame("pay"))

    assert (result.status, result.reason) == ("failed", "replan_budget_exhausted")
    assert world.story() == ["pay 100", "book blue", "post hi"]
    assert "unwind_started" not in kinds_of(await engine.events(result.task_id))


async def test_a_compensation_an_interrupt_cut_short_is_never_made_again(engine: Engine) -> None:
    """Ctrl-C in a saga's refund: resumed, it is unknown, never called again; the end is partial."""
    world = World(undo="interrupts")
    with pytest.raises(KeyboardInterrupt):
        await _saga(engine, world, blame("pay"), compensate_on_failure=True, task_id="unwinding")

    result = await pev.resume(
        "unwinding",
        store=engine.store,
        planner=ScriptedPlanner(),
        tools=[*world.tools, receipt],
        verifier=ScriptedVerifier(),
    )
    await engine.check(result)

    assert (result.status, result.reason) == ("partial", "device_failure")
    assert "the effect of record 1:pay (pay) is left in place" in result.detail
    assert world.story() == ["pay 100", "book blue", "post hi", "cancel blue"]
    assert [effect.record_id for effect in world.undoing] == ["1:pay"]  # called once, ever


@pytest.mark.parametrize("how", ["pev.cancel", "handle.cancel"])
async def test_a_cancelled_task_undoes_its_effects(engine: Engine, how: str) -> None:
    """Cancelled while a node runs: the payment made before is refunded, the task cancelled."""
    world = World()
    waiting = asyncio.Event()

    @pev.tool(effect="query")
    async def wait() -> str:
        """Wait for the courier, who never comes, until the task is cancelled."""
        waiting.set()
        await current_node_context().cancelled.wait()
        return "gave up"

    handle = await pev.start(
        GOAL,
        planner=ScriptedPlanner(
            plan(pay(100), pev.PlanNode("wait", "wait", tool="wait", after=("pay",)))
        ),
        tools=[*world.tools, wait],
        verifier=ScriptedVerifier(PASS),
        contract=CONTRACT,
        store=engine.store,
        policy=pev.RecoveryPolicy(compensate_on_failure=True),
    )
    await asyncio.wait_for(waiting.wait(), 10)
    if how == "pev.cancel":
        await pev.cancel(handle.task_id, store=engine.store, reason="not needed")
    else:
        await handle.cancel("not needed")
    result = await asyncio.wait_for(handle.result(), 10)
    await engine.check(result)

    assert (result.status, result.reason) == ("cancelled", "cancelled")
    assert world.story() == ["pay 100", "refund 100"]
