"""Worker benchmarks: a fleet of `pev worker` processes beside in-process `pev.run`, and takeover.

Run with `make bench` (or `python bench/bench_workers.py [--write docs/benchmarks.md]
[--rounds N] [--tasks N]`).

Throughput: the same TASKS two-node tasks (`_fleet_agent.fleet`: a read, then an action that
does nothing slow; verification off), run two ways on the same kind of store in the same round:

* workers: 1, 2 or 4 `pev worker` processes with their default settings (concurrency 4, poll
  1 s, lease 30 s) on a fresh ledger, started and then left idle for IDLE_S plus a random part
  of a poll; this process then submits the tasks one after another with `pev.submit` while the
  workers claim and drive them;
* in-process: `pev.run` on a fresh ledger of the same kind, in this process, over the same tasks
  at the same total concurrency (`asyncio.gather`, at most 4 per worker at once: a semaphore).

Both are timed the same way, from the ledger: from the first task's creation (its `created_at`)
to the last event of the task that ends last (the latest `updated_at`). Process start-up is not
counted, nor what follows each task's last event (the lease release, the episode). Both record
each ended task's episode, as `pev worker` does (`experience=LessonBook(store)`). Ratio: workers
÷ in-process, of the medians; target (issue 11): <= 1.3x on each store.

Takeover: one task of `_fleet_agent.held`, whose read waits while a file exists, is driven by a
`pev worker --lease-s 2`; once the read runs, a second such worker starts and idles beside it
(as long as a fleet does); then the first is killed with SIGKILL. Measured: from the kill to
the second worker's `driver_started` event for the task (the event's own time in the ledger),
and how much of that was the dead worker's lease running out (its expiry, read from the lease
row just after the kill). Target: within lease_s + 2 s.

Every figure is a median over the rounds; each round measures every case on SQLite (a file) and
then on PostgreSQL (a schema), alternating which of workers and in-process goes first. The
server is `PEV_TEST_POSTGRES_URL` (default `postgresql://postgres@127.0.0.1:5432/test`), in
throwaway schemas the bench creates and drops; without one, the bench says so and measures SQLite
alone. With `PEV_BENCH_PROFILE=DIR` set, the workers and the in-process runs are profiled
(cProfile, one file each in DIR), to see where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import gc
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import _fleet_agent
import pev
from _fleet import (
    PROFILE_DIR,
    STOP_TIMEOUT_S,
    UNFINISHED,
    URL,
    Counts,
    Fleet,
    FleetError,
    Place,
    fleet,
    place,
    summaries,
    until,
    wait_for,
)
from _report import command_text, machine_line, met, progress, write_section
from bench_stores import _server_version, postgres_unavailable
from pev.experience import LessonBook
from pev.kernel import TaskStatus
from pev.ledger import DriverStarted, utc_now

ROUNDS = 5
TASKS = 1000
FLEETS = (1, 2, 4)  # worker processes
CONCURRENCY = 4  # `pev worker --concurrency`'s default: tasks each worker drives at once
IDLE_S = 2.0  # how long workers idle before the tasks come (past any start-up quick polls)
POLL_S = 1.0  # `pev worker --poll-s`'s default: up to this more idling, at random
SEED = 11  # of that random part
TARGET = 1.3  # workers ÷ in-process
LEASE_S = 2.0  # the takeover's `pev worker --lease-s`
SLACK_S = 2.0  # takeover target: lease_s + this
TAKEOVER_WAIT_S = 60.0  # past the lease, the longest the bench waits for a takeover or an end
TAKEOVER_END = (
    "the read the killed worker left running changed nothing: crash recovery ends its record "
    "`cancelled` and runs the query again as a new record, so the task ends as it would have."
)
KINDS = ("sqlite", "postgres")
LABELS = {"sqlite": "SQLite (one file)", "postgres": "PostgreSQL (one schema)"}
WORKERS, IN_PROCESS = "workers", "in-process"


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One throughput measurement: how long the tasks took, and how they ended.

    Attributes:
        seconds: From the first task's creation to the last task's last event.
        first_wait_s: From the first task's creation to its ``driver_started`` event: how long
            it waited for a driver (in a fleet: for an idle worker's next look).
        tasks: Tasks in the ledger.
        succeeded: Tasks that ended ``succeeded``.
        counts: What the fleet's workers said they did (``None`` in-process).
    """

    seconds: float
    first_wait_s: float
    tasks: int
    succeeded: int
    counts: Counts | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Takeover:
    """One takeover: times from the kill, and what became of the task.

    Attributes:
        seconds: From the SIGKILL to the second worker's ``driver_started`` event.
        lease_left_s: From the SIGKILL to the dead worker's lease expiry.
        owners: The distinct owners of the task's ``driver_started`` events, in order.
        dead_owner: The killed worker's owner id.
        status: How the task ended.
        counts: What the second worker said it did.
    """

    seconds: float
    lease_left_s: float
    owners: tuple[str, ...]
    dead_owner: str
    status: TaskStatus | None
    counts: Counts | None


@dataclass(slots=True)
class Samples:
    """Every round's measurements: throughput by (store, workers, way), takeovers by store."""

    runs: dict[tuple[str, int, str], list[Run]] = field(default_factory=dict)
    takeovers: dict[str, list[Takeover]] = field(default_factory=dict)


# -- throughput -----------------------------------------------------------------------------


async def _ended_run(store: pev.Store, tasks: int) -> Run:
    """The run's figures, from the ledger's index and its first task's events."""
    rows = await summaries(store, tasks)
    first = min(rows, key=lambda row: row.created_at)
    entries = await store.read(first.task_id)
    started = next(entry.at for entry in entries if isinstance(entry.event, DriverStarted))
    return Run(
        seconds=(max(row.updated_at for row in rows) - first.created_at).total_seconds(),
        first_wait_s=(started - first.created_at).total_seconds(),
        tasks=len(rows),
        succeeded=sum(row.status is TaskStatus.SUCCEEDED for row in rows),
    )


def _end_timeout(tasks: int) -> float:
    return 60.0 + 0.5 * tasks  # a bound on a hung run, far above any real one


def fleet_run(kind: str, workers: int, tasks: int, folder: Path, *, idle_s: float) -> Run:
    """``tasks`` tasks submitted to ``workers`` idle `pev worker` processes on a fresh ledger."""
    with place(kind, folder) as where, fleet(where.db, folder, workers, idle_s=idle_s) as running:
        run = asyncio.run(_submit_all(where, tasks, running))
    return dataclasses.replace(run, counts=running.counts)


async def _submit_all(where: Place, tasks: int, running: Fleet) -> Run:
    store = where.open()
    try:
        gc.collect()
        for number in range(tasks):
            await pev.submit(f"task {number}", agent=_fleet_agent.fleet, store=store)

        async def all_ended() -> bool:
            running.check_alive()
            return not await store.list_tasks(phases=UNFINISHED, limit=1)

        await until(all_ended, _end_timeout(tasks), "the workers' tasks", every_s=0.1)
        return await _ended_run(store, tasks)
    finally:
        await store.close()


def inprocess_run(kind: str, concurrency: int, tasks: int, folder: Path) -> Run:
    """The same tasks through `pev.run` in this process, ``concurrency`` at once, fresh ledger."""
    with place(kind, folder) as where:
        return asyncio.run(_run_all(where, concurrency, tasks))


async def _run_all(where: Place, concurrency: int, tasks: int) -> Run:
    store = where.open()
    try:
        book = LessonBook(store)  # as `pev worker` records every task it ends
        gate = asyncio.Semaphore(concurrency)

        async def one(number: int) -> None:
            async with gate:
                await pev.run(
                    f"task {number}", agent=_fleet_agent.fleet, store=store, experience=book
                )

        gc.collect()
        with _profiled(f"inprocess-{where.kind}-{concurrency}"):
            await asyncio.wait_for(
                asyncio.gather(*(one(number) for number in range(tasks))), _end_timeout(tasks)
            )
        return await _ended_run(store, tasks)
    finally:
        await store.close()


@contextmanager
def _profiled(name: str) -> Iterator[None]:
    """cProfile what runs inside, into ``PEV_BENCH_PROFILE/<name>-<random>.prof`` when set."""
    if not PROFILE_DIR:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(Path(PROFILE_DIR) / f"{name}-{secrets.token_hex(3)}.prof")


def throughput_round(
    kind: str,
    round_: int,
    tasks: int,
    fleets: tuple[int, ...],
    samples: Samples,
    *,
    idle: Callable[[], float],
) -> None:
    """Each fleet size beside in-process `pev.run` on ``kind``, in alternating order.

    ``idle()`` is how long each fleet idles before the first task is submitted.
    """
    for workers in fleets:
        order = (WORKERS, IN_PROCESS) if (round_ + workers) % 2 else (IN_PROCESS, WORKERS)
        for way in order:
            with tempfile.TemporaryDirectory() as tmp:
                run = (
                    fleet_run(kind, workers, tasks, Path(tmp), idle_s=idle())
                    if way == WORKERS
                    else inprocess_run(kind, workers * CONCURRENCY, tasks, Path(tmp))
                )
            samples.runs.setdefault((kind, workers, way), []).append(run)
            progress(
                f"  {kind}, {workers} worker(s), {way}: {run.seconds:.2f} s, "
                f"{run.succeeded}/{run.tasks} succeeded"
            )


# -- takeover -------------------------------------------------------------------------------


def takeover_run(kind: str, folder: Path, *, lease_s: float, idle_s: float) -> Takeover:
    """SIGKILL a worker mid-task; time until an idle second worker has taken the task over."""
    hold, started = folder / "hold", folder / "started"
    hold.touch()
    env = {"PEV_BENCH_HOLD": str(hold), "PEV_BENCH_STARTED": str(started)}
    options = ("--lease-s", f"{lease_s:g}")
    try:
        with place(kind, folder) as where:
            task_id = asyncio.run(_submit_held(where))
            with fleet(where.db, folder, 1, *options, env=env) as first:
                [dying] = first.workers
                dead_owner = dying.owner

                def reading() -> bool:
                    first.check_alive()
                    return started.exists()

                wait_for(reading, TAKEOVER_WAIT_S, "the first worker's read")
                with fleet(where.db, folder, 1, *options, env=env, idle_s=idle_s) as second:
                    killed_at = utc_now()
                    dying.kill()
                    hold.unlink()  # the read, run again by the second worker, returns at once
                    seen = asyncio.run(
                        _taken_over(
                            where,
                            task_id,
                            dead_owner=dead_owner,
                            killed_at=killed_at,
                            lease_s=lease_s,
                            second=second,
                        )
                    )
            counts = second.counts
    finally:
        hold.unlink(missing_ok=True)
    taken_at, expiry, owners, status = seen
    return Takeover(
        seconds=(taken_at - killed_at).total_seconds(),
        lease_left_s=(expiry - killed_at).total_seconds() if expiry else float("nan"),
        owners=owners,
        dead_owner=dead_owner,
        status=status,
        counts=counts,
    )


async def _submit_held(where: Place) -> str:
    store = where.open()
    try:
        return await pev.submit("held", agent=_fleet_agent.held, store=store)
    finally:
        await store.close()


async def _taken_over(
    where: Place,
    task_id: str,
    *,
    dead_owner: str,
    killed_at: datetime,
    lease_s: float,
    second: Fleet,
) -> tuple[datetime, datetime | None, tuple[str, ...], TaskStatus | None]:
    """When the takeover's `driver_started` was written, the dead lease's expiry, and the end."""
    store = where.open()
    try:
        lease = await store.lease(task_id)
        expiry = lease.expires_at if lease is not None and lease.owner == dead_owner else None
        starts: list[tuple[datetime, str]] = []

        async def taken() -> bool:
            second.check_alive()
            starts[:] = [
                (entry.at, entry.event.owner)
                for entry in await store.read(task_id)
                if isinstance(entry.event, DriverStarted)
            ]
            return any(owner != dead_owner for _, owner in starts)

        await until(taken, lease_s + TAKEOVER_WAIT_S, "the takeover", every_s=0.02)
        taken_at = next(at for at, owner in starts if owner != dead_owner)

        async def ended() -> bool:
            summary = await store.summary(task_id)
            return summary is not None and summary.phase not in UNFINISHED

        await until(ended, TAKEOVER_WAIT_S, "the taken-over task's end", every_s=0.05)
        summary = await store.summary(task_id)
        owners = tuple(dict.fromkeys(owner for _, owner in starts))
        return taken_at, expiry, owners, summary.status if summary else None
    finally:
        await store.close()


def takeover_round(
    kind: str, samples: Samples, *, lease_s: float, idle: Callable[[], float]
) -> None:
    """One takeover on ``kind``; the second worker idles for ``idle()`` before the kill."""
    with tempfile.TemporaryDirectory() as tmp:
        taken = takeover_run(kind, Path(tmp), lease_s=lease_s, idle_s=idle())
    samples.takeovers.setdefault(kind, []).append(taken)
    progress(
        f"  {kind}, takeover: {taken.seconds:.2f} s after the kill "
        f"(the lease ran out after {taken.lease_left_s:.2f} s)"
    )


# -- rounds ---------------------------------------------------------------------------------


def bench(
    rounds: int,
    tasks: int,
    *,
    kinds: tuple[str, ...] = KINDS,
    fleets: tuple[int, ...] = FLEETS,
    lease_s: float = LEASE_S,
    idle_s: float = IDLE_S,
    jitter_s: float = POLL_S,
) -> Samples:
    """The samples of ``rounds`` rounds on each store in ``kinds``: throughput, then takeover.

    A warm-up run (a few in-process tasks per store, dropped) comes first. Each fleet idles for
    ``idle_s`` plus a random part of ``jitter_s`` (a poll's length) before its first task or the
    kill, so that over the rounds these come at every point of the idle workers' polls.
    """
    samples = Samples()
    rng = random.Random(SEED)  # noqa: S311 - a reproducible spread of moments, not a secret

    def idle() -> float:
        return idle_s + rng.uniform(0.0, jitter_s)

    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            inprocess_run(kind, CONCURRENCY, min(tasks, 20), Path(tmp))
    for round_ in range(rounds):
        progress(f"round {round_ + 1} of {rounds}")
        for kind in kinds:
            throughput_round(kind, round_, tasks, fleets, samples, idle=idle)
            takeover_round(kind, samples, lease_s=lease_s, idle=idle)
    return samples


# -- report ---------------------------------------------------------------------------------


def throughput_table(samples: Samples) -> str:
    """Seconds for the tasks, workers and in-process, their ratio and the target's verdict."""
    lines = [
        (
            "| store | worker processes x tasks at once | `pev worker` fleet, s | of which the "
            "first task's wait for a worker, s | in-process `pev.run`, s | ratio | per-round "
            f"ratios | fleet tasks/s | target ≤ {TARGET}x |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (kind, workers, way), runs in samples.runs.items():
        if way != WORKERS:
            continue
        baseline = samples.runs.get((kind, workers, IN_PROCESS), [])
        if not baseline:
            continue
        fleet_s = statistics.median([run.seconds for run in runs])
        first_s = statistics.median([run.first_wait_s for run in runs])
        inproc_s = statistics.median([run.seconds for run in baseline])
        ratio = fleet_s / inproc_s
        ratios = [a.seconds / b.seconds for a, b in zip(runs, baseline, strict=False)]
        lines.append(
            f"| {LABELS[kind]} | {workers} x {CONCURRENCY} | {fleet_s:.2f} | {first_s:.2f} | "
            f"{inproc_s:.2f} | "
            f"{ratio:.2f}x | {min(ratios):.2f} to {max(ratios):.2f}x | "
            f"{runs[0].tasks / fleet_s:.0f} | {met(ratio <= TARGET)} |"
        )
    return "\n".join(lines)


def takeover_table(samples: Samples, lease_s: float) -> str:
    """Seconds from the SIGKILL to the takeover, split at the lease's expiry; the verdict."""
    lines = [
        (
            "| store | `--lease-s` | kill → second worker's `driver_started`, s | of which the "
            "lease running out, s | expiry → `driver_started`, s | slowest round, s | "
            f"target ≤ lease_s + {SLACK_S:g} s |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for kind, takeovers in samples.takeovers.items():
        seconds = statistics.median([t.seconds for t in takeovers])
        left = statistics.median([t.lease_left_s for t in takeovers])
        after = statistics.median([t.seconds - t.lease_left_s for t in takeovers])
        slowest = max(t.seconds for t in takeovers)
        lines.append(
            f"| {LABELS[kind]} | {lease_s:g} | {seconds:.2f} | {left:.2f} | {after:.2f} | "
            f"{slowest:.2f} | {met(seconds <= lease_s + SLACK_S)} |"
        )
    return "\n".join(lines)


def problems(samples: Samples, tasks: int) -> list[str]:
    """What did not go as the report says it goes: every task ended, counted once, taken over."""
    found = []
    for (kind, workers, way), runs in samples.runs.items():
        for run in runs:
            if run.tasks != tasks or run.succeeded != tasks:
                found.append(f"{kind}, {workers} worker(s), {way}: {run.succeeded}/{tasks} ok")
            if run.counts is not None:
                found += _fleet_problems(f"{kind}, {workers} worker(s)", run.counts, tasks)
    for kind, takeovers in samples.takeovers.items():
        for taken in takeovers:
            if len(taken.owners) != 2 or taken.owners[0] != taken.dead_owner:
                found.append(f"{kind} takeover: drivers {taken.owners}")
            if math.isnan(taken.lease_left_s):
                found.append(f"{kind} takeover: no lease of the killed worker after the kill")
            if taken.status is not TaskStatus.SUCCEEDED:  # see TAKEOVER_END
                found.append(f"{kind} takeover: the task ended {taken.status}")
            if taken.counts is None:
                found.append(f"{kind} takeover: the second worker did not stop")
            else:
                found += _fleet_problems(f"{kind} takeover", taken.counts, 1)
    return found


def _fleet_problems(what: str, counts: Counts, tasks: int) -> list[str]:
    """A fleet's workers that did not stop when told, or counts other than ``tasks`` ended."""
    if counts.silent:
        silent = (
            f"{what}: {len(counts.silent)} worker(s) logged no `stopped` line (not drained "
            f"within {STOP_TIMEOUT_S:g} s of SIGTERM, so killed): {'; '.join(counts.silent)}"
        )
        return [silent]
    if (counts.claimed, counts.ended, counts.failed) != (tasks, tasks, 0):
        claimed, ended, failed = counts.claimed, counts.ended, counts.failed
        return [
            f"{what}: the workers claimed {claimed}, ended {ended}, failed {failed}, of {tasks}"
        ]
    return []


def report(samples: Samples, tasks: int, lease_s: float, skipped: str | None) -> str:
    """Both tables, and whether every run did what the tables assume."""
    trouble = problems(samples, tasks)
    check = (
        "Every run ended all its tasks `succeeded`; each fleet's workers claimed and ended "
        f"exactly the {tasks} tasks submitted (none failed), and each takeover task was driven "
        f"by the killed worker, then by the second one, and ended `succeeded`: {TAKEOVER_END}"
        if not trouble
        else "**Not as described:** " + "; ".join(trouble) + "."
    )
    text = (
        f"Throughput ({tasks} two-node tasks per run):\n\n{throughput_table(samples)}\n\n"
        f"Takeover after a SIGKILL:\n\n{takeover_table(samples, lease_s)}\n\n{check}"
    )
    if skipped:
        text += f"\n\nPostgreSQL skipped: {skipped}."
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds (medians over them)")
    parser.add_argument("--tasks", type=int, default=TASKS, help="tasks per throughput run")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    skipped = postgres_unavailable(URL)
    if skipped:
        print(f"PostgreSQL: skipped, {skipped}; set PEV_TEST_POSTGRES_URL to measure it")
    kinds = ("sqlite",) if skipped else KINDS
    progress(
        f"benchmarking {args.tasks} tasks through {', '.join(map(str, FLEETS))} worker(s) and "
        f"in-process, and a takeover, x {args.rounds} rounds on {' and '.join(kinds)} ..."
    )
    try:
        samples = bench(args.rounds, args.tasks, kinds=kinds)
    except FleetError as exc:
        progress(f"the benchmark could not run: {exc}")
        return 1
    text = report(samples, args.tasks, LEASE_S, skipped)
    print(text)
    wall_s = time.perf_counter() - began
    progress(f"{wall_s:.0f} s in all")
    if args.write:
        server = "" if skipped else f", {_server_version(URL)}"
        body = (
            f"{machine_line()}, {os.cpu_count()} CPU cores{server}; medians of {args.rounds} "
            f"rounds, {wall_s:.0f} s in all. Command: "
            f"{command_text('bench_workers.py', sys.argv[1:] if argv is None else argv)}.\n\n{text}"
        )
        write_section(args.write, "workers", body, heading="## Workers: throughput and takeover")
        progress(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
