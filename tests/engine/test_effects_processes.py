"""Effects and compensations across processes: SIGKILL, resume, and a worker's takeover.

The task (tests/support/undo_agent.py) reserves, pays 100 and notifies; its verifier blames the
reservation and the payment once, so a local replan reserves the same (reused), refunds the 100
and pays 50. A child process runs it on an SQLite ledger and kills itself with SIGKILL right
after the store commits its ``k``-th event, or right after a tool's ``n``-th delivery; a fresh
process resumes it (tests/support/crash.py). What reached the world is read from the files the
tools append to, never from pev's ledger: no key twice, no refund twice, every refund under its
effect's key and ``/compensate``, and the ledger verifies.
"""

from __future__ import annotations

import asyncio
import importlib.util
import signal
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from tests.support.crash import TASK, Snapshot, summary_line
from tests.support.modules import user_module
from tests.support.undo_agent import AGENT, Undone, UndoShop

import pev
from pev.ledger import Ledger, TaskState, utc_now
from pev.model import Effect, RecordStatus
from pev.stores import SQLiteStore

pytestmark = pytest.mark.slow

AT_ONCE = 4  # children at a time: each spends most of its life starting Python and in fsync


@dataclass(frozen=True, slots=True)
class Reference:
    """A crash-free run of the refunding shop: how it ends, its ledger and its appends' ends."""

    out: str
    ledger: Snapshot
    boundaries: tuple[int, ...]

    def event(self, kind: str) -> int:
        """The number of the first event of ``kind`` (1 for the first event)."""
        kinds = [entry.event.kind for entry in self.ledger.entries]
        return kinds.index(kind) + 1

    @property
    def sends_before_refund(self) -> int:
        """How many deliveries come before the refund: revision 1's actions."""
        return sum(
            1
            for record in self.ledger.state.records.values()
            if record.revision == 1 and record.effect is Effect.ACTION
        )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The crash-free run: reserved, paid, refunded and paid again, in two revisions."""
    shop = UndoShop.in_folder(tmp_path_factory.mktemp("reference"))
    ran = shop.run()
    assert (ran.code, ran.out) == (0, "succeeded/passed"), ran.err
    ledger = shop.ledger()
    assert (ledger.ok, len(ledger.state.revisions)) == (True, 2)
    assert sum(shop.undone().values()) == 1
    return Reference(ran.out, ledger, tuple(shop.boundaries()))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("refunded", [False, True], ids=["before-the-refund", "after-the-refund"])
def test_a_kill_between_an_effect_and_its_compensation_never_compensates_twice(
    reference: Reference, tmp_path: Path, refunded: bool
) -> None:
    """Killed mid-refund (before or after its line): never refunded again; partial, naming it."""
    kill = (
        {"kill_after_send": reference.sends_before_refund + 1}
        if refunded
        else {"kill_after_event": reference.event("compensation_dispatched")}
    )
    shop = UndoShop.in_folder(tmp_path)

    case = Undone.of_shop(shop, "refund", reference=reference.out, **kill)

    assert not case.problems(), "\n".join(case.problems())
    assert case.after is not None
    state = case.after.state
    payment = state.effects["1:pay"]
    assert payment.compensation is not None
    assert payment.compensation.status is RecordStatus.UNKNOWN
    assert case.undone == Counter({f"{payment.key}/compensate": 1} if refunded else {})
    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == ("partial", "device_failure")
    assert "1:pay" in state.finished.detail
    assert all(record.revision == 1 for record in state.records.values())  # nothing more sent


@pytest.mark.timeout(240)
def test_a_kill_after_any_event_or_delivery_never_sends_or_refunds_twice(
    reference: Reference, tmp_path: Path
) -> None:
    """Kill after each append and after each delivery, resume: nothing sent or refunded twice."""
    # A kill after an event inside an append lands after that append: every distinct point is
    # the end of one append of the crash-free run.
    events = len(reference.ledger.entries)
    deliveries = reference.sends_before_refund + 3  # the refund, the new payment, the notice
    kills = [(f"event {k}", {"kill_after_event": k}) for k in reference.boundaries]
    kills += [(f"send {n}", {"kill_after_send": n}) for n in range(1, deliveries + 1)]

    def case(index: int) -> Undone:
        name, kill = kills[index]
        shop = UndoShop.in_folder(tmp_path / f"case-{index}")
        return Undone.of_shop(shop, name, reference=reference.out, **kill)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        cases = list(pool.map(case, range(len(kills))))

    print(f"\n{summary_line(cases, events)}")
    problems = [problem for case_ in cases for problem in case_.problems()]
    assert not problems, "\n".join(problems)


async def test_a_worker_taking_over_after_a_failed_verdict_reuses_the_effect(
    reference: Reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver dies after the verdict; a worker takes over and reuses the reservation."""
    shop = UndoShop.in_folder(tmp_path)
    killed = shop.run(kill_after_event=reference.event("awaiting_replan"))
    assert killed.code == -signal.SIGKILL, killed.err
    base = importlib.util.spec_from_file_location("pev_crash_base", tmp_path / "pev_crash_base.py")
    assert base is not None
    assert base.loader is not None
    base_module = importlib.util.module_from_spec(base)
    base.loader.exec_module(base_module)
    monkeypatch.setitem(sys.modules, "pev_crash_base", base_module)
    store = SQLiteStore(shop.db)
    try:
        with user_module(tmp_path, monkeypatch, AGENT, prefix="pev_undo_agent") as agent:
            state = await _taken_over(store, agent.shop)
    finally:
        await store.close()

    assert state.finished is not None
    assert (state.finished.status, state.finished.reason) == ("succeeded", "passed")
    assert [driver.epoch for driver in state.drivers] == [1, 2]
    assert [(r.revision, r.node_id, r.record_id) for r in state.reused] == [
        (2, "reserve", "1:reserve")
    ]
    sent = shop.sent()
    assert set(sent.values()) == {1}
    assert sum(1 for key in sent if "/reserve/" in key) == 1
    assert shop.undone() == Counter({f"{state.effects['1:pay'].key}/compensate": 1})


async def _taken_over(store: pev.Store, agent: pev.Agent) -> TaskState:
    """Run a worker (a minute ahead: the dead driver's lease has expired) until the task ends."""
    stop = asyncio.Event()
    working = asyncio.create_task(
        pev.worker(
            store,
            agent=agent,
            poll_s=0.05,
            stop=stop,
            clock=lambda: utc_now() + timedelta(seconds=60),
        )
    )
    try:
        async with asyncio.timeout(30):
            while not (state := await Ledger(store).state(TASK)).terminal:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        report = await working
    assert (report.claimed, report.ended) == (1, 1)
    return state
