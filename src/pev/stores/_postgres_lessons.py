"""Episodes and lessons in the PostgreSQL store (docs/design.md §8, docs/stores.md).

Lessons are found through PostgreSQL's full-text search: each lesson row keeps its search terms
(:func:`~pev.experience.lesson_terms`) and, generated from them, a ``tsvector`` of those exact
terms with a GIN index; a query's terms become a ``tsquery`` of the same terms, and ``ts_rank``
orders the matches by how many of them a lesson holds, as the other stores rank.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

from pev import codec
from pev.errors import CodecError, StoreError
from pev.experience import Episode, Lesson, LessonStatus, lesson_terms, search_terms
from pev.stores._postgres_db import Cursor, Database, TupleRow

__all__ = ["PostgresLessons"]

T = TypeVar("T")

_UPSERT_LESSON = (
    "INSERT INTO {s}.pev_lessons (id, status, independent, support, terms, lesson) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "independent = excluded.independent, support = excluded.support, terms = excluded.terms, "
    "lesson = excluded.lesson"
)
# Active first, then most independent support: the order lessons are listed in.
_LESSON_ORDER = "(status = 'active') DESC, independent DESC, support DESC, id"


class PostgresLessons:
    """The :class:`~pev.experience.LessonStore` half of :class:`~pev.stores.PostgresStore`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save_episode(self, episode: Episode, *, supports: Collection[str] = ()) -> None:
        """Keep an episode once, with the lessons it supports, in one transaction."""
        text = codec.dumps(episode)
        links = [(lesson_id, episode.task_id) for lesson_id in dict.fromkeys(supports)]

        async def work(cur: Cursor) -> None:
            await cur.execute(
                self._db.sql(
                    "INSERT INTO {s}.pev_episodes (task_id, episode) VALUES (%s, %s) "
                    "ON CONFLICT (task_id) DO NOTHING"
                ),
                (episode.task_id, text),
            )
            if cur.rowcount and links:
                await cur.executemany(
                    self._db.sql(
                        "INSERT INTO {s}.pev_lesson_support (lesson_id, task_id) "
                        "VALUES (%s, %s) ON CONFLICT DO NOTHING"
                    ),
                    links,
                )

        await self._db.write(work)

    async def episode(self, task_id: str) -> Episode | None:
        """The episode of a task, or ``None``."""
        rows = await self._db.query(
            "SELECT episode FROM {s}.pev_episodes WHERE task_id = %s", (task_id,)
        )
        return self._decode(rows[0][0], Episode, f"episode {task_id}") if rows else None

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes supporting a lesson, in save order."""
        rows = await self._db.query(
            "SELECT e.task_id, e.episode FROM {s}.pev_lesson_support s "
            "JOIN {s}.pev_episodes e ON e.task_id = s.task_id "
            "WHERE s.lesson_id = %s ORDER BY s.saved",
            (lesson_id,),
        )
        return tuple(self._decode(text, Episode, f"episode {task}") for task, text in rows)

    async def save_lesson(self, lesson: Lesson) -> None:
        """Insert or replace a lesson by id; its full-text entry follows its terms."""
        row = (
            lesson.id,
            str(lesson.status),
            lesson.independent,
            len(lesson.support),
            " ".join(lesson_terms(lesson)),
            codec.dumps(lesson),
        )

        async def work(cur: Cursor) -> None:
            await cur.execute(self._db.sql(_UPSERT_LESSON), row)

        await self._db.write(work)

    async def lesson(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        rows = await self._db.query(
            "SELECT id, lesson FROM {s}.pev_lessons WHERE id = %s", (lesson_id,)
        )
        return self._lessons_of(rows)[0] if rows else None

    async def lessons(self, *, status: LessonStatus | None = None) -> tuple[Lesson, ...]:
        """Every lesson (or those with ``status``), most independent support first."""
        query = "SELECT id, lesson FROM {s}.pev_lessons"
        params: list[object] = []
        if status is not None:
            query += " WHERE status = %s"
            params.append(str(status))
        rows = await self._db.query(f"{query} ORDER BY {_LESSON_ORDER}", params)
        return self._lessons_of(rows)

    async def search_lessons(
        self, query: str, *, limit: int = 5, status: LessonStatus | None = None
    ) -> tuple[Lesson, ...]:
        """Lessons holding any of the query's terms: most terms held first, then support.

        The match is PostgreSQL full-text search over the lessons' search terms (a GIN index);
        ``ts_rank`` counts the query's terms a lesson holds, as the other stores rank.
        """
        terms = search_terms(query)
        if not terms:
            return ()
        # Each term is letters and digits only (search_terms): quoted, it is one exact lexeme.
        wanted = " | ".join(f"'{term}'" for term in terms)
        sql = (
            "SELECT id, lesson FROM {s}.pev_lessons, (SELECT CAST(%s AS tsquery) AS q) AS query "
            "WHERE search @@ q"
        )
        params: list[object] = [wanted]
        if status is not None:
            sql += " AND status = %s"
            params.append(str(status))
        sql += f" ORDER BY ts_rank(search, q) DESC, {_LESSON_ORDER} LIMIT %s"
        params.append(limit)
        return self._lessons_of(await self._db.query(sql, params))

    def _lessons_of(self, rows: Sequence[TupleRow]) -> tuple[Lesson, ...]:
        return tuple(self._decode(text, Lesson, f"lesson {lesson_id}") for lesson_id, text in rows)

    def _decode(self, text: object, into: type[T], what: str) -> T:
        try:
            return codec.loads(str(text), into)
        except CodecError as exc:
            raise StoreError(f"{self._db.location}: {what} cannot be read: {exc}") from exc
