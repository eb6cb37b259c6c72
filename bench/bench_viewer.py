"""The viewer's page time for a task with 50 revisions, against `pev show` of the same task.

Run with `make bench` (or `python bench/bench_viewer.py [--write docs/benchmarks.md]`; needs the
web extra).

One task is written to an SQLite file: 50 revisions of a four-node plan, each of the first 49
verdicts asking for a replan (so each revision has records, a verdict with cited criteria, a
diagnosis and a decision). Then, in interleaved rounds (viewer, show, viewer, show, ...), each
round times:

* **viewer**: `GET /tasks/TASK` of `pev.web.create_app` through starlette's TestClient (in this
  process): the ledger read and folded, its chain verified, the page rendered; the store stays
  open between requests, as under `pev serve`.
* **pev show**: the `pev show TASK` command through click's CliRunner (in this process): the
  store opened, the chain verified, the state folded and rendered by rich, the store closed.

The figures are the medians over the rounds, and their ratio.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner
from starlette.testclient import TestClient

import pev
from _report import bench_parser, machine_line, parse_bench_args, progress, write_section
from pev.cli._app import cli
from pev.model import Plan, PlanNode, Verdict, VerificationContract, VerificationMode
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier
from pev.web import create_app

REVISIONS = 50
ROUNDS = 7
CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, "stack the blocks", ("the tower stands", "it is four high")
)


async def write_task(db: Path) -> str:
    """A task with ``REVISIONS`` revisions, in the SQLite file ``db``."""
    plan = Plan(
        "stack",
        (
            PlanNode("look", "look at the table", tool="look", effect="query"),
            PlanNode("pick", "pick a block", tool="move", after=("look",)),
            PlanNode("place", "place it", tool="move", after=("pick",)),
            PlanNode("check", "look again", tool="look", after=("place",), effect="query"),
        ),
    )
    again = Verdict.failed(CONTRACT, failed_nodes=["place"], feedback="the tower fell")
    store = pev.SQLiteStore(db)
    try:
        result = await pev.run(
            "stack the blocks",
            store=store,
            planner=ScriptedPlanner(plan, repeat_last=True),
            executor=FunctionExecutor({"look": lambda: {"blocks": 4}, "move": lambda: "moved"}),
            verifier=ScriptedVerifier(*[again] * (REVISIONS - 1), Verdict.passed(CONTRACT)),
            contract=CONTRACT,
            policy=pev.RecoveryPolicy(max_replans=REVISIONS - 1),
        )
    finally:
        await store.close()
    assert result.revisions == REVISIONS, result
    return result.task_id


def measure(rounds: int) -> tuple[float, float, int]:
    """Median seconds of the viewer's page and of `pev show`, and the page's size in bytes."""
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "bench.db"
        task_id = asyncio.run(write_task(db))
        runner = CliRunner()
        viewer_s: list[float] = []
        show_s: list[float] = []
        with TestClient(
            create_app(pev.SQLiteStore(db), close_store=True), base_url="http://127.0.0.1"
        ) as client:
            page = client.get(f"/tasks/{task_id}")  # warm both once
            assert page.status_code == 200
            assert runner.invoke(cli, ["--db", str(db), "show", task_id]).exit_code == 0
            for number in range(rounds):
                start = time.perf_counter()
                page = client.get(f"/tasks/{task_id}")
                viewer_s.append(time.perf_counter() - start)
                assert page.status_code == 200
                start = time.perf_counter()
                shown = runner.invoke(cli, ["--db", str(db), "show", task_id])
                show_s.append(time.perf_counter() - start)
                assert shown.exit_code == 0, shown.output
                progress(f"  round {number + 1}/{rounds} done")
        return statistics.median(viewer_s), statistics.median(show_s), len(page.content)


def report(viewer: float, show: float, size: int) -> str:
    """The Markdown table: both medians and their ratio."""
    return "\n".join(
        [
            f"| a task with {REVISIONS} revisions | median |",
            "|---|---|",
            f"| viewer, `GET /tasks/TASK` ({size // 1024} KB page) | {viewer * 1000:.1f} ms |",
            f"| `pev show TASK` | {show * 1000:.1f} ms |",
            f"| viewer ÷ `pev show` | {viewer / show:.2f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    args = parse_bench_args(parser, argv)
    rounds = 2 if args.quick else ROUNDS
    table = report(*measure(rounds))
    print(table)
    if args.write:
        command = "python bench/bench_viewer.py --write docs/benchmarks.md"
        body = (
            f"{machine_line()}; `make bench` (`{command}`). {rounds} interleaved rounds; medians."
            f"\n\n{table}"
        )
        write_section(
            args.write,
            "bench-viewer",
            body,
            heading="## The viewer: a task's page against `pev show`",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
