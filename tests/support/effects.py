"""A small world for the effect tests, whose tools write down what they did to it.

Every call that reaches the world appends one :class:`Sent` to :attr:`World.log`: what it did,
its args and the idempotency key it was handed (``current_node_context()``), written by the tool
itself. The tests prove "never twice" from that log, never from pev's ledger (docs/engine.md,
"Effects happen once").

- ``pay(amount)``: an action that a function undoes (``refund``, given the effect);
- ``book(room)``: an action that a tool undoes (``cancel_booking``, given the effect's args);
- ``post(text)``: an action with a timeout and a ``reconcile``, and nothing to undo it;
- ``look()``: a query, answering the amounts it is given, one a call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

import pev
from pev.engine import current_node_context
from pev.ledger import Event, TaskEffect
from pev.model import (
    DeviceFailure,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
)
from pev.stores import SQLiteStore
from pev.testing import ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import Engine

GOAL = "settle the bill"
CONTRACT = VerificationContract(VerificationMode.RECOVERY, GOAL, ("the bill is settled right",))
PASS = Verdict.passed(CONTRACT)
SHORT = 0.2  # the timeout of a post: one that hangs misses it (a thread under load needs room)
LONG = 2.0  # how long a post or a refund hangs

Undo = Literal["undoes", "raises", "hangs", "interrupts"]
Posting = Literal["ok", "late", "lost"]
"""How a post goes: it takes effect; it takes effect, then hangs; it hangs without effect."""


def blame(*nodes: str) -> Verdict:
    """A failed verdict blaming ``nodes``: one or two are re-planned locally, else globally."""
    return Verdict.failed(CONTRACT, failed_nodes=list(nodes), feedback="not right")


def plan(*nodes: PlanNode, compensate: Sequence[str] = ()) -> Plan:
    """A plan of ``nodes`` for the goal, naming the effects to ``compensate``."""
    return Plan(GOAL, nodes, compensate=tuple(compensate))


def pay(amount: JsonValue = 100, *, node: str = "pay", **options: Any) -> PlanNode:
    """A node paying ``amount`` (``{"$ref": ...}`` for one a dependency gives)."""
    return PlanNode(node, "pay the bill", tool="pay", args={"amount": amount}, **options)


def book(room: str = "blue", *, node: str = "book", **options: Any) -> PlanNode:
    """A node booking ``room``."""
    return PlanNode(node, "book a room", tool="book", args={"room": room}, **options)


def post(text: JsonValue = "hi", *, node: str = "post", **options: Any) -> PlanNode:
    """A node posting ``text``."""
    return PlanNode(node, "tell the team", tool="post", args={"text": text}, **options)


def look(*, node: str = "look", **options: Any) -> PlanNode:
    """A node looking up the amount due."""
    return PlanNode(node, "look up the bill", tool="look", **options)


@dataclass(frozen=True, slots=True)
class Sent:
    """One thing a tool did to the world: what, with which args, under which key."""

    what: str
    args: Mapping[str, object]
    key: str

    def __str__(self) -> str:
        return " ".join([self.what, *map(str, self.args.values())])


@dataclass(eq=False)
class World:
    """The outside world the tools act on; only the tools (and their reconcile) write to it.

    Attributes:
        undo: How a compensation goes: it undoes; it raises; it hangs past its timeout; the
            operator presses Ctrl-C while it runs.
        posts: How the next posts go, one a call (``ok`` once they run out).
        looks: What the next looks answer, one a call (the last one again once they run out).
        reconciles: Whether ``post``'s reconcile can tell what a post did (else it says None).
        log: What took effect, in order.
        calls: The key of every action call, whether it took effect or not, in order.
        undoing: The effects the compensating function was given, in order.
        asked: The records ``post``'s reconcile was asked about, in order.
    """

    undo: Undo = "undoes"
    posts: deque[Posting] = field(default_factory=deque)
    looks: deque[JsonValue] = field(default_factory=lambda: deque([{"amount": 100}]))
    reconciles: bool = True
    log: list[Sent] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    undoing: list[TaskEffect] = field(default_factory=list)
    asked: list[ExecutionRecord] = field(default_factory=list)

    def story(self) -> list[str]:
        """What took effect, one line each: ``pay 100``, ``refund 100``, ``post hi``."""
        return [str(sent) for sent in self.log]

    def keys(self, what: str) -> list[str]:
        """The keys of what took effect as ``what``, in order."""
        return [sent.key for sent in self.log if sent.what == what]

    def _note(self, what: str, **args: object) -> None:
        """Note that ``what`` took effect, under the key of the call (or compensation) running."""
        self.log.append(Sent(what, args, current_node_context().idempotency_key))

    def _call(self) -> None:
        """Note an action's call, before it does anything."""
        self.calls.append(current_node_context().idempotency_key)

    @property
    def tools(self) -> list[pev.Tool[..., Any]]:
        """The world's tools, bound to it."""
        world = self

        async def refund(effect: TaskEffect) -> str:
            world.undoing.append(effect)
            if world.undo == "raises":
                raise ConnectionError("the bank refused the refund")
            if world.undo == "hangs":
                await asyncio.sleep(LONG)
            if world.undo == "interrupts":
                raise KeyboardInterrupt
            assert effect.args is not None
            world._note("refund", amount=effect.args["amount"])
            return f"refunded {effect.args['amount']}"

        @pev.tool(effect="action", compensate=refund)
        async def pay(amount: int) -> str:
            """Pay an amount (a refund undoes it)."""
            world._call()
            world._note("pay", amount=amount)
            return f"paid {amount}"

        @pev.tool(effect="action")
        async def cancel_booking(room: str) -> str:
            """Cancel the booking of a room."""
            world._note("cancel", room=room)
            return f"cancelled {room}"

        @pev.tool(effect="action", compensate=cancel_booking)
        async def book(room: str) -> str:
            """Book a room (cancelling the booking undoes it)."""
            world._call()
            world._note("book", room=room)
            return f"booked {room}"

        async def posted(record: ExecutionRecord) -> NodeResult | None:
            world.asked.append(record)
            if not world.reconciles:
                return None
            for sent in world.log:
                if sent.key == record.idempotency_key:
                    return Success(f"posted {sent.args['text']}")
            return DeviceFailure(record.node_id, "the team never saw such a post")

        @pev.tool(effect="action", timeout_s=SHORT, reconcile=posted)
        async def post(text: str) -> str:
            """Post to the team (its reconcile finds a post by its key)."""
            world._call()
            going = world.posts.popleft() if world.posts else "ok"
            if going == "lost":
                await asyncio.sleep(LONG)
            world._note("post", text=text)
            if going == "late":
                await asyncio.sleep(LONG)
            return f"posted {text}"

        @pev.tool(effect="query")
        async def look() -> JsonValue:
            """Look up the bill."""
            return world.looks.popleft() if len(world.looks) > 1 else world.looks[0]

        return [pay, book, cancel_booking, post, look]


async def run(
    engine: Engine,
    world: World,
    *plans: Plan | None,
    verdicts: Sequence[Verdict],
    **policy: Any,
) -> pev.RunResult:
    """Run the goal on ``engine`` with the world's tools: the plans and verdicts in turn.

    The policy allows three replans unless ``policy`` says otherwise.
    """
    return await engine.run(
        GOAL,
        planner=ScriptedPlanner(*plans),
        tools=world.tools,
        verifier=ScriptedVerifier(*verdicts),
        contract=CONTRACT,
        policy=pev.RecoveryPolicy(**{"max_replans": 3, **policy}),
    )


def kinds_of(events: Iterable[Event], *kinds: str) -> list[str]:
    """The kinds of ``events`` that are among ``kinds``, in order (all of them without any)."""
    return [event.kind for event in events if not kinds or event.kind in kinds]


STORES = ["memory", "sqlite"]


async def on_each_store(
    request: pytest.FixtureRequest, engine: Engine, tmp_path: Path
) -> AsyncIterator[Engine]:
    """The ``engine`` fixture, overridden: the conftest's on its memory store, then on SQLite.

    Use as ``engine = pytest.fixture(params=STORES)(on_each_store)`` in a test module.
    """
    if request.param == "memory":
        yield engine
        return
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        yield type(engine)(store)  # the conftest's Engine, over the SQLite file
    finally:
        await store.close()
