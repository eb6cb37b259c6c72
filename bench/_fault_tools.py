"""The fault suite's tools: a service's function wrapped to act on one run's world, faults armed.

Every call is counted; an action's call is appended to its service's log (`World.logs`) with
the idempotency key pev handed it (the baselines call the function directly and have none), and
nothing de-duplicates: a call sent twice takes effect twice, so the logs show what each strategy
sent. An action's `reconcile` looks up by that key what the call did (what a payment or booking
API with idempotency keys offers), and an undoable action's `compensate` undoes one effect by
its key (docs/design.md §4.5): given to pev, never to the baselines, which call the functions
directly.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pev
from _fault_world import Crash, Sent, World, call_key
from pev.model import DeviceFailure, ExecutionRecord, NodeResult, Success

# Every tool's timeout: ample, as an author sets one, for services that answer in well under a
# millisecond. pev counts a call's time from its dispatch (the pending write included), so a
# timeout must also outlast the stalls of a busy machine (2 cores shared with other work). With
# 0.05 s, such a stall ended a run `partial` (a call "not started: its 0.05 s had passed", a
# compensation timed out) and flipped runs at random.
TIMEOUT_S = 1.0
# The timeout of a tool armed to hang (`Arms.hang`), on every strategy alike: each hang costs
# it in wall time, so it is shorter, yet still past those stalls; the hang lasts well past it.
HANG_TIMEOUT_S = 0.25
HANG_S = 4 * HANG_TIMEOUT_S


@dataclass(frozen=True)
class Service:
    """What a tool does, as the service behind it answers: a function and how it behaves.

    Attributes:
        fn: The function; its signature and docstring make the tool's schema and description.
        effect: ``query`` or ``action``.
        undoable: The service can undo one of the action's effects (cancel a booking, reverse
            a transfer, delete a file); a message once delivered cannot be.
        cached: A query answered through a cache, whose answer says whether it is ``fresh``.
    """

    fn: Callable[..., Any]
    effect: str = "query"
    undoable: bool = False
    cached: bool = False


@dataclass(frozen=True)
class Arms:
    """The faults armed on one tool for one run.

    Attributes:
        crash: Every call raises before it changes anything: the tool is broken.
        hang: The first call takes effect, then hangs past the tool's timeout.
        stale: A cached query's first ``stale`` answers come from a stale cache.
        kill: The process driving the run is killed during the tool's first call.
    """

    crash: bool = False
    hang: bool = False
    stale: int = 0
    kill: bool = False


def _key_of_call() -> str | None:
    try:
        return pev.engine.current_node_context().idempotency_key
    except LookupError:
        return None  # a baseline's call: it has no idempotency key to hand


def world_tool(
    name: str,
    service: Service,
    world: World,
    arms: Arms = Arms(),
    *,
    crash: Crash | None = None,
    description: str | None = None,
) -> pev.engine.Tool[..., Any]:
    """The service as a pev tool acting on `world`, counting calls, with its faults armed."""
    original = service.fn
    action = service.effect == "action"

    @functools.wraps(original)
    async def call(**kwargs: Any) -> Any:
        key = world.called(tool, kwargs)
        idempotency_key = _key_of_call()
        if arms.kill and crash is not None and not crash.fired:
            await crash.die()
        if action and idempotency_key is not None:
            world.by_key[idempotency_key] = (key, None)
        if arms.crash:
            if action:
                world.log(name, Sent(key, idempotency_key, took_effect=False))
                world.left_unknown(key)
            raise RuntimeError(f"{name}: device error")
        value = original(**kwargs)
        if service.cached:
            value = {**value, "fresh": world.calls_of[name] > arms.stale}
        if action:
            world.effects.append(value)
            world.log(name, Sent(key, idempotency_key, result=value))
            if idempotency_key is not None:
                world.by_key[idempotency_key] = (key, Success(value))
        if arms.hang and name not in world.hung:
            world.hung.add(name)
            world.left_unknown(key)
            await asyncio.sleep(HANG_S)
        world.unresolved.discard(key)
        return value

    def reconcile(record: ExecutionRecord) -> NodeResult | None:
        found = world.by_key.get(record.idempotency_key)
        if found is None:
            return None  # pev never called it with this key: nothing to look up
        key, result = found
        world.unresolved.discard(key)  # the outcome is known now
        if result is None:
            return DeviceFailure(record.node_id, f"{name}: no effect recorded for this call")
        return result

    def compensate(effect: Any) -> None:
        """Undo one effect of the action, found by the key it was sent with."""
        world.tool_calls += 1
        world.undo(name, key=effect.key, call=call_key(name, dict(effect.args)))

    options: dict[str, Any] = {}
    if action:
        options["reconcile"] = reconcile
    if action and service.undoable:
        options["compensate"] = compensate
    tool = pev.tool(
        call,
        name=name,
        effect=service.effect,
        timeout_s=HANG_TIMEOUT_S if arms.hang else TIMEOUT_S,
        description=description,
        **options,
    )
    return tool
