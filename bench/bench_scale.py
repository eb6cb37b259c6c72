"""Scale: many tasks at once in one process, on the memory store and on SQLite.

Run with `make bench` (or `python bench/bench_scale.py [--write docs/benchmarks.md]`).

Each case starts N tasks at once (`asyncio.gather` of N `pev.run` calls in one event loop), each
a two-node chain of async no-op query tools, verification `off`, one store shared by all:
`MemoryStore`; `MemoryStore` again with CPython's cyclic garbage collector made less eager
(`gc.set_threshold(100_000, 50, 100)`), since at this size it walks every live task's state over
and over; then one `SQLiteStore` file (WAL, a durable commit per append). The baseline is raw
asyncio doing the same work: N coroutines at once, each awaiting two `create_task(noop())` one
after the other. Every run is in a fresh Python process, so its peak memory is its own: the figure
is the growth of the process's peak resident set (`ru_maxrss`) from just before the tasks start
to the end, which includes the ledger the store keeps, every task's events, and the engine's
per-task state (its asyncio tasks, the watcher that polls each task every 0.25 s). Each case runs
`RUNS` times; the table gives the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pev
from _common import noop, raw_levels
from _report import machine_line, progress, write_section

TASKS = 10_000
RUNS = 3  # runs per case, each in a fresh process
CASES = ("asyncio", "memory", "memory-gc", "sqlite")
GC_THRESHOLD = (100_000, 50, 100)
SQLITE_CAP_S = 120.0  # past this, SQLite is measured at SQLITE_FALLBACK tasks instead
SQLITE_FALLBACK = 2_000
PLAN = pev.Plan(
    "scale",
    (
        pev.PlanNode("a", tool="noop", effect=pev.Effect.QUERY),
        pev.PlanNode("b", tool="noop", effect=pev.Effect.QUERY, after=("a",)),
    ),
)


async def planner(request: pev.engine.PlanRequest) -> pev.Plan:
    return PLAN


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def _raw(tasks: int) -> None:
    """`tasks` two-node chains at once, each node its own task."""
    await asyncio.gather(*(raw_levels((1, 1)) for _ in range(tasks)))


async def _case(case: str, tasks: int) -> dict[str, float]:
    if case == "memory-gc":
        gc.set_threshold(*GC_THRESHOLD)
    with tempfile.TemporaryDirectory() as folder:
        store: pev.Store = (
            pev.SQLiteStore(Path(folder) / "scale.db") if case == "sqlite" else pev.MemoryStore()
        )
        # Warm up: the first run imports and builds what later runs reuse.
        await pev.run("warm-up", planner=planner, tools=[noop], store=store)
        await _raw(1)
        before = _rss_kib()
        start = time.perf_counter()
        if case == "asyncio":
            await _raw(tasks)
            ok = tasks
        else:
            results = await asyncio.gather(
                *(
                    pev.run(f"task {i}", planner=planner, tools=[noop], store=store)
                    for i in range(tasks)
                )
            )
            ok = sum(result.ok for result in results)
        elapsed = time.perf_counter() - start
        after = _rss_kib()
        if isinstance(store, pev.SQLiteStore):
            await store.close()
    return {
        "tasks": tasks,
        "ok": ok,
        "seconds": elapsed,
        "rss_before_mib": before / 1024,
        "rss_peak_mib": after / 1024,
        "kib_per_task": (after - before) / tasks,
    }


def _subprocess(case: str, tasks: int, timeout_s: float | None) -> dict[str, float] | None:
    command = [sys.executable, __file__, "--case", case, "--tasks", str(tasks)]
    try:
        done = subprocess.run(  # noqa: S603 - this very script, with our own arguments
            command, capture_output=True, text=True, timeout=timeout_s, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of every figure over the runs (each figure on its own)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def _measure(case: str, tasks: int, timeout_s: float | None) -> dict[str, float] | None:
    """`RUNS` runs of a case, each in a fresh process; `None` if the first ran out of time."""
    runs = []
    for _ in range(RUNS):
        run = _subprocess(case, tasks, timeout_s)
        if run is None:
            return None
        runs.append(run)
    return _median(runs)


LABELS = {
    "asyncio": "raw asyncio (baseline)",
    "memory": "pev + MemoryStore",
    "memory-gc": "pev + MemoryStore, `gc.set_threshold(100_000, 50, 100)`",
    "sqlite": "pev + SQLiteStore (one file)",
}


def report(rows: list[tuple[str, dict[str, float]]], note: str) -> str:
    baseline = dict(rows).get("asyncio")
    lines = [
        (
            f"{machine_line()}; medians of {RUNS} runs per case, each in a fresh process. "
            "Command: `make bench` (`python bench/bench_scale.py --write docs/benchmarks.md`)."
        ),
        "",
        (
            "| case | tasks at once | succeeded | wall time, s | tasks/s | ÷ raw asyncio "
            "| peak RSS, MiB (before → peak) | memory per task, KiB |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, r in rows:
        ratio = (
            f"{r['seconds'] / baseline['seconds']:.0f}x"
            if baseline is not None and case != "asyncio" and r["tasks"] == baseline["tasks"]
            else "—"
        )
        lines.append(
            f"| {LABELS[case]} | {r['tasks']:.0f} | {r['ok']:.0f} | {r['seconds']:.2f} "
            f"| {r['tasks'] / r['seconds']:.0f} | {ratio} "
            f"| {r['rss_before_mib']:.0f} → {r['rss_peak_mib']:.0f} | {r['kib_per_task']:.1f} |"
        )
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the figures into this markdown file")
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(asyncio.run(_case(args.case, args.tasks))))
        return 0
    rows: list[tuple[str, dict[str, float]]] = []
    note = ""
    for case in CASES:
        progress(f"scale: {case}, {args.tasks} tasks x {RUNS} runs ...")
        timeout = SQLITE_CAP_S if case == "sqlite" else None
        measured = _measure(case, args.tasks, timeout)
        if measured is None:
            note = (
                f"SQLite with {args.tasks} tasks at once ran past {SQLITE_CAP_S:.0f} s, so it "
                f"is measured with {SQLITE_FALLBACK} tasks."
            )
            measured = _measure(case, SQLITE_FALLBACK, None)
        if measured is not None:
            rows.append((case, measured))
    body = report(rows, note)
    print(body)
    if args.write:
        write_section(args.write, "scale", body, heading="## Scale: many tasks in one process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
