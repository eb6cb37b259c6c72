"""Rewriting stored ledger rows behind a store's back, field by field, on every backend.

What someone with write access to the database (or a bad disk) could do: change an event's
stored text, time, schema or hash, move a task's index head, delete its index row or its events.
The SQL stores are changed through a connection of their own with the append-only triggers out
of the way; the memory store through its private tables (it keeps decoded entries, so it can
only hold texts that decode).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from datetime import datetime
from typing import Any, Protocol

from tests.support import postgres

from pev import codec
from pev.ledger import Event, Store
from pev.stores import MemoryStore, SQLiteStore

__all__ = ["Rows", "rows_of"]


class Rows(Protocol):
    """The stored rows of one store, open to change (see :func:`rows_of`)."""

    can_hold_any_text: bool
    """The store keeps texts (so an event text that does not decode can be planted)."""

    def set_event(self, task_id: str, seq: int, **columns: Any) -> None:
        """Overwrite columns of event ``seq``: ``event``, ``at`` (texts), ``schema``, ``hash``."""
        ...

    def set_head(self, task_id: str, head_hash: str) -> None:
        """Overwrite the head hash in the task's index row."""
        ...

    def drop_index_row(self, task_id: str) -> None:
        """Delete the task's index row, leaving its events."""
        ...

    def drop_events(self, task_id: str) -> None:
        """Delete every event of the task, leaving its index row."""
        ...


class _MemoryRows:
    can_hold_any_text = False

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def set_event(self, task_id: str, seq: int, **columns: Any) -> None:
        entries = self._store._entries[task_id]
        changes: dict[str, Any] = {}
        for name, value in columns.items():
            if name == "event":
                changes["event"] = codec.loads(value, Event, jcs=True)
            elif name == "at":
                changes["at"] = codec.loads(value, datetime)
            else:
                changes[name] = value
        entries[seq - 1] = dataclasses.replace(entries[seq - 1], **changes)

    def set_head(self, task_id: str, head_hash: str) -> None:
        summaries = self._store._summaries
        summaries[task_id] = dataclasses.replace(summaries[task_id], head_hash=head_hash)

    def drop_index_row(self, task_id: str) -> None:
        del self._store._summaries[task_id]

    def drop_events(self, task_id: str) -> None:
        del self._store._entries[task_id]


class _SQLiteRows:
    can_hold_any_text = True

    def __init__(self, store: SQLiteStore) -> None:
        self._location = store.location

    def _execute(self, sql: str, params: tuple[object, ...]) -> None:
        with contextlib.closing(sqlite3.connect(self._location, isolation_level=None)) as conn:
            conn.execute("DROP TRIGGER IF EXISTS pev_events_no_update")
            conn.execute("DROP TRIGGER IF EXISTS pev_events_no_delete")
            conn.execute(sql, params)

    def set_event(self, task_id: str, seq: int, **columns: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in columns)
        self._execute(
            f"UPDATE pev_events SET {assignments} WHERE task_id = ? AND seq = ?",  # noqa: S608
            (*columns.values(), task_id, seq),
        )

    def set_head(self, task_id: str, head_hash: str) -> None:
        self._execute("UPDATE pev_tasks SET head_hash = ? WHERE task_id = ?", (head_hash, task_id))

    def drop_index_row(self, task_id: str) -> None:
        self._execute("DELETE FROM pev_tasks WHERE task_id = ?", (task_id,))

    def drop_events(self, task_id: str) -> None:
        self._execute("DELETE FROM pev_events WHERE task_id = ?", (task_id,))


class _PostgresRows:
    can_hold_any_text = True

    def __init__(self, store: Any) -> None:
        self._schema = store.schema

    def _execute(self, sql: str, params: tuple[object, ...]) -> None:
        postgres.execute(
            "SET LOCAL session_replication_role = replica", sql, schema=self._schema, params=params
        )

    def set_event(self, task_id: str, seq: int, **columns: Any) -> None:
        assignments = ", ".join(f"{name} = %s" for name in columns)
        self._execute(
            f"UPDATE {{s}}.pev_events SET {assignments} WHERE task_id = %s AND seq = %s",  # noqa: S608
            (*columns.values(), task_id, seq),
        )

    def set_head(self, task_id: str, head_hash: str) -> None:
        self._execute(
            "UPDATE {s}.pev_tasks SET head_hash = %s WHERE task_id = %s", (head_hash, task_id)
        )

    def drop_index_row(self, task_id: str) -> None:
        self._execute("DELETE FROM {s}.pev_tasks WHERE task_id = %s", (task_id,))

    def drop_events(self, task_id: str) -> None:
        self._execute("DELETE FROM {s}.pev_events WHERE task_id = %s", (task_id,))


def rows_of(store: Store) -> Rows:
    """The stored rows of ``store`` (a memory, SQLite or PostgreSQL store), open to change."""
    if isinstance(store, MemoryStore):
        return _MemoryRows(store)
    if isinstance(store, SQLiteStore):
        return _SQLiteRows(store)
    return _PostgresRows(store)
