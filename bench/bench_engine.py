"""Engine benchmarks: pev on SQLite beside the disk's floor; a node's time beside its primitives.

Run with `make bench` (or `python bench/bench_engine.py [--write docs/benchmarks.md]`);
`--quick` runs small sizes to check the bench (its figures are not for the docs), and
`--profile TOP` prints the whole dissection of the in-memory chain instead (the breakdown
below, then cProfile's TOP functions, chosen steps, µs per node against plan size).

pev's overhead per node in memory, beside raw asyncio and LangGraph, is measured on all three
shapes by `bench_langgraph.py`, the reference for those targets. This bench measures:

* On SQLite: the three 100-node shapes of `_common.shapes` (chain, fan-out, diamond) of one
  no-op async query tool, verification `off`, each run on a fresh `SQLiteStore` file (opened
  before the clock starts): the wall time of `await pev.run(...)` divided by the nodes. Beside
  it the floor: raw `sqlite3` committing the very event rows the run wrote, grouped into
  transactions as the run committed them (the entries of one append share their `at`; the
  run's commits are counted in the file's write-ahead log, and each commit that wrote no event,
  such as the task's lease, gets a one-row commit of its own), WAL and `synchronous=FULL`, in
  the same folder and round, alternating which of the two goes first. Target (issue 14): the
  chain at most 1.1x the floor per node, that is one raw durable commit per node.
* Where a node's time goes: the primitives a node cannot do without, timed in the same run
  (sha256 of a node event's canonical text, `orjson.dumps` of the same event's plain dict, one
  asyncio task switch; a frozen dataclass built beside a plain class with slots), the floor
  they make (two events, each a canonical text and its sha256, and one task switch), and
  cProfile's own time of the in-memory chain grouped by where the code lives, as shares of a
  node's time and the µs they stand for at the un-profiled µs per node of the same run; and,
  since the profiler inflates code of many small calls more than the rest, the ledger's steps
  (fold, seal, index row) timed directly on the chain's events.

Every figure is the median of several rounds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import hashlib
import io
import pstats
import statistics
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pev
from _common import (
    MEMORY_TARGET,
    label,
    memory_per_node,
    pev_seconds,
    plan_of,
    policy_for,
    raw_per_node,
    run_rounds,
    shapes,
    timed_run,
    widths,
)
from _floor import WalCount, appends, raw_transactions, wal_count
from _profile import (
    ASYNCIO,
    SEALING_HASH,
    SEALING_TEXT,
    Shares,
    profiled,
    raw_stats,
    shares_of,
    shares_table,
)
from _report import (
    bench_parser,
    machine_line,
    met,
    parse_bench_args,
    progress,
    write_section,
)
from pev import codec
from pev.ledger import (
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    apply,
    event_text,
    seal,
    summarize,
)
from pev.model import ExecutionRecord

NODES = 100
SQLITE_TARGET = 1.2  # issue 27: the SQLite chain at most 1.2x the floor per node
# The CPU work before each of the floor's second set of commits: about what pev does between two
# commits of the chain (its µs per node less one commit).
CPU_GAP_S = 0.0003
SHAPES = shapes(NODES)
LABELS = {case: label(case, shape) for case, shape in SHAPES.items()}
PLANS = {case: plan_of(case, shape) for case, shape in SHAPES.items()}
POLICY = policy_for(NODES)
CHAIN_WIDTHS = widths(SHAPES["chain"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How much the bench measures."""

    rounds: int  # SQLite rounds; also the un-profiled samples of the chain and raw asyncio
    raw_runs: int  # raw asyncio runs of the chain per sample
    memory_runs: int  # pev runs of the chain on MemoryStore per sample
    profile_runs: int  # pev runs of the chain under cProfile
    repeats: int  # timings of each primitive


FULL = Sizes(rounds=7, raw_runs=50, memory_runs=5, profile_runs=20, repeats=7)
QUICK = Sizes(rounds=2, raw_runs=10, memory_runs=2, profile_runs=3, repeats=3)


# -- on SQLite, beside the durable-commit floor ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _SQLiteRun:
    seconds: float
    entries: tuple[LedgerEntry, ...]
    wal: WalCount | None  # what the run committed, from the WAL; None if the log restarted

    @property
    def bare_commits(self) -> int:
        """Commits of the run that wrote no event (the lease): the WAL's count beyond appends."""
        return 0 if self.wal is None else max(0, self.wal.commits - len(appends(self.entries)))


async def _sqlite_run(case: str, path: Path) -> _SQLiteRun:
    store = pev.SQLiteStore(path)
    try:
        before = wal_count(path)
        gc.collect()
        seconds, task_id = await timed_run(PLANS[case], POLICY, store)
        wal = wal_count(path).since(before)
        entries = await pev.Ledger(store).entries(task_id)
    finally:
        await store.close()
    return _SQLiteRun(seconds, entries, wal)


@dataclass(slots=True)
class _SQLiteSamples:
    seconds: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    floor_wal: list[WalCount | None] = field(default_factory=list)
    after_cpu: list[float] = field(default_factory=list)  # s per raw commit after CPU_GAP_S
    runs: list[_SQLiteRun] = field(default_factory=list)


async def _sqlite_round(
    last: dict[str, _SQLiteRun], folder: Path, round_: int, samples: dict[str, _SQLiteSamples]
) -> None:
    for case, into in samples.items():
        pev_file, raw_file = folder / f"{case}.db", folder / f"{case}-raw.db"
        if round_ % 2:  # pev first: the floor commits this very run's rows
            run = floor_of = await _sqlite_run(case, pev_file)
        else:  # the floor first, with the rows of the case's run before (same plan, same commits)
            floor_of = last[case]
        transactions = appends(floor_of.entries)
        floor, floor_wal = raw_transactions(
            raw_file, transactions, bare_commits=floor_of.bare_commits
        )
        after_cpu, _ = raw_transactions(
            folder / f"{case}-raw-cpu.db", transactions, cpu_s=CPU_GAP_S
        )
        if not round_ % 2:
            run = await _sqlite_run(case, pev_file)
        last[case] = run
        into.seconds.append(run.seconds)
        into.floor.append(floor)
        into.floor_wal.append(floor_wal)
        into.after_cpu.append(after_cpu / len(transactions))
        into.runs.append(run)


def bench_sqlite(sizes: Sizes) -> dict[str, _SQLiteSamples]:
    """Every shape's samples on SQLite, one per round (after a warm-up round)."""
    last: dict[str, _SQLiteRun] = {}  # the warm-up round, pev first, leaves one for each

    def fresh() -> dict[str, _SQLiteSamples]:
        return {case: _SQLiteSamples() for case in SHAPES}

    return run_rounds(functools.partial(_sqlite_round, last), fresh, sizes.rounds)


def _pages(wals: Sequence[WalCount | None]) -> str:
    """Pages written per commit, the median over the runs whose log could be read."""
    known = [wal.frames / wal.commits for wal in wals if wal is not None and wal.commits]
    return f"{statistics.median(known):.1f}" if known else "?"


def _sqlite_table(samples: dict[str, _SQLiteSamples]) -> str:
    median = statistics.median
    lines = [
        (
            "| on SQLite | events / appends / commits | pev + SQLiteStore, µs/node | floor: raw "
            "sqlite3 committing the same transactions, µs/node | one raw commit, µs | one raw "
            f"commit after {CPU_GAP_S * 1e3:g} ms of CPU work, µs | pages a commit, pev / floor "
            "| pev ÷ floor | per-round ratios | target |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case, s in samples.items():
        pev_us, floor_us = median(s.seconds) / NODES * 1e6, median(s.floor) / NODES * 1e6
        commit_us = median(
            t / w.commits for t, w in zip(s.floor, s.floor_wal, strict=True) if w and w.commits
        )
        ratios = [t / f for t, f in zip(s.seconds, s.floor, strict=True)]
        run = s.runs[-1]
        commits = "?" if run.wal is None else str(run.wal.commits)
        ratio = pev_us / floor_us
        target = f"≤ {SQLITE_TARGET}x: {met(ratio <= SQLITE_TARGET)}" if case == "chain" else "—"
        lines.append(
            f"| {LABELS[case]} | {len(run.entries)} / {len(appends(run.entries))} / {commits} "
            f"| {pev_us:.0f} | {floor_us:.0f} | {commit_us * 1e6:.0f} "
            f"| {median(s.after_cpu) * 1e6:.0f} "
            f"| {_pages([r.wal for r in s.runs])} / {_pages(s.floor_wal)} | {ratio:.2f}x "
            f"| {min(ratios):.2f} to {max(ratios):.2f}x | {target} |"
        )
    return "\n".join(lines)


# -- the primitives' floor ------------------------------------------------------------------


# `ExecutionRecord`'s fields in a plain class with slots, no freezing: its `__init__` assigns
# each field directly, as a hand-written one would (made from the record's own fields, so that
# a field added to the record is here too).
_RECORD_FIELDS = [f.name for f in dataclasses.fields(ExecutionRecord)]
_PlainRecord = dataclasses.make_dataclass("_PlainRecord", _RECORD_FIELDS, slots=True, kw_only=True)


@dataclass(frozen=True, slots=True)
class _Primitives:
    """µs per call of what a node cannot do without, timed on a chain run's node events."""

    dumps_name: str  # what wrote the canonical text: orjson.dumps, or json.dumps without it
    text_bytes: float  # a node event's canonical text, bytes on average
    sha256_us: float
    dumps_us: float
    frozen_us: float  # an ExecutionRecord built: a frozen dataclass with slots
    plain_us: float  # the same fields in a plain class with slots


def _dumps_floor() -> tuple[str, Callable[[object], object]]:
    """The quickest canonical JSON writer at hand for a plain dict (sorted keys, no spaces)."""
    try:
        import orjson
    except ImportError:  # said in the figures
        import json

        writer = functools.partial(json.dumps, sort_keys=True, separators=(",", ":"))
        return "json.dumps (orjson is not installed)", writer
    return "orjson.dumps", functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)


def _primitives(entries: Sequence[LedgerEntry], repeats: int) -> _Primitives:
    nodes = [e for e in entries if isinstance(e.event, NodeDispatched | NodeFinished)]
    texts = [event_text(e.event, e.schema).encode() for e in nodes]
    plains = [codec.encode(e.event) for e in nodes]
    dumps_name, dumps = _dumps_floor()
    record = next(e.event.record for e in nodes if isinstance(e.event, NodeDispatched))
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}

    def us(step: Callable[[], object], calls: int, number: int) -> float:
        return statistics.median(timeit.repeat(step, number=number, repeat=repeats)) / (
            number * calls
        )

    return _Primitives(
        dumps_name=dumps_name,
        text_bytes=sum(map(len, texts)) / len(texts),
        sha256_us=us(lambda: [hashlib.sha256(t).hexdigest() for t in texts], len(texts), 20) * 1e6,
        dumps_us=us(lambda: [dumps(p) for p in plains], len(plains), 20) * 1e6,
        frozen_us=us(lambda: ExecutionRecord(**fields), 1, 20_000) * 1e6,
        plain_us=us(lambda: _PlainRecord(**fields), 1, 20_000) * 1e6,
    )


def _ledger_steps(entries: Sequence[LedgerEntry], repeats: int) -> list[tuple[str, float]]:
    """µs per node of the ledger's steps, timed without the profiler on a chain run's events.

    The profiler inflates code of many small calls more than the rest; these are the same steps
    as the run takes them, timed directly.
    """
    states: list[pev.TaskState] = []
    state = None
    for entry in entries:
        state = apply(state, entry.event, at=entry.at)
        states.append(state)
    texts = [codec.dumps_jcs(e.event) for e in entries]
    # Each repeat seals fresh copies of the events, as a run does (a run never seals one event
    # object twice).
    copies = iter([[dataclasses.replace(e.event) for e in entries] for _ in range(repeats)])

    def fold() -> None:
        folded = None
        for entry in entries:
            folded = apply(folded, entry.event, at=entry.at)

    def seal_copies() -> None:
        for e, event in zip(entries, next(copies), strict=True):
            seal(e.task_id, [event], after_seq=e.seq - 1, prev_hash=e.prev_hash, at=e.at)

    at: datetime = entries[-1].at
    steps: list[tuple[str, Callable[[], object]]] = [
        ("the fold: `apply` of each event", fold),
        ("sealing: `seal` of each event (its header, canonical text and sha256)", seal_copies),
        (
            "of which the event's canonical text, `codec.dumps_jcs`",
            lambda: [codec.dumps_jcs(e.event) for e in entries],
        ),
        ("of which the time's text, `codec.dumps(at)`", lambda: [codec.dumps(at) for _ in entries]),
        (
            "of which sha256 of the event's text",
            lambda: [hashlib.sha256(t.encode()).hexdigest() for t in texts],
        ),
        (
            "the index row: `summarize` after each event",
            lambda: [summarize(s, head_hash="0" * 64) for s in states],
        ),
    ]
    return [
        (name, statistics.median(timeit.repeat(step, number=1, repeat=repeats)) / NODES * 1e6)
        for name, step in steps
    ]


# -- the dissection -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Dissection:
    """A chain node's time in memory: the primitives, raw asyncio, pev, the profile's shares."""

    primitives: _Primitives
    switch_us: float  # raw asyncio per chain node: one task created and awaited
    pev_us: float  # pev + MemoryStore per chain node, not profiled
    shares: Shares
    steps: list[tuple[str, float]]  # the ledger's steps without the profiler, µs per node
    events: int  # the events of the chain run they were timed on

    @property
    def floors(self) -> dict[str, float]:
        """µs per node of the floor, by the category that stands for each part of it."""
        p = self.primitives
        return {
            SEALING_TEXT: 2 * p.dumps_us,
            SEALING_HASH: 2 * p.sha256_us,
            ASYNCIO: self.switch_us,
        }

    @property
    def floor_us(self) -> float:
        """The least one node needs: two events, each a canonical text and its sha256; a switch."""
        return sum(self.floors.values())


async def _chain_in_memory(sizes: Sizes) -> tuple[float, float, tuple[LedgerEntry, ...]]:
    """Median seconds per chain node of raw asyncio and of pev in memory, and a run's entries."""
    store = pev.MemoryStore()
    _, task_id = await timed_run(PLANS["chain"], POLICY, store)  # also the warm-up
    await raw_per_node(CHAIN_WIDTHS, sizes.raw_runs)
    raw, memory = [], []
    run = functools.partial(pev_seconds, PLANS["chain"], POLICY)
    for _ in range(sizes.rounds):
        raw.append(await raw_per_node(CHAIN_WIDTHS, sizes.raw_runs))
        memory.append(await memory_per_node(run, nodes=NODES, runs=sizes.memory_runs))
    median = statistics.median
    return median(raw), median(memory), await pev.Ledger(store).entries(task_id)


def dissect(sizes: Sizes) -> tuple[_Dissection, pstats.Stats]:
    """The chain node dissected, and the profile's stats."""
    raw_s, pev_s, entries = asyncio.run(_chain_in_memory(sizes))

    async def chain_runs() -> None:
        for _ in range(sizes.profile_runs):
            await timed_run(PLANS["chain"], POLICY, pev.MemoryStore())

    stats = profiled(chain_runs)
    dissection = _Dissection(
        _primitives(entries, sizes.repeats),
        raw_s * 1e6,
        pev_s * 1e6,
        shares_of(stats),
        _ledger_steps(entries, sizes.repeats),
        len(entries),
    )
    return dissection, stats


def _dissection_text(d: _Dissection, profile_runs: int) -> str:
    p = d.primitives
    lines = [
        "| primitive, timed in this run | µs |",
        "|---|---|",
        (
            f"| sha256 of a node event's canonical text ({p.text_bytes:.0f} bytes on average) "
            f"| {p.sha256_us:.2f} |"
        ),
        f"| `{p.dumps_name}` of the same event's plain dict, keys sorted | {p.dumps_us:.2f} |",
        (
            "| one task switch: `await create_task(noop())` (raw asyncio per chain node) "
            f"| {d.switch_us:.2f} |"
        ),
        (
            f"| an `ExecutionRecord` built (frozen dataclass, slots, {len(_RECORD_FIELDS)} fields) "
            f"| {p.frozen_us:.2f} |"
        ),
        f"| the same fields in a plain class with slots | {p.plain_us:.2f} |",
        "",
        (
            f"The floor of a node, two events (each a canonical text and its sha256) and one task "
            f"switch: **{d.floor_us:.1f} µs, {d.floor_us / d.switch_us:.1f}x raw asyncio**. pev + "
            f"MemoryStore, not profiled, in the same run: {d.pev_us:.0f} µs per chain node, "
            f"{d.pev_us / d.switch_us:.0f}x raw asyncio (target ≤ {MEMORY_TARGET:.0f}x: "
            f"{MEMORY_TARGET * d.switch_us:.0f} µs)."
        ),
        "",
        *shares_table(
            d.shares,
            title=f"where a chain node's time goes (cProfile's own time, {profile_runs} runs)",
            unit="µs per node",
            whole=d.pev_us,
            floors=d.floors,
        ),
        "",
        f"| the ledger's steps, timed without the profiler ({d.events} events) | µs per node |",
        "|---|---|",
        *(f"| {name} | {us:.1f} |" for name, us in d.steps),
    ]
    return "\n".join(lines)


# -- the whole dissection (--profile) -------------------------------------------------------

# Cumulative time of the steps worth knowing about; they nest, so the shares overlap.
_STEPS: tuple[tuple[str, str, str], ...] = (
    ("Ledger._write: fold + seal + summary + store", "ledger/_ledger.py", "_write"),
    ("  apply: the fold", "ledger/_state.py", "apply"),
    ("  seal: hash chain (canonical JSON, sha256)", "ledger/_chain.py", "seal"),
    ("  summarize: the index row", "ledger/_summary.py", "summarize"),
    ("  MemoryStore.append", "stores/_memory.py", "append"),
    ("Driver.write: write lock, ledger, rails", "engine/_driver.py", "write"),
    ("Round._prepare: records, args, digests", "engine/_round.py", "_prepare"),
    ("Round._finished: finish, wake dependents", "engine/_round.py", "_finished"),
    ("Round._run_node: a node's task", "engine/_round.py", "_run_node"),
    ("  ToolExecutor.execute", "engine/_tool_executor.py", "execute"),
    ("review_plan: plan validation", "engine/_planning.py", "review_plan"),
    ("lineage_results (all callers)", "ledger/_queries.py", "lineage_results"),
    ("create_task", "asyncio/base_events.py", "create_task"),
)


async def _scaling(sizes: Sequence[int], repeats: int) -> list[tuple[int, float, float]]:
    """Median µs per node of the in-memory chain and fan-out at each plan size."""
    out = []
    policy = policy_for(max(sizes))
    for size in sizes:
        medians = []
        for case in ("chain", "fan-out"):
            plan = plan_of(case, shapes(size)[case])
            samples = [await pev_seconds(plan, policy, pev.MemoryStore()) for _ in range(repeats)]
            medians.append(statistics.median(samples) / size * 1e6)
        out.append((size, medians[0], medians[1]))
    return out


def profile(top: int, sizes: Sizes) -> str:
    """The in-memory chain, dissected in full.

    What the bench writes (the primitives, the breakdown by category, the ledger's steps); then
    cProfile's top functions by own time, the cumulative time of chosen steps, and, without the
    profiler, µs per node against plan size (a growing figure is work proportional to the plan,
    done per node).
    """
    dissection, stats = dissect(sizes)
    out = io.StringIO()
    out.write(_dissection_text(dissection, sizes.profile_runs) + "\n\n")
    stats.stream = out  # type: ignore[attr-defined] # where print_stats writes
    stats.sort_stats("tottime").print_stats(top)
    raw = raw_stats(stats)
    total = sum(row[2] for row in raw.values())
    per_node = dissection.pev_us / total
    out.write("cumulative time of chosen steps (they nest: shares overlap), scaled as above:\n")
    for name, file_part, function in _STEPS:
        rows = [r for f, r in raw.items() if file_part in f[0] and f[2] == function]
        seconds = sum(r[3] for r in rows)
        calls = sum(r[1] for r in rows)
        out.write(
            f"  {name:<48} {seconds / total:6.1%}  {seconds * per_node:6.1f} µs/node"
            f"  {calls / (sizes.profile_runs * NODES):6.1f} calls/node\n"
        )
    out.write("\nwithout the profiler: µs per node against plan size (in memory, median of 7)\n")
    out.write(f"  {'nodes':>6} {'chain':>8} {'fan-out':>8}\n")
    for size, chain_us, fan_us in asyncio.run(_scaling((10, 50, 100, 200, 400), 7)):
        out.write(f"  {size:>6} {chain_us:>8.1f} {fan_us:>8.1f}\n")
    return out.getvalue()


# -- report ---------------------------------------------------------------------------------


def _write(path: Path, sizes: Sizes, sqlite: str, dissection: str) -> None:
    command = "Command: `make bench` (`python bench/bench_engine.py --write docs/benchmarks.md`)."
    body = (
        f"{machine_line()}; medians of {sizes.rounds} rounds (1 SQLite run of each shape and "
        f"its floor per round). {command}\n\n{sqlite}"
    )
    write_section(path, "engine", body, heading="## Engine on SQLite: one durable commit per node")
    body = (
        f"{machine_line()}; primitives: medians of {sizes.repeats} timings; raw asyncio and pev: "
        f"medians of {sizes.rounds} samples ({sizes.raw_runs} and {sizes.memory_runs} runs of "
        f"the {NODES}-node chain each); cProfile over {sizes.profile_runs} runs. {command}\n\n"
        f"{dissection}"
    )
    write_section(
        path,
        "engine-profile",
        body,
        heading="## Engine in memory: a node's time beside its primitives",
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    parser.add_argument(
        "--profile", type=int, metavar="TOP", help="dissect the in-memory chain; show TOP rows"
    )
    args = parse_bench_args(parser, argv)
    sizes = QUICK if args.quick else FULL
    if args.profile:
        print(profile(args.profile, sizes))
        return 0
    progress(f"benchmarking the engine on SQLite: {len(SHAPES)} shapes x {sizes.rounds} rounds ...")
    sqlite = _sqlite_table(bench_sqlite(sizes))
    print(sqlite)
    progress("dissecting a chain node in memory ...")
    dissection = _dissection_text(dissect(sizes)[0], sizes.profile_runs)
    print(f"\n{dissection}")
    if args.write:
        _write(args.write, sizes, sqlite, dissection)
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
