"""Foundation benchmarks: the kernel's `decide` and durable ledger appends, beside their floors.

Run with `make bench` (or `python bench/bench_foundation.py [--write docs/benchmarks.md]`).

* `decide`: µs per call over a mix of representative inputs (pass, local replan, partial,
  budget spent, audit with shadow), median of several rounds.
* Durable appends: one event per transaction through `Ledger.append` on `SQLiteStore` (fold,
  hash chain, index row, WAL + synchronous=FULL), beside raw `sqlite3` committing the same event
  row, one transaction per row, with the same pragmas, in the same run. The ratio is what pev's
  bookkeeping costs on top of the disk's durable-commit floor.

Targets (issue 2): `decide` <= 5 µs; a durable append <= 1.5x a raw durable commit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _floor import raw_commit_floor
from _report import machine_line, progress, write_section
from pev.kernel import Budget, Diagnosis, RootCause, decide
from pev.ledger import CaptureFailed, Ledger, RevisionKind, RevisionStarted, seal
from pev.model import (
    EvidencePhase,
    Plan,
    PlanNode,
    Reliability,
    Verdict,
    VerificationContract,
    VerificationMode,
)
from pev.stores import SQLiteStore

ROUNDS = 7
DECIDE_CALLS = 20_000
APPENDS = 1000

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, "put the cubes in the tray", ["red in tray"]
)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _decide_inputs() -> list[dict[str, object]]:
    passed = Verdict.passed(CONTRACT)
    failed = Verdict.failed(CONTRACT, failed_nodes=["pick_red"], feedback="the grasp slipped")
    plan_error = Diagnosis(RootCause.PLAN_OR_ANSWER_ERROR, frozenset({"pick_red"}), "blamed")
    device = Diagnosis(RootCause.DEVICE_FAILURE, frozenset({"pick_red"}), "timeout")
    base = {"executed_ok": True, "now": NOW, "evidence_missing": False}
    return [
        {**base, "mode": VerificationMode.RECOVERY, "verdict": passed,
         "reliability": Reliability.OK, "diagnosis": None, "budget": Budget(0)},
        {**base, "mode": VerificationMode.RECOVERY, "verdict": failed,
         "reliability": Reliability.OK, "diagnosis": plan_error, "budget": Budget(0)},
        {**base, "mode": VerificationMode.RECOVERY, "verdict": failed,
         "reliability": Reliability.OK, "diagnosis": device, "budget": Budget(0)},
        {**base, "mode": VerificationMode.RECOVERY, "verdict": failed,
         "reliability": Reliability.OK, "diagnosis": plan_error, "budget": Budget(2)},
        {**base, "mode": VerificationMode.AUDIT, "verdict": failed,
         "reliability": Reliability.OK, "diagnosis": plan_error, "budget": Budget(0)},
    ]  # fmt: skip


def bench_decide() -> float:
    """Median µs per `decide` call."""
    inputs = _decide_inputs()
    calls = [(lambda kw=kw: decide(**kw)) for kw in inputs]  # type: ignore[arg-type]
    per_round = DECIDE_CALLS // len(calls)
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(per_round):
            for call in calls:
                call()
        samples.append((time.perf_counter() - start) / (per_round * len(calls)) * 1e6)
    return statistics.median(samples)


def _event(index: int) -> CaptureFailed:
    return CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=f"camera frame {index} lost")


async def _pev_appends(folder: Path, count: int) -> float:
    store = SQLiteStore(folder / "pev.db")
    ledger = Ledger(store)
    plan = Plan("benchmark", [PlanNode("n1", "observe")])
    state = await ledger.create({"task": "benchmark"}, contract=CONTRACT)
    await ledger.append(
        state.task_id,
        [RevisionStarted(number=1, revision_kind=RevisionKind.INITIAL, reason="bench", plan=plan)],
    )
    start = time.perf_counter()
    for index in range(count):
        await ledger.append(state.task_id, [_event(index)])
    elapsed = time.perf_counter() - start
    report = await ledger.verify(state.task_id)
    assert report.ok, report
    assert report.events == count + 2, report
    await store.close()
    return elapsed / count


def _raw_commits(folder: Path, count: int) -> float:
    # The very rows pev writes, prepared up front: the floor is the commit alone.
    entries = seal(
        "raw-task",  # type: ignore[arg-type]
        [_event(index) for index in range(count)],
        after_seq=2,
        prev_hash="0" * 64,
        at=NOW + timedelta(seconds=1),
    )
    return raw_commit_floor(folder / "raw.db", entries)


def bench_appends() -> tuple[float, float]:
    """Median seconds per durable append: (pev, raw sqlite3).

    Each round runs both on fresh files in one folder, alternating which goes first so that
    drift in the disk's flush time does not favour either.
    """
    pev_samples, raw_samples = [], []
    for round_ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            if round_ % 2:
                pev_samples.append(asyncio.run(_pev_appends(folder, APPENDS)))
                raw_samples.append(_raw_commits(folder, APPENDS))
            else:
                raw_samples.append(_raw_commits(folder, APPENDS))
                pev_samples.append(asyncio.run(_pev_appends(folder, APPENDS)))
    return statistics.median(pev_samples), statistics.median(raw_samples)


def _table(decide_us: float, pev_s: float, raw_s: float) -> str:
    ratio = pev_s / raw_s
    return "\n".join(
        [
            "| measure | pev | baseline | ratio | target |",
            "|---|---|---|---|---|",
            f"| `decide`, µs per call | {decide_us:.2f} | — | — | ≤ 5 µs |",
            (
                f"| durable append, µs | {pev_s * 1e6:.0f} | raw sqlite3 commit: "
                f"{raw_s * 1e6:.0f} | {ratio:.2f}x | ≤ 1.5x |"
            ),
            f"| durable appends per second | {1 / pev_s:.0f} | raw: {1 / raw_s:.0f} | | |",
        ]
    )


def _write(path: Path, table: str) -> None:
    body = (
        f"{machine_line()}; medians of {ROUNDS} rounds ({DECIDE_CALLS} `decide` calls, "
        f"{APPENDS} appends per round). Command: `make bench`.\n\n{table}"
    )
    write_section(path, "foundation", body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    args = parser.parse_args(argv)
    progress("benchmarking decide ...")
    decide_us = bench_decide()
    progress(f"benchmarking {APPENDS} durable appends x {ROUNDS} rounds (pev and raw sqlite3) ...")
    pev_s, raw_s = bench_appends()
    table = _table(decide_us, pev_s, raw_s)
    print(table)
    if args.write:
        _write(args.write, table)
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
