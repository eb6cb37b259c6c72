"""The lesson store: one contract on both stores, and the SQLite file's FTS5 index."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pev.experience import (
    Episode,
    Lesson,
    LessonKey,
    LessonStatus,
    LessonStore,
    template_text,
)
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import SCHEMA_VERSION
from pev.model import Effect, TaskId, VerificationMode
from pev.stores import MemoryStore, SQLiteStore
from pev.stores._sqlite_db import SQLiteDatabase


def episode(task: str, digest: str = "") -> Episode:
    return Episode(
        task_id=TaskId(task),
        input_digest=digest or task,
        goal="file the claim",
        mode=VerificationMode.RECOVERY,
        status=TaskStatus.SUCCEEDED,
        reason=TerminalReason.PASSED,
        literals=("CLM-1",),
    )


def lesson(tool: str, *, active: bool = False, independent: int = 1) -> Lesson:
    key = LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, tool=tool, effect=Effect.ACTION)
    return Lesson(
        id=key.id,
        key=key,
        text=template_text(key) or "",
        status=LessonStatus.ACTIVE if active else LessonStatus.CANDIDATE,
        support=tuple(TaskId(f"t{n}") for n in range(independent)),
        independent=independent,
    )


def test_both_stores_keep_lessons() -> None:
    """MemoryStore and SQLiteStore implement the LessonStore protocol."""
    assert issubclass(MemoryStore, LessonStore)
    assert issubclass(SQLiteStore, LessonStore)


async def test_an_episode_is_saved_once_with_its_support(store: Any) -> None:
    """Saving a task's episode again changes neither it nor its support links."""
    first = episode("t1")
    await store.save_episode(first, supports=["L1", "L2"])
    await store.save_episode(dataclasses.replace(first, goal="changed"), supports=["L3"])
    assert await store.episode("t1") == first
    assert await store.episodes("L1") == (first,)
    assert await store.episodes("L3") == ()
    assert await store.episode("nope") is None


async def test_supporting_episodes_come_in_save_order(store: Any) -> None:
    """episodes(lesson) lists its supporters in the order they were saved."""
    for task in ("t3", "t1", "t2"):
        await store.save_episode(episode(task), supports=["L"])
    assert [e.task_id for e in await store.episodes("L")] == ["t3", "t1", "t2"]


async def test_a_lesson_is_replaced_whole(store: Any) -> None:
    """save_lesson is an upsert by id; lesson(id) reads back what was saved last."""
    candidate = lesson("pick")
    await store.save_lesson(candidate)
    promoted = dataclasses.replace(candidate, status=LessonStatus.ACTIVE, independent=3)
    await store.save_lesson(promoted)
    assert await store.lesson(candidate.id) == promoted
    assert await store.lessons() == (promoted,)
    assert await store.lesson("missing") is None


async def test_lessons_are_listed_active_first_then_by_support(store: Any) -> None:
    """Active lessons first, most independent support first; a status filters."""
    weak = lesson("pick", active=True, independent=3)
    strong = lesson("place", active=True, independent=5)
    waiting = lesson("observe", independent=2)
    for item in (waiting, weak, strong):
        await store.save_lesson(item)
    assert await store.lessons() == (strong, weak, waiting)
    assert await store.lessons(status=LessonStatus.CANDIDATE) == (waiting,)


async def test_search_finds_lessons_by_tool_and_text_terms(store: Any) -> None:
    """Search matches any term of the query in a lesson's text, tool or kind."""
    pick, place = lesson("pick", active=True), lesson("place_item")
    await store.save_lesson(pick)
    await store.save_lesson(place)
    assert await store.search_lessons("pick up the cup") == (pick,)
    assert await store.search_lessons("place item") == (place,)  # snake_case splits into words
    assert set(await store.search_lessons("observe the scene")) == {pick, place}
    assert await store.search_lessons("scene", status=LessonStatus.ACTIVE) == (pick,)
    assert await store.search_lessons("teapot") == ()
    assert await store.search_lessons("the, and: ...") == ()  # no terms, nothing found


async def test_search_ranks_the_better_match_first_and_limits(store: Any) -> None:
    """A lesson holding more of the query's terms ranks first; limit cuts the list."""
    pick, place = lesson("pick"), lesson("place")
    await store.save_lesson(pick)
    await store.save_lesson(place)
    assert (await store.search_lessons("place scene"))[0] == place
    assert len(await store.search_lessons("scene", limit=1)) == 1


async def test_search_follows_an_updated_text(store: Any) -> None:
    """A replaced lesson is found by its new text, not its old one."""
    old = lesson("pick")
    await store.save_lesson(old)
    await store.save_lesson(dataclasses.replace(old, text="Grip gently and look twice."))
    assert await store.search_lessons("gently") != ()
    assert await store.search_lessons("retrying") == ()


# --- SQLite ----------------------------------------------------------------------------------


def _tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}


async def test_sqlite_keeps_lessons_in_the_ledger_file_with_fts5(tmp_path: Path) -> None:
    """The same file holds the ledger and experience, with an FTS5 index; schema unchanged."""
    store = SQLiteStore(tmp_path / "ledger.db")
    assert store.full_text_search
    await store.save_lesson(lesson("pick"))
    await store.close()
    assert {"pev_events", "pev_episodes", "pev_lessons", "pev_lessons_fts"} <= _tables(
        tmp_path / "ledger.db"
    )
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.db")) as conn:
        (version,) = conn.execute("SELECT value FROM pev_meta WHERE key = 'schema_version'")
        hits = conn.execute(
            "SELECT count(*) FROM pev_lessons_fts WHERE pev_lessons_fts MATCH 'pick'"
        ).fetchone()
    assert int(version[0]) == SCHEMA_VERSION
    assert hits == (1,)


async def test_sqlite_lessons_survive_reopening(tmp_path: Path) -> None:
    """Episodes and lessons are durable: another store on the file reads them back."""
    first = SQLiteStore(tmp_path / "ledger.db")
    saved = lesson("pick", active=True, independent=3)
    await first.save_episode(episode("t1"), supports=[saved.id])
    await first.save_lesson(saved)
    await first.close()
    second = SQLiteStore(tmp_path / "ledger.db")
    try:
        assert await second.lessons() == (saved,)
        assert await second.episodes(saved.id) == (episode("t1"),)
        assert await second.search_lessons("pick") == (saved,)
    finally:
        await second.close()


async def test_a_ledger_from_before_experience_gets_its_tables(tmp_path: Path) -> None:
    """A file written without the experience tables gets them when opened; its tasks stay."""
    path = tmp_path / "ledger.db"
    await SQLiteStore(path).close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for table in ("pev_lessons_fts", "pev_lessons", "pev_lesson_support", "pev_episodes"):
            conn.execute(f"DROP TABLE {table}")
    assert "pev_lessons" not in _tables(path)
    store = SQLiteStore(path)
    try:
        await store.save_lesson(lesson("pick"))
        assert await store.search_lessons("pick") != ()
    finally:
        await store.close()


async def test_a_lagging_fts_index_is_rebuilt_on_open(tmp_path: Path) -> None:
    """Lessons written where FTS5 was missing are indexed when a store with FTS5 opens."""
    path = tmp_path / "ledger.db"
    store = SQLiteStore(path)
    await store.save_lesson(lesson("pick"))
    await store.close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("DELETE FROM pev_lessons_fts")
    reopened = SQLiteStore(path)
    try:
        assert await reopened.search_lessons("pick") != ()
    finally:
        await reopened.close()


async def test_a_file_made_without_fts5_gets_the_index_when_fts5_is_here(tmp_path: Path) -> None:
    """A ledger made where FTS5 was missing gains the index once an SQLite with FTS5 opens it."""
    path = tmp_path / "ledger.db"
    store = SQLiteStore(path)
    await store.save_lesson(lesson("pick"))
    await store.close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("DROP TABLE pev_lessons_fts")
    reopened = SQLiteStore(path)
    try:
        assert reopened.full_text_search
        assert await reopened.search_lessons("pick") != ()
        assert "pev_lessons_fts" in _tables(path)
    finally:
        await reopened.close()


async def test_without_fts5_search_falls_back_to_term_matching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite built without FTS5 still finds lessons, by LIKE and exact terms."""
    monkeypatch.setattr(SQLiteDatabase, "_prepare_fts", staticmethod(lambda conn: False))
    store = SQLiteStore(tmp_path / "ledger.db")
    try:
        assert not store.full_text_search
        pick, place = lesson("pick"), lesson("place")
        await store.save_lesson(pick)
        await store.save_lesson(place)
        assert await store.search_lessons("pick") == (pick,)
        assert await store.search_lessons("pic") == ()  # a term, not a substring
        assert (await store.search_lessons("place scene"))[0] == place
    finally:
        await store.close()
