"""Store faults: a fleet of `pev worker` processes on a PostgreSQL server that fails under it.

Run with `python bench/bench_store_faults.py [--quick] [--write docs/benchmarks.md] [--tasks N]
[--faults N] [--seed N]`; `--quick` is a short run that checks the bench works.

The workload and the faults are the fault tests' (tests/stores/test_postgres_restarts.py), at a
larger count: TASKS two-action tasks (each reserves an item and charges for it, delivering both
to an append-only file the tools write themselves) driven by WORKERS `pev worker` processes
(`--lease-s 2`, concurrency 4) on a private server started for the bench (Debian's `initdb`
and `pg_ctl`, a free port of 127.0.0.1, fsync off; never the shared one), struck FAULTS times
per run by one kind of fault:

* restart-fast, restart-immediate: `pg_ctl restart -m fast|immediate` while tasks run;
* crash: SIGKILL to the postmaster and its processes, then a start (crash recovery);
* terminate: for 3 s a time, `pg_terminate_backend` of one of the workers' backends every
  ~100 ms, preferring one inside a transaction;
* freeze: SIGSTOP a worker while one of its connections is inside a transaction (else the one
  driving the most tasks), SIGCONT it 5 s later.

One row per kind: tasks not ended within the bound, keys the other end received twice (from
its file, never from pev's ledger), events lost (an index's count against the events read back,
and acknowledged writes missing from a ledger), ledgers that do not verify, actions delivered
but recorded `unknown`, the slowest takeover of a frozen worker's task (SIGSTOP to another
worker's `driver_started`; target lease_s + 2 s) and the slowest return to work after a server
fault (the fault's start to the next event written).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the fleet harness lives with the tests

from tests.support import private_postgres  # noqa: E402
from tests.support.store_faults import (  # noqa: E402
    FAULTS,
    MUST_SUCCEED,
    TAKEOVER_SLACK_S,
    FaultReport,
    Settings,
    run_under,
    shop_in,
)

from _report import (  # noqa: E402 - after the path entry above
    bench_parser,
    command_text,
    machine_line,
    met,
    parse_bench_args,
    progress,
    write_section,
)

TASKS = 120
WORKERS = 4
FAULTS_PER_RUN = 6
QUICK = Settings(tasks=16, workers=2, faults=1, within_s=60.0)


def settings_of(tasks: int, faults: int, seed: int) -> Settings:
    """A run's size: the bound grows with the tasks and the faults (a hung run, not a target)."""
    return Settings(
        tasks=tasks,
        workers=WORKERS,
        faults=faults,
        within_s=60.0 + tasks + 10.0 * faults,
        seed=seed,
    )


def measure(settings: Settings, kinds: tuple[str, ...]) -> list[FaultReport]:
    """One run per kind of fault, on one private server (a fresh schema each)."""
    reports = []
    with private_postgres.private_server() as server:
        for kind in kinds:
            with tempfile.TemporaryDirectory() as tmp, shop_in(Path(tmp)) as shop:
                report = asyncio.run(run_under(kind, server, Path(tmp), shop, settings))
            progress(f"  {report.line()}")
            reports.append(report)
    return reports


def table(reports: list[FaultReport], settings: Settings) -> str:
    """One row per kind of fault."""
    bound = settings.lease_s + TAKEOVER_SLACK_S
    lines = [
        (
            "| fault | struck (mid-transaction) | tasks | succeeded | not ended | sent twice | "
            "events lost | chains that fail | delivered, recorded unknown | slowest takeover, s "
            f"(target ≤ {bound:g}) | back to work after a server fault, s | worker errors | "
            "run, s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        takeover = "-"
        if report.takeover_s is not None:
            takeover = f"{report.takeover_s:.2f} ({met(report.takeover_s <= bound)})"
        if report.not_taken_over:
            takeover += f", {report.not_taken_over} never"
        back = "-" if report.back_s is None else f"{report.back_s:.2f}"
        struck = str(report.faults)
        if report.fault in ("terminate", "freeze"):  # a server fault hits whatever is in flight
            struck += f" ({report.mid_transaction})"
        errors = ", ".join(f"{n} {what}" for what, n in report.logged_errors.items()) or "none"
        lines.append(
            f"| {report.fault} | {struck} | {report.tasks} | "
            f"{report.succeeded} | {report.not_ended} | {report.sent_twice} | "
            f"{report.lost_events} | {report.unverified} | {report.delivered_unknown} | "
            f"{takeover} | {back} | {errors} | {report.ended_s:.1f} |"
        )
    return "\n".join(lines)


def verdict(reports: list[FaultReport]) -> str:
    """What the runs got wrong, in words, or that they got nothing wrong; then honest endings.

    A task that did not succeed under a fault that cuts no call short (a restart, a crash,
    killed connections) is wrong; under a frozen worker it is listed as the honest ending of a
    call the freeze cut short.
    """
    wrong = [f"{r.fault}: {p}" for r in reports for p in r.problems]
    wrong += [
        f"{r.fault}: {why}" for r in reports if r.fault in MUST_SUCCEED for why in r.unsucceeded
    ]
    cut_short = [
        f"{r.fault}: {why}" for r in reports if r.fault not in MUST_SUCCEED for why in r.unsucceeded
    ]
    clean = "Every run ended every task, sent no key twice, lost no event and verified; " + (
        "under every fault but a frozen worker, every task succeeded."
        if cut_short
        else "every task succeeded."
    )
    parts = [
        "**Not as it should be:**\n\n" + "\n".join(f"* {line}" for line in wrong[:40])
        if wrong
        else clean
    ]
    if cut_short:
        parts.append(
            "Tasks that ended otherwise, honestly: a frozen worker's call cut short, which the "
            "takeover's `reconcile` found never delivered (and revoked), so it is a device "
            "failure, never sent again:\n\n" + "\n".join(f"* {line}" for line in cut_short[:40])
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    parser.add_argument("--tasks", type=int, default=TASKS, help="tasks per run")
    parser.add_argument("--faults", type=int, default=FAULTS_PER_RUN, help="faults per run")
    parser.add_argument("--seed", type=int, default=11, help="of the faults' moments and victims")
    args = parse_bench_args(parser, argv)
    if reason := private_postgres.unavailable():
        progress(f"the benchmark cannot run: {reason}")
        return 1
    settings = QUICK if args.quick else settings_of(args.tasks, args.faults, args.seed)
    began = time.perf_counter()
    progress(
        f"{settings.tasks} tasks, {settings.workers} workers, {settings.faults} faults per run, "
        f"{len(FAULTS)} kinds of fault ..."
    )
    reports = measure(settings, FAULTS)
    text = f"{table(reports, settings)}\n\n{verdict(reports)}"
    print(text)
    wall_s = time.perf_counter() - began
    progress(f"{wall_s:.0f} s in all")
    if args.write:
        body = (
            f"{machine_line()}, {os.cpu_count()} CPU cores, a private PostgreSQL server; "
            f"{settings.tasks} tasks and {settings.faults} faults per run, {settings.workers} "
            f"workers, `--lease-s {settings.lease_s:g}`; {wall_s:.0f} s in all. Command: "
            f"{command_text('bench_store_faults.py', sys.argv[1:] if argv is None else argv)}."
            f"\n\n{text}"
        )
        write_section(
            args.write,
            "store-faults",
            body,
            heading="## Store faults: a fleet on a failing PostgreSQL server",
        )
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
