"""A SQL store whose task index write fails, planted in the database itself.

A trigger on ``pev_tasks`` raises (as a full disk or a broken constraint would) on every insert
or update of an index row, or of one task's row only, while the block runs; it is dropped after.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from tests.support import postgres

from pev.ledger import Store
from pev.stores import SQLiteStore

REFUSAL = "the index write failed"
"""The message the planted trigger raises with."""


@contextlib.contextmanager
def refusing_index(store: Store, task_id: str | None = None) -> Iterator[None]:
    """While the block runs, writing an index row (``task_id``'s only, if given) fails."""
    if isinstance(store, SQLiteStore):
        only = f"WHEN NEW.task_id = '{task_id}' " if task_id is not None else ""
        with contextlib.closing(sqlite3.connect(store.location, isolation_level=None)) as conn:
            for when in ("INSERT", "UPDATE"):
                conn.execute(
                    f"CREATE TRIGGER pev_test_refuse_{when.lower()} BEFORE {when} ON pev_tasks "
                    f"{only}BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
                )
        try:
            yield
        finally:
            with contextlib.closing(sqlite3.connect(store.location, isolation_level=None)) as c:
                c.execute("DROP TRIGGER pev_test_refuse_insert")
                c.execute("DROP TRIGGER pev_test_refuse_update")
        return
    schema = store.schema  # type: ignore[attr-defined]
    only = f"WHEN (NEW.task_id = '{task_id}') " if task_id is not None else ""
    postgres.execute(
        "CREATE FUNCTION {s}.pev_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$",
        "CREATE TRIGGER pev_test_refuse BEFORE INSERT OR UPDATE ON {s}.pev_tasks FOR EACH ROW "
        f"{only}EXECUTE FUNCTION {{s}}.pev_test_refuse()",
        schema=schema,
    )
    try:
        yield
    finally:
        postgres.execute(
            "DROP TRIGGER pev_test_refuse ON {s}.pev_tasks",
            "DROP FUNCTION {s}.pev_test_refuse()",
            schema=schema,
        )
