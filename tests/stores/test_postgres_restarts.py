"""A fleet of `pev worker` processes keeps going while its PostgreSQL server fails under it.

The behaviour is docs/workers.md's and docs/stores.md's: a store that cannot be reached is
retried, not taken for damage; a frozen worker holds up no task past its lease. Each test runs
the fleet fault test of :mod:`tests.support.fleet` (each task reserves and charges: two actions
delivered to an append-only file the tools write) on a private server
(:mod:`tests.support.private_postgres`, never the shared one) and strikes it with one kind of
fault while the tasks run: a restart (fast or immediate shutdown), a crash (SIGKILL to the
postmaster), client backends terminated every ~100 ms, or a worker SIGSTOPped inside a
transaction and SIGCONTed later (:mod:`tests.support.store_faults`).

Every run must end every task within its bound, send no key twice (read from the tools' file,
never from pev's ledger), lose no event, verify every chain, record no delivered action
``unknown``, and let another worker take a frozen worker's tasks over within ``lease_s`` + 2 s.
Under killed connections, server restarts and crashes every task must also end ``succeeded``,
as all do without a fault: a write whose answer was lost is found out, and a call whose time went
on the outage is sent later. A frozen worker's in-flight call may truly be cut short (its process
stopped under it, and the call's deadline passed): such a task ends ``partial``, honestly, and
the report counts it. The figures print on one line per run
(``pytest -s``). ``PEV_SOAK_FACTOR`` (default 1) multiplies the tasks and the faults of each
run, for `make soak`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from tests.support.private_postgres import PrivateServer, private_server
from tests.support.store_faults import (
    FAULTS,
    MUST_SUCCEED,
    TAKEOVER_SLACK_S,
    FaultReport,
    Settings,
    run_under,
    shop_in,
)

pytestmark = pytest.mark.slow

FACTOR = int(os.environ.get("PEV_SOAK_FACTOR", "1"))
SETTINGS = Settings(tasks=24 * FACTOR, workers=3, faults=2 * FACTOR, within_s=45.0 * FACTOR)


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    """One private server for the module's runs (each in a schema of its own)."""
    with private_server() as started:
        yield started


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[ModuleType]:
    """The fleet's shop, with an other end of its own."""
    with shop_in(tmp_path) as module:
        yield module


def _failures(report: FaultReport, *, must_succeed: bool = True) -> list[str]:
    """Every target the run missed, in words (all of them, so one run tells the whole story)."""
    missed = [
        f"{what}: {value}"
        for what, value, ok in (
            ("faults struck (none proves nothing)", report.faults, report.faults > 0),
            ("tasks not ended within the bound", report.not_ended, report.not_ended == 0),
            ("keys sent twice", report.sent_twice, report.sent_twice == 0),
            ("events lost", report.lost_events, report.lost_events == 0),
            ("ledgers that do not verify", report.unverified, report.unverified == 0),
            (
                "tasks that did not succeed",
                report.tasks - report.succeeded,
                report.succeeded == report.tasks or not must_succeed,
            ),
            (
                "delivered actions recorded unknown",
                report.delivered_unknown,
                report.delivered_unknown == 0,
            ),
        )
        if not ok
    ]
    return missed + report.problems + (report.unsucceeded if must_succeed else [])


@pytest.mark.timeout(120 * FACTOR)
@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "freeze"])
async def test_a_fleet_outlives_a_failing_server(
    fault: str, server: PrivateServer, shop: ModuleType, tmp_path: Path
) -> None:
    """Restarts, crashes, killed connections: all tasks end and succeed, none sent twice."""
    report = await run_under(fault, server, tmp_path, shop, SETTINGS)
    print(f"\n{report.line()}")
    missed = _failures(report, must_succeed=fault in MUST_SUCCEED)
    assert not missed, "\n".join(missed)


@pytest.mark.timeout(120 * FACTOR)
async def test_a_frozen_worker_holds_up_no_task_past_its_lease(
    server: PrivateServer, shop: ModuleType, tmp_path: Path
) -> None:
    """A worker SIGSTOPped mid-transaction: its tasks are taken over within lease_s + 2 s."""
    report = await run_under("freeze", server, tmp_path, shop, SETTINGS)
    print(f"\n{report.line()}")
    missed = _failures(report, must_succeed=False)
    bound = SETTINGS.lease_s + TAKEOVER_SLACK_S
    if report.takeover_s is None:
        missed.append("no frozen worker's task was taken over: the run proves nothing")
    elif report.takeover_s > bound:
        missed.append(f"slowest takeover {report.takeover_s:.2f} s, over {bound:g} s")
    if report.not_taken_over:
        missed.append(f"{report.not_taken_over} frozen worker's tasks never taken over")
    assert not missed, "\n".join(missed)
