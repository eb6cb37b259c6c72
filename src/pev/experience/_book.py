"""The lesson book: records episodes after each task and gives planners the lessons that apply.

This is experience's I/O shell over a :class:`~pev.experience.LessonStore`; everything it decides
(the episode, its class, the candidates, promotion, the sanitiser) is a pure function it calls.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from pev.chat import ChatMessage, ChatModel, ChatRequest
from pev.errors import UsageError
from pev.experience._classify import EpisodeClass, classify
from pev.experience._episode import Episode, build_episode
from pev.experience._lessons import (
    DEFAULT_MIN_SUPPORT,
    Lesson,
    LessonCandidate,
    LessonKey,
    LessonStatus,
    draw_candidates,
    sanitize_for,
    search_terms,
    tally,
)
from pev.experience._store import LessonStore
from pev.ledger import TaskState

__all__ = ["DraftRequest", "Drafter", "LessonBook"]

_log = logging.getLogger("pev.experience")


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftRequest:
    """What a drafter is asked to rewrite: one lesson, as its template wrote it.

    Attributes:
        key: Root cause, tool and action kind.
        text: The template's lesson, which the draft replaces if it passes the sanitiser.
        independent: How many independent tasks support the lesson.
        classes: The classes of the supporting episodes (``failure``, ``mixed``).
    """

    key: LessonKey
    text: str
    independent: int
    classes: tuple[EpisodeClass, ...]


Drafter: TypeAlias = Callable[[DraftRequest], str | Awaitable[str]]
"""A function (sync or async) that rewrites a lesson's text; see :class:`LessonBook`.

A :class:`~pev.chat.ChatModel` may draft instead of a function.
"""


# The sanitiser drops any draft with a word outside its vocabulary: the prompt asks for the
# plain words that pass, so that a model's draft is worth asking for.
_DRAFT_SYSTEM = (
    "You rewrite one lesson for a planning agent as one short, general sentence of advice, in "
    "plain English. Keep its meaning and the tool's name, and name no other tool. Use only "
    "common words about planning, acting, observing and checking. Never include numbers (in "
    "digits or in words), units, coordinates, colours, materials, sizes or other attributes, "
    "names of objects, people, places or products, ids, file paths, URLs, e-mail addresses, "
    "credentials, code or quoted values. Answer with the sentence only."
)


class LessonBook:
    """Experience over a store: episodes in, advice out (see ``docs/experience.md``).

    After each task, :meth:`record` builds its episode, classifies it, draws lesson candidates
    from a ``failure`` or ``mixed`` episode, and promotes a candidate once ``min_support``
    independent tasks support it. Before a task, :meth:`active` finds the active lessons that
    apply to its tools and goal; ``pev.run(..., experience=book)`` does both.

    Args:
        store: Where episodes and lessons are kept: a :class:`~pev.stores.MemoryStore` or
            :class:`~pev.stores.SQLiteStore` (the ledger's own store does).
        min_support: Independent tasks (distinct ids and inputs) a lesson needs to be active.
        drafter: Optional: rewrites a lesson's text when it becomes active. A function of a
            :class:`DraftRequest` returning the new text (sync or async), or a
            :class:`~pev.chat.ChatModel` (anything with ``complete(ChatRequest)``; no extra
            needed, only :class:`~pev.llm.OpenAIChat` needs ``openai``). The draft must pass the
            sanitiser against the literals of every supporting task, else the template's text
            is kept; a drafter that raises keeps it too.
        limit: The most lessons :meth:`active` returns by default.

    Raises:
        UsageError: The store keeps no lessons, or ``min_support`` or ``limit`` is below 1.
    """

    def __init__(
        self,
        store: object,
        *,
        min_support: int = DEFAULT_MIN_SUPPORT,
        drafter: Drafter | ChatModel | None = None,
        limit: int = 5,
    ) -> None:
        if not isinstance(store, LessonStore):
            raise UsageError(
                f"a {type(store).__name__} keeps no lessons; give the LessonBook a store that "
                "does (MemoryStore, SQLiteStore)"
            )
        if min_support < 1 or limit < 1:
            raise UsageError(
                f"min_support and limit must be at least 1, got {min_support} and {limit}"
            )
        self._store: LessonStore = store
        self._min_support = min_support
        self._drafter = drafter
        self._limit = limit

    @property
    def store(self) -> LessonStore:
        """Where the episodes and lessons are kept."""
        return self._store

    @property
    def min_support(self) -> int:
        """Independent tasks a lesson needs to be active."""
        return self._min_support

    async def record(self, state: TaskState) -> Episode:
        """Learn from an ended task: keep its episode and update the lessons it supports.

        Recording a task again changes nothing.

        Raises:
            StateError: The task has not ended.
            StoreError: The store failed.
        """
        episode = build_episode(state)
        supported: list[tuple[LessonCandidate, Lesson | None]] = []
        for candidate in draw_candidates(episode):
            previous = await self._store.lesson(candidate.id)
            # A drafted text was checked against the supporters so far; this task's own
            # specifics must not be in it either, or this task does not support it.
            if (
                previous is None
                or sanitize_for(previous.key, previous.text, episode.literals) is not None
            ):
                supported.append((candidate, previous))
        await self._store.save_episode(episode, supports=[c.id for c, _ in supported])
        for candidate, previous in supported:
            supporters = await self._store.episodes(candidate.id)
            lesson = tally(candidate, supporters, previous=previous, min_support=self._min_support)
            promoted = lesson.active and (previous is None or not previous.active)
            if promoted and self._drafter is not None:
                lesson = await _draft(self._drafter, lesson, supporters)
            if lesson != previous:
                await self._store.save_lesson(lesson)
        return episode

    async def active(
        self, *, tools: Iterable[str] = (), goal: str = "", limit: int | None = None
    ) -> tuple[Lesson, ...]:
        """The active lessons that apply to a task, most relevant first.

        Relevance is full-text search over the lessons' text, tool and action kind, by the
        task's tool names and the terms of its goal. Given ``tools``, a lesson about another
        tool never applies, and lessons about the task's own tools come first. With neither
        tools nor goal terms, every active lesson applies (most supported first). A stored
        lesson whose text fails today's sanitiser (saved by an older pev, or written into the
        store by hand) never applies.
        """
        limit = self._limit if limit is None else limit
        names = tuple(dict.fromkeys(tool for tool in tools if tool))
        query = " ".join((*names, goal))
        if search_terms(query):
            found = await self._store.search_lessons(
                query, limit=max(limit * 10, 50), status=LessonStatus.ACTIVE
            )
        else:
            found = await self._store.lessons(status=LessonStatus.ACTIVE)
        if names:
            found = tuple(
                lesson for lesson in found if lesson.key.tool is None or lesson.key.tool in names
            )
            found = tuple(sorted(found, key=lambda lesson: lesson.key.tool is None))
        found = tuple(lesson for lesson in found if sanitize_for(lesson.key, lesson.text, ()))
        return found[:limit]

    async def advice(
        self, *, tools: Iterable[str] = (), goal: str = "", limit: int | None = None
    ) -> tuple[str, ...]:
        """The texts of :meth:`active`: what a planner is given."""
        return tuple(
            lesson.text for lesson in await self.active(tools=tools, goal=goal, limit=limit)
        )

    async def get(self, lesson_id: str) -> Lesson | None:
        """One lesson by id, or ``None``."""
        return await self._store.lesson(lesson_id)

    async def all(self) -> tuple[Lesson, ...]:
        """Every lesson, candidates included: most independent support first."""
        return await self._store.lessons()

    async def episodes(self, lesson_id: str) -> tuple[Episode, ...]:
        """The episodes that support a lesson, in the order they were recorded."""
        return await self._store.episodes(lesson_id)


async def _draft(
    drafter: Drafter | ChatModel, lesson: Lesson, supporters: Sequence[Episode]
) -> Lesson:
    """``lesson`` with the drafter's text, if that passes the sanitiser against every supporter."""
    request = DraftRequest(
        key=lesson.key,
        text=lesson.text,
        independent=lesson.independent,
        classes=tuple(classify(episode) for episode in supporters),
    )
    try:
        draft = await _ask(drafter, request)
    except Exception:  # noqa: BLE001 - a failed draft keeps the template; logged, not raised
        _log.warning("the lesson drafter failed on lesson %s", lesson.id, exc_info=True)
        return lesson
    literals = {literal for episode in supporters for literal in episode.literals}
    clean = sanitize_for(lesson.key, draft, literals)
    if clean is None:
        _log.info("the draft of lesson %s failed the sanitiser; the template stays", lesson.id)
        return lesson
    return replace(lesson, text=clean, drafted=True)


async def _ask(drafter: Drafter | ChatModel, request: DraftRequest) -> str:
    if isinstance(drafter, ChatModel):
        return await _ask_chat(drafter, request)
    answer = drafter(request)
    if inspect.isawaitable(answer):
        answer = await answer
    if not isinstance(answer, str):
        raise TypeError(f"a drafter returned a {type(answer).__name__}, not a str")
    return answer


async def _ask_chat(model: ChatModel, request: DraftRequest) -> str:
    """Ask a chat model for the draft."""
    key = request.key
    prompt = (
        f"Root cause: {str(key.cause).replace('_', ' ')}. "
        f"Tool: {key.tool or 'none'}. Kind: {key.effect or 'whole plan'}.\n"
        f"Lesson: {request.text}"
    )
    reply = await model.complete(
        ChatRequest(
            messages=(
                ChatMessage(role="system", text=_DRAFT_SYSTEM),
                ChatMessage(role="user", text=prompt),
            ),
            temperature=0.0,
        )
    )
    text = getattr(reply, "text", None)
    if not isinstance(text, str):
        raise TypeError("the chat model's reply has no text")
    return text.strip().strip("\"'")
