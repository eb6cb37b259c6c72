"""The fleet fault test: four `pev worker` processes, 200 tasks, random SIGKILLs.

The behaviour is docs/workers.md's, with docs/engine.md's "Crash and resume" and docs/tools.md's
"When 'it did not happen' can be trusted". Each task reserves an item and charges for it: two
actions, each with a timeout and a ``reconcile``, each delivered to "the other end", an
append-only file the tools write themselves. While the fleet works, the test SIGKILLs a random
worker and starts a new one, 20 times, so that four stay alive: each kill comes once a drawn
share of the tasks has ended, then a random fraction of a second later, so that kills land
mid-work on any machine. Then the fleet finishes, and SIGTERM stops it. Every task must end, no
key may reach the other end twice (read from that file, never from pev's ledger), and every
ledger must verify. The figures are printed on one line per store (``pytest -s``) and added to
the JSON file that ``PEV_FLEET_REPORT`` names, if set; ``PEV_FLEET_SEED`` (default 11) changes
the seed of the kills, to explore or to replay a run.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import pytest
from tests.support import postgres
from tests.support.fleet import (
    PEV,
    SHOP,
    Figures,
    Fleet,
    deliveries,
    tally,
    wait_until_ended,
)
from tests.support.modules import user_module

import pev
from pev.stores import SQLiteStore

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("PEV_FLEET_SEED", "11"))
WORKERS = 4
TASKS = 200
KILLS = 20
KILL_AT = (0.05, 0.85)  # the share of the tasks ended when a kill comes, drawn for each kill
KILL_GAP_S = (0.05, 0.3)  # then a random moment more
WORKER_OPTIONS = ("--lease-s", "1", "--poll-s", "0.1", "--concurrency", "4")
# Bounds, not expectations: a run takes 10 to 30 s on two cores. A takeover costs the lease
# (1 s) and the tool's timeout (1 s) at most; a drained worker exits at once.
RUN_WITHIN_S = 75.0
STOP_WITHIN_S = 15.0


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The shop module under a unique name, on the path, with its own other end."""
    monkeypatch.setenv("PEV_FLEET_OTHER_END", str(tmp_path / "other-end.log"))
    with user_module(tmp_path, monkeypatch, SHOP, prefix="pev_fleet_shop") as module:
        yield module


@asynccontextmanager
async def shared_store(kind: str, folder: Path) -> AsyncIterator[tuple[pev.Store, str]]:
    """A store of ``kind`` and what ``--db`` names it by; a PostgreSQL schema is dropped after."""
    if kind == "sqlite":
        path = folder / "ledger.db"
        store: pev.Store = SQLiteStore(path)
        db = str(path)
    else:
        postgres.require()
        store = postgres.ThrowawayStore()
        db = postgres.url_of(store.schema)
    try:
        yield store, db
    finally:
        await store.close()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_fleet_under_random_kills_ends_every_task_and_never_sends_twice(
    kind: str, shop: ModuleType, tmp_path: Path
) -> None:
    """4 workers, 200 two-action tasks, 20 SIGKILLs: all end, no key sent twice, ledgers verify."""
    chaos = random.Random(f"{SEED}:{kind}")  # noqa: S311 - it picks victims; no secret
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    async with shared_store(kind, tmp_path) as (store, db):
        ids = [await pev.submit(f"item {n}", agent=shop.shop, store=store) for n in range(TASKS)]
        fleet = Fleet(db, tmp_path, env, WORKER_OPTIONS)
        begun = time.monotonic()
        ends = begun + RUN_WITHIN_S
        try:
            for _ in range(WORKERS):
                fleet.start()
            # Each kill waits for its share of the tasks to end, so that every kill lands while
            # the fleet is at work, however fast the machine is.
            for mark in sorted(round(chaos.uniform(*KILL_AT) * TASKS) for _ in range(KILLS)):
                await wait_until_ended(
                    store, ids, fleet, count=mark, timeout_s=ends - time.monotonic()
                )
                await asyncio.sleep(chaos.uniform(*KILL_GAP_S))
                fleet.kill_one(chaos)
                fleet.start()
            await wait_until_ended(store, ids, fleet, timeout_s=ends - time.monotonic())
            await fleet.stop(timeout_s=STOP_WITHIN_S)
        finally:
            fleet.close()
        wall_s = time.monotonic() - begun
        delivered = deliveries(shop.OTHER_END)
        found = await tally(store, ids, delivered, killed=fleet.killed)
        verified = subprocess.run(
            [str(PEV), "--db", db, "ledger", "verify"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    figures = Figures.of(
        kind, seed=SEED, wall_s=wall_s, fleet=fleet, delivered=delivered, found=found
    )
    print(f"\n{figures.line()}")
    if report := os.environ.get("PEV_FLEET_REPORT"):
        figures.save(Path(report))

    assert (figures.tasks, figures.kills) == (TASKS, KILLS)
    # The chaos hit work in flight, or the run proves nothing.
    assert figures.takeovers_after_kill > 0
    assert figures.settled_on_takeover > 0
    twice = sorted(key for key, n in delivered.sent.items() if n > 1)
    assert not twice, f"keys delivered more than once: {twice[:10]}"
    called = sorted(key for key, n in delivered.calls.items() if n > 1)
    assert not called, f"keys the tools were called with more than once: {called[:10]}"
    late = sorted(delivered.refused)
    assert not late, f"calls that started past their record's deadline (key revoked): {late[:10]}"
    assert not found.problems, "\n".join(found.problems)
    assert found.lost_events == 0
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # A worker may lose a lease on a busy machine (a takeover, logged); nothing else may fail.
    assert set(figures.logged_errors) <= {"LeaseLost"}, figures.logged_errors
