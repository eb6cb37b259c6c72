"""Experience and lessons: what pev learns from ended tasks, and gives planners.

* :func:`build_episode` turns an ended task's ledger state into an :class:`Episode`, and
  :func:`classify` gives it exactly one :class:`EpisodeClass` (success, mixed, failure,
  ignored): pure functions;
* :func:`draw_candidates` draws lesson candidates from failure and mixed episodes, keyed by
  (root cause, tool, action kind), from deterministic :data:`TEMPLATES`; :func:`sanitize`
  drops any text that carries numbers, paths, URLs, ids, credentials, names or the source
  tasks' literals, or any word outside :data:`LESSON_VOCABULARY` (an allow-list of general
  recovery words); :func:`tally` promotes a candidate once ``min_support`` independent tasks
  support it;
* :class:`LessonBook` does all that over a :class:`LessonStore` (the ledger's own store) and
  finds the active lessons that apply to a task, for ``pev.run(..., experience=book)``; its
  optional drafter is a function or any :class:`pev.chat.ChatModel` (no extra needed).

Lessons are advice to planners: never evidence, and never a way around the verifier. See
``docs/experience.md``.
"""

from pev.experience._book import Drafter, DraftRequest, LessonBook
from pev.experience._classify import CLASSIFICATION, EpisodeClass, classify, classify_why
from pev.experience._episode import (
    Episode,
    EpisodeAction,
    EpisodeNode,
    EpisodeRevision,
    build_episode,
    task_literals,
)
from pev.experience._lessons import (
    DEFAULT_MIN_SUPPORT,
    TEMPLATES,
    Lesson,
    LessonCandidate,
    LessonKey,
    LessonStatus,
    draw_candidates,
    lesson_terms,
    search_terms,
    tally,
    template_text,
)
from pev.experience._sanitize import (
    LESSON_VOCABULARY,
    MAX_LESSON_LENGTH,
    lesson_problems,
    sanitize,
)
from pev.experience._store import LessonStore

__all__ = [
    "CLASSIFICATION",
    "DEFAULT_MIN_SUPPORT",
    "LESSON_VOCABULARY",
    "MAX_LESSON_LENGTH",
    "TEMPLATES",
    "DraftRequest",
    "Drafter",
    "Episode",
    "EpisodeAction",
    "EpisodeClass",
    "EpisodeNode",
    "EpisodeRevision",
    "Lesson",
    "LessonBook",
    "LessonCandidate",
    "LessonKey",
    "LessonStatus",
    "LessonStore",
    "build_episode",
    "classify",
    "classify_why",
    "draw_candidates",
    "lesson_problems",
    "lesson_terms",
    "sanitize",
    "search_terms",
    "tally",
    "task_literals",
    "template_text",
]
