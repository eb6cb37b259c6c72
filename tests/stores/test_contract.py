"""The store contract (docs/design.md §5.2, §5.5), run against every backend in ``BACKENDS``.

And against a PostgreSQL schema made by pev's schema version 5 and upgraded (``pev db upgrade``):
the migrations must make a schema that keeps the contract as a fresh one does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta, timezone
from typing import TYPE_CHECKING

import pytest
from tests.support import builders
from tests.support.builders import T0, created

from pev.errors import ConflictError, StateError, StoreError, UnknownTaskError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    GENESIS_HASH,
    CaptureFailed,
    Event,
    Ledger,
    LedgerEntry,
    RevisionKind,
    RoundExecuted,
    Store,
    TaskPhase,
    TaskState,
    TaskSummary,
    apply,
    replay,
    seal,
    summarize,
)
from pev.model import EvidencePhase, Plan, PlanNode, TaskId

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory
    from pev.testing import FakeClock

PLAN = Plan("fetch the answer", (PlanNode("a", "fetch it", tool="fetch"),))
CAPTURE_FAILED = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="camera offline")


# A revision_started event for PLAN.
revision = functools.partial(builders.revision, plan=PLAN, reason="a plan")


@pytest.fixture(params=["memory", "postgres", "postgres-upgraded", "sqlite"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """Every backend, and a PostgreSQL schema made at version 5 and upgraded."""
    return backends[request.param]


async def sealed(
    store: Store,
    task_id: str,
    events: Sequence[Event],
    *,
    after_seq: int | None = None,
    prev_hash: str | None = None,
) -> tuple[tuple[LedgerEntry, ...], TaskSummary]:
    """A batch continuing the task's stored chain (or the head given), with a matching index row.

    The index row always agrees with the batch itself, so a refusal comes from the batch's place
    in the chain, never from a mismatched row.
    """
    try:
        stored = await store.read(task_id)
    except UnknownTaskError:
        stored = ()
    state: TaskState | None = replay(stored) if stored else None
    at = stored[-1].at + timedelta(seconds=1) if stored else T0
    for event in events:
        state = apply(state, event, at=at)
    assert state is not None
    entries = seal(
        TaskId(task_id),
        events,
        after_seq=len(stored) if after_seq is None else after_seq,
        prev_hash=(stored[-1].hash if stored else GENESIS_HASH) if prev_hash is None else prev_hash,
        at=at,
    )
    summary = dataclasses.replace(
        summarize(state, head_hash=entries[-1].hash), event_count=entries[-1].seq
    )
    return entries, summary


async def assert_unchanged(store: Store, task_id: str, before: Sequence[LedgerEntry]) -> None:
    """The task's ledger and index row are exactly as they were."""
    assert await store.read(task_id) == tuple(before)
    summary = await store.summary(task_id)
    assert summary is not None
    assert (summary.event_count, summary.head_hash) == (len(before), before[-1].hash)


# --- append and read -------------------------------------------------------------------------


async def test_first_append_reads_back_equal(store: Store) -> None:
    """A new task's first batch reads back equal to the entries written."""
    entries, summary = await sealed(store, "t1", [created(task_id="t1")])
    await store.append(entries, summary)
    assert await store.read("t1") == entries


async def test_batch_append_reads_back_in_order(store: Store, tasks: TaskFactory) -> None:
    """Several events appended in one call read back equal and in order after the old ones."""
    await tasks.executing("t1")
    before = await store.read("t1")
    batch = [tasks.capture_failed("one"), tasks.capture_failed("two"), tasks.capture_failed("3")]
    entries, summary = await sealed(store, "t1", batch)
    await store.append(entries, summary)
    assert await store.read("t1") == (*before, *entries)


async def test_append_writes_the_index_row(store: Store, tasks: TaskFactory) -> None:
    """The index row written with a batch reads back equal."""
    await tasks.executing("t1")
    entries, summary = await sealed(store, "t1", [tasks.capture_failed()])
    await store.append(entries, summary)
    assert await store.summary("t1") == summary


@pytest.mark.parametrize("phase", ["planning", "executing", "awaiting_replan", "finished"])
async def test_ledger_index_row_matches_its_state(
    store: Store, tasks: TaskFactory, phase: str
) -> None:
    """The index row the ledger writes is the summary of the task's state and head."""
    build: Callable[[str], Awaitable[TaskState]] = getattr(tasks, phase)
    state = await build("t1")
    entries = await store.read("t1")
    assert await store.summary("t1") == summarize(state, head_hash=entries[-1].hash)


@pytest.mark.parametrize("after", [0, 1, 4, 5, 9])
async def test_read_after_returns_later_entries(
    store: Store, tasks: TaskFactory, after: int
) -> None:
    """``read(after=k)`` returns exactly the entries with seq > k."""
    await tasks.verifying("t1")
    everything = await store.read("t1")
    assert await store.read("t1", after=after) == tuple(e for e in everything if e.seq > after)


async def test_read_unknown_task_raises(store: Store) -> None:
    """Reading a task that does not exist raises UnknownTaskError naming it."""
    with pytest.raises(UnknownTaskError) as info:
        await store.read("nope")
    assert info.value.task_id == "nope"


async def test_read_after_of_unknown_task_raises(store: Store, tasks: TaskFactory) -> None:
    """``read(after=k)`` of a task that does not exist raises too, not an empty answer."""
    await tasks.executing("t1")
    with pytest.raises(UnknownTaskError):
        await store.read("nope", after=1)


async def test_summary_of_unknown_task_is_none(store: Store) -> None:
    """The index has no row for a task that does not exist."""
    assert await store.summary("nope") is None


async def test_empty_append_raises(store: Store, tasks: TaskFactory) -> None:
    """An append with no entries is refused."""
    state = await tasks.planning("t1")
    entries = await store.read("t1")
    with pytest.raises(StoreError):
        await store.append((), summarize(state, head_hash=entries[-1].hash))


# --- refusals write nothing ------------------------------------------------------------------


def _not_consecutive(entry: LedgerEntry) -> LedgerEntry:
    return dataclasses.replace(entry, seq=entry.seq + 5)


def _wrong_prev_hash(entry: LedgerEntry) -> LedgerEntry:
    return dataclasses.replace(entry, prev_hash="f" * 64)


def _other_task(entry: LedgerEntry) -> LedgerEntry:
    return dataclasses.replace(entry, task_id=TaskId("intruder"))


@pytest.mark.parametrize(
    "break_entry",
    [
        pytest.param(_not_consecutive, id="not-consecutive"),
        pytest.param(_wrong_prev_hash, id="wrong-prev-hash"),
        pytest.param(_other_task, id="mixed-task-ids"),
    ],
)
async def test_batch_with_broken_second_entry_writes_nothing(
    store: Store, tasks: TaskFactory, break_entry: Callable[[LedgerEntry], LedgerEntry]
) -> None:
    """A batch whose second entry is broken is refused whole: not even the first is written."""
    await tasks.executing("t1")
    before = await store.read("t1")
    batch = [tasks.capture_failed("one"), tasks.capture_failed("two"), tasks.capture_failed("3")]
    entries, summary = await sealed(store, "t1", batch)
    broken = (entries[0], break_entry(entries[1]), entries[2])
    with pytest.raises(StoreError) as info:
        await store.append(broken, summary)
    assert not isinstance(info.value, ConflictError)
    await assert_unchanged(store, "t1", before)
    with pytest.raises(UnknownTaskError):
        await store.read("intruder")


async def test_appending_an_existing_seq_conflicts(store: Store, tasks: TaskFactory) -> None:
    """Appending a sequence number already stored raises ConflictError naming task and seq."""
    await tasks.executing("t1")
    before = await store.read("t1")
    entries, summary = await sealed(
        store, "t1", [tasks.capture_failed()], after_seq=1, prev_hash=before[0].hash
    )
    with pytest.raises(ConflictError) as info:
        await store.append(entries, summary)
    assert (info.value.task_id, info.value.seq) == ("t1", 2)
    await assert_unchanged(store, "t1", before)


async def test_creating_an_existing_task_conflicts(store: Store, tasks: TaskFactory) -> None:
    """A second first event for a task id raises ConflictError and leaves the task alone."""
    await tasks.executing("t1")
    before = await store.read("t1")
    entries = seal(
        TaskId("t1"), [created(task_id="t1")], after_seq=0, prev_hash=GENESIS_HASH, at=T0
    )
    state = apply(None, entries[0].event, at=T0)
    with pytest.raises(ConflictError):
        await store.append(entries, summarize(state, head_hash=entries[0].hash))
    await assert_unchanged(store, "t1", before)


async def test_gap_raises_store_error(store: Store, tasks: TaskFactory) -> None:
    """An append that skips a sequence number is refused and writes nothing."""
    await tasks.executing("t1")
    before = await store.read("t1")
    entries, summary = await sealed(store, "t1", [tasks.capture_failed()], after_seq=3)
    with pytest.raises(StoreError) as info:
        await store.append(entries, summary)
    assert not isinstance(info.value, ConflictError)
    await assert_unchanged(store, "t1", before)


async def test_first_entry_not_linking_to_head_raises(store: Store, tasks: TaskFactory) -> None:
    """A batch whose first prev_hash is not the stored head hash is refused."""
    await tasks.executing("t1")
    before = await store.read("t1")
    entries, summary = await sealed(store, "t1", [tasks.capture_failed()], prev_hash="ab" * 32)
    with pytest.raises(StoreError) as info:
        await store.append(entries, summary)
    assert not isinstance(info.value, ConflictError)
    await assert_unchanged(store, "t1", before)


async def test_first_event_of_new_task_must_link_to_genesis(store: Store) -> None:
    """A new task's first entry must link to the genesis hash."""
    entries, summary = await sealed(store, "t1", [created(task_id="t1")], prev_hash="ab" * 32)
    with pytest.raises(StoreError):
        await store.append(entries, summary)
    assert await store.summary("t1") is None


# --- the index: listing and overdue tasks ----------------------------------------------------


async def test_list_tasks_newest_first(store: Store, tasks: TaskFactory) -> None:
    """Tasks are listed newest first."""
    for task_id in ("t1", "t2", "t3"):
        await tasks.planning(task_id)
    assert [s.task_id for s in await store.list_tasks()] == ["t3", "t2", "t1"]


async def test_list_tasks_of_empty_store(store: Store) -> None:
    """An empty store lists no tasks."""
    assert await store.list_tasks() == ()


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        pytest.param({TaskPhase.EXECUTING}, ["exec"], id="one-phase"),
        pytest.param({TaskPhase.PLANNING, TaskPhase.SUCCEEDED}, ["done", "plan"], id="two-phases"),
        pytest.param({TaskPhase.CANCELLED}, [], id="no-match"),
        pytest.param(set(), [], id="empty"),
        pytest.param(None, ["wait", "done", "exec", "plan"], id="all"),
    ],
)
async def test_list_tasks_filters_by_phase(
    store: Store, tasks: TaskFactory, phases: set[TaskPhase] | None, expected: list[str]
) -> None:
    """``phases`` keeps only tasks in those phases; ``None`` keeps all of them."""
    await tasks.planning("plan")
    await tasks.executing("exec")
    await tasks.finished("done")
    await tasks.awaiting_replan("wait")
    assert [s.task_id for s in await store.list_tasks(phases=phases)] == expected


@pytest.mark.parametrize(
    ("limit", "offset", "expected"),
    [
        pytest.param(2, 0, ["t5", "t4"], id="first-page"),
        pytest.param(2, 2, ["t3", "t2"], id="second-page"),
        pytest.param(2, 4, ["t1"], id="last-page"),
        pytest.param(10, 5, [], id="past-the-end"),
        pytest.param(0, 0, [], id="limit-zero"),
    ],
)
async def test_list_tasks_pages(
    store: Store, tasks: TaskFactory, limit: int, offset: int, expected: list[str]
) -> None:
    """``limit`` and ``offset`` page through the newest-first list."""
    for n in range(1, 6):
        await tasks.planning(f"t{n}")
    listed = await store.list_tasks(limit=limit, offset=offset)
    assert [s.task_id for s in listed] == expected


async def test_list_tasks_pages_within_a_phase(store: Store, tasks: TaskFactory) -> None:
    """Paging applies after the phase filter."""
    for n in range(1, 4):
        await tasks.planning(f"p{n}")
        await tasks.executing(f"e{n}")
    listed = await store.list_tasks(phases={TaskPhase.EXECUTING}, limit=1, offset=1)
    assert [s.task_id for s in listed] == ["e2"]


async def test_overdue_lists_only_waiting_tasks_past_deadline(
    store: Store, tasks: TaskFactory
) -> None:
    """Only tasks awaiting a replan whose deadline is at or before ``now`` are overdue."""
    early = await tasks.awaiting_replan("early")
    late = await tasks.awaiting_replan("late")
    await tasks.executing("running")
    await tasks.finished("done")
    assert early.replan_deadline is not None
    assert late.replan_deadline is not None
    assert early.replan_deadline < late.replan_deadline
    assert await store.overdue(early.replan_deadline) == ("early",)
    assert await store.overdue(late.replan_deadline) == ("early", "late")  # earliest first


async def test_overdue_compares_instants_not_clock_faces(store: Store, tasks: TaskFactory) -> None:
    """``now`` given in another time zone means the same instant."""
    state = await tasks.awaiting_replan("t1")
    assert state.replan_deadline is not None
    east = timezone(timedelta(hours=2))
    assert await store.overdue(state.replan_deadline.astimezone(east)) == ("t1",)
    before = state.replan_deadline - timedelta(seconds=1)
    assert await store.overdue(before.astimezone(east)) == ()


async def test_overdue_before_any_deadline_is_empty(store: Store, tasks: TaskFactory) -> None:
    """A task whose deadline is still ahead is not overdue."""
    state = await tasks.awaiting_replan("t1")
    assert state.replan_deadline is not None
    assert await store.overdue(state.replan_deadline - timedelta(microseconds=1)) == ()


async def test_overdue_forgets_a_task_once_it_moves_on(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """A task that ended (here: cancelled) while waiting is no longer overdue."""
    state = await tasks.awaiting_replan("t1")
    await ledger.cancel("t1")
    assert state.replan_deadline is not None
    assert await store.overdue(state.replan_deadline + timedelta(days=1)) == ()


# --- closing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.read("t1"), id="read"),
        pytest.param(lambda s: s.summary("t1"), id="summary"),
        pytest.param(lambda s: s.list_tasks(), id="list_tasks"),
        pytest.param(lambda s: s.overdue(T0), id="overdue"),
    ],
)
async def test_closed_store_refuses_reads(
    store: Store, tasks: TaskFactory, call: Callable[[Store], Awaitable[object]]
) -> None:
    """Every read of a closed store raises StoreError."""
    await tasks.planning("t1")
    await store.close()
    with pytest.raises(StoreError):
        await call(store)


async def test_closed_store_refuses_appends(store: Store, tasks: TaskFactory) -> None:
    """An append to a closed store raises StoreError."""
    await tasks.executing("t1")
    entries, summary = await sealed(store, "t1", [tasks.capture_failed()])
    await store.close()
    with pytest.raises(StoreError):
        await store.append(entries, summary)


async def test_closing_twice_is_harmless(store: Store) -> None:
    """Closing a closed store does nothing."""
    await store.close()
    await store.close()


# --- through the Ledger facade ---------------------------------------------------------------


async def test_state_is_the_replay_of_the_entries(ledger: Ledger, tasks: TaskFactory) -> None:
    """The state the ledger returns is the fold of what the store holds."""
    state = await tasks.awaiting_replan("t1")
    assert await ledger.state("t1") == state
    assert replay(await ledger.entries("t1")) == state


async def test_append_returns_the_state_it_wrote(ledger: Ledger, tasks: TaskFactory) -> None:
    """The state returned by ``append`` is the state read back afterwards."""
    await tasks.executing("t1")
    written = await ledger.append("t1", [tasks.capture_failed()])
    assert written == await Ledger(ledger.store).state("t1")


async def test_second_ledger_sees_the_same_state(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """A fresh Ledger over the same store folds the same state."""
    state = await tasks.awaiting_replan("t1")
    assert await Ledger(store).state("t1") == state


async def test_second_ledger_sees_later_appends(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """A Ledger that cached a task reads events another Ledger appended since."""
    other = Ledger(store)
    await tasks.executing("t1")
    assert (await other.state("t1")).event_count == 2
    state = await ledger.append("t1", [tasks.capture_failed()])
    assert await other.state("t1") == state


async def test_state_of_unknown_task_raises(ledger: Ledger) -> None:
    """Asking for a task that does not exist raises UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        await ledger.state("nope")


async def test_creating_an_existing_task_through_ledger_conflicts(
    ledger: Ledger, tasks: TaskFactory
) -> None:
    """``Ledger.create`` with a taken id raises ConflictError and leaves the task alone."""
    state = await tasks.executing("t1")
    with pytest.raises(ConflictError):
        await tasks.planning("t1")
    assert await Ledger(ledger.store).state("t1") == state


@pytest.mark.parametrize(
    ("phase", "event"),
    [
        pytest.param("executing", revision(1), id="revision-while-executing"),
        pytest.param("executing", revision(2), id="revision-2-while-executing"),
        pytest.param("planning", RoundExecuted(revision=1, executed_ok=True), id="round-planning"),
        pytest.param("planning", revision(2), id="revision-2-first"),
        pytest.param("planning", revision(1, RevisionKind.LOCAL), id="local-revision-first"),
        pytest.param("finished", CAPTURE_FAILED, id="anything-after-finished"),
        pytest.param("finished", revision(2, RevisionKind.GLOBAL), id="revision-after-finished"),
        pytest.param("awaiting_replan", revision(2, RevisionKind.LOCAL), id="revision-no-replan"),
    ],
)
async def test_illegal_event_raises_and_writes_nothing(
    ledger: Ledger, tasks: TaskFactory, phase: str, event: Event
) -> None:
    """An event the task's state does not allow raises StateError; the ledger is untouched."""
    build: Callable[[str], Awaitable[TaskState]] = getattr(tasks, phase)
    state = await build("t1")
    with pytest.raises(StateError):
        await ledger.append("t1", [event])
    assert len(await ledger.entries("t1")) == state.event_count
    assert await Ledger(ledger.store).state("t1") == state
    assert (await ledger.verify("t1")).ok


async def test_batch_with_one_illegal_event_writes_nothing(
    ledger: Ledger, tasks: TaskFactory
) -> None:
    """A batch whose second event is illegal writes none of its events."""
    state = await tasks.executing("t1")
    with pytest.raises(StateError):
        await ledger.append("t1", [tasks.capture_failed(), tasks.revision(1)])
    assert len(await ledger.entries("t1")) == state.event_count


async def test_racing_ledgers_one_wins_one_conflicts(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """Of two ledgers appending on the same head, one wins and the other gets ConflictError."""
    await tasks.executing("t1")
    other = Ledger(store)
    await ledger.state("t1")
    await other.state("t1")
    await ledger.append("t1", [tasks.capture_failed("first writer")])
    with pytest.raises(ConflictError) as info:
        await other.append("t1", [tasks.capture_failed("second writer")])
    assert info.value.seq == 3
    errors = [f.error for f in (await Ledger(store).state("t1")).capture_failures]
    assert errors == ["first writer"]


async def test_conflicted_ledger_retries_and_nothing_is_lost(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """After a ConflictError the loser re-reads, appends, and both writes are kept, in order."""
    await tasks.executing("t1")
    other = Ledger(store)
    await other.state("t1")
    await ledger.append("t1", [tasks.capture_failed("first writer")])
    with pytest.raises(ConflictError):
        await other.append("t1", [tasks.capture_failed("second writer")])
    await other.append("t1", [tasks.capture_failed("second writer")])
    state = await Ledger(store).state("t1")
    assert [f.error for f in state.capture_failures] == ["first writer", "second writer"]
    assert [e.seq for e in await store.read("t1")] == [1, 2, 3, 4]
    assert (await ledger.verify("t1")).ok


async def test_cancel_of_finished_task_returns_it_unchanged(
    ledger: Ledger, tasks: TaskFactory
) -> None:
    """Cancelling a task that ended writes nothing and returns its state."""
    state = await tasks.finished("t1")
    assert await ledger.cancel("t1", reason="too late") == state
    assert len(await ledger.entries("t1")) == state.event_count


async def test_cancel_of_waiting_task_ends_it_cancelled(ledger: Ledger, tasks: TaskFactory) -> None:
    """A task waiting for a replan has nothing in flight, so a cancel ends it at once."""
    await tasks.awaiting_replan("t1")
    state = await ledger.cancel("t1", reason="operator")
    assert state.phase is TaskPhase.CANCELLED
    assert state.finished is not None
    assert state.finished.reason is TerminalReason.CANCELLED


async def test_cancel_of_running_task_asks_it_to_stop(ledger: Ledger, tasks: TaskFactory) -> None:
    """A running task moves to cancelling, for its engine to wind down."""
    await tasks.executing("t1")
    state = await ledger.cancel("t1", reason="operator")
    assert state.phase is TaskPhase.CANCELLING
    assert state.cancel_reason == "operator"


async def test_expire_overdue_fails_only_overdue_tasks(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """``expire_overdue`` ends overdue waiting tasks failed/replan_deadline_expired, no others."""
    early = await tasks.awaiting_replan("early")
    late = await tasks.awaiting_replan("late")
    running = await tasks.executing("running")
    assert early.replan_deadline is not None
    assert late.replan_deadline is not None
    assert early.replan_deadline < late.replan_deadline

    assert await ledger.expire_overdue(early.replan_deadline) == ("early",)

    fresh = Ledger(store)
    expired = await fresh.state("early")
    assert expired.finished is not None
    assert (expired.phase, expired.finished.status, expired.finished.reason) == (
        TaskPhase.FAILED,
        TaskStatus.FAILED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
    )
    assert await fresh.state("late") == late
    assert await fresh.state("running") == running
    assert await store.overdue(early.replan_deadline) == ()


async def test_expire_overdue_before_deadline_does_nothing(
    store: Store, ledger: Ledger, tasks: TaskFactory
) -> None:
    """Before any deadline passes, ``expire_overdue`` ends nothing and writes nothing."""
    state = await tasks.awaiting_replan("t1")
    assert state.replan_deadline is not None
    moment = state.replan_deadline - timedelta(seconds=1)
    assert await ledger.expire_overdue(moment) == ()
    assert await Ledger(store).state("t1") == state


async def test_expire_overdue_uses_the_clock_by_default(
    ledger: Ledger, tasks: TaskFactory, clock: FakeClock
) -> None:
    """Without ``now``, ``expire_overdue`` asks the ledger's clock."""
    await tasks.awaiting_replan("t1")
    clock.advance(3600)
    assert await ledger.expire_overdue() == ("t1",)
    assert (await ledger.state("t1")).phase is TaskPhase.FAILED
    assert (await ledger.verify("t1")).ok


async def test_expired_task_verifies(ledger: Ledger, tasks: TaskFactory) -> None:
    """A ledger ended by ``expire_overdue`` passes ``verify``."""
    state = await tasks.awaiting_replan("t1")
    assert state.replan_deadline is not None
    await ledger.expire_overdue(state.replan_deadline)
    report = await ledger.verify("t1")
    assert report.ok
    assert report.events == state.event_count + 1
