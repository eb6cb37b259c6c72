"""Engine scenarios over a real ledger: every run is checked against the ledger it wrote.

The ``engine`` fixture runs ``pev.run`` on its own store and, after each run, asserts the rule
that the ledger alone explains the run: ``RunResult.from_state`` of the folded ledger equals the
result the run returned, and the hash chain verifies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import pev
from pev.ledger import Event, Ledger, LedgerEntry, TaskState
from pev.stores import MemoryStore


class Engine:
    """Runs tasks on one store and checks that each run's ledger explains its result."""

    def __init__(self, store: pev.Store) -> None:
        self.store = store
        self.ledger = Ledger(store)

    async def run(self, input: object = "water the plants", **options: Any) -> pev.RunResult:  # noqa: A002
        """``pev.run`` on this engine's store, then the ledger checks."""
        result = await pev.run(input, store=self.store, **options)  # type: ignore[arg-type]
        await self.check(result)
        return result

    async def check(self, result: pev.RunResult) -> None:
        """The ledger alone rebuilds ``result``, and its hash chain verifies."""
        ledger = Ledger(self.store)
        assert pev.RunResult.from_state(await ledger.state(result.task_id)) == result
        report = await ledger.verify(result.task_id)
        assert report.ok, report.problem

    async def state(self, task_id: str) -> TaskState:
        """The task's state, folded from the store."""
        return await Ledger(self.store).state(task_id)

    async def entries(self, task_id: str) -> tuple[LedgerEntry, ...]:
        """The task's ledger entries."""
        return await Ledger(self.store).entries(task_id)

    async def events(self, task_id: str) -> list[Event]:
        """The task's events, in order."""
        return [entry.event for entry in await self.entries(task_id)]

    async def kinds(self, task_id: str) -> list[str]:
        """The kinds of the task's events, in order."""
        return [event.kind for event in await self.events(task_id)]


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    """An engine over a fresh in-memory store."""
    store = MemoryStore()
    yield Engine(store)
    await store.close()
