"""What the viewer's tests share: a task with markup planted everywhere, one awaiting approval.

``write_hostile`` writes a task whose input, plan, outputs and verdict feedback carry script tags
and markup; ``AwaitingTask`` drives a payment task (in a thread, on an SQLite file) that waits
for a person's approval, as a live ``pev run`` would.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from tests.support.approval_agent import payments_agent
from tests.support.watering import RECOVERY

import pev
from pev.ledger import Ledger, TaskPhase
from pev.model import Plan, PlanNode, Verdict
from pev.rails import RailPhase
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

SCRIPT = "<script>alert('pwned')</script>"
MARKUP = '<img src=x onerror="alert(1)"><b>bold</b>'
HOSTILE_ID = "hostile-task"
T = TypeVar("T")
WAIT_S = 30.0  # the longest any helper here waits for a task


def run_apart(work: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(work())`` in a thread of its own (Playwright's loop runs in the test's)."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(asyncio.run(work()))  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            errors.append(exc)

    thread = threading.Thread(target=run, name="run-apart")
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive(), f"{work} did not finish in {WAIT_S} s"
    if errors:
        raise errors[0]
    return results[0]


async def write_hostile(store: pev.Store) -> None:
    """A task with markup in its input, plan, outputs and verdict feedback, replanned once."""
    first = Plan(
        SCRIPT,
        (PlanNode("pour", f"pour {MARKUP}", tool="can", args={"note": SCRIPT}),),
    )
    second = Plan(SCRIPT, (PlanNode("pour", "pour again", tool="can", args={"note": MARKUP}),))
    await pev.run(
        {"ask": SCRIPT, "more": MARKUP},
        store=store,
        task_id=HOSTILE_ID,
        planner=ScriptedPlanner(first, second),
        executor=FunctionExecutor({"can": lambda note: f"{note} {SCRIPT}"}),
        verifier=ScriptedVerifier(
            Verdict.failed(RECOVERY, failed_nodes=["pour"], feedback=f"{SCRIPT} {MARKUP}"),
            Verdict.passed(RECOVERY),
        ),
        contract=RECOVERY,
    )


def hostile_ledger(db: Path) -> Path:
    """An SQLite ledger at ``db`` holding the hostile task."""

    async def fill() -> None:
        store = pev.SQLiteStore(db)
        try:
            await write_hostile(store)
        finally:
            await store.close()

    run_apart(fill)
    return db


class AwaitingTask:
    """A payment task that waits for approval, driven in a thread as `pev run` would drive it."""

    def __init__(self, db: Path, task_id: str = "bill-7") -> None:
        self.db = db
        self.task_id = task_id
        self.awaiting = threading.Event()
        self.result: pev.RunResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="awaiting-task", daemon=True)

    def __enter__(self) -> AwaitingTask:
        self._thread.start()
        assert self.awaiting.wait(WAIT_S), "the task never asked for approval"
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread.is_alive() and self.result is None:
            run_apart(self._cancel)  # a test that did not decide: end the task
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the task's driver did not stop"

    def finished(self) -> pev.RunResult:
        """The task's result, once its driver has finished it."""
        self._thread.join(WAIT_S)
        if self.error is not None:
            raise self.error
        assert self.result is not None, "the task did not finish in time"
        return self.result

    async def _cancel(self) -> None:
        store = pev.SQLiteStore(self.db)
        try:
            await pev.cancel(self.task_id, store=store, reason="test over")
        finally:
            await store.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._drive())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    async def _drive(self) -> None:
        store = pev.SQLiteStore(self.db)
        try:
            handle = await pev.start(
                "pay the invoice", agent=payments_agent, store=store, task_id=self.task_id
            )
            async with asyncio.timeout(WAIT_S):
                async with pev.watch(self.task_id, store=store) as events:
                    async for event in events:
                        if event.phase is RailPhase.APPROVAL_REQUESTED:
                            self.awaiting.set()
                self.result = await handle.result()
        finally:
            await store.close()


async def phase_of(db: Path, task_id: str) -> TaskPhase:
    """Where a task of the ledger at ``db`` stands."""
    store = pev.SQLiteStore(db)
    try:
        return (await Ledger(store).state(task_id)).phase
    finally:
        await store.close()
