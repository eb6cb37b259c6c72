"""A node's effect defaults to its tool's (docs/design.md §2.1, docs/tools.md).

A plan node that leaves ``effect`` unset takes its registered tool's declared effect; with no
registered tool (a plain executor) it is an action, the safe assumption. A node may make a query
tool stricter, never an action tool a query.
"""

from __future__ import annotations

import asyncio

import pev
from pev import codec
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import Ledger
from pev.model import Effect, Plan, PlanNode, RecordStatus
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedVerifier


@pev.tool(effect="query", timeout_s=0.2)
async def lookup(room: str) -> str:
    """A read-only lookup; the room "slow" hangs past its timeout."""
    if room == "slow":
        await asyncio.sleep(5)
    return f"{room} is free"


@pev.tool(effect="action")
def book(room: str) -> str:
    """Book a room: an action."""
    return f"booked {room}"


def finding(room: str = "orion", effect: Effect | None = None) -> Plan:
    """One lookup, its effect as given (``None``: the tool's)."""
    return Plan(
        "find a room",
        (PlanNode("find", "look it up", tool="lookup", args={"room": room}, effect=effect),),
    )


async def effects_of(result: pev.RunResult, store: pev.Store) -> list[tuple[str, Effect]]:
    """(node id, effect) of every execution record of the task, in dispatch order."""
    state = await Ledger(store).state(result.task_id)
    return [(record.node_id, record.effect) for record in state.records.values()]


async def test_a_node_without_an_effect_takes_its_tools() -> None:
    """A timed-out lookup is a failed query, not an action of unknown outcome: the task ends
    an honest partial (a device failure), and nothing is locked out as "never send twice"."""
    store = MemoryStore()
    result = await pev.run(
        "find a room",
        planner=lambda _: finding("slow"),
        tools=[lookup],
        verifier=ScriptedVerifier.failing("find"),
        store=store,
    )
    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    state = await Ledger(store).state(result.task_id)
    (record,) = state.records.values()
    assert (record.effect, record.status) == (Effect.QUERY, RecordStatus.FAILED)
    assert "timed out" in result.detail


async def test_a_node_may_make_a_query_tool_an_action() -> None:
    """effect="action" on a node of a query tool: the stricter effect stands."""
    store = MemoryStore()
    result = await pev.run(
        "find", planner=lambda _: finding(effect=Effect.ACTION), tools=[lookup], store=store
    )
    assert result.ok
    assert await effects_of(result, store) == [("find", Effect.ACTION)]


async def test_a_node_cannot_make_an_action_tool_a_query() -> None:
    """effect="query" on a node of an action tool is an invalid plan: nothing runs."""
    plan = Plan(
        "book",
        (PlanNode("b", "book it", tool="book", args={"room": "orion"}, effect=Effect.QUERY),),
    )
    result = await pev.run("book", planner=lambda _: plan, tools=[book])
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.INVALID_PLAN)
    assert "tool 'book' is an action; a node cannot label it 'query'" in result.detail


async def test_without_a_registered_tool_a_node_is_an_action() -> None:
    """A plain executor has no declared effects: a node that says none is an action."""
    store = MemoryStore()
    plan = Plan("x", (PlanNode("n", "do it"), PlanNode("q", "read", effect=Effect.QUERY)))
    executor = FunctionExecutor({"n": lambda: "done", "q": lambda: "read"})
    result = await pev.run("x", planner=lambda _: plan, executor=executor, store=store)
    assert result.ok
    assert await effects_of(result, store) == [("n", Effect.ACTION), ("q", Effect.QUERY)]


def test_an_unset_effect_is_left_out_of_the_ledger_and_an_older_node_reads_as_before() -> None:
    """A node's JSON holds its effect only when set: an older ledger's nodes (always written with
    their effect, then "action" by default) encode, and hash, exactly as they did."""
    assert "effect" not in codec.encode(PlanNode("n", tool="lookup"))  # type: ignore[operator]
    older = {
        "id": "n",
        "description": "",
        "tool": "book",
        "args": {},
        "after": [],
        "effect": "action",
    }
    node = codec.decode(older, PlanNode)
    assert node.effect is Effect.ACTION
    assert codec.encode(node) == older
