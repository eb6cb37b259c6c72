"""``marks``: the phase and lease of many tasks in one query, on every backend.

What a store's one task watch reads each look (docs/engine.md, "Watching what others write"):
a task that does not exist is left out, a task without a lease has no owner, and a cancel or a
takeover shows at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.support.builders import T0

from pev.ledger import Ledger, Marks, Store, TaskMark, TaskPhase

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import TaskFactory


async def test_marks_read_phase_and_lease_of_existing_tasks(
    store: Store, tasks: TaskFactory
) -> None:
    """One call names each existing task's phase and lease; unknown ids are left out."""
    assert isinstance(store, Marks)
    await tasks.planning("a")
    await tasks.executing("b")
    lease = await store.acquire_lease("b", "me", now=T0, lease_s=30)
    marks = await store.marks(["a", "b", "nobody"])
    assert sorted(marks) == [
        TaskMark("a", TaskPhase.PLANNING, None, None),
        TaskMark("b", TaskPhase.EXECUTING, "me", lease.epoch),
    ]
    assert await store.marks([]) == ()


async def test_marks_show_a_cancel_and_a_takeover(
    store: Store, tasks: TaskFactory, ledger: Ledger
) -> None:
    """A cancel written by anyone and a lease taken under the next epoch show in the marks."""
    assert isinstance(store, Marks)
    await tasks.executing("t")
    first = await store.acquire_lease("t", "first", now=T0, lease_s=1)
    await ledger.cancel("t", reason="stop")
    later = T0.replace(minute=T0.minute + 1)
    second = await store.acquire_lease("t", "second", now=later, lease_s=30)
    (mark,) = await store.marks(["t"])
    assert mark == TaskMark("t", TaskPhase.CANCELLING, "second", first.epoch + 1)
    assert second.epoch == first.epoch + 1


async def test_marks_take_many_ids_at_once(store: Store, tasks: TaskFactory) -> None:
    """A thousand ids are one call, whatever the backend's limit on query parameters."""
    assert isinstance(store, Marks)
    for number in range(3):
        await tasks.planning(f"t{number}")
    wanted = [f"t{number}" for number in range(3)] + [f"x{number}" for number in range(1000)]
    assert sorted(mark.task_id for mark in await store.marks(wanted)) == ["t0", "t1", "t2"]
