"""`pev lessons`: list the lessons of a ledger, and show one with the episodes behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from click.testing import CliRunner

from pev.cli import cli
from pev.experience import LessonBook
from pev.stores import SQLiteStore

if TYPE_CHECKING:
    from conftest import Claims as ClaimsType


def _fill(path: Path, claims_type: type[ClaimsType], *, supporters: int) -> list[str]:
    """Record ``supporters`` recovered claims tasks and one device failure in the ledger."""

    async def fill() -> list[str]:
        store = SQLiteStore(path)
        try:
            claims, book = claims_type(store), LessonBook(store)
            ids = [
                (await claims.mixed(f"claim {n}", experience=book)).task_id
                for n in range(supporters)
            ]
            await claims.device_failure("claim x", experience=book)
            return ids
        finally:
            await store.close()

    return asyncio.run(fill())


def _invoke(path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(path), "lessons", *args], env={"COLUMNS": "250"})
    return result.exit_code, result.output


def test_lessons_lists_active_lessons(tmp_path: Path, claims_type: type[ClaimsType]) -> None:
    """By default only active lessons are listed, with key, support and text."""
    db = tmp_path / "pev.db"
    _fill(db, claims_type, supporters=3)
    code, out = _invoke(db)
    assert code == 0
    assert "active" in out
    assert "submit" in out
    assert "support 3/3" in out
    assert "After a submit step fails verification" in out
    assert "candidate" not in out


def test_lessons_all_lists_candidates_too(tmp_path: Path, claims_type: type[ClaimsType]) -> None:
    """--all adds the candidates."""
    db = tmp_path / "pev.db"
    _fill(db, claims_type, supporters=3)
    code, out = _invoke(db, "--all")
    assert code == 0
    assert "candidate" in out
    assert "device_failure" in out


def test_show_lists_the_supporting_episodes(tmp_path: Path, claims_type: type[ClaimsType]) -> None:
    """`pev lessons ID` shows the lesson and each supporting task, class and ending."""
    db = tmp_path / "pev.db"
    task_ids = _fill(db, claims_type, supporters=3)

    async def lesson_id() -> str:
        store = SQLiteStore(db)
        try:
            (lesson,) = await LessonBook(store).active()
            return lesson.id
        finally:
            await store.close()

    full = asyncio.run(lesson_id())
    code, out = _invoke(db, full[:6])
    assert code == 0, out
    assert full in out
    assert "(template)" in out
    for task_id in task_ids:
        assert task_id in out
    assert out.count("mixed") == 3
    assert "succeeded/passed" in out


def test_an_empty_ledger_says_so(tmp_path: Path) -> None:
    """No lessons: one line saying so (a missing ledger is a usage error: docs/cli.md)."""
    db = tmp_path / "pev.db"
    asyncio.run(SQLiteStore(db).close())  # an empty ledger, made as a writer would
    code, out = _invoke(db)
    assert code == 0
    assert "no active lessons" in out


def test_an_unknown_lesson_is_a_usage_error(tmp_path: Path, claims_type: type[ClaimsType]) -> None:
    """An id that names no lesson exits 2 with one line."""
    db = tmp_path / "pev.db"
    _fill(db, claims_type, supporters=1)
    code, out = _invoke(db, "zzzz")
    assert code == 2
    assert "no lesson has id 'zzzz'" in out


def test_an_ambiguous_prefix_is_a_usage_error(
    tmp_path: Path, claims_type: type[ClaimsType]
) -> None:
    """The empty prefix matches both lessons: exit 2, asking for more."""
    db = tmp_path / "pev.db"
    _fill(db, claims_type, supporters=1)
    code, out = _invoke(db, "")
    assert code == 2
    assert "ambiguous" in out
