"""pev.run(..., experience=book): active lessons go to the planner as advice; ended tasks are
recorded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from pev.errors import StoreError
from pev.experience import LessonBook, LessonKey, template_text
from pev.kernel import RootCause
from pev.ledger import Ledger, RevisionStarted
from pev.model import Effect
from pev.testing import ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:
    from conftest import Claims

LESSON = template_text(
    LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, tool="submit", effect=Effect.ACTION)
)


async def _learn(claims: Claims, book: LessonBook) -> None:
    for n in (1, 2, 3):
        await claims.mixed(f"claim {n}", experience=book)


async def test_runs_record_their_episodes(claims: Claims, book: LessonBook) -> None:
    """Each run with experience= records its episode; three recovered runs make a lesson."""
    await _learn(claims, book)
    (lesson,) = await book.all()
    assert lesson.active
    assert lesson.text == LESSON


async def test_the_next_planner_request_carries_the_lesson(
    claims: Claims, book: LessonBook
) -> None:
    """The next task's planner (and verifier) get the lesson as advice; the ledger records it."""
    await _learn(claims, book)
    planner = ScriptedPlanner(claims.plan)
    verifier = ScriptedVerifier.passing()
    state = await claims._run("claim 4", verifier, planner=planner, experience=book)
    (request,) = planner.requests
    assert request.lessons == (LESSON,)
    assert verifier.requests[0].lessons == (LESSON,)
    events = [entry.event for entry in await Ledger(claims.store).entries(state.task_id)]
    started = [event for event in events if isinstance(event, RevisionStarted)]
    assert [event.lessons for event in started] == [(LESSON,)]


async def test_lessons_given_by_hand_come_first(claims: Claims, book: LessonBook) -> None:
    """lessons= and experience= add up, without repeats."""
    await _learn(claims, book)
    planner = ScriptedPlanner(claims.plan)
    await claims.success(
        "claim 5", planner=planner, experience=book, lessons=["Read twice.", LESSON or ""]
    )
    assert planner.requests[0].lessons == ("Read twice.", LESSON)


async def test_a_task_without_the_tool_gets_no_lesson(claims: Claims, book: LessonBook) -> None:
    """A lesson about ``submit`` is not advice for a task whose tools do not include it."""
    from dataclasses import replace

    await _learn(claims, book)
    find, _ = claims.plan.nodes
    planner = ScriptedPlanner(replace(claims.plan, nodes=(find,)))
    await claims.success("claim 6", planner=planner, tools=[claims.lookup], experience=book)
    assert planner.requests[0].lessons == ()


async def test_candidates_are_never_advice(claims: Claims, book: LessonBook) -> None:
    """Two supporting tasks make a candidate, which no planner is given."""
    await claims.mixed("claim 1", experience=book)
    await claims.mixed("claim 2", experience=book)
    planner = ScriptedPlanner(claims.plan)
    await claims.success("claim 3", planner=planner, experience=book)
    assert planner.requests[0].lessons == ()


class FailingStore:
    """Keeps lessons in memory but cannot save an episode."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save_episode(self, episode: Any, *, supports: Any = ()) -> None:
        raise StoreError("disk full")

    # The protocol's methods, forwarded explicitly so isinstance(..., LessonStore) holds.
    async def episode(self, task_id: str) -> Any:
        return await self._inner.episode(task_id)

    async def episodes(self, lesson_id: str) -> Any:
        return await self._inner.episodes(lesson_id)

    async def save_lesson(self, lesson: Any) -> None:
        await self._inner.save_lesson(lesson)

    async def lesson(self, lesson_id: str) -> Any:
        return await self._inner.lesson(lesson_id)

    async def lessons(self, **options: Any) -> Any:
        return await self._inner.lessons(**options)

    async def search_lessons(self, query: str, **options: Any) -> Any:
        return await self._inner.search_lessons(query, **options)


async def test_a_failed_recording_leaves_the_result_standing(
    claims: Claims, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A store failure while recording is logged; the run still returns its result."""
    book = LessonBook(FailingStore(store))
    with caplog.at_level(logging.WARNING, logger="pev.engine"):
        state = await claims.mixed("claim 1", experience=book)
    assert state.finished is not None
    assert "recording its episode failed" in caplog.text


async def test_resume_records_the_ended_task(claims: Claims, book: LessonBook) -> None:
    """pev.resume(..., experience=book) of an ended task records it too (once)."""
    import pev

    state = await claims.mixed("claim 1")
    assert await book.all() == ()
    await pev.resume(state.task_id, store=claims.store, experience=book)
    (lesson,) = await book.all()
    assert lesson.support == (state.task_id,)
