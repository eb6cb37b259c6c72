"""Engine benchmarks: what `pev.run` costs per node, beside raw asyncio and the disk's floor.

Run with `make bench` (or `python bench/bench_engine.py [--write docs/benchmarks.md]`);
`--profile` prints where the time of the in-memory chain goes instead (cProfile, by tottime).

Two 100-node plans of one no-op async query tool (`async def noop() -> None`):

* chain: each node `after` the one before, so the nodes run one at a time;
* fan-out: 100 independent nodes, with `RecoveryPolicy(max_parallel=100)` so that all of them
  are dispatched at once (the default of 8 would make it eight short chains).

Verification is `off` (no verifier, no contract), so the figures are the loop's own bookkeeping:
plan validation, one dispatch and one finish record per node folded and hash-chained into the
ledger, the node's task, its timeout scope and context.

* pev + `MemoryStore`: wall time of `await pev.run(...)` (task creation and plan included),
  divided by the nodes. The baseline runs the very same coroutine function in the same event
  loop the way pev does, one task per node: the chain awaits `create_task(noop())` one after
  another; the fan-out gathers 100 tasks made with `create_task`. Ratio target: <= 4x.
* pev + `SQLiteStore` (a fresh file per round): the same wall time, divided by the nodes, by
  the events the run wrote (`len(await Ledger(store).entries(task_id))`) and by its
  transactions (the entries of one append share one timestamp, and two appends cannot: each
  takes far longer than the clock's microsecond). The floor is raw `sqlite3` committing the
  rows of the same plan's events (those of an in-memory run of it), one transaction per row,
  WAL and `synchronous=FULL`, as `bench_foundation.py` measures it. Per-event ratio target:
  <= 1.5x.

Every figure is the median of several rounds; each round measures every case in one event loop,
alternating whether the floor or pev's SQLite run goes first.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import io
import itertools
import pstats
import statistics
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pev
from _common import raw_per_node, run_rounds, timed_run
from _floor import raw_commit_floor
from _report import machine_line, met, progress, write_section
from pev import codec
from pev.ledger import LedgerEntry, apply, seal, summarize
from pev.model import TaskId

ROUNDS = 7
NODES = 100
MEMORY_RUNS = 5  # pev runs per case and round on MemoryStore
RAW_RUNS = 50  # raw asyncio runs per case and round: each is only a few hundred µs
PROFILE_RUNS = 30
QUERY = pev.Effect.QUERY


def _plans(nodes: int) -> dict[str, tuple[pev.Plan, pev.RecoveryPolicy]]:
    chain = pev.Plan(
        "chain",
        tuple(
            pev.PlanNode(f"n{i}", tool="noop", effect=QUERY, after=(f"n{i - 1}",) if i else ())
            for i in range(nodes)
        ),
    )
    fan_out = pev.Plan(
        "fan-out", tuple(pev.PlanNode(f"n{i}", tool="noop", effect=QUERY) for i in range(nodes))
    )
    return {
        "chain": (chain, pev.RecoveryPolicy(max_nodes=nodes)),
        "fan-out": (fan_out, pev.RecoveryPolicy(max_nodes=nodes, max_parallel=nodes)),
    }


CASES = _plans(NODES)
# The raw asyncio equivalent, level by level: the chain one node at a time, the fan-out at once.
RAW_WIDTHS = {"chain": [1] * NODES, "fan-out": [NODES]}


async def _memory_per_node(case: str) -> tuple[float, tuple[LedgerEntry, ...]]:
    """Seconds per node on `MemoryStore`, and the entries of one run (rows for the floor)."""
    gc.collect()
    total = 0.0
    for _ in range(MEMORY_RUNS):
        store = pev.MemoryStore()
        seconds, task_id = await timed_run(*CASES[case], store)
        total += seconds
    return total / (MEMORY_RUNS * NODES), await pev.Ledger(store).entries(task_id)


@dataclass(frozen=True, slots=True)
class _SQLiteRun:
    seconds: float
    events: int
    transactions: int


async def _sqlite_run(case: str, path: Path) -> _SQLiteRun:
    store = pev.SQLiteStore(path)
    try:
        gc.collect()
        seconds, task_id = await timed_run(*CASES[case], store)
        entries = await pev.Ledger(store).entries(task_id)
    finally:
        await store.close()
    transactions = sum(1 for _ in itertools.groupby(entries, key=lambda e: e.at))
    return _SQLiteRun(seconds, len(entries), transactions)


# -- rounds ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Samples:
    raw: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    sqlite: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    transactions: list[int] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)


async def _round(folder: Path, round_: int, samples: dict[str, _Samples]) -> None:
    for case, into in samples.items():
        into.raw.append(await raw_per_node(RAW_WIDTHS[case], RAW_RUNS))
        memory, entries = await _memory_per_node(case)
        into.memory.append(memory)
        # The floor commits the rows of an in-memory run of the same plan (same events).
        if round_ % 2:
            run = await _sqlite_run(case, folder / f"{case}.db")
            into.floor.append(raw_commit_floor(folder / f"{case}-raw.db", entries))
        else:
            into.floor.append(raw_commit_floor(folder / f"{case}-raw.db", entries))
            run = await _sqlite_run(case, folder / f"{case}.db")
        into.sqlite.append(run.seconds)
        into.events.append(run.events)
        into.transactions.append(run.transactions)


def bench() -> dict[str, _Samples]:
    """Every case's samples, one per round (after one warm-up run of each)."""
    return run_rounds(_round, lambda: {case: _Samples() for case in CASES}, ROUNDS)


# -- report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Figures:
    raw_us: float
    memory_us: float
    sqlite_node_us: float
    sqlite_event_us: float
    sqlite_transaction_us: float
    floor_us: float
    events: int
    transactions: int


def _figures(s: _Samples) -> _Figures:
    median = statistics.median
    return _Figures(
        raw_us=median(s.raw) * 1e6,
        memory_us=median(s.memory) * 1e6,
        sqlite_node_us=median(t / NODES for t in s.sqlite) * 1e6,
        sqlite_event_us=median(t / n for t, n in zip(s.sqlite, s.events, strict=True)) * 1e6,
        sqlite_transaction_us=median(t / n for t, n in zip(s.sqlite, s.transactions, strict=True))
        * 1e6,
        floor_us=median(s.floor) * 1e6,
        events=round(median(s.events)),
        transactions=round(median(s.transactions)),
    )


def _table(figures: dict[str, _Figures]) -> str:
    label = {
        "chain": f"chain ({NODES} nodes)",
        "fan-out": f"fan-out ({NODES} nodes, max_parallel={NODES})",
    }
    lines = [
        "| in memory | raw asyncio, µs/node | pev + MemoryStore, µs/node | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for case, f in figures.items():
        ratio = f.memory_us / f.raw_us
        lines.append(
            f"| {label[case]} | {f.raw_us:.1f} | {f.memory_us:.0f} | {ratio:.0f}x | "
            f"≤ 4x: {met(ratio <= 4)} |"
        )
    lines += [
        "",
        (
            "| on SQLite | events / transactions | pev, µs/node | pev, µs/event | "
            "pev, µs/transaction | raw durable commit, µs | per event | per transaction | target |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, f in figures.items():
        per_event = f.sqlite_event_us / f.floor_us
        per_transaction = f.sqlite_transaction_us / f.floor_us
        lines.append(
            f"| {label[case]} | {f.events} / {f.transactions} | {f.sqlite_node_us:.0f} | "
            f"{f.sqlite_event_us:.0f} | {f.sqlite_transaction_us:.0f} | {f.floor_us:.0f} | "
            f"{per_event:.2f}x | {per_transaction:.2f}x | per event ≤ 1.5x: "
            f"{met(per_event <= 1.5)} |"
        )
    return "\n".join(lines)


def _write(path: Path, table: str) -> None:
    body = (
        f"{machine_line()}; medians of {ROUNDS} rounds ({MEMORY_RUNS} in-memory runs, "
        f"{RAW_RUNS} raw asyncio runs, 1 SQLite run and its floor per case and round). "
        "Command: `make bench` (`python bench/bench_engine.py --write docs/benchmarks.md`)."
        f"\n\n{table}"
    )
    write_section(path, "engine", body, heading="## Engine: overhead per node")


# -- profile --------------------------------------------------------------------------------

# Where a function's own time is counted, by where it lives ("file:function"); first match wins.
# A builtin or generated function (isinstance, any, a dataclass __eq__) that matches none is
# charged to its callers instead, in proportion to the time each spent in it.
_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "hashing and codec",
        (
            "pev/codec.py",
            "pev/_canonical.py",
            "pev/_jcs.py",
            "pev/_json.py",
            "ledger/_chain.py",
            "hashlib",
            "hmac",
            "json",
        ),
    ),
    ("fold and state machine", ("ledger/_state.py", "ledger/_machine.py", "ledger/_summary.py")),
    ("ledger queries (lineage_results, ...)", ("ledger/_queries.py",)),
    ("ledger and store", ("ledger/_ledger.py", "ledger/_store.py", "pev/stores/")),
    ("rails", ("pev/rails/",)),
    ("engine: driver loop", ("engine/_driver.py",)),
    ("engine: tools, planning, protocols", ("pev/engine/",)),
    ("data model, kernel, policy", ("pev/model/", "pev/kernel/", "pev/policy.py")),
    ("threads", ("threading.py", "concurrent/futures", "_thread")),
    ("asyncio scheduling", ("asyncio/", "_asyncio", "selectors.py", "epoll", "contextvars")),
    ("stdlib: dataclasses, uuid, datetime", ("dataclasses.py", "uuid.py", "datetime", "enum.py")),
)
_OTHER = "other"

# Cumulative time of the steps worth knowing about; they nest, so the shares overlap.
_STEPS: tuple[tuple[str, str, str], ...] = (
    ("Ledger._write: fold + seal + summary + store", "ledger/_ledger.py", "_write"),
    ("  apply: the fold", "ledger/_state.py", "apply"),
    ("  seal: hash chain (canonical JSON, sha256)", "ledger/_chain.py", "seal"),
    ("  summarize: the index row", "ledger/_summary.py", "summarize"),
    ("  MemoryStore.append", "stores/_memory.py", "append"),
    ("canonical texts (all callers)", "pev/_canonical.py", "dumps"),
    ("Driver.write: write lock, ledger, rails", "engine/_driver.py", "write"),
    ("Round._prepare: records, args, digests", "engine/_round.py", "_prepare"),
    ("Round._finished + _wake: finish, wake dependents", "engine/_round.py", "_finished"),
    ("Round._run_node: a node's task", "engine/_round.py", "_run_node"),
    ("  ToolExecutor.execute", "engine/_tool_executor.py", "execute"),
    ("Round._next_ended: the round's wait", "engine/_round.py", "_next_ended"),
    ("review_plan: plan validation", "engine/_planning.py", "review_plan"),
    ("lineage_results (all callers)", "ledger/_queries.py", "lineage_results"),
    ("executed_ok", "ledger/_queries.py", "executed_ok"),
    ("create_task", "asyncio/base_events.py", "create_task"),
)

_Func = tuple[str, int, str]
# What pstats keeps per function: calls, primitive calls, own time, cumulative time, callers.
_Row = tuple[int, int, float, float, dict[_Func, tuple[int, int, float, float]]]


def _area(func: _Func) -> str:
    filename, _, name = func
    where = f"{filename}:{name}"
    for area, needles in _AREAS:
        if any(needle in where for needle in needles):
            return area
    return _OTHER


def _areas(raw: dict[_Func, _Row]) -> dict[str, float]:
    areas: dict[str, float] = {}

    def charge(func: _Func, seconds: float, depth: int) -> None:
        area = _area(func)
        callers = raw[func][4] if func in raw else {}
        if area == _OTHER and func[0] in ("~", "<string>") and callers and depth < 8:
            spent = sum(row[2] for row in callers.values())
            if spent > 0:
                for caller, row in callers.items():
                    charge(caller, seconds * row[2] / spent, depth + 1)
                return
        areas[area] = areas.get(area, 0.0) + seconds

    for func, row in raw.items():
        charge(func, row[2], 0)
    return areas


async def _scaling(sizes: Sequence[int], repeats: int) -> list[tuple[int, float, float]]:
    """Median µs per node of the in-memory chain and fan-out at each plan size."""
    out = []
    for size in sizes:
        cases = _plans(size)
        medians = []
        for case in ("chain", "fan-out"):
            samples = [
                (await timed_run(*cases[case], pev.MemoryStore()))[0] for _ in range(repeats)
            ]
            medians.append(statistics.median(samples) / size * 1e6)
        out.append((size, medians[0], medians[1]))
    return out


_REPEATS = 15


def _ledger_costs(entries: Sequence[LedgerEntry]) -> list[tuple[str, float]]:
    """µs per event of the ledger's steps, timed directly (no profiler) on a chain's events."""
    states: list[pev.TaskState] = []
    state = None
    for entry in entries:
        state = apply(state, entry.event, at=entry.at)
        states.append(state)
    texts = [codec.dumps_jcs(e.event) for e in entries]
    # Each repeat seals fresh copies of the events, as a run does (a run never seals one event
    # object twice).
    copies = iter([[replace(e.event) for e in entries] for _ in range(_REPEATS)])

    def fold() -> None:
        folded = None
        for entry in entries:
            folded = apply(folded, entry.event, at=entry.at)

    def seal_copies() -> None:
        for e, event in zip(entries, next(copies), strict=True):
            seal(e.task_id, [event], after_seq=e.seq - 1, prev_hash=e.prev_hash, at=e.at)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("apply (the fold)", fold),
        ("seal (header + codec.dumps_jcs + sha256)", seal_copies),
        ("  codec.dumps_jcs(event)", lambda: [codec.dumps_jcs(e.event) for e in entries]),
        (
            "  sha256 of the event's text",
            lambda: [hashlib.sha256(t.encode()).digest() for t in texts],
        ),
        ("summarize (index row)", lambda: [summarize(s, head_hash="0" * 64) for s in states]),
    ]
    costs = []
    for label, step in steps:
        best = min(timeit.repeat(step, number=1, repeat=_REPEATS))
        costs.append((label, best / len(entries) * 1e6))
    return costs


def profile(top: int) -> str:
    """The in-memory chain, dissected.

    cProfile's top functions by own time, own time by area, cumulative time of chosen steps;
    then, without the profiler (which inflates Python-heavy code several times): µs per node
    against plan size (a growing figure is work proportional to the plan, done per node) and
    the ledger's steps per event.
    """
    store = pev.MemoryStore()

    async def runs() -> TaskId:
        task_ids = [(await timed_run(*CASES["chain"], store))[1] for _ in range(PROFILE_RUNS)]
        return task_ids[-1]

    asyncio.run(runs())  # warm-up, not profiled
    profiler = cProfile.Profile()
    profiler.enable()
    task_id = asyncio.run(runs())
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    raw: dict[_Func, _Row] = stats.stats  # type: ignore[attr-defined] # undocumented, stable
    total = sum(row[2] for row in raw.values())
    per_node = 1e6 / (PROFILE_RUNS * NODES)
    out.write(
        f"own time by area, builtins charged to their callers ({PROFILE_RUNS} runs of the "
        f"{NODES}-node chain: {total:.3f} s under the profiler, {total * per_node:.0f} µs "
        "per node):\n"
    )
    for area, seconds in sorted(_areas(raw).items(), key=lambda item: -item[1]):
        out.write(f"  {area:<42} {seconds / total:6.1%}  {seconds * per_node:6.1f} µs/node\n")
    out.write("\ncumulative time of chosen steps (they nest: shares overlap):\n")
    for label, file_part, name in _STEPS:
        rows = [r for f, r in raw.items() if file_part in f[0] and f[2] == name]
        seconds = sum(r[3] for r in rows)
        calls = sum(r[1] for r in rows)
        out.write(
            f"  {label:<48} {seconds / total:6.1%}  {seconds * per_node:6.1f} µs/node"
            f"  {calls / (PROFILE_RUNS * NODES):6.1f} calls/node\n"
        )
    out.write("\nwithout the profiler: µs per node against plan size (in memory, median of 7)\n")
    out.write(f"  {'nodes':>6} {'chain':>8} {'fan-out':>8}\n")
    for size, chain_us, fan_us in asyncio.run(_scaling((10, 50, 100, 200, 400), 7)):
        out.write(f"  {size:>6} {chain_us:>8.1f} {fan_us:>8.1f}\n")
    entries = asyncio.run(pev.Ledger(store).entries(task_id))
    out.write(f"\nwithout the profiler: the ledger's steps, µs per event ({len(entries)} events)\n")
    for label, us in _ledger_costs(entries):
        out.write(f"  {label:<40} {us:6.1f}\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    parser.add_argument(
        "--profile", type=int, metavar="TOP", help="profile the in-memory chain; show TOP rows"
    )
    args = parser.parse_args(argv)
    if args.profile:
        print(profile(args.profile))
        return 0
    progress(f"benchmarking the engine: {len(CASES)} cases x {ROUNDS} rounds ...")
    figures = {case: _figures(s) for case, s in bench().items()}
    table = _table(figures)
    print(table)
    if args.write:
        _write(args.write, table)
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
