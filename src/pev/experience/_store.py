"""Where episodes and lessons are kept: the ledger's own store (docs/design.md §8).

:class:`LessonStore` is a protocol of its own, beside :class:`~pev.ledger.Store`, so a ledger
store that keeps no lessons still keeps the ledger contract. :class:`~pev.stores.MemoryStore`
and :class:`~pev.stores.SQLiteStore` implement both.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from pev.experience._episode import Episode
from pev.experience._lessons import Lesson, LessonStatus

__all__ = ["LessonStore"]


@runtime_checkable
class LessonStore(Protocol):
    """Episodes, lessons, and which episodes support which lesson.

    A store guarantees:

    * an episode is saved once per task (saving it again changes nothing) together with its
      support links, in one transaction;
    * a lesson is saved whole (an upsert by id), and is found by :meth:`search_lessons` as soon
      as :meth:`save_lesson` returns.
    """

    async def save_episode(self, episode: Episode, *, supports: Collection[str] = ()) -> None:
        """Keep an ended task's episode, and record that it supports these lesson ids."""
        ...

    async def episode(self, task_id: str) -> Episode | None:
        """The episode of a task, or ``None`` if none was saved."""
        ...

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes supporting a lesson, in the order they were saved."""
        ...

    async def save_lesson(self, lesson: Lesson) -> None:
        """Insert or replace a lesson (by id) and its search entry."""
        ...

    async def lesson(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        ...

    async def lessons(self, *, status: LessonStatus | None = None) -> tuple[Lesson, ...]:
        """Every lesson (or only those with ``status``): most independent support first."""
        ...

    async def search_lessons(
        self, query: str, *, limit: int = 5, status: LessonStatus | None = None
    ) -> tuple[Lesson, ...]:
        """Lessons holding any of the query's search terms, most relevant first.

        Terms are :func:`~pev.experience.search_terms` of ``query``; a query without terms finds
        nothing.
        """
        ...
