"""Many real processes opening one new SQLite ledger at once (docs/stores.md).

Each opener is a fresh Python process. For every round the openers meet at a barrier (files, so
nothing is shared but the disk), then all open the same new file together, write a task of their
own into it and list the tasks. None may fail (switching the file to WAL, creating the schema and
checking its version all meet the others' locks), and the file must end as one valid ledger that
holds every opener's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pev.ledger import Ledger
from pev.stores import SQLiteStore

# `make soak` runs many more rounds (PEV_SOAK_FACTOR times as many).
SOAK_FACTOR = int(os.environ.get("PEV_SOAK_FACTOR", "1"))
OPENERS = 8
ROUNDS = 24 * SOAK_FACTOR
# How long the whole test may take, past which the openers are killed: generous, for a loaded
# two-core machine (a round takes a few tens of milliseconds).
WITHIN_S = 90.0 * SOAK_FACTOR

OPENER = r'''
import asyncio
import json
import sys
import time
from pathlib import Path

from pev.ledger import Ledger
from pev.stores import SQLiteStore

folder, name, rounds, openers = sys.argv[1:]
folder, rounds, openers = Path(folder), int(rounds), int(openers)


def barrier(label):
    """Wait until every opener has reached the same round."""
    meeting = folder / f"meet-{label}"
    meeting.mkdir(exist_ok=True)
    (meeting / name).touch()
    give_up = time.monotonic() + 30
    while len(list(meeting.iterdir())) < openers:
        if time.monotonic() > give_up:
            raise TimeoutError(f"{name}: the other openers never reached round {label}")
        time.sleep(0.0005)


async def open_and_write(path):
    store = SQLiteStore(path, busy_timeout_s=20)
    try:
        await Ledger(store).create({"by": name}, task_id=name)
        return sorted(summary.task_id for summary in await store.list_tasks())
    finally:
        await store.close()


failures = []
for round_ in range(rounds):
    barrier(round_)
    try:
        asyncio.run(open_and_write(folder / f"ledger-{round_}.db"))
    except Exception as exc:
        failures.append(f"round {round_}: {type(exc).__name__}: {exc}")
print(json.dumps(failures))
'''


@pytest.mark.slow
def test_many_processes_open_one_new_file_at_once(tmp_path: Path) -> None:
    """Eight processes open each of a few dozen new files together: none fails, and each file
    is one valid ledger holding every opener's task."""
    script = tmp_path / "opener.py"
    script.write_text(OPENER)
    names = [f"opener-{n}" for n in range(OPENERS)]
    give_up = time.monotonic() + WITHIN_S
    failures: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:  # each process's pipes closed, whatever happens
        processes = {
            name: stack.enter_context(
                subprocess.Popen(
                    [sys.executable, str(script), str(tmp_path), name, str(ROUNDS), str(OPENERS)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            for name in names
        }
        try:
            for name, process in processes.items():
                out, err = process.communicate(timeout=max(give_up - time.monotonic(), 1))
                assert process.returncode == 0, f"{name} failed:\n{err}"
                failures[name] = json.loads(out)
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
    assert failures == {name: [] for name in names}
    asyncio.run(_check_ledgers(tmp_path, names))


async def _check_ledgers(folder: Path, names: list[str]) -> None:
    """Every round's file is a ledger holding each opener's task, whole and unbroken."""
    for round_ in range(ROUNDS):
        store = SQLiteStore(folder / f"ledger-{round_}.db", create=False)
        try:
            assert sorted(s.task_id for s in await store.list_tasks()) == sorted(names)
            ledger = Ledger(store)
            for name in names:
                report = await ledger.verify(name)
                assert report.ok, report
                assert (await ledger.state(name)).task_id == name
        finally:
            await store.close()
