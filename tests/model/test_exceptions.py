"""How a component's exception is written down: type, message, and its own innermost frame.

See docs/engine.md, "Failures that speak".
"""

from __future__ import annotations

import inspect
import json

import pytest
from packaging.version import InvalidVersion, Version

from pev.model import Plan
from pev.model._exceptions import describe_exception, raised_at

HERE = "test_exceptions.py"


def _caught(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - the exception is the subject of the test
        return exc
    raise AssertionError("it did not raise")


def _line_of(fn: object, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if text in line)


def book_room() -> None:
    rooms: dict[str, str] = {}
    rooms["room"]


def test_a_key_error_keeps_its_key_and_names_its_line() -> None:
    """KeyError('room') is "KeyError: 'room'" at the line that raised, never an empty detail."""
    line = _line_of(book_room, 'rooms["room"]')
    assert describe_exception(_caught(book_room)) == (
        f"KeyError: 'room' at {HERE}:{line} in book_room"
    )


def parse(text: str) -> object:
    return json.loads(text)


def test_a_failure_inside_the_standard_library_is_placed_in_the_component() -> None:
    """Frames of the standard library are skipped: the place is the component's call."""
    exc = _caught(lambda: parse("{"))
    assert describe_exception(exc).startswith("json.decoder.JSONDecodeError: Expecting")
    assert raised_at(exc) == f"{HERE}:{_line_of(parse, 'json.loads')} in parse"


def version_of(text: str) -> Version:
    return Version(text)


def test_a_failure_inside_a_library_is_placed_in_the_component() -> None:
    """A third-party library's frames are skipped too: the component's own package decides."""
    exc = _caught(lambda: version_of("not a version"))
    assert isinstance(exc, InvalidVersion)
    assert raised_at(exc) == f"{HERE}:{_line_of(version_of, 'Version(text)')} in version_of"


def test_with_only_pev_frames_the_innermost_of_them_is_named() -> None:
    """An exception that only went through pev's own code is placed in pev's innermost frame."""
    exc = _caught(lambda: Plan("g").node("missing"))
    assert exc.__traceback__ is not None
    while exc.__traceback__ is not None and "pev" not in exc.__traceback__.tb_frame.f_globals.get(
        "__name__", ""
    ):
        exc = exc.with_traceback(exc.__traceback__.tb_next)
    assert raised_at(exc).startswith("_plan.py:")
    assert raised_at(exc).endswith(" in node")


def test_an_exception_never_raised_has_no_place() -> None:
    """Without a traceback the line ends after the message."""
    assert describe_exception(ValueError("bad")) == "ValueError: bad"


def test_an_empty_message_leaves_the_type_alone() -> None:
    """An exception without a message is named by its type."""
    assert describe_exception(TimeoutError()) == "TimeoutError"


def test_an_exception_of_the_component_is_named_with_its_module() -> None:
    """As Python's traceback names it: module and qualified name, except for builtins."""

    class RoomTakenError(Exception):
        pass

    assert describe_exception(RoomTakenError("taken")) == (
        f"{__name__}.test_an_exception_of_the_component_is_named_with_its_module."
        "<locals>.RoomTakenError: taken"
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(ValueError("bad \ud800 text"), "ValueError: bad \\ud800 text", id="surrogate"),
        pytest.param(ValueError("one\ntwo\r\nthree"), "ValueError: one two three", id="lines"),
        pytest.param(ValueError("x" * 5000), "ValueError: " + "x" * 1000 + "…", id="long"),
    ],
)
def test_the_line_can_always_be_stored(exc: BaseException, expected: str) -> None:
    """Lone surrogates are escaped, line breaks folded, and long messages cut."""
    assert describe_exception(exc) == expected


def test_a_message_that_cannot_be_read_is_replaced() -> None:
    """An exception whose __str__ raises still has a line."""

    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe_exception(UnprintableError()).endswith(
        "UnprintableError: <its message could not be read>"
    )
