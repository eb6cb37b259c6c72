"""An append whose answer is lost is found out, never written twice (docs/ledger.md).

A dropped connection loses the answer of an append that committed, or of one that never
arrived: the ledger looks at what follows the head it sealed after, and sends the same sealed
entries again only when nothing does. The counts of the store's own entries prove it.
"""

from __future__ import annotations

from typing import Literal

import pytest
from tests.support.flaky_store import FlakyStore

import pev.ledger._unanswered as unanswered
from pev.errors import ConflictError, LeaseLost, StoreUnavailable
from pev.ledger import CancelRequested, DriverStarted, Event, Ledger

pytestmark = pytest.mark.anyio


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore()


async def _new(ledger: Ledger) -> str:
    return (await ledger.create("water the plants")).task_id


@pytest.mark.parametrize("fault", ["before", "after"])
async def test_an_append_whose_answer_is_lost_is_stored_once(store: FlakyStore, fault: str) -> None:
    ledger = Ledger(store)
    task_id = await _new(ledger)
    store.fail_appends.append(fault)  # type: ignore[arg-type]
    state = await ledger.append(task_id, [CancelRequested(reason="stop")])
    assert state.cancel_requested
    kinds = [entry.event.kind for entry in await store.read(task_id)]
    assert kinds == ["task_created", "cancel_requested"]
    assert (store.lost_before, store.lost_after) == ((1, 0) if fault == "before" else (0, 1))
    assert (await Ledger(store).verify(task_id)).ok


async def test_a_new_task_whose_answer_is_lost_is_created_once(store: FlakyStore) -> None:
    store.fail_appends.append("after")
    ledger = Ledger(store)
    task_id = await _new(ledger)
    assert [e.seq for e in await store.read(task_id)] == [1]
    assert store.lost_after == 1


async def test_the_look_up_is_tried_again_while_reads_fail(store: FlakyStore) -> None:
    ledger = Ledger(store)
    task_id = await _new(ledger)
    store.fail_appends.append("after")
    store.fail_reads = 3
    await ledger.append(task_id, [CancelRequested(reason="stop")])
    assert len(await store.read(task_id)) == 2
    assert store.lost_reads == 3


async def test_another_writer_first_is_a_conflict(store: FlakyStore) -> None:
    ledger, other = Ledger(store), Ledger(store)
    task_id = await _new(ledger)
    await ledger.state(task_id)
    await other.append(task_id, [CancelRequested(reason="theirs")])
    store.fail_appends.append("before")
    with pytest.raises(ConflictError):
        await ledger.append(task_id, [CancelRequested(reason="mine")])
    reasons = [getattr(e.event, "reason", None) for e in await store.read(task_id)]
    assert reasons == [None, "theirs"]


@pytest.mark.parametrize("fault", ["before", "after"])
async def test_past_its_patience_the_same_write_again_settles_it(
    store: FlakyStore, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unanswered, "PATIENCE_S", 0.1)
    ledger = Ledger(store)
    task_id = await _new(ledger)
    store.fail_appends.append(fault)  # type: ignore[arg-type]
    store.fail_reads = 1000  # the look-up never answers: the outcome stays unknown
    events = [CancelRequested(reason="stop")]
    with pytest.raises(StoreUnavailable):
        await ledger.append(task_id, events)
    store.fail_reads = 0
    state = await ledger.append(task_id, events)  # the caller tries the same write again
    assert state.cancel_requested
    assert [e.seq for e in await store.read(task_id)] == [1, 2]
    assert (await Ledger(store).verify(task_id)).ok


async def _left_unknown(
    store: FlakyStore,
    ledger: Ledger,
    task_id: str,
    events: list[Event],
    fault: Literal["before", "after"],
    *,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Append ``events`` losing the answer (``fault``) past the write's patience: unknown."""
    monkeypatch.setattr(unanswered, "PATIENCE_S", 0.05)
    store.fail_appends.append(fault)
    store.fail_reads = 1000  # the look-up never answers
    with pytest.raises(StoreUnavailable):
        await ledger.append(task_id, events)
    store.fail_reads = 0


async def test_other_events_after_an_unsettled_write_follow_it_when_it_landed(
    store: FlakyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(store)
    task_id = await _new(ledger)
    started = DriverStarted(owner="host:1:a", epoch=1, host="host", process=1)
    await _left_unknown(store, ledger, task_id, [started], "after", monkeypatch=monkeypatch)
    await ledger.append(task_id, [CancelRequested(reason="then")])
    kinds = [e.event.kind for e in await store.read(task_id)]
    assert kinds == ["task_created", "driver_started", "cancel_requested"]


async def test_a_kept_write_another_writer_overtook_is_a_conflict_when_tried_again(
    store: FlakyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same write tried again after another writer's events is refused, not laid on them."""
    ledger = Ledger(store)
    task_id = await _new(ledger)
    mine = [CancelRequested(reason="mine")]
    # It never landed.
    await _left_unknown(store, ledger, task_id, mine, "before", monkeypatch=monkeypatch)
    await Ledger(store).append(task_id, [CancelRequested(reason="theirs")])
    with pytest.raises(ConflictError):
        await ledger.append(task_id, mine)  # decided on a head that is gone
    reasons = [getattr(e.event, "reason", None) for e in await store.read(task_id)]
    assert reasons == [None, "theirs"]
    assert (await ledger.state(task_id)).cancel_requested  # read afresh: the head was dropped


async def test_a_write_sent_again_keeps_its_fence(store: FlakyStore) -> None:
    ledger = Ledger(store)
    task_id = await _new(ledger)
    held = await ledger.acquire(task_id, "host:1:a", lease_s=0.0)  # expires at once
    await ledger.acquire(task_id, "host:2:b", lease_s=60)  # taken over: epoch 2
    store.fail_appends.append("before")
    with pytest.raises(LeaseLost):
        await ledger.append(task_id, [CancelRequested(reason="stale")], fence=held)
    assert len(await store.read(task_id)) == 1


async def test_a_read_that_fails_is_unavailable_never_damage(store: FlakyStore) -> None:
    ledger = Ledger(store)
    task_id = await _new(ledger)
    store.fail_reads = 1
    with pytest.raises(StoreUnavailable):
        await ledger.verify(task_id)
    assert (await ledger.verify(task_id)).ok
