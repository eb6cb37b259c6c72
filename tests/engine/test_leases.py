"""Who drives a task: run and resume hold its lease, fence every write with it, and lose it cleanly.

The side effects are counted by the tools themselves (a list they append to), never read back
from pev's own ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

import pev
from pev.engine import _tenure
from pev.errors import LeaseHeld, LeaseLost
from pev.ledger import DriverStarted, Ledger, utc_now
from pev.model import DeviceFailure, ExecutionRecord, Plan, PlanNode, RecordStatus
from pev.stores import MemoryStore

PAY = Plan("pay the bill", (PlanNode("pay", "charge 30", tool="pay", args={"amount": 30}),))


class Card:
    """A payment tool that records every charge it makes, and can be held mid-charge."""

    def __init__(self) -> None:
        self.charges: list[str] = []
        self.charging = asyncio.Event()
        self.go = asyncio.Event()

    def tool(self) -> pev.engine.Tool[..., dict[str, int]]:
        async def pay(amount: int) -> dict[str, int]:
            """Charge the card."""
            self.charges.append(pev.engine.current_node_context().idempotency_key)
            self.charging.set()
            await self.go.wait()
            return {"charged": amount}

        return pev.tool(pay, effect="action")

    def paying(
        self, store: MemoryStore, *, lease_s: float = 30.0
    ) -> asyncio.Task[pev.engine.RunResult]:
        """A run of task ``bill`` that charges this card, started in the background."""
        policy = pev.RecoveryPolicy(lease_s=lease_s)
        return asyncio.create_task(
            pev.run(
                "pay",
                planner=lambda r: PAY,
                tools=[self.tool()],
                store=store,
                policy=policy,
                task_id="bill",
            )
        )


async def test_a_run_takes_the_lease_first_and_frees_it_at_the_end() -> None:
    """driver_started (epoch 1) is the run's first write; the lease is free once it ends."""
    store, card = MemoryStore(), Card()
    card.go.set()
    result = await pev.run("pay", planner=lambda r: PAY, tools=[card.tool()], store=store)
    assert result.ok
    entries = await Ledger(store).entries(result.task_id)
    started = entries[1].event
    assert isinstance(started, DriverStarted)
    assert started.epoch == 1
    lease = await store.lease(result.task_id)
    assert lease is not None
    assert (lease.owner, lease.epoch) == (started.owner, 1)
    assert not lease.live(utc_now())


async def test_resuming_a_live_task_is_refused_and_charges_nothing() -> None:
    """While a run is mid-charge, resume raises LeaseHeld naming it: no second charge."""
    store, card = MemoryStore(), Card()
    run = card.paying(store)
    await asyncio.wait_for(card.charging.wait(), 5)
    events = len(await Ledger(store).entries("bill"))

    with pytest.raises(LeaseHeld) as held:
        await pev.resume("bill", store=store, planner=lambda r: PAY, tools=[card.tool()])

    assert held.value.owner == (await store.lease("bill")).owner  # type: ignore[union-attr]
    assert len(await Ledger(store).entries("bill")) == events
    card.go.set()
    assert (await run).ok
    assert len(card.charges) == 1


async def test_a_driver_taken_over_stops_with_lease_lost_and_writes_nothing_more() -> None:
    """Another driver takes the lease over: the heartbeat notices, the run raises LeaseLost."""
    store, card = MemoryStore(), Card()
    run = card.paying(store, lease_s=0.3)
    await asyncio.wait_for(card.charging.wait(), 5)
    # As if this driver had been paused past its lease: another one takes the task over.
    later = utc_now() + timedelta(seconds=10)
    taken = await store.acquire_lease("bill", "other", now=later, lease_s=60)
    before = len(await Ledger(store).entries("bill"))

    with pytest.raises(LeaseLost) as lost:
        await asyncio.wait_for(run, 5)

    assert lost.value.epoch == 1
    assert taken.epoch == 2
    assert len(await Ledger(store).entries("bill")) == before  # not even the charge's end
    assert await store.lease("bill") == taken
    assert len(card.charges) == 1


async def test_a_stale_fence_refuses_the_write_itself() -> None:
    """Even without a heartbeat, the old driver's next write is refused by the store."""
    store = MemoryStore()
    ledger = Ledger(store)
    await ledger.create("x", task_id="t")
    old = await ledger.acquire("t", "a", lease_s=0.01)
    await asyncio.sleep(0.02)
    await ledger.acquire("t", "b", lease_s=30)
    with pytest.raises(LeaseLost):
        await ledger.append("t", [DriverStarted(owner="a", epoch=1)], fence=old)
    assert len(await ledger.entries("t")) == 1


async def test_resume_after_the_lease_expired_drives_under_the_next_epoch() -> None:
    """A driver that died leaves its lease to expire; resume then takes epoch 2 and finishes."""
    store, card = MemoryStore(), Card()
    ledger = Ledger(store)
    await ledger.create("pay", task_id="bill")
    await ledger.acquire("bill", "dead-driver", lease_s=0.01)
    await asyncio.sleep(0.02)
    card.go.set()

    result = await pev.resume("bill", store=store, planner=lambda r: PAY, tools=[card.tool()])

    assert result.ok
    drivers = (await ledger.state("bill")).drivers
    assert [d.epoch for d in drivers] == [2]
    assert len(card.charges) == 1


class Crash(BaseException):
    """Stands in for the driving process dying mid-call."""


def _crashing_card(
    answers: list[tuple[datetime, ExecutionRecord]], answer: object, timeout_s: float | None
) -> pev.engine.Tool[..., None]:
    async def pay(amount: int) -> None:
        """Charge the card, then the process dies."""
        raise Crash

    def reconcile(record: ExecutionRecord) -> object:
        answers.append((utc_now(), record))
        return answer

    return pev.tool(pay, effect="action", timeout_s=timeout_s, reconcile=reconcile)


async def _left_in_flight(store: MemoryStore, card: pev.engine.Tool[..., None]) -> None:
    with pytest.raises(Crash):
        await pev.run("pay", planner=lambda r: PAY, tools=[card], store=store, task_id="bill")


async def test_without_a_deadline_not_done_is_not_trusted() -> None:
    """No timeout: the earlier call could still land, so "no such charge" leaves it unknown."""
    store, answers = MemoryStore(), []
    card = _crashing_card(answers, DeviceFailure("pay", "no such charge"), None)
    await _left_in_flight(store, card)

    result = await pev.resume("bill", store=store, planner=lambda r: PAY, tools=[card])

    state = await Ledger(store).state("bill")
    assert [r.status for r in state.records.values()] == [RecordStatus.UNKNOWN]
    assert len(answers) == 1
    assert not result.ok


async def test_without_a_deadline_done_still_counts() -> None:
    """No timeout, but reconcile finds the charge: it did happen, whenever asked."""
    store, answers = MemoryStore(), []
    await _left_in_flight(store, _crashing_card(answers, {"charged": 30}, None))

    result = await pev.resume(
        "bill",
        store=store,
        planner=lambda r: PAY,
        tools=[_crashing_card(answers, {"charged": 30}, None)],
    )

    assert result.ok
    assert result.outputs["pay"] == {"charged": 30}


async def test_an_earlier_call_is_asked_about_only_past_its_deadline() -> None:
    """With a timeout, resume waits for the call's deadline, then trusts "not done"."""
    store, answers = MemoryStore(), []
    card = _crashing_card(answers, DeviceFailure("pay", "no such charge"), 0.3)
    await _left_in_flight(store, card)

    await pev.resume("bill", store=store, planner=lambda r: PAY, tools=[card])

    [(asked_at, record)] = answers
    assert asked_at >= record.created_at + timedelta(seconds=0.3)
    state = await Ledger(store).state("bill")
    assert [r.status for r in state.records.values()] == [RecordStatus.FAILED]


class LookedAtStore(MemoryStore):
    """A memory store watched by looks, as SQL stores are: its heartbeat sees a takeover first."""

    hears_every_write = False


async def test_a_callers_cancel_is_not_turned_into_lease_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller cancels the run just as the heartbeat finds the lease lost: it stays cancelled."""
    store, card = LookedAtStore(), Card()
    beat = _tenure.Tenure.beat
    run: asyncio.Task[pev.engine.RunResult] | None = None

    async def beat_and_cancel(self: _tenure.Tenure, on_lost: Callable[[], object]) -> None:
        def both() -> None:
            on_lost()
            assert run is not None
            run.cancel()  # the caller's own cancel, in the same turn of the loop

        await beat(self, both)

    monkeypatch.setattr(_tenure.Tenure, "beat", beat_and_cancel)
    run = card.paying(store, lease_s=0.3)
    await asyncio.wait_for(card.charging.wait(), 5)
    await store.acquire_lease("bill", "other", now=utc_now() + timedelta(seconds=10), lease_s=60)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(run), 5)
    assert run.cancelled()


async def test_a_cancel_cuts_short_the_wait_for_an_earlier_calls_deadline() -> None:
    """Resume waits for an earlier call's 30 s deadline; a cancel ends that wait at once."""
    store, answers = MemoryStore(), []
    card = _crashing_card(answers, DeviceFailure("pay", "no such charge"), 30.0)
    await _left_in_flight(store, card)
    resumed = asyncio.create_task(
        pev.resume("bill", store=store, planner=lambda r: PAY, tools=[card])
    )
    await asyncio.sleep(0.1)
    await pev.cancel("bill", store=store, reason="the customer left")

    result = await asyncio.wait_for(resumed, 5)

    assert answers == []  # never asked: the call might still land
    assert (result.status, result.reason) == ("failed", "cancelled")  # an action left unknown
    state = await Ledger(store).state("bill")
    assert [r.status for r in state.records.values()] == [RecordStatus.UNKNOWN]


async def test_a_lease_held_before_the_drive_is_renewed_before_it_runs_out() -> None:
    """A worker's claim may take a shorter lease than the task's policy asks for: the tenure
    renews it a third of the way to its expiry, then to the policy's full length."""
    store = MemoryStore()
    ledger = Ledger(store)
    await ledger.create("pay the bill", task_id="bill")
    claimed = await ledger.acquire("bill", "worker-a", lease_s=0.6)
    tenure = _tenure.Tenure(ledger, "bill", owner="worker-a", lease_s=600, lease=claimed)
    beating = asyncio.create_task(tenure.beat(on_lost=lambda: None))
    try:
        await asyncio.sleep(0.4)  # past a third of 0.6 s, short of its end
        current = await store.lease("bill")
        assert current is not None
        assert current.epoch == claimed.epoch
        assert current.expires_at > utc_now() + timedelta(seconds=500)
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
