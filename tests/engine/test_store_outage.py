"""A drive outlasts a store that drops answers or goes away: nothing is lost, nothing doubled.

The tools write what they did to a log of their own; the store (tests/support/flaky_store.py)
loses the answers of appends before or after they commit, fails reads, or goes down for longer
than one write's patience. Every task must end as it ends without the faults, each action sent
once by the tools' own log, and no record left ``unknown`` (docs/workers.md, "A store that does
not answer").
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from tests.support.flaky_store import FlakyStore

import pev
import pev.ledger._unanswered as unanswered
from pev.ledger import Ledger
from pev.model import Plan, PlanNode, RecordStatus, Verdict
from pev.stores import MemoryStore

pytestmark = pytest.mark.anyio

sent: list[str] = []


@pev.tool(effect="action")
def ship(order: str, count: int) -> str:
    """Ship ``count`` of ``order`` (an action: written to the tools' own log)."""
    sent.append(f"ship {order} x{count}")
    return f"shipped {order}"


@pev.tool(effect="query")
def stock(order: str) -> int:
    """How many of ``order`` are in stock."""
    return 3


def planner(request: pev.PlanRequest) -> Plan:
    order = str(request.input)
    return Plan(
        f"ship {order}",
        (
            PlanNode("look", "check the stock", tool="stock", args={"order": order}),
            PlanNode(
                "ship", "ship it", tool="ship", args={"order": order, "count": 2}, after=("look",)
            ),
        ),
    )


def verifier(request: pev.VerifyRequest) -> Verdict:
    return Verdict.passed(request.contract)


agent = pev.Agent(planner, tools=[stock, ship], verifier=verifier)


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    sent.clear()


async def _check(store: FlakyStore, result: pev.RunResult) -> None:
    assert result.status is pev.TaskStatus.SUCCEEDED, result.detail
    state = await Ledger(store).state(result.task_id)
    assert all(r.status is not RecordStatus.UNKNOWN for r in state.records.values())
    assert (await Ledger(store).verify(result.task_id)).ok


def _ship_then_outage(
    store: FlakyStore, away_s: float, delivered: asyncio.Event
) -> pev.engine.Tool[..., str]:
    """A ``ship`` after which the store goes away for ``away_s``, as the action is delivered."""

    @pev.tool(effect="action", name="ship")
    async def ship_then_outage(order: str, count: int) -> str:
        sent.append(f"ship {order} x{count}")
        store.outage(away_s)
        delivered.set()
        return f"shipped {order}"

    return ship_then_outage


async def test_tasks_end_as_without_faults_when_answers_are_lost() -> None:
    store = FlakyStore(chance=0.3, seed=26)
    orders = [f"order-{n}" for n in range(12)]
    results = [await pev.run(order, agent=agent, store=store) for order in orders]
    store.chance = 0.0  # the checks below read without faults
    for result in results:
        await _check(store, result)
    assert sorted(sent) == sorted(f"ship {order} x2" for order in orders)  # each once
    # The faults were hit: answers lost before and after commits, and reads.
    assert store.lost_before
    assert store.lost_after
    assert store.lost_reads


async def test_a_drive_waits_out_a_store_away_for_longer_than_a_write_is_patient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(unanswered, "PATIENCE_S", 0.1)
    store = FlakyStore()
    gate = asyncio.Event()
    slow = pev.Agent(planner, tools=[stock, _ship_then_outage(store, 1.0, gate)], verifier=verifier)
    result = await asyncio.wait_for(pev.run("order-x", agent=slow, store=store), timeout=30)
    assert gate.is_set()
    await _check(store, result)
    assert sent == ["ship order-x x2"]
    assert store.lost_before + store.lost_reads > 2  # tried again and again while away


async def test_an_action_whose_time_went_on_the_outage_is_sent_later_once() -> None:
    """The pending write waited past half the call's time: not made then, dispatched again."""
    store = FlakyStore()

    @pev.tool(effect="query", name="stock")
    def stock_then_outage(order: str) -> int:
        store.outage(0.6)  # the store goes away before the action's pending write
        return 3

    @pev.tool(effect="action", name="ship", timeout_s=0.5)
    def quick_ship(order: str, count: int) -> str:
        sent.append(f"ship {order} x{count}")
        return f"shipped {order}"

    quick = pev.Agent(planner, tools=[stock_then_outage, quick_ship], verifier=verifier)
    result = await asyncio.wait_for(pev.run("order-y", agent=quick, store=store), timeout=30)
    await _check(store, result)
    assert sent == ["ship order-y x2"]
    state = await Ledger(store).state(result.task_id)
    ships = [r for r in state.records.values() if r.node_id == "ship"]
    assert [r.status for r in ships] == [RecordStatus.CANCELLED, RecordStatus.SUCCEEDED]
    assert ships[0].idempotency_key == ships[1].idempotency_key  # one intended effect
    assert ships[0].id not in state.effects  # the call never made has no effect


async def test_a_worker_that_cannot_read_a_task_says_so_in_one_line_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store does not answer as a drive starts: one warning, no traceback; the task is
    driven once its lease expires (docs/workers.md, "A store that does not answer")."""
    store = FlakyStore()
    task_id = await pev.submit("order-z", agent=agent, store=store)
    store.fail_reads = 1  # the drive's first read: the chain check
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="pev"):
        running = asyncio.create_task(
            pev.worker(store, agent=agent, lease_s=0.5, poll_s=0.05, stop=stop)
        )
        async with asyncio.timeout(30):
            # Read past the faults (the store's own read): they are the worker's to meet.
            while (row := await MemoryStore.summary(store, task_id)) is None or row.status is None:
                await asyncio.sleep(0.05)
        stop.set()
        report = await running
    assert (report.unavailable, report.ended, report.failed) == (1, 1, 0)
    (said,) = [r for r in caplog.records if "did not answer (" in r.getMessage()]
    assert said.levelno == logging.WARNING
    assert said.exc_info is None
    assert sent == ["ship order-z x2"]


async def test_a_draining_worker_stops_waiting_for_a_store_that_is_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM's drain ends a drive's wait for the store: the worker stops, the task's lease
    held until it expires, and the task is driven to its end later, its action sent once."""
    monkeypatch.setattr(unanswered, "PATIENCE_S", 0.1)
    store = FlakyStore()
    delivered = asyncio.Event()
    away = pev.Agent(
        planner, tools=[stock, _ship_then_outage(store, 3600, delivered)], verifier=verifier
    )
    task_id = await pev.submit("order-w", agent=agent, store=store)
    stop = asyncio.Event()
    running = asyncio.create_task(
        pev.worker(store, agent=away, lease_s=0.5, poll_s=0.05, stop=stop)
    )
    await asyncio.wait_for(delivered.wait(), timeout=30)
    await asyncio.sleep(0.3)  # the drive is waiting for the store now
    stop.set()
    report = await asyncio.wait_for(running, timeout=10)  # without the drain: an hour
    assert (report.claimed, report.unavailable, report.ended) == (1, 1, 0)
    store.outage(0)  # back: another worker goes on once the lease expires
    stop = asyncio.Event()
    running = asyncio.create_task(
        pev.worker(store, agent=agent, lease_s=0.5, poll_s=0.05, stop=stop)
    )
    async with asyncio.timeout(30):
        while not (await Ledger(store).state(task_id)).terminal:
            await asyncio.sleep(0.05)
    stop.set()
    assert (await running).ended == 1
    assert sent == ["ship order-w x2"]  # never twice, whatever the ledger says of it
