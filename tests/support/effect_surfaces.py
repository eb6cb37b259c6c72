"""Tasks whose effects are reused, superseded and compensated: real runs, for the surfaces' tests.

``paid`` ships a cup and pays 100; the verifier blames the payment, and the local replan pays 50
instead, so the payment of 100 is superseded and refunded (``pay`` has ``compensate=refund``)
before the new one goes out. The verifier then blames nothing, and the global replan proposes
the same plan again: both nodes are satisfied by the effects the task already has
(``node_reused`` of ``1:ship`` and ``2:pay``), nothing is sent a third time, and it succeeds.

``unwound`` ships and pays, the verifier blames the payment and no replan is left; the policy
asks for ``compensate_on_failure``, so the task unwinds its effects, newest first: the refund
fails (the bank is closed), the cup is unshipped, and the task ends ``partial`` naming the
payment left in place.

``posted`` posts a note, and its local replan posts another text instead: ``post`` has no
``compensate``, so the first post is superseded and left in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pev
from pev.engine import Tool
from pev.ledger import TaskCreated, TaskEffect
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.rails import RailLike
from pev.testing import ScriptedPlanner, ScriptedVerifier

CONTRACT = VerificationContract("recovery", "buy the cup", ("paid the right price",))
CLOSED = "the bank is closed"
PAID, UNWOUND, POSTED = "paid", "unwound", "posted"


def _plan(amount: int) -> Plan:
    return Plan(
        "buy the cup",
        (
            PlanNode("ship", "ship the cup", tool="ship", args={"item": "cup"}),
            PlanNode("pay", "pay for it", tool="pay", args={"amount": amount}, after=("ship",)),
        ),
    )


WRONG, RIGHT = _plan(100), _plan(50)


def tools(*, refund_fails: bool = False) -> list[Tool[..., Any]]:
    """``ship`` (undone by ``unship``) and ``pay`` (undone by ``refund``), both actions."""

    def unship(effect: TaskEffect) -> str:
        return f"unshipped {effect.value}"

    def refund(effect: TaskEffect) -> str:
        if refund_fails:
            raise RuntimeError(CLOSED)
        return f"refunded {effect.args['amount'] if effect.args else '?'}"

    @pev.tool(effect="action", compensate=unship)
    def ship(item: str) -> str:
        """Ship an item."""
        return f"shipped {item}"

    @pev.tool(effect="action", compensate=refund)
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    return [ship, pay]


async def run_paid(
    store: pev.Store, *, task_id: str = PAID, rails: Sequence[RailLike] = ()
) -> pev.RunResult:
    """Pay 100, refund it and pay 50 (a local replan), then reuse both effects (a global one)."""
    result = await pev.run(
        "buy the cup",
        store=store,
        task_id=task_id,
        planner=ScriptedPlanner(WRONG, RIGHT, RIGHT),
        tools=tools(),
        verifier=ScriptedVerifier(
            Verdict.failed(CONTRACT, failed_nodes=["pay"], feedback="too much"),
            Verdict.failed(CONTRACT, feedback="check again"),
            Verdict.passed(CONTRACT),
        ),
        contract=CONTRACT,
        rails=list(rails),
    )
    assert result.ok, result
    assert result.revisions == 3, result
    return result


async def run_unwound(
    store: pev.Store, *, task_id: str = UNWOUND, rails: Sequence[RailLike] = ()
) -> pev.RunResult:
    """Ship and pay, fail with no replan left, unwind: the refund fails, the cup is unshipped."""
    result = await pev.run(
        "buy the cup",
        store=store,
        task_id=task_id,
        planner=ScriptedPlanner(WRONG),
        tools=tools(refund_fails=True),
        verifier=ScriptedVerifier(Verdict.failed(CONTRACT, failed_nodes=["pay"])),
        contract=CONTRACT,
        rails=list(rails),
        policy=pev.RecoveryPolicy(max_replans=0, compensate_on_failure=True),
    )
    assert result.status == "partial", result
    return result


async def run_posted(store: pev.Store, *, task_id: str = POSTED) -> pev.RunResult:
    """Post a note, then another in a local replan: the first, which nothing undoes, stays."""

    @pev.tool(effect="action")
    def post(text: str) -> str:
        """Post a note."""
        return f"posted {text}"

    def posting(text: str) -> Plan:
        return Plan("tell them", (PlanNode("post", "post it", tool="post", args={"text": text}),))

    result = await pev.run(
        "tell them",
        store=store,
        task_id=task_id,
        planner=ScriptedPlanner(posting("hi"), posting("hello")),
        tools=[post],
        verifier=ScriptedVerifier(
            Verdict.failed(CONTRACT, failed_nodes=["post"]), Verdict.passed(CONTRACT)
        ),
        contract=CONTRACT,
    )
    assert result.ok, result
    return result


async def effects_in(db: Path) -> None:
    """Run the three tasks into the SQLite ledger at ``db``."""
    store = pev.SQLiteStore(db)
    try:
        await run_paid(store)
        await run_unwound(store)
        await run_posted(store)
    finally:
        await store.close()


async def cut_at(source: pev.Store, target: pev.Store, task_id: str, kind: str) -> pev.TaskState:
    """Copy ``task_id``'s ledger from ``source`` into ``target``, up to its first ``kind`` event.

    The task as it stood at that moment (one still unwinding its effects, say), written again
    event by event: what a viewer or ``pev show`` sees while it runs.
    """
    entries = await pev.Ledger(source).entries(task_id)
    created = entries[0].event
    assert isinstance(created, TaskCreated)
    ledger = pev.Ledger(target)
    state = await ledger.create(
        created.input, contract=created.contract, policy=created.policy, task_id=task_id
    )
    for entry in entries[1:]:
        state = await ledger.append(task_id, [entry.event])
        if entry.event.kind == kind:
            return state
    raise AssertionError(f"task {task_id} has no {kind} event")
