"""The in-memory store: the store contract without durability, for tests and short runs."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from datetime import datetime

from pev.errors import StoreError, UnknownTaskError
from pev.ledger import GENESIS_HASH, LedgerEntry, TaskPhase, TaskSummary, check_batch
from pev.model import TaskId

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keeps ledgers in this process's memory; they are gone when it exits.

    Safe to share between the threads and tasks of one process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, list[LedgerEntry]] = {}
        self._summaries: dict[str, TaskSummary] = {}
        self._closed = False

    async def append(self, entries: Sequence[LedgerEntry], summary: TaskSummary) -> None:
        """Append a batch and its index row atomically (see :class:`pev.ledger.Store`)."""
        with self._lock:
            self._check_open()
            task_id = entries[0].task_id if entries else ""
            stored = self._entries.get(task_id, [])
            head_seq = stored[-1].seq if stored else 0
            head_hash = stored[-1].hash if stored else GENESIS_HASH
            check_batch(entries, summary, head_seq=head_seq, head_hash=head_hash)
            self._entries[task_id] = [*stored, *entries]
            self._summaries[task_id] = summary

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """The task's entries after ``after`` (see :class:`pev.ledger.Store`)."""
        with self._lock:
            self._check_open()
            stored = self._entries.get(task_id)
            if stored is None:
                raise UnknownTaskError(task_id)
            return tuple(stored[max(after, 0) :])  # entry seq n sits at index n - 1

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The task's index row, or ``None``."""
        with self._lock:
            self._check_open()
            return self._summaries.get(task_id)

    async def list_tasks(
        self,
        *,
        phases: Collection[TaskPhase] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[TaskSummary, ...]:
        """Index rows, newest first, optionally only those in ``phases``."""
        with self._lock:
            self._check_open()
            rows = [s for s in self._summaries.values() if phases is None or s.phase in phases]
        rows.sort(key=lambda s: (s.created_at, s.task_id), reverse=True)
        return tuple(rows[offset : offset + limit])

    async def overdue(self, now: datetime) -> tuple[TaskId, ...]:
        """Tasks waiting for a replan whose deadline is at or before ``now``."""
        with self._lock:
            self._check_open()
            return tuple(
                s.task_id
                for s in self._summaries.values()
                if s.replan_deadline is not None and s.replan_deadline <= now
            )

    async def close(self) -> None:
        """Drop everything; the store is unusable afterwards."""
        with self._lock:
            self._closed = True
            self._entries.clear()
            self._summaries.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this MemoryStore is closed")
