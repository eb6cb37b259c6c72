"""The lesson sanitiser: a lesson is a general principle, never a task's specifics.

See docs/design.md §8.

A lesson carries no numbers, coordinates, URLs, file paths, e-mail addresses, ids, credentials,
names, code, or literal values of the tasks it came from. The check is a table of patterns plus
the source tasks' literals; a text that fails any of them is dropped, never repaired: a repaired
lesson could still say more than it should.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_LESSON_LENGTH", "lesson_problems", "sanitize"]

MAX_LESSON_LENGTH = 300
"""The longest lesson, in characters: one or two sentences of advice."""

# Literals shorter than this identify nothing (a node called "a"), and forbidding them would
# forbid ordinary words in every lesson.
_MIN_LITERAL = 3

# What a lesson must not hold, one pattern per row, checked in order (every row is reported).
# Tool names the caller allows are masked out first: a lesson is keyed by its tool and names it.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL", re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\bwww\.\S+|\bmailto:", re.IGNORECASE)),
    ("an e-mail address", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    (
        "a file path",
        re.compile(r"(?:^|(?<=[\s(\"'`]))(?:~|\.{1,2})?/\w|\w[/\\]\w|\b[a-z]:\\", re.IGNORECASE),
    ),
    (
        "coordinates",
        re.compile(r"[(\[]\s*[-+]?(?:\d+\.?\d*|\.\d+)\s*[,;]\s*[-+]?(?:\d+\.?\d*|\.\d+)"),
    ),
    ("a number", re.compile(r"\d")),
    (
        "an id (UUID or hex)",
        re.compile(
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{8,}\b",
            re.IGNORECASE,
        ),
    ),
    (
        "a credential",
        re.compile(
            r"\bsk-[\w-]{6,}|\b(?:AKIA|ASIA)[A-Z0-9]{8,}|\bgh[pousr]_\w+|\bxox[abprs]-\S+"
            r"|\b(?:api[ _-]?key|secret|password|passwd|token)\s*[:=]\s*\S+|\bbearer\s+\S{8,}",
            re.IGNORECASE,
        ),
    ),
    ("a long token (a key or encoded data)", re.compile(r"[A-Za-z0-9+/_=-]{24,}")),
    ("an identifier", re.compile(r"\b\w+_\w+\b|\b[a-z]+[A-Z]\w*")),
    ("a file name or dotted name", re.compile(r"\b[a-z_]\w+\.[a-z_]\w+", re.IGNORECASE)),
    ("code or a quoted value", re.compile(r"[{}\[\]<>$#|\\`\"=@%^*~]")),
    ("a control character", re.compile(r"[\x00-\x1f\x7f]")),
)

# Words that start a sentence may be capitalised; any other capital letter marks a name
# (a person, a place, a product, an object's proper name) or an acronym, which are specifics.
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)\S")
_CAPITAL = re.compile(r"[A-Z]")
_MASK = "tool"


def lesson_problems(
    text: str,
    *,
    forbidden_literals: Iterable[str] = (),
    allowed: Iterable[str] = (),
) -> tuple[str, ...]:
    """Why ``text`` cannot be a lesson; empty when it can.

    Args:
        text: The lesson's text.
        forbidden_literals: The source tasks' specifics (input strings, node ids, argument
            values): matched case-insensitively as whole words, and also with ``_``, ``-`` and
            ``.`` read as spaces (``red_cube`` forbids "red cube").
        allowed: Words the lesson may name although a pattern would refuse them: its tools.
    """
    if "\n" in text or "\r" in text:
        return ("more than one line",)
    normal = " ".join(text.split())
    if not normal:
        return ("empty",)
    problems: list[str] = []
    if len(normal) > MAX_LESSON_LENGTH:
        problems.append(f"longer than {MAX_LESSON_LENGTH} characters")
    words = {word.strip().casefold() for word in allowed if word.strip()}
    masked = _mask(normal, words)
    problems.extend(why for why, pattern in _PATTERNS if pattern.search(masked))
    if _has_name(masked):
        problems.append("a name (a capitalised word inside a sentence)")
    if any(
        _contains(normal, literal)
        for literal in forbidden_literals
        if literal.strip().casefold() not in words
    ):
        problems.append("a literal value of a source task")
    return tuple(problems)


def sanitize(
    text: str,
    *,
    forbidden_literals: Iterable[str] = (),
    allowed: Iterable[str] = (),
) -> str | None:
    """``text`` with its whitespace tidied if it may be a lesson, else ``None`` (drop it).

    See :func:`lesson_problems` for the arguments and the checks.
    """
    if lesson_problems(text, forbidden_literals=forbidden_literals, allowed=allowed):
        return None
    return " ".join(text.split())


def _mask(text: str, words: set[str]) -> str:
    for word in sorted(words, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", _MASK, text, flags=re.IGNORECASE)
    return text


def _has_name(text: str) -> bool:
    starts = {match.end() - 1 for match in _SENTENCE_START.finditer(text)}
    return any(match.start() not in starts for match in _CAPITAL.finditer(text))


def _contains(text: str, literal: str) -> bool:
    literal = " ".join(literal.split())
    if len(literal) < _MIN_LITERAL:
        return False
    variants = {literal, " ".join(re.split(r"[_.\-]+", literal)).strip()}
    return any(
        re.search(rf"(?<!\w){re.escape(variant)}(?!\w)", text, flags=re.IGNORECASE)
        for variant in variants
        if variant
    )
