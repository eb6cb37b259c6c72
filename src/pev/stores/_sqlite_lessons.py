"""Experience in an SQLite ledger file: episodes, lessons and their support (docs/design.md §8).

The :class:`~pev.experience.LessonStore` half of :class:`~pev.stores.SQLiteStore`, in the same
file as the ledgers: lessons are searched through an FTS5 full-text index where this SQLite has
FTS5 (ranked by bm25), else by a term match over their stored search terms.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from pev import codec
from pev.experience import Episode, Lesson, LessonStatus, lesson_terms, search_terms
from pev.stores._memory import rank_by_terms
from pev.stores._sqlite_db import SQLiteDatabase

__all__ = ["SQLiteLessons"]

_UPSERT_LESSON = (
    "INSERT INTO pev_lessons (id, status, independent, support, terms, lesson) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "independent = excluded.independent, support = excluded.support, terms = excluded.terms, "
    "lesson = excluded.lesson RETURNING rowid"
)
# Active first, then most independent support: the order lessons are listed in.
_LESSON_ORDER = "(status = 'active') DESC, independent DESC, support DESC, id"


class SQLiteLessons:
    """Episodes and lessons kept in an SQLite ledger file (see :class:`~pev.stores.SQLiteStore`)."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db

    async def save_episode(self, episode: Episode, *, supports: Collection[str] = ()) -> None:
        """Keep an episode once, with the lessons it supports, in one transaction."""
        row = (episode.task_id, codec.dumps(episode))
        links = [(lesson_id, episode.task_id) for lesson_id in dict.fromkeys(supports)]

        def work(conn: sqlite3.Connection) -> None:
            saved = conn.execute(
                "INSERT INTO pev_episodes (task_id, episode) VALUES (?, ?) "
                "ON CONFLICT (task_id) DO NOTHING",
                row,
            )
            if saved.rowcount and links:
                conn.executemany(
                    "INSERT OR IGNORE INTO pev_lesson_support (lesson_id, task_id) VALUES (?, ?)",
                    links,
                )

        await self._db.write(work)

    async def episode(self, task_id: str) -> Episode | None:
        """The episode of a task, or ``None``."""
        query = "SELECT episode FROM pev_episodes WHERE task_id = ?"
        rows = await self._db.query(query, (task_id,))
        return self._db.decode(rows[0][0], Episode, f"episode {task_id}") if rows else None

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes supporting a lesson, in save order."""
        query = (
            "SELECT e.task_id, e.episode FROM pev_lesson_support s "
            "JOIN pev_episodes e ON e.task_id = s.task_id WHERE s.lesson_id = ? ORDER BY s.rowid"
        )
        rows = await self._db.query(query, (lesson_id,))
        return tuple(self._db.decode(text, Episode, f"episode {task}") for task, text in rows)

    async def save_lesson(self, lesson: Lesson) -> None:
        """Insert or replace a lesson by id, and its full-text entry."""
        terms = " ".join(lesson_terms(lesson))
        row = (
            lesson.id,
            str(lesson.status),
            lesson.independent,
            len(lesson.support),
            terms,
            codec.dumps(lesson),
        )

        def work(conn: sqlite3.Connection) -> None:
            rowid = conn.execute(_UPSERT_LESSON, row).fetchone()[0]
            if self._db.full_text:
                conn.execute("DELETE FROM pev_lessons_fts WHERE rowid = ?", (rowid,))
                conn.execute(
                    "INSERT INTO pev_lessons_fts (rowid, terms) VALUES (?, ?)", (rowid, terms)
                )

        await self._db.write(work)

    async def lesson(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        query = "SELECT id, lesson FROM pev_lessons WHERE id = ?"
        rows = await self._db.query(query, (lesson_id,))
        return self._lessons_of(rows)[0] if rows else None

    async def lessons(self, *, status: LessonStatus | None = None) -> tuple[Lesson, ...]:
        """Every lesson (or those with ``status``), most independent support first."""
        query = "SELECT id, lesson FROM pev_lessons WHERE (? IS NULL OR status = ?) "
        query += f"ORDER BY {_LESSON_ORDER}"
        wanted = str(status) if status is not None else None
        rows = await self._db.query(query, (wanted, wanted))
        return self._lessons_of(rows)

    async def search_lessons(
        self, query: str, *, limit: int = 5, status: LessonStatus | None = None
    ) -> tuple[Lesson, ...]:
        """Lessons holding any of the query's terms, by FTS5 rank (bm25), then support."""
        terms = search_terms(query)
        if not terms:
            return ()
        wanted = str(status) if status is not None else None
        if self._db.full_text:
            # Each term is letters and digits only (search_terms), quoted as an FTS5 string.
            match = " OR ".join(f'"{term}"' for term in terms)
            sql = (
                "SELECT l.id, l.lesson FROM pev_lessons_fts f "
                "JOIN pev_lessons l ON l.rowid = f.rowid "
                "WHERE pev_lessons_fts MATCH ? AND (? IS NULL OR l.status = ?) "
                "ORDER BY bm25(pev_lessons_fts), l.independent DESC, l.id LIMIT ?"
            )
            rows = await self._db.query(sql, (match, wanted, wanted, limit))
            return self._lessons_of(rows)
        # Without FTS5: LIKE finds the rows holding a term, and the exact terms rank them.
        like = " OR ".join("terms LIKE ?" for _ in terms)
        sql = (
            f"SELECT id, lesson FROM pev_lessons WHERE ({like}) "  # noqa: S608 - placeholders only
            f"AND (? IS NULL OR status = ?) ORDER BY {_LESSON_ORDER}"
        )
        params = [f"%{term}%" for term in terms] + [wanted, wanted]
        rows = await self._db.query(sql, params)
        return rank_by_terms(self._lessons_of(rows), terms, limit=limit)

    def _lessons_of(self, rows: Sequence[tuple[object, ...]]) -> tuple[Lesson, ...]:
        return tuple(
            self._db.decode(text, Lesson, f"lesson {lesson_id}") for lesson_id, text in rows
        )
