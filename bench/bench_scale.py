"""Scale: many tasks at once in one process, on the memory store and on SQLite.

Run with `make bench` (or `python bench/bench_scale.py [--write docs/benchmarks.md]`).

Each case starts N tasks at once (`asyncio.gather` of N `pev.run` calls in one event loop), each
a two-node chain of async no-op query tools, verification `off`, one store shared by all:
`MemoryStore`, then one `SQLiteStore` file (WAL, a durable commit per append). Every case runs
in a fresh Python process, so its peak memory is its own: the figure is the growth of the
process's peak resident set (`ru_maxrss`) from just before the tasks start to the end, which
includes the ledger the store keeps, every task's events, and the engine's per-task state
(its asyncio tasks, the watcher that polls each task every 0.25 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pev
from _report import machine_line, write_section

TASKS = 10_000
SQLITE_CAP_S = 120.0  # past this, SQLite is measured at SQLITE_FALLBACK tasks instead
SQLITE_FALLBACK = 2_000
PLAN = pev.Plan(
    "scale",
    (
        pev.PlanNode("a", tool="noop", effect=pev.Effect.QUERY),
        pev.PlanNode("b", tool="noop", effect=pev.Effect.QUERY, after=("a",)),
    ),
)


@pev.tool(effect="query")
async def noop() -> None:
    return None


async def planner(request: pev.engine.PlanRequest) -> pev.Plan:
    return PLAN


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def _case(store_kind: str, tasks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        store: pev.Store = (
            pev.MemoryStore()
            if store_kind == "memory"
            else pev.SQLiteStore(Path(folder) / "scale.db")
        )
        # Warm up: the first run imports and builds what later runs reuse.
        await pev.run("warm-up", planner=planner, tools=[noop], store=store)
        before = _rss_kib()
        start = time.perf_counter()
        results = await asyncio.gather(
            *(
                pev.run(f"task {i}", planner=planner, tools=[noop], store=store)
                for i in range(tasks)
            )
        )
        elapsed = time.perf_counter() - start
        after = _rss_kib()
        ok = sum(result.ok for result in results)
        if isinstance(store, pev.SQLiteStore):
            await store.close()
    return {
        "tasks": tasks,
        "ok": ok,
        "seconds": elapsed,
        "per_s": tasks / elapsed,
        "rss_before_mib": before / 1024,
        "rss_peak_mib": after / 1024,
        "kib_per_task": (after - before) / tasks,
    }


def _subprocess(store_kind: str, tasks: int, timeout_s: float | None) -> dict[str, float] | None:
    command = [sys.executable, __file__, "--case", store_kind, "--tasks", str(tasks)]
    try:
        done = subprocess.run(  # noqa: S603 - this very script, with our own arguments
            command, capture_output=True, text=True, timeout=timeout_s, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(rows: list[tuple[str, dict[str, float]]], note: str) -> str:
    lines = [
        (
            f"{machine_line()}; one run per case, each in a fresh process. Command: `make bench` "
            "(`python bench/bench_scale.py --write docs/benchmarks.md`)."
        ),
        "",
        (
            "| store | tasks at once | succeeded | wall time, s | tasks/s | peak RSS, MiB "
            "(before → peak) | memory per task, KiB |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {r['tasks']:.0f} | {r['ok']:.0f} | {r['seconds']:.1f} | {r['per_s']:.0f} "
        f"| {r['rss_before_mib']:.0f} → {r['rss_peak_mib']:.0f} | {r['kib_per_task']:.1f} |"
        for name, r in rows
    ]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the figures into this markdown file")
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--case", choices=("memory", "sqlite"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(asyncio.run(_case(args.case, args.tasks))))
        return 0
    rows = [("MemoryStore", _subprocess("memory", args.tasks, None))]
    note = ""
    sqlite = _subprocess("sqlite", args.tasks, SQLITE_CAP_S)
    if sqlite is None:
        note = (
            f"SQLite with {args.tasks} tasks at once ran past {SQLITE_CAP_S:.0f} s, so it is "
            f"measured with {SQLITE_FALLBACK} tasks."
        )
        sqlite = _subprocess("sqlite", SQLITE_FALLBACK, None)
    rows.append(("SQLiteStore (one file)", sqlite))
    body = report([(name, row) for name, row in rows if row is not None], note)
    print(body)
    if args.write:
        write_section(args.write, "scale", body, heading="## Scale: many tasks in one process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
