"""Engine overhead beside LangGraph: pev, raw asyncio and LangGraph 1.x on the same graphs.

Run with `make bench` (or `python bench/bench_langgraph.py [--write docs/benchmarks.md]
[--readme README.md]`); needs the `bench` extra (`pip install -e '.[bench]'`).

Three 100-node shapes of one no-op async function (`async def noop() -> None`):

* chain: each node after the one before, so the nodes run one at a time;
* fan-out: 100 independent nodes, all dispatched at once;
* diamond: four levels, a source, 49 parallel branches of two nodes each (level 2 then level 3)
  and a join after all of them (1 + 49 + 49 + 1 nodes).

Six ways to run each, in one process and one event loop per round:

* raw asyncio, the floor: one task per node, level by level (`await create_task(noop())` for a
  level of one node, `gather` of `create_task`s for a wider one);
* raw asyncio + pev's ledger writes: the same, plus the very events a pev run of the shape writes
  (task created, revision started, each level's pending records with the finishes of the level
  before, the round's end, the finish), through `pev.Ledger` on a `MemoryStore`: the ledger work
  docs/design.md §5.2 asks of every run (fold, hash chain, index row), without the engine;
* pev + `MemoryStore`: `await pev.run(...)` of a plan of those nodes (`noop` as a query tool,
  verification off, `RecoveryPolicy(max_parallel=100)`), task creation and planning included;
* pev + `SQLiteStore`: the same run on a fresh file (opened before the clock starts);
* LangGraph: a `StateGraph` with one async no-op node per node and edges matching the shape
  (START to the sources, a waiting edge from all of a node's predecessors to it, the sinks to
  END), compiled once without a checkpointer; `await graph.ainvoke(...)` is timed;
* LangGraph + `AsyncSqliteSaver` (langgraph.checkpoint.sqlite.aio): the same graph compiled with
  the checkpointer on a fresh file (opened and set up before the clock starts), invoked with a
  `thread_id`, LangGraph's default durability.

Every figure is the wall time divided by the nodes; each is the median of several rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pev
from _common import raw_levels, raw_per_node, run_rounds, timed_run
from _report import machine_line, met, progress, write_section
from pev.kernel import Finish, TaskStatus, TerminalReason
from pev.ledger import (
    Dispatched,
    Event,
    NodeDispatched,
    NodeFinished,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    finish,
    utc_now,
)
from pev.model import ExecutionRecord, RecordId, RecordStatus, Success, digest

try:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, StateGraph
except ImportError as exc:  # pragma: no cover - the message is the point
    raise SystemExit("bench_langgraph.py needs the bench extra: pip install -e '.[bench]'") from exc

ROUNDS = 7
NODES = 100
RAW_RUNS = 50  # raw asyncio runs per shape and round: each is only a few hundred µs
MEMORY_RUNS = 5  # pev runs per shape and round on MemoryStore
GRAPH_RUNS = 3  # LangGraph runs per shape and round without a checkpointer
QUERY = pev.Effect.QUERY
SUCCEEDED = RecordStatus.SUCCEEDED

# A shape is its nodes in order, each with its predecessors.
Shape = Mapping[str, tuple[str, ...]]


def _shapes(nodes: int) -> dict[str, Shape]:
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


SHAPES = _shapes(NODES)


def _levels(shape: Shape) -> list[list[str]]:
    """The shape's nodes grouped by depth: each level depends only on those before it."""
    depth: dict[str, int] = {}
    for name, after in shape.items():  # predecessors come first in every shape
        depth[name] = 1 + max((depth[p] for p in after), default=-1)
    levels: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for name, level in depth.items():
        levels[level].append(name)
    return levels


# How many nodes each level of a shape has: what raw asyncio runs at once, level by level.
WIDTHS = {case: [len(level) for level in _levels(shape)] for case, shape in SHAPES.items()}
LABELS = {
    "chain": f"chain ({NODES} nodes)",
    "fan-out": f"fan-out ({NODES} nodes)",
    "diamond": f"diamond (4 levels: {' + '.join(map(str, WIDTHS['diamond']))} = {NODES} nodes)",
}


# -- pev ------------------------------------------------------------------------------------


def _plan(case: str) -> pev.Plan:
    return pev.Plan(
        case,
        tuple(
            pev.PlanNode(name, tool="noop", effect=QUERY, after=after)
            for name, after in SHAPES[case].items()
        ),
    )


PLANS = {case: _plan(case) for case in SHAPES}
POLICY = pev.RecoveryPolicy(max_nodes=NODES, max_parallel=NODES)


async def _pev_seconds(case: str, store: pev.Store) -> float:
    seconds, _ = await timed_run(PLANS[case], POLICY, store)
    return seconds


async def _in_memory_per_node(
    run: Callable[[str, pev.Store], Awaitable[float]], case: str
) -> float:
    """Seconds per node of `MEMORY_RUNS` runs of `run`, each on a fresh `MemoryStore`."""
    gc.collect()
    total = 0.0
    for _ in range(MEMORY_RUNS):
        total += await run(case, pev.MemoryStore())
    return total / (MEMORY_RUNS * NODES)


async def _pev_sqlite_per_node(case: str, path: Path) -> float:
    store = pev.SQLiteStore(path)
    try:
        gc.collect()
        return await _pev_seconds(case, store) / NODES
    finally:
        await store.close()


# -- the ledger floor -----------------------------------------------------------------------


async def _ledger_floor_seconds(case: str, store: pev.Store) -> float:
    """Raw asyncio plus the very events a pev run writes, through pev's `Ledger`: no engine.

    The task's creation, its revision, each level's pending records (written with the level
    before's finishes, as the engine's round does), the round's end and the finish: every event
    folded, sealed into the hash chain and stored, as docs/design.md §5.2 asks of any run.
    """
    plan = PLANS[case]
    ledger = pev.Ledger(store)
    args_digest = digest({})
    start = time.perf_counter()
    state = await ledger.create("benchmark", policy=POLICY)
    task_id = state.task_id
    await ledger.write(
        task_id,
        [
            RevisionStarted(
                number=1, revision_kind=RevisionKind.INITIAL, reason="initial", plan=plan
            )
        ],
    )
    finished: list[Event] = []
    for level in _levels(SHAPES[case]):
        now = utc_now()
        records = [
            ExecutionRecord(
                id=RecordId(f"1:{name}"),
                task_id=task_id,
                revision=1,
                node_id=name,
                tool="noop",
                args_digest=args_digest,
                effect=QUERY,
                idempotency_key=f"{task_id}/1:{name}",
                created_at=now,
                updated_at=now,
            )
            for name in level
        ]
        await ledger.write(task_id, [*finished, *(NodeDispatched(record=r) for r in records)])
        await raw_levels([len(level)])
        done = utc_now()
        finished = [
            NodeFinished(record_id=r.id, status=SUCCEEDED, result=Success(None), at=done)
            for r in records
        ]
    await ledger.write(task_id, finished)
    state, _ = await ledger.write(task_id, [RoundExecuted(revision=1, executed_ok=True)])
    ending = Finish(TaskStatus.SUCCEEDED, TerminalReason.EXECUTION_SUCCEEDED)
    await ledger.write(
        task_id,
        [Dispatched(revision=1, decision=ending), finish(state, ending.status, ending.reason)],
    )
    elapsed = time.perf_counter() - start
    assert (await ledger.state(task_id)).terminal
    return elapsed


# -- LangGraph ------------------------------------------------------------------------------


class _State(TypedDict, total=False):
    n: int


async def _graph_node(state: _State) -> None:
    return None


def _graph(case: str, node: Callable[[_State], Awaitable[None]] = _graph_node) -> Any:
    """The shape as a LangGraph `StateGraph`, not yet compiled."""
    shape = SHAPES[case]
    graph = StateGraph(_State)
    for name in shape:
        graph.add_node(name, node)
    successors = {p for after in shape.values() for p in after}
    for name, after in shape.items():
        if not after:
            graph.add_edge(START, name)
        elif len(after) == 1:
            graph.add_edge(after[0], name)
        else:
            graph.add_edge(list(after), name)  # waits for all of them
        if name not in successors:
            graph.add_edge(name, END)
    return graph


# One superstep per level in the worst case (the chain); LangGraph's default limit is 25.
CONFIG: dict[str, Any] = {"recursion_limit": NODES + 10}
GRAPHS = {case: _graph(case).compile() for case in SHAPES}


async def _graph_per_node(case: str) -> float:
    graph = GRAPHS[case]
    gc.collect()
    start = time.perf_counter()
    for _ in range(GRAPH_RUNS):
        await graph.ainvoke({"n": 0}, CONFIG)
    return (time.perf_counter() - start) / (GRAPH_RUNS * NODES)


async def _graph_sqlite_per_node(case: str, path: Path) -> float:
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()  # pev's store creates its schema when opened, before the clock
        graph = _graph(case).compile(checkpointer=saver)
        config = CONFIG | {"configurable": {"thread_id": "benchmark"}}
        gc.collect()
        start = time.perf_counter()
        await graph.ainvoke({"n": 0}, config)
        elapsed = time.perf_counter() - start
        checkpoint = await saver.aget_tuple(config)
    assert checkpoint is not None
    return elapsed / NODES


async def _check_graphs() -> None:
    """Every LangGraph graph runs each of its nodes exactly once."""
    for case, shape in SHAPES.items():
        ran: list[None] = []

        async def counted(state: _State, ran: list[None] = ran) -> None:
            ran.append(None)

        await _graph(case, counted).compile().ainvoke({"n": 0}, CONFIG)
        assert len(ran) == len(shape), (case, len(ran))


# -- rounds ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Samples:
    raw: list[float] = field(default_factory=list)
    ledger_floor: list[float] = field(default_factory=list)
    pev_memory: list[float] = field(default_factory=list)
    pev_sqlite: list[float] = field(default_factory=list)
    graph: list[float] = field(default_factory=list)
    graph_sqlite: list[float] = field(default_factory=list)


async def _round(folder: Path, round_: int, samples: dict[str, _Samples]) -> None:
    for case, into in samples.items():
        into.raw.append(await raw_per_node(WIDTHS[case], RAW_RUNS))
        into.ledger_floor.append(await _in_memory_per_node(_ledger_floor_seconds, case))
        into.pev_memory.append(await _in_memory_per_node(_pev_seconds, case))
        into.graph.append(await _graph_per_node(case))
        # Alternate which of the two disk-bound runs goes first.
        if round_ % 2:
            into.graph_sqlite.append(await _graph_sqlite_per_node(case, folder / f"{case}-lg.db"))
            into.pev_sqlite.append(await _pev_sqlite_per_node(case, folder / f"{case}-pev.db"))
        else:
            into.pev_sqlite.append(await _pev_sqlite_per_node(case, folder / f"{case}-pev.db"))
            into.graph_sqlite.append(await _graph_sqlite_per_node(case, folder / f"{case}-lg.db"))


def bench() -> dict[str, _Samples]:
    """Every shape's samples, one per round (after a check and a warm-up round)."""
    asyncio.run(_check_graphs())
    return run_rounds(_round, lambda: {case: _Samples() for case in SHAPES}, ROUNDS)


# -- report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Figures:
    raw_us: float
    ledger_floor_us: float
    pev_memory_us: float
    pev_sqlite_us: float
    graph_us: float
    graph_sqlite_us: float

    @property
    def pev_over_raw(self) -> float:
        return self.pev_memory_us / self.raw_us

    @property
    def floor_over_raw(self) -> float:
        return self.ledger_floor_us / self.raw_us

    @property
    def pev_over_floor(self) -> float:
        return self.pev_memory_us / self.ledger_floor_us

    @property
    def leaner(self) -> float:
        return self.graph_us / self.pev_memory_us

    @property
    def leaner_sqlite(self) -> float:
        return self.graph_sqlite_us / self.pev_sqlite_us


def _figures(s: _Samples) -> _Figures:
    def median_us(values: list[float]) -> float:
        return statistics.median(values) * 1e6

    return _Figures(
        raw_us=median_us(s.raw),
        ledger_floor_us=median_us(s.ledger_floor),
        pev_memory_us=median_us(s.pev_memory),
        pev_sqlite_us=median_us(s.pev_sqlite),
        graph_us=median_us(s.graph),
        graph_sqlite_us=median_us(s.graph_sqlite),
    )


def _ratio(value: float) -> str:
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def _table(figures: dict[str, _Figures]) -> str:
    lines = [
        (
            "| µs per node | raw asyncio | raw asyncio + pev's ledger writes | pev + MemoryStore | "
            "LangGraph | pev + SQLiteStore | LangGraph + AsyncSqliteSaver |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {LABELS[case]} | {f.raw_us:.1f} | {f.ledger_floor_us:.0f} | {f.pev_memory_us:.0f} | "
        f"{f.graph_us:.0f} | {f.pev_sqlite_us:.0f} | {f.graph_sqlite_us:.0f} |"
        for case, f in figures.items()
    ]
    lines += [
        "",
        (
            "| ratio | pev + MemoryStore ÷ raw asyncio | LangGraph ÷ pev + MemoryStore | "
            "LangGraph + AsyncSqliteSaver ÷ pev + SQLiteStore |"
        ),
        "|---|---|---|---|",
    ]
    lines += [
        f"| {LABELS[case]} | {_ratio(f.pev_over_raw)}: {met(f.pev_over_raw <= 4)} | "
        f"{_ratio(f.leaner)}: {met(f.leaner >= 8)} | "
        f"{_ratio(f.leaner_sqlite)}: {met(f.leaner_sqlite >= 8)} |"
        for case, f in figures.items()
    ]
    lines.append("| target | ≤ 4x | ≥ 8x (pev 8x leaner) | ≥ 8x (pev 8x leaner) |")
    lines += [
        "",
        (
            "| where pev's time goes (in memory) | ledger writes alone ÷ raw asyncio | "
            "pev ÷ its ledger writes alone (the engine's own share) |"
        ),
        "|---|---|---|",
    ]
    lines += [
        f"| {LABELS[case]} | {_ratio(f.floor_over_raw)} | {_ratio(f.pev_over_floor)} |"
        for case, f in figures.items()
    ]
    return "\n".join(lines)


def _readme_table(figures: dict[str, _Figures]) -> str:
    cases = list(figures)
    head = " | ".join(case for case in cases)

    def row(label: str, values: list[str], target: str) -> str:
        return f"| {label} | {' | '.join(values)} | {target} |"

    return "\n".join(
        [
            f"| per node, medians | {head} | target |",
            "|---|" + "---|" * (len(cases) + 1),
            row("pev in memory, µs", [f"{f.pev_memory_us:.0f}" for f in figures.values()], ""),
            row(
                "pev in memory ÷ raw asyncio",
                [_ratio(f.pev_over_raw) for f in figures.values()],
                "≤ 4x",
            ),
            row(
                "of which pev's ledger writes alone ÷ raw asyncio",
                [_ratio(f.floor_over_raw) for f in figures.values()],
                "",
            ),
            row(
                "LangGraph ÷ pev (no persistence)",
                [_ratio(f.leaner) for f in figures.values()],
                "≥ 8x",
            ),
            row(
                "LangGraph + SQLite checkpointer ÷ pev + SQLite",
                [_ratio(f.leaner_sqlite) for f in figures.values()],
                "≥ 8x",
            ),
        ]
    )


def _write(path: Path, table: str) -> None:
    body = (
        f"{machine_line()}; medians of {ROUNDS} rounds ({RAW_RUNS} raw asyncio runs, "
        f"{MEMORY_RUNS} runs of the ledger writes alone, {MEMORY_RUNS} pev in-memory runs, "
        f"{GRAPH_RUNS} LangGraph runs, 1 run of each on "
        "SQLite per shape and round). Command: `make bench` "
        "(`python bench/bench_langgraph.py --write docs/benchmarks.md --readme README.md`)."
        f"\n\n{table}"
    )
    write_section(path, "langgraph", body, heading="## Engine beside LangGraph")


def _write_readme(path: Path, table: str) -> None:
    body = (
        f"{machine_line()}, by `make bench`: 100-node graphs of no-op async tools, pev, raw "
        "asyncio and LangGraph in the same run. Method and all the figures: "
        f"[docs/benchmarks.md](docs/benchmarks.md).\n\n{table}"
    )
    write_section(path, "bench", body, heading="## Benchmarks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    parser.add_argument("--readme", type=Path, help="update the headline table in this README")
    args = parser.parse_args(argv)
    progress(f"benchmarking pev beside LangGraph: {len(SHAPES)} shapes x {ROUNDS} rounds ...")
    figures = {case: _figures(s) for case, s in bench().items()}
    table = _table(figures)
    print(table)
    if args.write:
        _write(args.write, table)
        progress(f"wrote {args.write}")
    if args.readme:
        _write_readme(args.readme, _readme_table(figures))
        progress(f"wrote {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
