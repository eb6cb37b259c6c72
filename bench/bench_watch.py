"""Watch latency: from an append's commit to a watcher holding the entry, SQLite and PostgreSQL.

Run with `make bench` (or `python bench/bench_watch.py [--write docs/benchmarks.md]`).

A writer appends events to one task (one `CaptureFailed` per append, 5 to 20 ms apart at
random, seeded, as a task's steps come, and out of step with any watcher's own period); watchers
follow the task with `pev.ledger.follow` and note when each entry reaches them. The latency of an
entry is the time its watcher got it minus the time the writer called `Ledger.append` (both on
one monotonic clock, in one process), beside the append's own time, from that call to its return
(a watcher of the same store can hold the entry before the append returns to its caller):

* **same store**: the watcher reads through the writer's own store object, as `TaskHandle.events()`
  does for a task `pev.start` drives: the store signals its own appends.
* **other store**: the watcher has a store object of its own over the same file or schema, as a
  watcher in another process (`pev events --follow`, a dashboard) does: an SQLite store looks at
  its file's `data_version` every 10 ms; PostgreSQL hears each append through `LISTEN`/`NOTIFY`.

Each round runs both watchers at once over a fresh task; the figures are the medians over the
rounds of each round's median and 95th percentile. The PostgreSQL server is
`PEV_TEST_POSTGRES_URL` (default `postgresql://postgres@127.0.0.1:5432/test`), in a throwaway
schema; without one, that part is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _report import bench_parser, machine_line, parse_bench_args, progress, write_section
from bench_stores import postgres_unavailable
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import CaptureFailed, Ledger, Store, TaskFinished, follow
from pev.model import EvidencePhase
from pev.stores import SQLiteStore

ROUNDS = 5
Figures = dict[str, dict[str, tuple[float, float]]]  # store -> what was timed -> (median, p95)
APPENDS = 100
SPACING_S = (0.005, 0.02)  # the pause between appends: uniform in this range, seeded
URL = os.environ.get("PEV_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def _watch(store: Store, task_id: str, seen: dict[int, float]) -> None:
    """Follow the task to its end, noting when each entry arrived."""
    async with contextlib.aclosing(follow(store, task_id)) as batches:
        async for batch in batches:
            now = time.perf_counter()
            for entry in batch:
                seen[entry.seq] = now


async def one_round(writer: Store, other: Store, appends: int) -> dict[str, list[float]]:
    """One task written by ``writer``, watched through it and through ``other``; latencies (s)."""
    ledger = Ledger(writer)
    state = await ledger.create({"bench": "watch"})
    task_id = state.task_id
    same: dict[int, float] = {}
    far: dict[int, float] = {}
    watchers = [
        asyncio.create_task(_watch(writer, task_id, same)),
        asyncio.create_task(_watch(other, task_id, far)),
    ]
    await asyncio.sleep(0.2)  # both are following before the first timed append
    spacing = random.Random(appends)  # noqa: S311 - pauses, not secrets
    called: dict[int, float] = {}
    durations: list[float] = []
    for index in range(appends):
        event = CaptureFailed(revision=0, phase=EvidencePhase.AFTER, error=f"probe {index}")
        start = time.perf_counter()
        state = await ledger.append(task_id, [event])
        durations.append(time.perf_counter() - start)
        called[state.event_count] = start
        await asyncio.sleep(spacing.uniform(*SPACING_S))
    await ledger.append(
        task_id, [TaskFinished(status=TaskStatus.FAILED, reason=TerminalReason.CANCELLED)]
    )
    await asyncio.wait_for(asyncio.gather(*watchers), 30)
    return {
        "the append itself": durations,
        "watcher, same store": [same[seq] - at for seq, at in called.items()],
        "watcher, other store": [far[seq] - at for seq, at in called.items()],
    }


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


async def measure(
    open_pair: Callable[[], Awaitable[tuple[Store, Store]]], *, rounds: int, appends: int
) -> dict[str, tuple[float, float]]:
    """Median over rounds of (median, p95) latency, in ms, for each watcher."""
    per_round: dict[str, list[tuple[float, float]]] = {}
    for number in range(rounds):
        writer, other = await open_pair()
        try:
            latencies = await one_round(writer, other, appends)
        finally:
            await writer.close()
            await other.close()
        for name, values in latencies.items():
            per_round.setdefault(name, []).append((statistics.median(values), _p95(values)))
        progress(f"  round {number + 1}/{rounds} done")
    return {
        name: (
            1000 * statistics.median(m for m, _ in figures),
            1000 * statistics.median(p for _, p in figures),
        )
        for name, figures in per_round.items()
    }


def _sqlite_pair(folder: Path) -> Callable[[], Awaitable[tuple[Store, Store]]]:
    async def pair() -> tuple[Store, Store]:
        path = folder / f"watch-{secrets.token_hex(4)}.db"
        return SQLiteStore(path), SQLiteStore(path)

    return pair


def _postgres_pair(schemas: list[str]) -> Callable[[], Awaitable[tuple[Store, Store]]]:
    from pev.stores import PostgresStore

    async def pair() -> tuple[Store, Store]:
        schema = f"pev_bench_{secrets.token_hex(6)}"
        schemas.append(schema)
        writer = PostgresStore(URL, schema=schema)
        await writer.upgrade()  # creates the schema before the other store opens it
        return writer, PostgresStore(URL, schema=schema)

    return pair


def _drop(schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(URL, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def report(figures: Figures, skipped: str | None) -> str:
    """The Markdown section: one row per store and watcher."""
    lines = [
        "| store | from the call of `Ledger.append` to | median | p95 |",
        "|---|---|---|---|",
    ]
    for store, watchers in figures.items():
        for watcher, (median, p95) in watchers.items():
            lines.append(f"| {store} | {watcher} | {median:.1f} ms | {p95:.1f} ms |")
    if skipped:
        lines.append(f"\nPostgreSQL: skipped, {skipped}.")
    return "\n".join(lines)


async def run(
    rounds: int, appends: int
) -> tuple[dict[str, dict[str, tuple[float, float]]], str | None]:
    figures: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as folder:
        progress("SQLite")
        figures["SQLite"] = await measure(
            _sqlite_pair(Path(folder)), rounds=rounds, appends=appends
        )
    skipped = postgres_unavailable()
    if skipped is None:
        schemas: list[str] = []
        try:
            progress("PostgreSQL")
            figures["PostgreSQL"] = await measure(
                _postgres_pair(schemas), rounds=rounds, appends=appends
            )
        finally:
            _drop(schemas)
    return figures, skipped


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    args = parse_bench_args(parser, argv)
    rounds, appends = (2, 20) if args.quick else (ROUNDS, APPENDS)
    figures, skipped = asyncio.run(run(rounds, appends))
    table = report(figures, skipped)
    print(table)
    if args.write:
        command = "python bench/bench_watch.py --write docs/benchmarks.md"
        body = (
            f"{machine_line()}; `make bench` (`{command}`). {rounds} rounds of {appends} appends "
            f"5 to 20 ms apart; the time from the call of `Ledger.append` to its return, and to a "
            f"watcher holding the entry, medians over the rounds.\n\n{table}"
        )
        write_section(
            args.write, "watch", body, heading="## Watching a task: from an append to a watcher"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
