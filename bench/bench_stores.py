"""Store benchmarks: one durable append through `Ledger.append`, on SQLite and on PostgreSQL.

Run with `make bench` (or `python bench/bench_stores.py [--write docs/benchmarks.md]`).

Each append is one event (the `CaptureFailed` chain of `bench_foundation.py`, after the task's
`RevisionStarted`) appended to one task, one transaction per append, timed over a run of appends:

* SQLite: pev's `Ledger.append` on `SQLiteStore` beside raw `sqlite3` committing the very same
  event rows (WAL, `synchronous=FULL`), exactly as `bench_foundation.py` measures them.
* PostgreSQL: pev's `Ledger.append` on `PostgresStore` (its pool; each append locks the task's
  index row, checks the chain, inserts the event and moves the head) beside raw psycopg (async,
  one connection, autocommit off) doing `INSERT` + `COMMIT` of the same event rows, in a table
  of the same columns and primary key. Both live in a throwaway schema (`pev_bench_<hex>`) that
  the bench creates and drops. The server is `PEV_TEST_POSTGRES_URL` (default
  `postgresql://postgres@127.0.0.1:5432/test`); without one, that part is skipped, saying so.

Each round runs pev and its baseline on fresh files (a fresh task and rows on PostgreSQL),
alternating which goes first; the figures are medians over the rounds, and the ratio is
pev ÷ raw. Target (issue 2): a durable append <= 1.5x the raw durable commit, on each store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from _report import machine_line, met, progress, write_section
from bench_foundation import CONTRACT, NOW, _event, _pev_appends, _raw_commits
from pev.ledger import Ledger, RevisionKind, RevisionStarted, seal
from pev.ledger._chain import entry_texts
from pev.model import Plan, PlanNode

ROUNDS = 7
APPENDS = 1000
TARGET = 1.5
URL = os.environ.get("PEV_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

try:
    import psycopg

    from pev.stores import PostgresStore
except ImportError:  # the SQLite part still runs
    psycopg = None  # type: ignore[assignment]

_RAW_TABLE = (
    'CREATE TABLE {s}.raw_events (task_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, '
    "at text NOT NULL, schema integer NOT NULL, kind text NOT NULL, event text NOT NULL, "
    "prev_hash text NOT NULL, hash text NOT NULL, PRIMARY KEY (task_id, seq))"
)
_RAW_INSERT = "INSERT INTO {s}.raw_events VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"


def _where(url: str) -> str:
    return url.rsplit("@", maxsplit=1)[-1]


def postgres_unavailable(url: str = URL) -> str | None:
    """Why the PostgreSQL part cannot run, or ``None`` when the server answers."""
    if psycopg is None:
        return "psycopg is not installed: pip install 'pev-agent[postgres]'"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL server at {_where(url)} ({' '.join(str(exc).split())})"
    return None


# -- PostgreSQL -----------------------------------------------------------------------------


async def create_schema(url: str, schema: str) -> None:
    """pev's tables in a fresh schema, and the raw baseline's table beside them."""
    store = PostgresStore(url, schema=schema)
    try:
        await store.upgrade()
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(_RAW_TABLE.replace("{s}", f'"{schema}"'))


def drop_schema(url: str, schema: str) -> None:
    """Drop the throwaway schema and everything in it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def pev_postgres_appends(url: str, schema: str, count: int) -> float:
    """Seconds per `Ledger.append` of one event on `PostgresStore` (a fresh task)."""
    store = PostgresStore(url, schema=schema)
    try:
        ledger = Ledger(store)
        plan = Plan("benchmark", [PlanNode("n1", "observe")])
        state = await ledger.create({"task": "benchmark"}, contract=CONTRACT)
        started = RevisionStarted(
            number=1, revision_kind=RevisionKind.INITIAL, reason="bench", plan=plan
        )
        await ledger.append(state.task_id, [started])
        start = time.perf_counter()
        for index in range(count):
            await ledger.append(state.task_id, [_event(index)])
        elapsed = time.perf_counter() - start
        report = await ledger.verify(state.task_id)
        assert report.ok, report
        assert report.events == count + 2, report
    finally:
        await store.close()
    return elapsed / count


async def raw_postgres_commits(url: str, schema: str, count: int) -> float:
    """Seconds per raw psycopg `INSERT` + `COMMIT` of the same event rows, on one connection."""
    entries = seal(
        f"raw-{secrets.token_hex(8)}",  # type: ignore[arg-type]
        [_event(index) for index in range(count)],
        after_seq=2,
        prev_hash="0" * 64,
        at=NOW + timedelta(seconds=1),
    )
    # The very rows pev writes, as its store encodes them, prepared up front.
    rows = [
        (e.task_id, e.seq, at_text, e.schema, e.event.kind, text, e.prev_hash, e.hash)
        for e, (at_text, text) in zip(entries, entry_texts(entries), strict=True)
    ]
    insert = _RAW_INSERT.replace("{s}", f'"{schema}"')
    async with await psycopg.AsyncConnection.connect(url) as conn:
        start = time.perf_counter()
        for row in rows:
            await conn.execute(insert, row)
            await conn.commit()
        elapsed = time.perf_counter() - start
    return elapsed / len(rows)


# -- rounds ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Samples:
    """Seconds per append, one sample per round: pev and raw, per store."""

    pev: dict[str, list[float]] = field(default_factory=lambda: {"sqlite": [], "postgres": []})
    raw: dict[str, list[float]] = field(default_factory=lambda: {"sqlite": [], "postgres": []})


def sqlite_round(round_: int, count: int, samples: Samples) -> None:
    """One round on SQLite: pev and raw sqlite3 on fresh files, in alternating order."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for which in ("pev", "raw") if round_ % 2 else ("raw", "pev"):
            if which == "pev":
                samples.pev["sqlite"].append(asyncio.run(_pev_appends(folder, count)))
            else:
                samples.raw["sqlite"].append(_raw_commits(folder, count))


def postgres_round(url: str, schema: str, round_: int, count: int, samples: Samples) -> None:
    """One round on PostgreSQL: pev and raw psycopg, in alternating order, each in its loop."""
    for which in ("pev", "raw") if round_ % 2 else ("raw", "pev"):
        if which == "pev":
            seconds = asyncio.run(pev_postgres_appends(url, schema, count))
            samples.pev["postgres"].append(seconds)
        else:
            samples.raw["postgres"].append(asyncio.run(raw_postgres_commits(url, schema, count)))


def bench(rounds: int, count: int, *, url: str = URL, postgres: bool = True) -> Samples:
    """The samples of `rounds` rounds of `count` appends on each store (PostgreSQL if asked).

    A round measures both stores, SQLite then PostgreSQL; on PostgreSQL the rounds share one
    throwaway schema, dropped at the end.
    """
    samples = Samples()
    schema = f"pev_bench_{secrets.token_hex(6)}"
    if postgres:
        asyncio.run(create_schema(url, schema))
    try:
        for round_ in range(rounds):
            sqlite_round(round_, count, samples)
            if postgres:
                postgres_round(url, schema, round_, count, samples)
    finally:
        if postgres:
            drop_schema(url, schema)
    return samples


# -- report ---------------------------------------------------------------------------------


def table(samples: Samples, skipped: str | None) -> str:
    """The figures: µs per append, pev and raw, their ratio and the target's verdict."""
    lines = [
        "| store | pev `Ledger.append`, µs | raw durable commit, µs | ratio | target |",
        "|---|---|---|---|---|",
    ]
    raw_label = {"sqlite": "sqlite3", "postgres": "psycopg"}
    for store in ("sqlite", "postgres"):
        if not samples.pev[store]:
            continue
        pev_us = statistics.median(samples.pev[store]) * 1e6
        raw_us = statistics.median(samples.raw[store]) * 1e6
        ratio = pev_us / raw_us
        name = {"sqlite": "SQLite (WAL, synchronous=FULL)", "postgres": "PostgreSQL"}[store]
        lines.append(
            f"| {name} | {pev_us:.0f} | {raw_label[store]}: {raw_us:.0f} | {ratio:.2f}x | "
            f"≤ {TARGET}x: {met(ratio <= TARGET)} |"
        )
    if skipped:
        lines += ["", f"PostgreSQL skipped: {skipped}."]
    return "\n".join(lines)


def _server_version(url: str) -> str:
    with psycopg.connect(url, connect_timeout=3) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        settings = conn.execute(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        ).fetchone()
    assert row is not None
    assert settings is not None
    return (
        f"PostgreSQL {str(row[0]).split()[0]} on {_where(url).split('/')[0]} "
        f"(fsync={settings[0]}, synchronous_commit={settings[1]})"
    )


def _write(path: Path, text: str, server: str) -> None:
    body = (
        f"{machine_line()}{server}; medians of {ROUNDS} rounds ({APPENDS} appends per store, "
        "pev and raw each, per round). Command: `make bench` "
        f"(`python bench/bench_stores.py --write docs/benchmarks.md`).\n\n{text}"
    )
    write_section(
        path, "stores", body, heading="## Stores: a durable append, SQLite and PostgreSQL"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    args = parser.parse_args(argv)
    skipped = postgres_unavailable()
    if skipped:
        print(f"PostgreSQL: skipped, {skipped}; set PEV_TEST_POSTGRES_URL to measure it")
    stores = "SQLite" + ("" if skipped else " and PostgreSQL")
    progress(f"benchmarking {APPENDS} durable appends x {ROUNDS} rounds on {stores} ...")
    samples = bench(ROUNDS, APPENDS, postgres=skipped is None)
    text = table(samples, skipped)
    print(text)
    if args.write:
        _write(args.write, text, "" if skipped else f", {_server_version(URL)}")
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
