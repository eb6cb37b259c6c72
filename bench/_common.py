"""What the overhead benchmarks share: the no-op tool, the graph shapes, raw asyncio, rounds."""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pev
from _report import progress
from pev.model import TaskId
from pev.testing import ScriptedPlanner

Samples = TypeVar("Samples")

MEMORY_TARGET = 8.0
"""Issue 14: pev in memory at most 8x raw asyncio per node, on every shape."""

# A shape is its nodes in order, each with its predecessors (which always come before it).
Shape = Mapping[str, tuple[str, ...]]


@pev.tool(effect="query")
async def noop() -> None:
    return None


def shapes(nodes: int) -> dict[str, Shape]:
    """The three shapes of `nodes` nodes: chain, fan-out and diamond.

    The diamond has four levels: a source, two levels of parallel branches and a join after all
    of them (1 + 49 + 49 + 1 for 100 nodes).
    """
    width = (nodes - 2) // 2
    diamond: dict[str, tuple[str, ...]] = {"source": ()}
    diamond |= {f"a{i}": ("source",) for i in range(width)}
    diamond |= {f"b{i}": (f"a{i}",) for i in range(width)}
    diamond["join"] = tuple(f"b{i}" for i in range(width))
    return {
        "chain": {f"n{i}": (f"n{i - 1}",) if i else () for i in range(nodes)},
        "fan-out": {f"n{i}": () for i in range(nodes)},
        "diamond": diamond,
    }


def levels(shape: Shape) -> list[list[str]]:
    """The shape's nodes grouped by depth: each level depends only on those before it."""
    depth: dict[str, int] = {}
    for name, after in shape.items():
        depth[name] = 1 + max((depth[p] for p in after), default=-1)
    grouped: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for name, level in depth.items():
        grouped[level].append(name)
    return grouped


def widths(shape: Shape) -> list[int]:
    """How many nodes each level of a shape has: what raw asyncio runs at once, level by level."""
    return [len(level) for level in levels(shape)]


def label(case: str, shape: Shape) -> str:
    """A shape's name in the tables, with its size (and the diamond's levels)."""
    if case == "diamond":
        sizes = widths(shape)
        return f"diamond ({len(sizes)} levels: {' + '.join(map(str, sizes))} = {len(shape)} nodes)"
    return f"{case} ({len(shape)} nodes)"


def plan_of(case: str, shape: Shape) -> pev.Plan:
    """The shape as a pev plan of `noop` query nodes."""
    return pev.Plan(
        case,
        tuple(
            pev.PlanNode(name, tool="noop", effect=pev.Effect.QUERY, after=after)
            for name, after in shape.items()
        ),
    )


def policy_for(nodes: int) -> pev.RecoveryPolicy:
    """Room for every node, all of them dispatched at once where the shape allows it.

    The default `max_parallel` of 8 would make a fan-out eight short chains.
    """
    return pev.RecoveryPolicy(max_nodes=nodes, max_parallel=nodes)


async def raw_levels(level_widths: Iterable[int]) -> None:
    """No-op nodes level by level, a task each as pev runs them: one awaited, several gathered."""
    for width in level_widths:
        if width == 1:
            await asyncio.create_task(noop.fn())
        else:
            await asyncio.gather(*[asyncio.create_task(noop.fn()) for _ in range(width)])


async def raw_per_node(level_widths: Sequence[int], runs: int) -> float:
    """Seconds per node of `raw_levels(level_widths)`, averaged over `runs` runs."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        await raw_levels(level_widths)
    return (time.perf_counter() - start) / (runs * sum(level_widths))


async def timed_run(
    plan: pev.Plan, policy: pev.RecoveryPolicy, store: pev.Store
) -> tuple[float, TaskId]:
    """Seconds one `pev.run` of the plan takes, and its task; asserts that every node succeeded."""
    start = time.perf_counter()
    result = await pev.run(
        "benchmark", planner=ScriptedPlanner(plan), tools=[noop], policy=policy, store=store
    )
    elapsed = time.perf_counter() - start
    assert result.ok, result
    assert len(result.outputs) == len(plan.nodes), result
    return elapsed, result.task_id


async def pev_seconds(plan: pev.Plan, policy: pev.RecoveryPolicy, store: pev.Store) -> float:
    """Seconds one `pev.run` of the plan takes on `store` (see `timed_run`)."""
    seconds, _ = await timed_run(plan, policy, store)
    return seconds


async def memory_per_node(
    run: Callable[[pev.Store], Awaitable[float]], *, nodes: int, runs: int
) -> float:
    """Seconds per node of `runs` runs of `run` (seconds a run), each on a fresh `MemoryStore`."""
    gc.collect()
    total = 0.0
    for _ in range(runs):
        total += await run(pev.MemoryStore())
    return total / (runs * nodes)


def run_rounds(
    round_: Callable[[Path, int, Samples], Coroutine[object, object, None]],
    fresh: Callable[[], Samples],
    rounds: int,
) -> Samples:
    """The samples of `rounds` rounds, after a warm-up round whose samples are dropped.

    Each round runs in its own event loop, with a fresh temporary folder for its files.
    """
    progress("  warm-up round ...")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(round_(Path(tmp), 1, fresh()))
    samples = fresh()
    for number in range(rounds):
        progress(f"  round {number + 1} of {rounds} ...")
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(round_(Path(tmp), number, samples))
    return samples
