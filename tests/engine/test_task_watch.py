"""One task watch per store: every task a process drives is watched by one look a quarter second.

What other processes write to a running task (a cancel, a takeover of its lease) reaches its
driver through its store's :class:`~pev.ledger.TaskWatch`: one query of the index for all the
tasks at once, no events read or folded (docs/engine.md, "Watching what others write"). A store
that hears every write (``MemoryStore``) tells its watch of each change instead, and its watch
never looks: the stores below that look are memory stores told to behave as the SQL stores do.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence
from datetime import timedelta

import pytest

import pev
from pev.engine import Tool
from pev.errors import LeaseLost
from pev.kernel import TaskStatus
from pev.ledger import (
    Lease,
    LedgerEntry,
    TaskMark,
    TaskPhase,
    TaskSummary,
    TaskWatch,
    utc_now,
)
from pev.ledger import _watch as watch_module
from pev.ledger._watch import Follower, read_marks, watch_of
from pev.model import Plan, PlanNode, TaskId
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner

WATCH = "pev-task-watch"
TASKS = 30


class PollingStore(MemoryStore):
    """A memory store watched as a SQL store is: by looks, a quarter second apart."""

    hears_every_write = False


class CountingStore(PollingStore):
    """A memory store, watched by looks, that counts the looks and every read of events."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[int] = []
        self.reads = 0

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """Count the look and how many tasks it asked about."""
        self.looks.append(len(task_ids))
        return await super().marks(task_ids)

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """Count the read."""
        self.reads += 1
        return await super().read(task_id, after=after)


def watches() -> list[asyncio.Task[object]]:
    """The task watches running in this loop."""
    return [task for task in asyncio.all_tasks() if task.get_name() == WATCH]


def slow_plan() -> ScriptedPlanner:
    """One node calling ``slow``."""
    return ScriptedPlanner(Plan("p", (PlanNode("slow", "be slow", tool="slow"),)))


def slow_tool(started: asyncio.Event | None = None, *, seconds: float = 0.8) -> Tool[..., object]:
    """A query that takes ``seconds`` (and says when it started)."""

    async def slow() -> str:
        if started is not None:
            started.set()
        await asyncio.sleep(seconds)
        return "done"

    return pev.tool(slow, effect="query")


def slow_run(
    store: MemoryStore,
    task_id: str | None = None,
    *,
    started: asyncio.Event | None = None,
    seconds: float = 0.8,
    policy: RecoveryPolicy | None = None,
) -> asyncio.Task[pev.RunResult]:
    """A run of one ``slow`` node on ``store``, started as a task."""
    return asyncio.create_task(
        pev.run(
            "slow",
            planner=slow_plan(),
            tools=[slow_tool(started, seconds=seconds)],
            store=store,
            task_id=task_id,
            policy=policy,
        )
    )


async def test_many_tasks_share_one_watch_that_reads_no_events() -> None:
    """Thirty tasks at once: one watch, each look one query for all of them, no event read."""
    store = CountingStore()
    runs = [slow_run(store) for _ in range(TASKS)]
    await asyncio.sleep(0.5)
    assert len(watches()) == 1
    results = await asyncio.gather(*runs)
    assert all(result.ok for result in results)
    assert max(store.looks) == TASKS  # each look asked about every task at once
    assert len(store.looks) <= 6  # about 0.8 s of running at a look every 0.25 s
    assert store.reads == 0  # no task's events were read back to watch it
    assert watches() == []  # the last driver out stopped the watch


STORES = [
    pytest.param(PollingStore, id="looked-at"),
    pytest.param(MemoryStore, id="told"),
]


@pytest.mark.parametrize("kind", STORES)
async def test_a_cancel_reaches_only_its_task_among_many(kind: type[MemoryStore]) -> None:
    """One of several tasks is cancelled through the store: it ends cancelled, the rest succeed."""
    store = kind()
    started = asyncio.Event()
    runs = [
        slow_run(
            store, f"t{n}", started=started if n == 0 else None, seconds=1.5 if n == 0 else 0.8
        )
        for n in range(5)
    ]
    await asyncio.wait_for(started.wait(), 5)
    await pev.cancel("t0", store=store, reason="enough")
    results = await asyncio.wait_for(asyncio.gather(*runs), 10)
    assert results[0].status is TaskStatus.CANCELLED
    assert all(result.ok for result in results[1:])


@pytest.mark.parametrize("kind", STORES)
async def test_a_takeover_is_seen_by_the_watch_long_before_the_heartbeat(
    kind: type[MemoryStore],
) -> None:
    """A 60 s lease is renewed every 20 s; the watch sees a takeover within a look or two."""
    store = kind()
    started = asyncio.Event()
    run = slow_run(store, "t", started=started, seconds=30, policy=RecoveryPolicy(lease_s=60))
    await asyncio.wait_for(started.wait(), 5)
    # As if this driver had been paused past its lease: another takes the task over.
    taken = await store.acquire_lease(
        "t", "other", now=utc_now() + timedelta(seconds=61), lease_s=60
    )
    with pytest.raises(LeaseLost) as lost:
        await asyncio.wait_for(run, 2)
    assert (lost.value.epoch, taken.epoch) == (1, 2)


async def test_a_follower_is_told_each_change_once() -> None:
    """A cancel and a takeover are each told once, however many looks see them."""
    told: list[str] = []
    lease = Lease(task_id=TaskId("t"), owner="me", epoch=1, expires_at=utc_now())
    follower = Follower(
        lease, on_cancel=lambda: told.append("cancel"), on_lost=lambda: told.append("lost")
    )
    follower.see(TaskMark("t", TaskPhase.EXECUTING, "me", 1))
    assert told == []
    for _ in range(2):
        follower.see(TaskMark("t", TaskPhase.CANCELLING, "me", 1))
        follower.see(TaskMark("t", TaskPhase.CANCELLING, "other", 2))
    assert told == ["cancel", "lost"]


class PlainStore:
    """A store of one's own that has only ``summary`` and ``lease`` to watch by."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The inner store's row."""
        return await self.inner.summary(task_id)

    async def lease(self, task_id: str) -> Lease | None:
        """The inner store's lease."""
        return await self.inner.lease(task_id)


async def test_a_store_without_marks_is_watched_task_by_task() -> None:
    """``read_marks`` falls back to a row and a lease per task; such a store gets its own watch."""
    inner = MemoryStore()
    ledger = pev.Ledger(inner)
    await ledger.create("x", task_id="a")
    await ledger.acquire("a", "me", lease_s=30)
    plain = PlainStore(inner)
    marks = await read_marks(plain, ["a", "nobody"])  # type: ignore[arg-type]
    assert marks == await inner.marks(["a"])
    made: list[TaskWatch] = []

    def make() -> TaskWatch:
        made.append(TaskWatch(plain))  # type: ignore[arg-type]
        return made[-1]

    assert watch_of(plain, make) is not watch_of(plain, make)  # type: ignore[arg-type]
    assert watch_of(inner, make) is watch_of(inner, make)
    assert len(made) == 3


class FlakyStore(PollingStore):
    """A memory store, watched by looks, whose first look fails as a damaged index row would."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def marks(self, task_ids: Sequence[str]) -> tuple[TaskMark, ...]:
        """Fail the first look, then answer."""
        if not self.failed:
            self.failed = True
            raise ValueError("'???' is not a valid TaskPhase")
        return await super().marks(task_ids)


async def test_a_failed_look_is_logged_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A look that fails (any error) is logged; the next look still brings the cancel."""
    store = FlakyStore()
    started = asyncio.Event()
    run = slow_run(store, "t", started=started, seconds=5)
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.sleep(0.3)  # the first look has failed
    await pev.cancel("t", store=store)
    result = await asyncio.wait_for(run, 5)
    assert result.status is TaskStatus.CANCELLED
    assert store.failed
    assert "watching 1 tasks failed" in caplog.text


class ToldCountingStore(CountingStore):
    """The counting store, told of every write as ``MemoryStore`` is."""

    hears_every_write = True


async def test_a_store_that_hears_every_write_is_never_looked_at() -> None:
    """``MemoryStore``'s watch never looks: each follower reads its own mark once, on arrival."""
    store = ToldCountingStore()
    runs = [slow_run(store) for _ in range(TASKS)]
    await asyncio.sleep(0.5)
    assert watches() == []  # no look runs, and nothing waits on a timer per task
    results = await asyncio.gather(*runs)
    assert all(result.ok for result in results)
    assert store.looks == [1] * TASKS  # one read of its own mark as each driver began to follow
    assert store.reads == 0


async def test_a_told_watch_still_expires_overdue_replans(monkeypatch: pytest.MonkeyPatch) -> None:
    """While anyone follows, a watch that never looks expires overdue replans now and then."""
    monkeypatch.setattr(watch_module, "EXPIRE_S", 0.05)
    store = MemoryStore()
    ledger = pev.Ledger(store)
    await ledger.create("x", task_id="t")
    lease = await ledger.acquire("t", "me", lease_s=30)
    expired: list[float] = []

    async def expire() -> None:
        expired.append(asyncio.get_running_loop().time())

    watch = TaskWatch(store, expire=expire)
    async with watch.follow(Follower(lease, on_cancel=lambda: None, on_lost=lambda: None)):
        await asyncio.sleep(0.4)
    assert len(expired) >= 2
    seen = len(expired)
    await asyncio.sleep(0.2)
    assert len(expired) == seen  # the last follower out stopped it


async def test_a_takeover_is_told_to_a_follower_of_a_told_store_at_once() -> None:
    """A lease taken on a ``MemoryStore`` reaches its follower in the same turn, no look."""
    store = MemoryStore()
    ledger = pev.Ledger(store)
    await ledger.create("x", task_id="t")
    lease = await ledger.acquire("t", "me", lease_s=30)
    told: list[str] = []
    follower = Follower(
        lease, on_cancel=lambda: told.append("cancel"), on_lost=lambda: told.append("lost")
    )
    async with watch_of(store, lambda: TaskWatch(store)).follow(follower):
        assert told == []
        await store.acquire_lease("t", "other", now=utc_now() + timedelta(seconds=31), lease_s=30)
        assert told == ["lost"]
        await pev.cancel("t", store=store)
        assert told == ["lost", "cancel"]


async def test_an_ended_run_is_freed_without_the_garbage_collector() -> None:
    """A run leaves no reference cycle: its driver, steps and store go as it returns."""
    store = MemoryStore()
    gone = weakref.ref(store)
    gc.collect()
    gc.disable()
    try:
        result = await pev.run(
            "slow", planner=slow_plan(), tools=[slow_tool(seconds=0)], store=store
        )
        assert result.ok
        del store
        assert gone() is None
    finally:
        gc.enable()
