"""The viewer's tests: skipped without the ``web`` extra; the ledgers they show."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the viewer tests need the web extra")
pytest.importorskip("jinja2", reason="the viewer tests need the web extra")

from tests.web.support import AwaitingTask, hostile_ledger


@pytest.fixture
def hostile_db(tmp_path: Path) -> Path:
    """An SQLite ledger holding the hostile task."""
    return hostile_ledger(tmp_path / "hostile.db")


@pytest.fixture
def awaiting(tmp_path: Path) -> Iterator[AwaitingTask]:
    """A payment task awaiting approval in ``tmp_path/approve.db``."""
    with AwaitingTask(tmp_path / "approve.db") as task:
        yield task
