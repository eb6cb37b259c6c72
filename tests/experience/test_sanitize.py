"""The sanitiser rejects every specific a lesson could leak, and keeps general advice.

See docs/design.md §8.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev.experience import TEMPLATES, LessonKey, lesson_problems, sanitize, template_text

# The source task's specifics, as task_literals gives them.
LITERALS = (
    "red_cube",
    "pick_red",
    "observe.red_cube",
    "put the red, green and blue cubes in the tray",
    "Dana Whitfield",
    "CLM-7781",
    "kitchen flood",
)

ADVERSARIAL = [
    pytest.param("Pick again near 0.45 metres from the edge.", "a number", id="number"),
    pytest.param("Retry twice, then 3 more times.", "a number", id="small-number"),
    pytest.param("Re-grasp the cube at (0.45, 0.30).", "coordinates", id="coordinates"),
    pytest.param("Move back to [-0.1, .3] before retrying.", "coordinates", id="coordinates-list"),
    pytest.param("Check https://example.com/docs before retrying.", "a URL", id="url"),
    pytest.param("See www.example.org for the policy.", "a URL", id="url-www"),
    pytest.param("Read /etc/pev/config before retrying.", "a file path", id="absolute-path"),
    pytest.param("Read ./data/poses before retrying.", "a file path", id="relative-path"),
    pytest.param("Open C:\\Users\\ops before retrying.", "a file path", id="windows-path"),
    pytest.param("Load the scene from notes.json first.", "a file name or dotted name", id="file"),
    pytest.param("Ask ops@example.com before retrying.", "an e-mail address", id="email"),
    pytest.param(
        "Resume task 9597f9eb-a497-4e5d-8b2d-b70ca012eafc first.",
        "an id (UUID or hex)",
        id="uuid",
    ),
    pytest.param("Compare with record deadbeefcafe first.", "an id (UUID or hex)", id="hex"),
    pytest.param("Use node pick_red_2 again.", "an identifier", id="snake-id-digits"),
    pytest.param("Use the pickRed node again.", "an identifier", id="camel-id"),
    pytest.param("Call it with sk-proj-abcdefghijklmnop.", "a credential", id="openai-key"),
    pytest.param("Send api_key = hunter22 along.", "a credential", id="api-key"),
    pytest.param("Send the header bearer abcdefghijkl along.", "a credential", id="bearer"),
    pytest.param(
        "Attach aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ when retrying.",
        "a long token (a key or encoded data)",
        id="base64",
    ),
    pytest.param('Set "mode" again before retrying.', "code or a quoted value", id="quoted"),
    pytest.param("Pass {pose} from the last look.", "code or a quoted value", id="template-hole"),
    pytest.param(
        "Ask Dana before retrying.", "a name (a capitalised word inside a sentence)", id="name"
    ),
    pytest.param("Move back twelve centimetres.", "a number in words", id="number-in-words"),
    pytest.param("Use password hunter again.", "a credential in words", id="credential-in-words"),
    pytest.param(
        "Observe the scene again, then 重试.",
        "characters outside plain ASCII (another script, or look-alikes)",
        id="another-script",
    ),
    pytest.param(
        "Grasp the crimson mug beside the kettle.",
        "a word outside the lesson vocabulary",
        id="object-words",
    ),
    pytest.param("Set the mode to 'fast' first.", "code or a quoted value", id="single-quoted"),
    pytest.param("Retry once\nand then stop.", "more than one line", id="two-lines"),
    pytest.param("", "empty", id="empty"),
    pytest.param("Retry it. " * 40, "longer than 300 characters", id="too-long"),
    pytest.param(
        "Grasp the red_cube again.", "a literal value of a source task", id="argument-value"
    ),
    pytest.param(
        "Grasp the red cube again.", "a literal value of a source task", id="argument-words"
    ),
    pytest.param(
        "After pick_red fails, look again.", "a literal value of a source task", id="node-id"
    ),
    pytest.param(
        "Look again, then put the red, green and blue cubes in the tray.",
        "a literal value of a source task",
        id="input-string",
    ),
    pytest.param(
        "If the kitchen flood claim fails, wait.",
        "a literal value of a source task",
        id="argument-phrase",
    ),
    pytest.param(
        "Never refile clm-7781 blindly.", "a literal value of a source task", id="literal-any-case"
    ),
]


@pytest.mark.parametrize(("text", "why"), ADVERSARIAL)
def test_adversarial_texts_are_rejected(text: str, why: str) -> None:
    """Each specific is caught, for the reason it names, and the text is dropped."""
    assert why in lesson_problems(text, forbidden_literals=LITERALS)
    assert sanitize(text, forbidden_literals=LITERALS) is None


CLEAN = [
    "After a pick step fails verification, observe the scene again before retrying it.",
    "When an action fails on its device, do not send it again blindly.",
    "Check the object's pose again before grasping it again.",
    "Look before you act. Then act once, and check what changed.",
    "Prefer a fresh observation over an old one when re-planning a step (even a simple one).",
]


@pytest.mark.parametrize("text", CLEAN)
def test_general_advice_is_kept(text: str) -> None:
    """A general sentence passes unchanged."""
    assert lesson_problems(text, forbidden_literals=LITERALS) == ()
    assert sanitize(text, forbidden_literals=LITERALS) == text


def test_whitespace_is_tidied() -> None:
    """Runs of spaces collapse and the ends are stripped."""
    assert sanitize("  Observe   first,  then act. ") == "Observe first, then act."


def test_allowed_tool_names_pass_patterns_that_would_refuse_them() -> None:
    """A tool's own name may be snake_case, carry digits or a capital: it is the lesson's key."""
    text = "After a read_file_v2 step fails verification, check what it read."
    assert sanitize(text) is None
    assert sanitize(text, allowed=["read_file_v2"]) == text
    assert sanitize("After a PDFReader step fails, retry once.", allowed=["PDFReader"])


def test_a_literal_that_is_an_allowed_tool_name_does_not_refuse_it() -> None:
    """A node id equal to a tool's name (``observe``) does not forbid naming the tool."""
    text = "After a pick step fails verification, observe the scene again."
    assert sanitize(text, forbidden_literals=["observe"]) is None
    assert sanitize(text, forbidden_literals=["observe"], allowed=["observe"]) == text


def test_short_literals_forbid_nothing() -> None:
    """A node called ``a`` does not forbid the article."""
    assert sanitize("After a step fails, look again.", forbidden_literals=["a", "at"])


def test_literals_match_whole_words_only() -> None:
    """The literal ``tray`` does not forbid ``astray``."""
    assert sanitize("Plans that go astray need a fresh look.", forbidden_literals=["tray"])
    problems = lesson_problems("Put it in the tray.", forbidden_literals=["tray"])
    assert "a literal value of a source task" in problems


@pytest.mark.parametrize(
    "key", [LessonKey(cause=cause, tool="pick", effect=effect) for cause, effect in TEMPLATES]
)
def test_every_template_passes_the_sanitiser(key: LessonKey) -> None:
    """The templates are general by construction: each filled-in text is clean."""
    text = template_text(key)
    assert text is not None
    assert sanitize(text, forbidden_literals=LITERALS, allowed=["pick"]) == text


@given(st.text(max_size=80), st.lists(st.text(max_size=12), max_size=4))
def test_sanitize_is_total_and_never_keeps_a_literal(text: str, literals: list[str]) -> None:
    """Any text gives a verdict without raising, and a kept text holds no long literal."""
    kept = sanitize(text, forbidden_literals=literals)
    if kept is not None:
        lowered = f" {kept.casefold()} "
        for literal in literals:
            word = " ".join(literal.split()).casefold()
            if len(word) >= 3 and word.isalpha():
                assert f" {word} " not in lowered
