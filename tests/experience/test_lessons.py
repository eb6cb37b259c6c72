"""Lesson candidates, promotion at min_support independent tasks, drafting and retrieval."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from pev.chat import ChatRequest, LLMError
from pev.errors import UsageError
from pev.experience import (
    DraftRequest,
    EpisodeClass,
    LessonBook,
    LessonKey,
    LessonStatus,
    build_episode,
    draw_candidates,
    tally,
    template_text,
)
from pev.kernel import RootCause
from pev.ledger import Ledger
from pev.model import Effect
from pev.testing import ScriptedChat

if TYPE_CHECKING:
    from conftest import Claims

PLAN_ERROR_SUBMIT = LessonKey(
    cause=RootCause.PLAN_OR_ANSWER_ERROR, tool="submit", effect=Effect.ACTION
)
SUBMIT_TEXT = template_text(PLAN_ERROR_SUBMIT)


def test_lesson_ids_are_stable_digests_of_their_key() -> None:
    """Equal keys give equal ids (in any process); different keys, different ids."""
    same = LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, tool="submit", effect=Effect.ACTION)
    other = LessonKey(cause=RootCause.DEVICE_FAILURE, tool="submit", effect=Effect.ACTION)
    assert PLAN_ERROR_SUBMIT.id == same.id != other.id
    assert len(PLAN_ERROR_SUBMIT.id) == 12
    assert int(PLAN_ERROR_SUBMIT.id, 16) >= 0


@pytest.mark.parametrize(
    ("key", "start"),
    [
        pytest.param(PLAN_ERROR_SUBMIT, "After a submit step fails verification", id="action"),
        pytest.param(
            LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, tool="observe", effect=Effect.QUERY),
            "After an observe query",
            id="query",
        ),
        pytest.param(
            LessonKey(cause=RootCause.DEVICE_FAILURE, tool="arm", effect=Effect.ACTION),
            "When an arm action fails on its device",
            id="device",
        ),
        pytest.param(
            LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, effect=Effect.ACTION),
            "After a step fails verification",
            id="no-tool",
        ),
        pytest.param(
            LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR),
            "When a whole plan fails verification",
            id="whole-plan",
        ),
    ],
)
def test_templates_fill_in_the_tool_only(key: LessonKey, start: str) -> None:
    """Each (cause, kind) has its template; only the tool's name is filled in."""
    text = template_text(key)
    assert text is not None
    assert text.startswith(start)


def test_an_unreliable_verifier_teaches_nothing() -> None:
    """There is no template for PERCEPTION_UNRELIABLE: the fault was the verifier's."""
    assert template_text(LessonKey(cause=RootCause.PERCEPTION_UNRELIABLE)) is None


async def test_mixed_and_failure_episodes_give_candidates(claims: Claims) -> None:
    """A plan error and a device failure on ``submit`` give their two keys."""
    (mixed,) = draw_candidates(build_episode(await claims.mixed()))
    assert (mixed.key, mixed.text) == (PLAN_ERROR_SUBMIT, SUBMIT_TEXT)
    (device,) = draw_candidates(build_episode(await claims.device_failure()))
    assert device.key == LessonKey(
        cause=RootCause.DEVICE_FAILURE, tool="submit", effect=Effect.ACTION
    )
    (exhausted,) = draw_candidates(build_episode(await claims.exhausted()))
    assert exhausted.key == PLAN_ERROR_SUBMIT


@pytest.mark.parametrize("ending", ["success", "unreliable", "audit"])
async def test_other_episodes_give_no_candidates(claims: Claims, ending: str) -> None:
    """Success and ignored episodes teach no lesson (audit blamed a node: still nothing)."""
    assert draw_candidates(build_episode(await getattr(claims, ending)())) == ()


async def test_a_candidate_carrying_a_literal_of_its_task_is_dropped(claims: Claims) -> None:
    """A task whose argument value is a word of the template gives no candidate for that key."""
    from dataclasses import replace

    from pev.testing import ScriptedPlanner

    find, file = claims.plan.nodes
    scene = replace(file, args={"claim": "C", "amount": 1.0, "note": "scene"})
    plan = replace(claims.plan, nodes=(find, scene))
    state = await claims.mixed(planner=ScriptedPlanner(plan, repeat_last=True))
    episode = build_episode(state)
    assert episode.revisions[0].cause is RootCause.PLAN_OR_ANSWER_ERROR
    assert "scene" in episode.literals
    assert "scene" in (SUBMIT_TEXT or "")
    assert draw_candidates(episode) == ()


async def test_three_independent_tasks_promote_a_lesson(claims: Claims, book: LessonBook) -> None:
    """The lesson is a candidate after one and two supporting tasks, active after three."""
    statuses = []
    for n in (1, 2, 3):
        await book.record(await claims.mixed(f"claim {n}"))
        lesson = await book.get(PLAN_ERROR_SUBMIT.id)
        assert lesson is not None
        statuses.append((lesson.status, lesson.independent, len(lesson.support)))
    assert statuses == [
        (LessonStatus.CANDIDATE, 1, 1),
        (LessonStatus.CANDIDATE, 2, 2),
        (LessonStatus.ACTIVE, 3, 3),
    ]
    assert [e.task_id for e in await book.episodes(PLAN_ERROR_SUBMIT.id)] == list(lesson.support)


async def test_three_runs_of_one_input_do_not_promote(claims: Claims, book: LessonBook) -> None:
    """Distinct task ids are not enough: three runs of the same input are one independent task."""
    for _ in range(3):
        await book.record(await claims.mixed("the same claim"))
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.status, lesson.independent, len(lesson.support)) == (
        LessonStatus.CANDIDATE,
        1,
        3,
    )
    assert await book.active() == ()


async def test_recording_a_task_twice_counts_it_once(claims: Claims, book: LessonBook) -> None:
    """The same task id supports a lesson once, however often it is recorded."""
    state = await claims.mixed("claim 1")
    for _ in range(3):
        await book.record(state)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.independent, lesson.support) == (1, (state.task_id,))


async def test_failure_and_mixed_episodes_support_the_same_key(
    claims: Claims, book: LessonBook
) -> None:
    """A plan error that exhausted the budget and two recovered ones make three supporters."""
    await book.record(await claims.exhausted("claim 1"))
    await book.record(await claims.mixed("claim 2"))
    await book.record(await claims.mixed("claim 3"))
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert lesson.active
    statuses = sorted(str(e.status) for e in await book.episodes(lesson.id))
    assert statuses == ["failed", "succeeded", "succeeded"]


async def test_ignored_tasks_are_kept_but_support_nothing(claims: Claims, book: LessonBook) -> None:
    """An ignored task's episode is stored; no lesson comes of it."""
    state = await claims.unreliable()
    episode = await book.record(state)
    assert await book.store.episode(state.task_id) == episode
    assert await book.all() == ()


async def test_min_support_is_a_setting(claims: Claims, store: Any) -> None:
    """With min_support=1 the first supporting task promotes the lesson."""
    book = LessonBook(store, min_support=1)
    await book.record(await claims.device_failure())
    (lesson,) = await book.all()
    assert lesson.active


def test_tally_is_pure_and_keeps_an_earlier_text() -> None:
    """tally counts distinct ids and inputs, and keeps a previous (drafted) text."""
    from dataclasses import replace

    from pev.experience import Episode, LessonCandidate
    from pev.kernel import TaskStatus, TerminalReason
    from pev.model import TaskId, VerificationMode

    def ep(task: str, digest: str) -> Episode:
        return Episode(
            task_id=TaskId(task),
            input_digest=digest,
            goal="g",
            mode=VerificationMode.RECOVERY,
            status=TaskStatus.SUCCEEDED,
            reason=TerminalReason.PASSED,
        )

    assert SUBMIT_TEXT is not None
    candidate = LessonCandidate(id=PLAN_ERROR_SUBMIT.id, key=PLAN_ERROR_SUBMIT, text=SUBMIT_TEXT)
    supporters = [ep("a", "x"), ep("a", "x"), ep("b", "x"), ep("c", "y")]
    lesson = tally(candidate, supporters, min_support=2)
    assert (lesson.support, lesson.independent, lesson.status) == (
        ("a", "b", "c"),
        2,
        LessonStatus.ACTIVE,
    )
    drafted = replace(lesson, text="Look again first.", drafted=True)
    again = tally(candidate, supporters, previous=drafted, min_support=5)
    assert (again.text, again.drafted, again.status) == ("Look again first.", True, "active")


def test_a_store_without_lessons_is_refused() -> None:
    """A LessonBook needs a store that keeps lessons."""
    with pytest.raises(UsageError, match="keeps no lessons"):
        LessonBook(object())


def test_min_support_must_be_positive(store: Any) -> None:
    """min_support and limit are at least 1."""
    with pytest.raises(UsageError, match="at least 1"):
        LessonBook(store, min_support=0)


# --- drafting --------------------------------------------------------------------------------


async def _promote(claims: Claims, book: LessonBook) -> None:
    for n in (1, 2, 3):
        await book.record(await claims.mixed(f"claim {n}"))


async def test_a_clean_draft_replaces_the_template(claims: Claims, store: Any) -> None:
    """The drafter is asked once, at promotion, and its clean text becomes the lesson."""
    asked: list[DraftRequest] = []

    def drafter(request: DraftRequest) -> str:
        asked.append(request)
        return "  Before filing again with submit, look at what the last attempt changed. "

    book = LessonBook(store, drafter=drafter)
    await _promote(claims, book)
    await book.record(await claims.mixed("claim 4"))
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert lesson.text == "Before filing again with submit, look at what the last attempt changed."
    assert lesson.drafted
    (request,) = asked
    assert (request.key, request.text, request.independent) == (PLAN_ERROR_SUBMIT, SUBMIT_TEXT, 3)
    assert request.classes == (EpisodeClass.MIXED,) * 3


@pytest.mark.parametrize(
    "draft",
    [
        pytest.param("Refile CLM-7781 after checking it.", id="argument-value"),
        pytest.param("Ask Dana Whitfield before filing again.", id="name"),
        pytest.param("Wait 30 seconds, then file again.", id="number"),
        pytest.param("Wait twelve seconds, then file again.", id="number-in-words"),
        pytest.param("Ask the night desk before a new submit.", id="entity"),
        pytest.param("Use password hunter two when the submit fails.", id="credential-in-words"),
        pytest.param("提交失败后\uff0c先检查再重试。", id="another-script"),
    ],
)
async def test_a_draft_failing_the_sanitiser_keeps_the_template(
    claims: Claims, store: Any, draft: str
) -> None:
    """A draft carrying a specific of any supporting task is dropped; the template stays."""
    book = LessonBook(store, drafter=lambda request: draft)
    await _promote(claims, book)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.text, lesson.drafted, lesson.active) == (SUBMIT_TEXT, False, True)


async def test_a_task_whose_specifics_are_in_a_drafted_text_does_not_support_it(
    claims: Claims, store: Any
) -> None:
    """A later task's literal found in the drafted text keeps that task out of its support."""
    book = LessonBook(store, drafter=lambda request: "Look again before a new submit.")
    await _promote(claims, book)
    state = await claims.mixed("look again")
    await book.record(state)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert lesson.drafted
    assert state.task_id not in lesson.support
    assert len(lesson.support) == 3
    assert await book.store.episode(state.task_id) is not None


async def test_a_failing_drafter_keeps_the_template(
    claims: Claims, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A drafter that raises is logged; the lesson is promoted with its template text."""

    async def drafter(request: DraftRequest) -> str:
        raise TimeoutError("model busy")

    book = LessonBook(store, drafter=drafter)
    with caplog.at_level(logging.WARNING, logger="pev.experience"):
        await _promote(claims, book)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.text, lesson.active) == (SUBMIT_TEXT, True)
    assert "drafter failed" in caplog.text


async def test_a_chat_model_drafts_through_the_chat_seam(claims: Claims, store: Any) -> None:
    """A chat model is asked with a ChatRequest; its reply's text is the draft."""
    chat = ScriptedChat('"Look again before another submit."')
    book = LessonBook(store, drafter=chat)
    await _promote(claims, book)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.text, lesson.drafted) == ("Look again before another submit.", True)
    (request,) = chat.requests
    assert isinstance(request, ChatRequest)
    assert "Tool: submit" in request.messages[-1].text


async def test_a_chat_drafter_that_fails_keeps_the_template(
    claims: Claims, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A chat model that raises (a transport failure) keeps the template text, logged."""
    chat = ScriptedChat(LLMError("server down", model="m"))
    book = LessonBook(store, drafter=chat)
    with caplog.at_level(logging.WARNING, logger="pev.experience"):
        await _promote(claims, book)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert (lesson.text, lesson.drafted, chat.calls) == (SUBMIT_TEXT, False, 1)
    assert "drafter failed" in caplog.text


# --- retrieval -------------------------------------------------------------------------------


async def test_active_lessons_apply_by_tool(claims: Claims, book: LessonBook) -> None:
    """A task with the tool gets the lesson; a task without it does not."""
    await _promote(claims, book)
    assert [lesson.text for lesson in await book.active(tools=["lookup", "submit"])] == [
        SUBMIT_TEXT
    ]
    assert await book.active(tools=["lookup"]) == ()
    assert await book.advice(tools=["submit"]) == (SUBMIT_TEXT,)


async def test_active_lessons_apply_by_goal_terms(claims: Claims, book: LessonBook) -> None:
    """Without a tool catalogue, the goal's terms find the lesson by full-text search."""
    await _promote(claims, book)
    assert await book.advice(goal="submit the expense report") == (SUBMIT_TEXT,)
    assert await book.advice(goal="water the plants") == ()


async def test_with_no_terms_every_active_lesson_applies(claims: Claims, book: LessonBook) -> None:
    """No tools and no goal: every active lesson, candidates never."""
    await _promote(claims, book)
    await book.record(await claims.device_failure("claim 9"))  # a candidate only
    assert await book.advice() == (SUBMIT_TEXT,)
    assert len(await book.all()) == 2


async def test_active_respects_the_limit(claims: Claims, store: Any) -> None:
    """At most ``limit`` lessons are given."""
    book = LessonBook(store, min_support=1, limit=1)
    await book.record(await claims.mixed("claim 1"))
    await book.record(await claims.device_failure("claim 2"))
    assert len(await book.active(tools=["submit"])) == 1
    assert len(await book.active(tools=["submit"], limit=5)) == 2


async def test_a_stored_lesson_failing_the_sanitiser_never_applies(
    claims: Claims, book: LessonBook
) -> None:
    """An active lesson whose text the sanitiser now drops is not given to planners."""
    await _promote(claims, book)
    lesson = await book.get(PLAN_ERROR_SUBMIT.id)
    assert lesson is not None
    assert await book.active(tools=["submit"]) == (lesson,)
    leaky = replace(lesson, text="Ask the night desk before a new submit.", drafted=True)
    await book.store.save_lesson(leaky)
    assert await book.active(tools=["submit"]) == ()
    assert await book.active() == ()


async def test_lessons_survive_in_the_ledger_store(claims: Claims, book: LessonBook) -> None:
    """Episodes and lessons live beside the ledger: the same store holds the tasks."""
    await _promote(claims, book)
    (lesson,) = await book.all()
    for task_id in lesson.support:
        assert (await Ledger(book.store).state(task_id)).terminal  # type: ignore[arg-type]
