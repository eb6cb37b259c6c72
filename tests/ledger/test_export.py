"""`pev ledger export`: a task's stored entries as JSON lines, found from the events."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from pev.cli import cli
from pev.ledger import Ledger
from pev.model import VerificationContract, VerificationMode
from pev.stores import SQLiteStore

CONTRACT = VerificationContract(VerificationMode.OFF, "water the plants")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A ledger with tasks ``alpha-1``, ``alpha-2`` and ``beta``."""
    path = tmp_path / "ledger.db"

    async def write() -> None:
        store = SQLiteStore(path)
        try:
            ledger = Ledger(store, key=None)
            for task_id in ("alpha-1", "alpha-2", "beta"):
                await ledger.create({"pots": 3}, contract=CONTRACT, task_id=task_id)
        finally:
            await store.close()

    asyncio.run(write())
    return path


def _export(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "ledger", "export", *args])
    return result.exit_code, result.output


def test_export_writes_one_line_per_event_to_stdout(db: Path) -> None:
    """Each line is a stored entry, keys in the documented order."""
    code, out = _export(db, "beta")
    assert code == 0
    (line,) = out.splitlines()
    entry = json.loads(line)
    assert list(entry) == ["at", "event", "hash", "prev_hash", "schema", "seq", "task_id"]
    assert (entry["task_id"], entry["seq"], entry["schema"]) == ("beta", 1, 2)


def test_export_takes_a_unique_prefix(db: Path, tmp_path: Path) -> None:
    """A unique prefix names its task; the file written holds what stdout would."""
    out = tmp_path / "beta.jsonl"
    assert _export(db, "be", "-o", str(out))[0] == 0
    assert out.read_text(encoding="utf-8") == _export(db, "beta")[1]


@pytest.mark.parametrize(
    ("task", "words"),
    [
        pytest.param("gamma", "no task", id="unknown"),
        pytest.param("alpha", "ambiguous", id="prefix"),
    ],
)
def test_export_of_no_one_task_is_a_usage_error(db: Path, task: str, words: str) -> None:
    """An id that names no task, or a prefix of two, is one line and exit 2."""
    code, out = _export(db, task)
    assert code == 2
    assert words in out


def test_export_finds_a_task_the_index_lost(db: Path) -> None:
    """A task whose index row was deleted is still exported from its events."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM pev_tasks WHERE task_id = 'beta'")
    code, out = _export(db, "beta")
    assert code == 0
    assert json.loads(out)["task_id"] == "beta"
