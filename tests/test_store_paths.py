"""pev.open_store / SQLiteStore on a path that cannot hold a ledger: a StoreError naming it.

The command line turns these into one line and exit 2 (tests/test_cli_inputs.py); the library
raises :class:`~pev.errors.StoreError`, never the OSError or sqlite3 error underneath.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

import pev
from pev.errors import StoreError


def _bad_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    regular = tmp_path / "somefile"
    regular.write_text("x", encoding="utf-8")
    text = tmp_path / "notes.txt"
    text.write_text("shopping list\n" * 100, encoding="utf-8")
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    return {
        "under-a-file": (regular / "x.db", "is a file, not a folder"),
        "name-too-long": (tmp_path / ("a" * 300), "File name too long"),
        "a-folder": (tmp_path, "is a folder, not a ledger file"),
        "a-pipe": (pipe, "is not a regular file"),
        "a-text-file": (text, "is not an SQLite database"),
        "another-apps-database": (foreign, "of another application"),
    }


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize(
    "case",
    ["under-a-file", "name-too-long", "a-folder", "a-pipe", "a-text-file", "another-apps-database"],
)
def test_a_path_that_cannot_hold_a_ledger_raises_store_error(tmp_path: Path, case: str) -> None:
    """Each bad path raises StoreError naming the file and what is wrong with it."""
    path, words = _bad_paths(tmp_path)[case]
    with pytest.raises(StoreError) as raised:
        pev.open_store(str(path))
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_damaged_schema_page_raises_store_error(tmp_path: Path) -> None:
    """A byte of the schema's SQL made invalid UTF-8: StoreError saying the file is damaged."""
    db = tmp_path / "ledger.db"
    asyncio.run(pev.SQLiteStore(db).close())  # the last close leaves everything in the file
    data = db.read_bytes()
    at = data.index(b"CREATE TABLE pev_meta") + 3
    db.write_bytes(data[:at] + b"\xa0" + data[at + 1 :])
    with pytest.raises(StoreError, match="is damaged and cannot be read"):
        pev.SQLiteStore(db)
