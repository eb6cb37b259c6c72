"""Agents as users write them (README.md, docs/engine.md), for the benches that measure them.

Each agent is bound to a module-level name, with a function planner that builds its plan from
the task's input on every call, and one typed tool that takes an argument:
`async def step(i: int) -> int`. The input names the shape and its size
(`{"shape": "chain", "nodes": 100}`); each node calls `step` with its own number. The raw
asyncio and LangGraph baselines call the very same function with the same arguments.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

import pev
from _common import Shape, levels, shapes
from pev.engine import PlanRequest
from pev.model import Plan, PlanNode

__all__ = [
    "ONE_NODE",
    "POLICY",
    "async_agent",
    "graph_of_steps",
    "raw_steps",
    "shape_of",
    "step",
    "sync_agent",
]


@pev.tool(effect="query")
async def step(i: int) -> int:
    """Add one to ``i``."""
    return i + 1


ONE_NODE = "one"
"""The shape of a one-node task (its fixed cost)."""


@functools.cache
def shape_of(name: str, nodes: int) -> Shape:
    """The shape ``name`` (chain, fan-out, diamond, or one) of ``nodes`` nodes."""
    if name == ONE_NODE:
        return {"n0": ()}
    return shapes(nodes)[name]


def _plan(request: PlanRequest) -> Plan:
    """The plan of the input's shape, built as a user's planner builds one: every call."""
    task = request.input
    assert isinstance(task, Mapping), task
    name, nodes = str(task["shape"]), int(str(task["nodes"]))
    return Plan(
        name,
        tuple(
            PlanNode(node, f"step {number}", tool="step", args={"i": number}, after=after)
            for number, (node, after) in enumerate(shape_of(name, nodes).items())
        ),
    )


def sync_planner(request: PlanRequest) -> Plan:
    """A sync function planner (pev runs it in a thread)."""
    return _plan(request)


async def async_planner(request: PlanRequest) -> Plan:
    """An async function planner."""
    return _plan(request)


POLICY = pev.RecoveryPolicy(max_nodes=100, max_parallel=100)
"""Room for the 100-node shapes, every node dispatched at once where the shape allows it."""

sync_agent = pev.Agent(sync_planner, tools=[step], policy=POLICY)
async_agent = pev.Agent(async_planner, tools=[step], policy=POLICY)


async def raw_steps(shape: Shape) -> None:
    """The shape in raw asyncio: level by level, a task per node calling ``step`` with its number
    (one awaited, several gathered), as pev runs them."""
    numbers = {node: number for number, node in enumerate(shape)}
    for level in levels(shape):
        if len(level) == 1:
            await asyncio.create_task(step.fn(numbers[level[0]]))
        else:
            await asyncio.gather(*[asyncio.create_task(step.fn(numbers[n])) for n in level])


def graph_of_steps(shape: Shape) -> Any:
    """The shape as a compiled LangGraph graph whose nodes call ``step`` with their numbers."""
    from _graphs import GraphNode, GraphState, graph_of

    def calling(number: int) -> GraphNode:
        async def call(state: GraphState) -> None:
            await step.fn(number)

        return call

    return graph_of(shape, {node: calling(n) for n, node in enumerate(shape)}).compile()
