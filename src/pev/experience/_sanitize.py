"""The lesson sanitiser: a lesson is a general principle, never a task's specifics.

See docs/design.md §8 and docs/experience.md §4.

A lesson carries no numbers, coordinates, URLs, file paths, e-mail addresses, ids, credentials,
names, code, or literal values of the tasks it came from. Three nets catch them, and a text
caught by any of them is dropped, never repaired (a repaired lesson could still say more than it
should):

1. a table of patterns, one row per kind of specific, each naming what it found;
2. an allow-list: after NFKC normalisation the text must be plain ASCII prose, and every word
   must be in :data:`LESSON_VOCABULARY` or name the lesson's own tool. This is the net that
   holds against an attacker: no pattern foresees every colour, brand, unit, name, language or
   number spelled out in words, but a lesson built only from general recovery words cannot
   carry them;
3. the source tasks' own literals (input strings, node ids, argument values).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from pev.experience._vocabulary import HYPHEN_PREFIXES, LESSON_VOCABULARY, inflections

__all__ = ["LESSON_VOCABULARY", "MAX_LESSON_LENGTH", "lesson_problems", "sanitize"]

MAX_LESSON_LENGTH = 300
"""The longest lesson, in characters: one or two sentences of advice."""

# Literals shorter than this identify nothing (a node called "a"), and forbidding them would
# forbid ordinary words in every lesson.
_MIN_LITERAL = 3

_NUMBER_WORDS = (
    r"zero|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|twenty|thirty"
    r"|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?|billions?"
    r"|dozens?|twice|thrice|half|halves|quarters?|second|third|fourth|fifth|sixth|seventh"
    r"|eighth|ninth|tenth|\w+teenth|\w+ieth|hundredth|thousandth|point"
)

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
    ("a number in words", re.compile(rf"\b(?:{_NUMBER_WORDS})\b", re.IGNORECASE)),
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
    (
        "a credential in words",
        re.compile(
            r"\b(?:pass ?(?:word|wd|phrase|code)s?|pins?|api|keys?|secrets?|tokens?|credentials?"
            r"|login|logins|username|usernames|otp|bearer|auth\w*)\b",
            re.IGNORECASE,
        ),
    ),
    ("a long token (a key or encoded data)", re.compile(r"[A-Za-z0-9+/_=-]{24,}")),
    ("an identifier", re.compile(r"\b\w+_\w+\b|\b[a-z]+[A-Z]\w*")),
    ("a file name or dotted name", re.compile(r"\b[a-z_]\w+\.[a-z_]\w+", re.IGNORECASE)),
    # An apostrophe not between two letters quotes a value ('fast'); "it's" is a word.
    (
        "code or a quoted value",
        re.compile(r"[{}\[\]<>$#|\\`\"=@%^*~&+/_]|(?<![A-Za-z])'|'(?![A-Za-z])"),
    ),
    ("a control character", re.compile(r"[\x00-\x1f\x7f]")),
)

# Typography a model may use for plain ASCII punctuation; NFKC leaves these as they are.
_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2013": "-",
        "\u2014": "-",
    }
)

# Words that start a sentence may be capitalised; any other capital letter marks a name
# (a person, a place, a product, an object's proper name) or an acronym, which are specifics.
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)\S")
_CAPITAL = re.compile(r"[A-Z]")
_MASK = "tool"
# A word: letters, joined by inner apostrophes and hyphens ("it's", "re-grasp").
_WORD = re.compile(r"[a-z]+(?:['-][a-z]+)*")
# A modal read as a noun ("grasp the can") names an object.
_MODAL_AS_NOUN = re.compile(r"\b(?:a|an|the|its|their|your)\s+(?:can|will|may)\b")


def lesson_problems(
    text: str,
    *,
    forbidden_literals: Iterable[str] = (),
    allowed: Iterable[str] = (),
) -> tuple[str, ...]:
    """Why ``text`` cannot be a lesson; empty when it can.

    The text is read after NFKC normalisation (full-width letters, ligatures and look-alike
    digits become plain ones) with typographic quotes and dashes read as ASCII.

    Args:
        text: The lesson's text.
        forbidden_literals: The source tasks' specifics (input strings, node ids, argument
            values): matched case-insensitively as whole words, and also with ``_``, ``-`` and
            ``.`` read as spaces (``red_cube`` forbids "red cube").
        allowed: The lesson's tool names: it may name them (with the endings of
            :data:`LESSON_VOCABULARY`: "re-grasping" for ``grasp``) although a pattern or the
            vocabulary would refuse them.
    """
    text = _normalise(text)
    if len(text.splitlines()) > 1:
        return ("more than one line",)
    normal = " ".join(text.split())
    if not normal:
        return ("empty",)
    problems: list[str] = []
    if len(normal) > MAX_LESSON_LENGTH:
        problems.append(f"longer than {MAX_LESSON_LENGTH} characters")
    if not text.isascii():
        # Checked before whitespace is folded: str.split() takes U+0085 and the like for spaces.
        problems.append("characters outside plain ASCII (another script, or look-alikes)")
    tools = {word.strip().casefold() for word in allowed if word.strip()}
    masked = _mask(normal, tools)
    problems.extend(why for why, pattern in _PATTERNS if pattern.search(masked))
    if _has_name(masked):
        problems.append("a name (a capitalised word inside a sentence)")
    if _unknown_words(masked, tools) or _MODAL_AS_NOUN.search(masked.lower()):
        problems.append("a word outside the lesson vocabulary")
    if any(
        _contains(normal, literal)
        for literal in forbidden_literals
        if literal.strip().casefold() not in tools
    ):
        problems.append("a literal value of a source task")
    return tuple(problems)


def sanitize(
    text: str,
    *,
    forbidden_literals: Iterable[str] = (),
    allowed: Iterable[str] = (),
) -> str | None:
    """``text`` normalised and its whitespace tidied if it may be a lesson, else ``None``.

    ``None`` means drop it. See :func:`lesson_problems` for the arguments and the checks.
    """
    if lesson_problems(text, forbidden_literals=forbidden_literals, allowed=allowed):
        return None
    return " ".join(_normalise(text).split())


def _normalise(text: str) -> str:
    """NFKC, with typographic quotes and dashes as ASCII: the text every check reads."""
    return unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)


def _mask(text: str, words: set[str]) -> str:
    for word in sorted(words, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", _MASK, text, flags=re.IGNORECASE)
    return text


def _has_name(text: str) -> bool:
    starts = {match.end() - 1 for match in _SENTENCE_START.finditer(text)}
    return any(match.start() not in starts for match in _CAPITAL.finditer(text))


def _unknown_words(text: str, tools: set[str]) -> list[str]:
    """The words of ``text`` (already masked) that are neither vocabulary nor a tool's forms."""
    own: set[str] = set()
    for tool in tools:
        if tool.isascii() and tool.isalpha():
            own |= inflections(tool)
    return [word for word in _WORD.findall(text.lower()) if not _known(word, own)]


def _known(word: str, own: set[str]) -> bool:
    """A vocabulary word or a tool's form, a possessive of one, or a hyphenated run of them."""
    if word in LESSON_VOCABULARY or word in own:
        return True
    if word.endswith("'s"):
        return _known(word[:-2], own)
    if "-" in word:
        head, *rest = word.split("-")
        parts = rest if head in HYPHEN_PREFIXES else [head, *rest]
        return all(_known(part, own) for part in parts)
    return False


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
