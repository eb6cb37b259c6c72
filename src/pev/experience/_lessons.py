"""Lessons: general recovery principles drawn from episodes, and their promotion.

See docs/design.md §8.

A lesson is keyed by (root cause, tool, action kind). Its text comes from a template per
(root cause, action kind), filled in with the tool's name and nothing else, so a template lesson
is general by construction; the sanitiser checks it all the same. A candidate becomes active
once ``min_support`` independent tasks (distinct task ids *and* distinct inputs) support it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pev.experience._classify import EpisodeClass, classify
from pev.experience._episode import Episode
from pev.experience._sanitize import sanitize
from pev.kernel import RootCause
from pev.model import Effect, TaskId, digest

__all__ = [
    "DEFAULT_MIN_SUPPORT",
    "TEMPLATES",
    "Lesson",
    "LessonCandidate",
    "LessonKey",
    "LessonStatus",
    "draw_candidates",
    "lesson_terms",
    "search_terms",
    "tally",
    "template_text",
]

DEFAULT_MIN_SUPPORT = 3
"""Independent tasks a candidate needs before it becomes an active lesson."""


class LessonStatus(StrEnum):
    """Where a lesson stands."""

    CANDIDATE = "candidate"
    """Drawn from fewer than ``min_support`` independent tasks: kept, never given to planners."""
    ACTIVE = "active"
    """Supported by enough independent tasks: given to planners as advice."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LessonKey:
    """What a lesson is about.

    Attributes:
        cause: The root cause of the failure it answers.
        tool: The tool of the blamed step; ``None`` for a step without one or a whole plan.
        effect: The blamed step's kind (``action`` or ``query``); ``None`` for a whole plan.
    """

    cause: RootCause
    tool: str | None = None
    effect: Effect | None = None

    @property
    def id(self) -> str:
        """A stable digest of the key: equal keys, equal ids, in every process."""
        effect = str(self.effect) if self.effect is not None else None
        return digest([str(self.cause), self.tool, effect])[:12]


@dataclass(frozen=True, slots=True, kw_only=True)
class LessonCandidate:
    """What one episode says about one key: the key's id and its (sanitised) text."""

    id: str
    key: LessonKey
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Lesson:
    """A lesson as stored: its key, text, status and the tasks that support it.

    Attributes:
        id: The key's stable digest (:attr:`LessonKey.id`).
        key: Root cause, tool and action kind.
        text: The advice, sanitised.
        status: ``candidate`` or ``active``.
        support: The supporting tasks' ids, in the order they were recorded.
        independent: How many of them are independent (distinct inputs).
        drafted: The text was rewritten by a drafter (else it is the template's).
    """

    id: str
    key: LessonKey
    text: str
    status: LessonStatus = LessonStatus.CANDIDATE
    support: tuple[TaskId, ...] = ()
    independent: int = 0
    drafted: bool = False

    @property
    def active(self) -> bool:
        """True once the lesson is given to planners."""
        return self.status is LessonStatus.ACTIVE


# One template per (root cause, action kind); {a_tool} becomes "a pick" or "an observe" (or
# plain "a" where the step has no tool). PERCEPTION_UNRELIABLE has none: the fault was the
# verifier's, and a plan cannot learn from it.
TEMPLATES: dict[tuple[RootCause, Effect | None], str] = {
    (RootCause.PLAN_OR_ANSWER_ERROR, Effect.ACTION): (
        "After {a_tool} step fails verification, observe the scene again before retrying it, "
        "and plan the retry from what is observed now."
    ),
    (RootCause.PLAN_OR_ANSWER_ERROR, Effect.QUERY): (
        "After {a_tool} query gives an answer that fails verification, check its inputs "
        "against the goal before asking again."
    ),
    (RootCause.PLAN_OR_ANSWER_ERROR, None): (
        "When a whole plan fails verification with no step to blame, plan again from a fresh "
        "look at the task instead of patching the old plan."
    ),
    (RootCause.DEVICE_FAILURE, Effect.ACTION): (
        "When {a_tool} action fails on its device, do not send it again blindly: observe what "
        "it did first, and plan around the device if it keeps failing."
    ),
    (RootCause.DEVICE_FAILURE, Effect.QUERY): (
        "When {a_tool} query fails on its device, plan with another source for the same fact, "
        "or without it."
    ),
}
"""The lesson text for each (root cause, action kind)."""


def template_text(key: LessonKey) -> str | None:
    """The template lesson of ``key``, or ``None`` where there is no template."""
    template = TEMPLATES.get((key.cause, key.effect))
    if template is None:
        return None
    if key.tool is None:
        subject = "a"
    else:
        subject = ("an " if key.tool[:1].lower() in "aeiou" else "a ") + key.tool
    return template.format(a_tool=subject)


def sanitize_for(key: LessonKey, text: str, literals: Iterable[str]) -> str | None:
    """:func:`sanitize` for the lesson of ``key``: it may name its tool, never ``literals``."""
    return sanitize(text, forbidden_literals=literals, allowed=(key.tool,) if key.tool else ())


_LEARNS_FROM = frozenset({EpisodeClass.FAILURE, EpisodeClass.MIXED})


def draw_candidates(episode: Episode) -> tuple[LessonCandidate, ...]:
    """The lesson candidates of a ``failure`` or ``mixed`` episode (none for the others).

    One per distinct key among the episode's diagnosed failures: each blamed node gives (cause,
    its tool, its effect); a plan error that blames no node gives (cause, none, none). A
    candidate whose text fails the sanitiser against the episode's literals is dropped.
    """
    if classify(episode) not in _LEARNS_FROM:
        return ()
    keys: dict[LessonKey, None] = {}
    for revision in episode.revisions:
        if revision.cause is None:
            continue
        if not revision.blamed:
            keys[LessonKey(cause=revision.cause)] = None
        for node in revision.blamed:
            keys[LessonKey(cause=revision.cause, tool=node.tool, effect=node.effect)] = None
    candidates = []
    for key in keys:
        text = template_text(key)
        if text is None:
            continue
        clean = sanitize_for(key, text, episode.literals)
        if clean is not None:
            candidates.append(LessonCandidate(id=key.id, key=key, text=clean))
    return tuple(candidates)


def tally(
    candidate: LessonCandidate,
    supporters: Sequence[Episode],
    *,
    previous: Lesson | None = None,
    min_support: int = DEFAULT_MIN_SUPPORT,
) -> Lesson:
    """The lesson ``candidate`` makes with the episodes that support it.

    Support counts distinct task ids; independence counts distinct inputs among them, so three
    runs of one input are one independent task. The lesson is active once ``independent``
    reaches ``min_support``, and stays active. Its text is the previous text where there is one
    (a drafter may have rewritten it), else the candidate's.
    """
    by_task: dict[TaskId, Episode] = {}
    for episode in supporters:
        by_task.setdefault(episode.task_id, episode)
    independent = len({episode.input_digest for episode in by_task.values()})
    was_active = previous is not None and previous.active
    status = (
        LessonStatus.ACTIVE if was_active or independent >= min_support else LessonStatus.CANDIDATE
    )
    return Lesson(
        id=candidate.id,
        key=candidate.key,
        text=previous.text if previous is not None else candidate.text,
        status=status,
        support=tuple(by_task),
        independent=independent,
        drafted=previous.drafted if previous is not None else False,
    )


_TERM = re.compile(r"[^\W_]+")
# Words too common to tell lessons apart.
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "so",
        "the",
        "then",
        "this",
        "to",
        "with",
        "what",
        "when",
        "after",
        "before",
        "again",
        "all",
        "any",
        "not",
        "no",
        "do",
        "does",
    }
)


def search_terms(*texts: str | None) -> tuple[str, ...]:
    """The distinct search terms of ``texts``: lower-case words, stop words left out.

    Words are split at anything but letters and digits (``read_file`` is "read" and "file"), as
    SQLite's FTS5 ``unicode61`` tokenizer splits them, so both stores match the same terms.
    """
    terms: dict[str, None] = {}
    for text in texts:
        for word in _TERM.findall((text or "").casefold()):
            if word not in _STOPWORDS:
                terms[word] = None
    return tuple(terms)


def lesson_terms(lesson: Lesson) -> tuple[str, ...]:
    """What a lesson is found by: its text, tool and action kind."""
    return search_terms(lesson.text, lesson.key.tool, lesson.key.effect)
