"""pev as users write it: a task's fixed cost and the cost per node, beside asyncio and LangGraph.

Run with `make bench` (or `python bench/bench_agents.py [--write docs/benchmarks.md]`; `--quick`
for a short run that checks the bench, not for the docs); needs the `bench` extra.

The other engine benches run a path users rarely take (a prebuilt plan handed over by a
`ScriptedPlanner`, a tool without arguments). This one runs agents as README.md and
docs/engine.md write them (`bench/_user_agents.py`): a `pev.Agent` bound to a module-level
name, a function planner that builds its plan from the input on every call (sync, which pev runs
in a thread, or async), and a typed tool with an argument, `async def step(i: int) -> int`,
each node calling it with its own number. Each run is `await pev.run(input, agent=agent)` with
the store users get by default (none given: a fresh `MemoryStore` for the run) or one
`MemoryStore` shared by every run, verification off.

* Per node: the three 100-node shapes of `_common.shapes` (chain, fan-out, diamond), the wall
  time of a run divided by its nodes; raw asyncio runs the same calls level by level (a task per
  node, as pev runs them), LangGraph a compiled `StateGraph` whose nodes make the same calls.
* Per task: a one-node plan, the wall time of a whole run (task written, planned, its node
  called, ended): pev's fixed cost. Raw asyncio makes the one call in a task; LangGraph runs a
  one-node graph.

Each figure is the median of the rounds (every round runs every case in turn, in its own event
loop, alternating the order), and each ratio is a ratio of medians of the same run. `--check
docs/benchmarks.md` (`make bench-check`) runs a shorter version and exits 1 when one of pev's
ratios to raw asyncio or LangGraph is more than 20% above the one the page records. Targets
(issue 27): a one-node task at most 0.3 ms with a sync or an async planner; a chain node at most
12x raw asyncio; LangGraph at least 3x slower than pev per node on every shape.
"""

from __future__ import annotations

import functools
import gc
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pev
from _common import label, run_rounds
from _report import (
    bench_parser,
    command_text,
    machine_line,
    met,
    parse_bench_args,
    progress,
    write_section,
)
from _user_agents import ONE_NODE, async_agent, graph_of_steps, raw_steps, shape_of, sync_agent

NODES = 100
SHAPES = ("chain", "fan-out", "diamond")
ONE_TASK_TARGET_MS = 0.3  # issue 27: a one-node task, in memory, sync or async planner
CHAIN_TARGET = 12.0  # issue 27: a chain node at most 12x raw asyncio (typed tools with args)
LEANER_TARGET = 3.0  # issue 27: LangGraph at least 3x slower than pev per node, every shape

# The ways pev runs: which agent, and whether the runs share one store.
PEV_CASES = {
    "async planner, default store": (async_agent, False),
    "async planner, shared store": (async_agent, True),
    "sync planner, default store": (sync_agent, False),
    "sync planner, shared store": (sync_agent, True),
}
HEADLINE = "async planner, default store"  # the ratios and targets read this column


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How much each round measures."""

    rounds: int
    raw_runs: int  # raw asyncio runs per shape and round
    pev_runs: int  # pev runs per shape, case and round
    graph_runs: int  # LangGraph runs per shape and round
    task_runs: int  # one-node tasks per case and round (raw asyncio: ten times as many)


FULL = Sizes(rounds=7, raw_runs=50, pev_runs=5, graph_runs=5, task_runs=300)
QUICK = Sizes(rounds=2, raw_runs=5, pev_runs=1, graph_runs=1, task_runs=20)


def _input(shape: str) -> dict[str, Any]:
    return {"shape": shape, "nodes": NODES}


async def _pev_seconds(shape: str, agent: pev.Agent, store: pev.Store | None, runs: int) -> float:
    """Seconds per run of ``runs`` runs of the shape; asserts that every node succeeded."""
    nodes = len(shape_of(shape, NODES))
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        result = await pev.run(_input(shape), agent=agent, store=store)
        assert result.ok, result
        assert len(result.outputs) == nodes, result
    return (time.perf_counter() - start) / runs


async def _raw_seconds(shape: str, runs: int) -> float:
    steps = shape_of(shape, NODES)
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        await raw_steps(steps)
    return (time.perf_counter() - start) / runs


GRAPHS: dict[str, Any] = {}


async def _graph_seconds(shape: str, runs: int) -> float:
    from _graphs import config_for

    steps = shape_of(shape, NODES)
    graph = GRAPHS.get(shape)
    if graph is None:
        graph = GRAPHS[shape] = graph_of_steps(steps)
    config = config_for(steps)
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs):
        await graph.ainvoke({"n": 0}, config)
    return (time.perf_counter() - start) / runs


@dataclass(slots=True)
class _Samples:
    """Seconds per run, by way of running it."""

    runs: dict[str, list[float]] = field(default_factory=dict)

    def add(self, way: str, seconds: float) -> None:
        self.runs.setdefault(way, []).append(seconds)

    def median(self, way: str) -> float:
        return statistics.median(self.runs[way])


async def _round(sizes: Sizes, folder: Path, number: int, samples: dict[str, _Samples]) -> None:
    """Every shape (and the one-node task) run every way once, in turn."""
    for shape, into in samples.items():
        task = shape == ONE_NODE
        runs = sizes.task_runs if task else sizes.pev_runs
        ways: list[tuple[str, Callable[[], Awaitable[float]]]] = [
            ("raw", functools.partial(_raw_seconds, shape, runs * 10 if task else sizes.raw_runs)),
            (
                "langgraph",
                functools.partial(_graph_seconds, shape, runs if task else sizes.graph_runs),
            ),
        ]
        shared = pev.MemoryStore()  # one store for the round's runs that share one
        ways += [
            (case, functools.partial(_pev_seconds, shape, agent, shared if share else None, runs))
            for case, (agent, share) in PEV_CASES.items()
        ]
        for way, measure in ways if number % 2 == 0 else reversed(ways):
            into.add(way, await measure())


def bench(sizes: Sizes) -> dict[str, _Samples]:
    """Every shape's samples, one per round, after a warm-up round."""

    def fresh() -> dict[str, _Samples]:
        return {shape: _Samples() for shape in (*SHAPES, ONE_NODE)}

    return run_rounds(functools.partial(_round, sizes), fresh, sizes.rounds)


# -- report ---------------------------------------------------------------------------------


def _ratio(value: float) -> str:
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def table(samples: dict[str, _Samples]) -> str:
    """The per-node table, the per-task table, and the targets they bear on."""
    cases = list(PEV_CASES)
    lines = [
        "| µs per node | raw asyncio | "
        + " | ".join(f"pev: {case}" for case in cases)
        + " | LangGraph | pev ÷ raw asyncio | LangGraph ÷ pev |",
        "|---|" + "---|" * (len(cases) + 4),
    ]
    for shape in SHAPES:
        s, nodes = samples[shape], NODES
        raw, headline, graph = (s.median(w) / nodes for w in ("raw", HEADLINE, "langgraph"))
        over_raw, leaner = headline / raw, graph / headline
        over_raw_text = _ratio(over_raw)
        if shape == "chain":
            over_raw_text += f": {met(over_raw <= CHAIN_TARGET)}"
        lines.append(
            f"| {label(shape, shape_of(shape, nodes))} | {raw * 1e6:.1f} | "
            + " | ".join(f"{s.median(case) / nodes * 1e6:.0f}" for case in cases)
            + f" | {graph * 1e6:.0f} | {over_raw_text} | {_ratio(leaner)}: "
            f"{met(leaner >= LEANER_TARGET)} |"
        )
    lines.append(
        f"| target | | | | | | | chain ≤ {CHAIN_TARGET:.0f}x | ≥ {LEANER_TARGET:.0f}x on every "
        "shape |"
    )
    one = samples[ONE_NODE]
    lines += [
        "",
        "| ms per one-node task | raw asyncio | "
        + " | ".join(f"pev: {case}" for case in cases)
        + " | LangGraph |",
        "|---|" + "---|" * (len(cases) + 2),
        f"| a whole run | {one.median('raw') * 1e3:.3f} | "
        + " | ".join(
            f"{one.median(case) * 1e3:.2f}: {met(one.median(case) * 1e3 <= ONE_TASK_TARGET_MS)}"
            if "default" in case
            else f"{one.median(case) * 1e3:.2f}"
            for case in cases
        )
        + f" | {one.median('langgraph') * 1e3:.2f} |",
        f"| target | | ≤ {ONE_TASK_TARGET_MS} | | ≤ {ONE_TASK_TARGET_MS} | | |",
    ]
    return "\n".join(lines)


# -- the regression check (`make bench-check`) ------------------------------------------------

CHECK = Sizes(rounds=3, raw_runs=20, pev_runs=2, graph_runs=2, task_runs=100)
SLACK = 0.20  # a ratio more than 20% above the one recorded is a regression
_RATIOS_MARK = "<!-- agents-ratios: "


def _recorded(found: dict[str, float]) -> str:
    """The ratios as the page records them: JSON, three decimals."""
    return json.dumps({what: round(value, 3) for what, value in found.items()}, ensure_ascii=False)


def ratios(samples: dict[str, _Samples]) -> dict[str, float]:
    """pev's time over each baseline's, by what it compares (lower is better, all of them)."""
    found: dict[str, float] = {}
    for shape in SHAPES:
        s = samples[shape]
        found[f"{shape}: pev ÷ raw asyncio"] = s.median(HEADLINE) / s.median("raw")
        found[f"{shape}: pev ÷ LangGraph"] = s.median(HEADLINE) / s.median("langgraph")
    one = samples[ONE_NODE]
    for case in PEV_CASES:
        if "default" in case:
            found[f"one-node task, {case}: pev ÷ LangGraph"] = one.median(case) / one.median(
                "langgraph"
            )
    return found


def recorded_ratios(text: str) -> dict[str, float]:
    """The ratios recorded in a page's agents section (``{}`` when it has none)."""
    start = text.find(_RATIOS_MARK)
    if start < 0:
        return {}
    body = text[start + len(_RATIOS_MARK) : text.index(" -->", start)]
    return {str(k): float(v) for k, v in json.loads(body).items()}


def regressions(
    recorded: dict[str, float], measured: dict[str, float], *, slack: float = SLACK
) -> list[str]:
    """Each ratio measured more than ``slack`` above the one recorded, in words."""
    return [
        f"{what}: {measured[what]:.2f}, recorded {was:.2f} (at most {was * (1 + slack):.2f})"
        for what, was in recorded.items()
        if what in measured and measured[what] > was * (1 + slack)
    ]


def check(path: Path) -> int:
    """Run the check's sizes and compare the ratios with those ``path`` records: exit status."""
    recorded = recorded_ratios(path.read_text(encoding="utf-8"))
    if not recorded:
        progress(f"{path} records no ratios of this bench: run it with --write {path} first")
        return 2
    progress(f"checking against {path}: {CHECK.rounds} rounds ...")
    measured = ratios(bench(CHECK))
    for what, was in recorded.items():
        now = measured.get(what)
        shown = "not measured" if now is None else f"{now:.2f}"
        print(f"{what}: recorded {was:.2f}, now {shown}")
    worse = regressions(recorded, measured)
    if worse:
        print("\nregressed by more than 20%:\n" + "\n".join(f"* {line}" for line in worse))
        return 1
    print("\nno ratio regressed by more than 20%")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    parser.add_argument(
        "--check",
        type=Path,
        metavar="PAGE",
        help="run a short version and exit 1 if a ratio regressed more than 20%% from PAGE's",
    )
    args = parse_bench_args(parser, argv)
    if args.check is not None:
        return check(args.check)
    sizes = QUICK if args.quick else FULL
    progress(f"benchmarking agents as users write them: {sizes.rounds} rounds ...")
    samples = bench(sizes)
    text = table(samples)
    print(text)
    if args.write:
        body = (
            f"{machine_line()}; medians of {sizes.rounds} rounds (per round and shape: "
            f"{sizes.raw_runs} raw asyncio runs, {sizes.pev_runs} pev runs of each kind, "
            f"{sizes.graph_runs} LangGraph runs; {sizes.task_runs} one-node tasks of each kind, "
            f"{sizes.task_runs * 10} raw). Command: "
            f"{command_text('bench_agents.py', sys.argv[1:] if argv is None else argv)}; "
            "`make bench-check` compares a short run with the ratios below."
            f"\n\n{text}\n\n{_RATIOS_MARK}{_recorded(ratios(samples))} -->"
        )
        write_section(
            args.write,
            "agents",
            body,
            heading="## Agents as users write them: a task's fixed cost, and per node",
        )
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
