"""Terminal views of lessons: the lesson list, and one lesson with the episodes behind it.

A lesson's text is a sentence or two, so each lesson is a short block (a header line, then its
text) rather than a table row that would wrap the text into a narrow column.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from pev.cli._render import STATUS_STYLE
from pev.experience import Episode, EpisodeClass, Lesson, LessonKey, LessonStatus, classify

__all__ = ["lesson_list", "lesson_view"]

_LESSON_STYLE = {LessonStatus.ACTIVE: "bold green", LessonStatus.CANDIDATE: "yellow"}
_CLASS_STYLE = {
    EpisodeClass.SUCCESS: "green",
    EpisodeClass.MIXED: "cyan",
    EpisodeClass.FAILURE: "red",
    EpisodeClass.IGNORED: "dim",
}


def _key_text(key: LessonKey) -> str:
    return f"{key.cause} · {key.tool or '(no tool)'} · {key.effect or 'whole plan'}"


def _header(lesson: Lesson) -> Text:
    return Text.assemble(
        (lesson.id, "bold cyan"),
        "  ",
        (f"{lesson.status:<9}", _LESSON_STYLE[lesson.status]),
        f"  support {lesson.independent}/{len(lesson.support)}  ",
        (_key_text(lesson.key), "dim"),
    )


def lesson_list(lessons: Sequence[Lesson]) -> RenderableType:
    """The lesson list: per lesson, id (any unique prefix works), status, support, key, text."""
    blocks: list[RenderableType] = [Text(f"{len(lessons)} lesson(s)", style="bold")]
    for lesson in lessons:
        blocks.extend((_header(lesson), Padding(Text(lesson.text), (0, 0, 0, 2), expand=False)))
    return Group(*blocks)


def lesson_view(lesson: Lesson, episodes: Sequence[Episode]) -> RenderableType:
    """One lesson: its key, status, support and text, then each episode that supports it."""
    source = "drafted" if lesson.drafted else "template"
    lines: list[RenderableType] = [
        Text.assemble(
            ("lesson ", "bold"),
            (lesson.id, "bold cyan"),
            "  ",
            (str(lesson.status), _LESSON_STYLE[lesson.status]),
        ),
        Text(f"key: {_key_text(lesson.key)} (root cause · tool · action kind)"),
        Text(
            f"support: {len(lesson.support)} task(s), {lesson.independent} of them independent "
            "(distinct inputs)"
        ),
        Text(f"text ({source}): {lesson.text}"),
        Text(),
        Text("supporting episodes (task, class, outcome, revisions):", style="bold"),
    ]
    for episode in episodes:
        kind = classify(episode)
        lines.append(
            Text.assemble(
                "  ",
                (episode.task_id, "cyan"),
                "  ",
                (f"{kind:<7}", _CLASS_STYLE[kind]),
                "  ",
                (f"{episode.status}/{episode.reason}", STATUS_STYLE[episode.status]),
                f"  {len(episode.revisions)}",
            )
        )
    return Group(*lines)
