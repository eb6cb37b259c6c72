"""Two real processes appending to one SQLite task at once (docs/design.md §5.2, §5.5).

Each worker is a fresh Python process with its own store and ledger. First they run in lockstep:
both read the same head, meet at a barrier, then both append, so exactly one of them gets a
:class:`~pev.errors.ConflictError` each round; then they race freely, retrying on conflict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pev.ledger import Ledger

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory
    from pev.stores import SQLiteStore

LOCKSTEP_ROUNDS = 5
FREE_APPENDS = 150
WORKERS = ("alpha", "beta")

WORKER = r'''
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from pev.errors import ConflictError
from pev.ledger import CaptureFailed, EvidenceCaptured, Ledger
from pev.model import Evidence, EvidenceId, EvidencePhase
from pev.stores import SQLiteStore

path, task_id, name, peer, rounds, appends, meeting = sys.argv[1:]
rounds, appends, meeting = int(rounds), int(appends), Path(meeting)


def barrier(label):
    """Wait until the peer reached the same point (files, so nothing is shared but the disk)."""
    (meeting / f"{label}.{name}").touch()
    give_up = time.monotonic() + 20
    while not (meeting / f"{label}.{peer}").exists():
        if time.monotonic() > give_up:
            raise TimeoutError(f"{name}: {peer} never reached {label}")
        time.sleep(0.0005)


def event(n):
    """The worker's n-th event: alternately an observation and a failed capture."""
    if n % 2:
        return CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=f"{name}-{n}")
    evidence = Evidence(
        id=EvidenceId(f"{name}-{n}"),
        phase=EvidencePhase.AFTER,
        kind="state",
        source=name,
        captured_at=datetime.now(UTC),
        revision=1,
        payload={"n": n},
    )
    return EvidenceCaptured(evidence=evidence)


async def main():
    store = SQLiteStore(path)
    ledger = Ledger(store)
    wins = lockstep_conflicts = free_conflicts = 0
    try:
        for r in range(rounds):
            await ledger.state(task_id)
            barrier(f"read-{r}")
            try:
                await ledger.append(task_id, [event(wins)])
                wins += 1
            except ConflictError:
                lockstep_conflicts += 1
            barrier(f"wrote-{r}")
        barrier("go")
        done = 0
        while done < appends:
            try:
                await ledger.append(task_id, [event(wins)])
            except ConflictError:
                free_conflicts += 1
                await ledger.state(task_id)  # re-read, then try again
                continue
            wins += 1
            done += 1
    finally:
        await store.close()
    print(json.dumps({
        "wins": wins,
        "lockstep_conflicts": lockstep_conflicts,
        "free_conflicts": free_conflicts,
    }))


asyncio.run(main())
'''


@pytest.fixture
def backend(backends: dict[str, Backend]) -> Backend:
    """Only the SQLite backend: the one store shared by processes on one machine."""
    return backends["sqlite"]


def run_workers(location: str, task_id: str, tmp_path: Path) -> dict[str, dict[str, int]]:
    """Start both workers together and return what each reports."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    workers = {
        name: subprocess.Popen(
            [
                sys.executable,
                str(script),
                location,
                task_id,
                name,
                peer,
                str(LOCKSTEP_ROUNDS),
                str(FREE_APPENDS),
                str(meeting),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, peer in zip(WORKERS, reversed(WORKERS), strict=True)
    }
    reports: dict[str, dict[str, int]] = {}
    try:
        for name, process in workers.items():
            out, err = process.communicate(timeout=60)
            assert process.returncode == 0, f"worker {name} failed:\n{err}"
            reports[name] = json.loads(out)
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return reports


@pytest.mark.slow
async def test_two_processes_append_to_one_task(
    store: SQLiteStore, tasks: TaskFactory, tmp_path: Path
) -> None:
    """Racing processes lose nothing: every seq once, every win stored, conflicts raised."""
    initial = (await tasks.executing("t1")).event_count

    reports = run_workers(store.location, "t1", tmp_path)

    wins = sum(report["wins"] for report in reports.values())
    assert sum(r["lockstep_conflicts"] for r in reports.values()) == LOCKSTEP_ROUNDS
    assert wins == LOCKSTEP_ROUNDS + len(WORKERS) * FREE_APPENDS
    entries = await store.read("t1")
    assert [entry.seq for entry in entries] == list(range(1, initial + wins + 1))
    state = await Ledger(store).state("t1")
    written = {item.id for item in state.evidence} | {f.error for f in state.capture_failures}
    expected = {f"{name}-{n}" for name, report in reports.items() for n in range(report["wins"])}
    assert written == expected
    assert (await Ledger(store).verify("t1")).ok
