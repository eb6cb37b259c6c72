"""Tasks a driver must refuse, and a worker run until it has refused one (docs/security.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pev.engine import WorkerReport, worker
from pev.ledger import Ledger, Store
from pev.stores import SQLiteStore


async def waiting_task(db: Path, components: Mapping[str, str] | None = None) -> str:
    """A new task in the SQLite ledger ``db``, not yet driven, recording ``components``."""
    store = SQLiteStore(db)
    try:
        return (await Ledger(store).create("look", components=components)).task_id
    finally:
        await store.close()


async def worker_until(store: Store, done: Callable[[], bool], **options: Any) -> WorkerReport:
    """Run a worker on ``store`` (polling every 10 ms) until ``done()``, then stop it."""
    stop = asyncio.Event()
    running = asyncio.create_task(worker(store, poll_s=0.01, stop=stop, **options))
    while not done() and not running.done():
        await asyncio.sleep(0.01)
    stop.set()
    return await running


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of the worker's log that refuse a task."""
    return [record for record in caplog.records if "refused" in record.getMessage()]
