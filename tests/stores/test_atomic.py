"""An append is all or nothing: events and the task's index row commit together, or neither.

Each SQL store is made to fail its index-row write (a trigger that raises, as a full disk or a
broken constraint would) and must then have written none of the append's events: the task reads
back exactly as it was, and the same append succeeds once the index can be written again. The
failure is planted in the database itself, so the check is direct, not a side effect of some
other error. (The memory store applies a checked batch under one lock and cannot fail between
the two writes.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.support.index_refusal import REFUSAL, refusing_index

from pev.errors import StoreError
from pev.ledger import Store

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """The SQL stores, whose index row is a separate write in the append's transaction."""
    return backends[request.param]


async def test_a_new_tasks_events_are_not_kept_without_its_index_row(
    store: Store, tasks: TaskFactory
) -> None:
    """The first append of a task fails at its index row: no event of the task is stored."""
    assert await store.list_tasks() == ()  # the store's tables exist (PostgreSQL opens lazily)
    with refusing_index(store), pytest.raises(StoreError, match=REFUSAL):
        await tasks.planning("t1")
    assert await store.summary("t1") is None
    assert await store.list_tasks() == ()
    await tasks.planning("t1")  # the same task, once the index can be written
    assert [entry.seq for entry in await store.read("t1")] == [1]


async def test_a_later_append_keeps_no_event_without_its_index_row(
    store: Store, tasks: TaskFactory
) -> None:
    """An append to a task fails at its index row: the task reads back as it was, and the same
    sequence numbers are written once the index can be written again."""
    await tasks.executing("t1")
    before = await store.read("t1")
    summary = await store.summary("t1")
    with refusing_index(store), pytest.raises(StoreError, match=REFUSAL):
        await tasks.ledger.append("t1", [tasks.capture_failed()])
    assert await store.read("t1") == before
    assert await store.summary("t1") == summary
    await tasks.ledger.append("t1", [tasks.capture_failed()])
    assert [entry.seq for entry in await store.read("t1")] == [1, 2, 3]
    assert (await tasks.ledger.verify("t1")).ok
