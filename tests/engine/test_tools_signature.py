"""Tools: the @tool decorator, and the spec it reads from a function's signature.

See docs/design.md §6.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional, Union

import pytest

from pev.engine import Tool, tool
from pev.model import Effect

# --- decoration -------------------------------------------------------------------------------


def test_bare_decorator_makes_an_action_tool_named_after_the_function() -> None:
    """@tool without options: the function's name, effect action, no resource or timeout."""

    @tool
    def grip(force: float) -> str:
        """Close the gripper.

        Squeezes until the force is reached.

        Args:
            force: In newtons.
        """
        return f"gripped at {force}"

    assert isinstance(grip, Tool)
    assert (grip.name, grip.effect, grip.resource, grip.timeout_s) == (
        "grip",
        Effect.ACTION,
        None,
        None,
    )
    # The docstring's text before its sections, as the OpenAI Agents SDK and pydantic-ai read it.
    assert grip.description == "Close the gripper.\n\nSqueezes until the force is reached."
    assert grip.schema["properties"]["force"]["description"] == "In newtons."
    assert grip.spec.effect is Effect.ACTION


def test_decorator_with_options_sets_them() -> None:
    """@tool(...) sets name, effect, resource, timeout and description."""

    @tool(name="peek", effect="query", resource="camera", timeout_s=2.0, description="Look.")
    def look() -> str:
        return "a cube"

    assert (look.name, look.effect, look.resource, look.timeout_s, look.description) == (
        "peek",
        Effect.QUERY,
        "camera",
        2.0,
        "Look.",
    )
    assert look.spec.name == "peek"
    assert look.spec.effect is Effect.QUERY
    assert look.spec.description == "Look."


def test_a_tool_is_still_callable_directly() -> None:
    """Calling the Tool calls the function."""

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, b=3) == 5


async def test_an_async_tool_called_directly_returns_its_coroutine() -> None:
    """An async tool called directly is awaited like the function."""

    @tool(effect=Effect.QUERY)
    async def read() -> str:
        return "42"

    assert read.is_async
    assert await read() == "42"


def test_decorating_a_tool_twice_is_refused() -> None:
    """@tool on a Tool is a TypeError, not a silent second wrapper."""

    @tool
    def once() -> None:
        return None

    with pytest.raises(TypeError, match="already a tool"):
        tool(once)


@pytest.mark.parametrize("effect", ["write", "QUERY", ""])
def test_an_unknown_effect_is_refused_naming_the_allowed_values(effect: str) -> None:
    """A bad effect string is a ValueError that names 'query' and 'action'."""
    with pytest.raises(ValueError, match="'query', 'action'"):
        tool(lambda: None, name="x", effect=effect)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout_s", [0, -1.0, math.nan, math.inf])
def test_a_timeout_that_is_not_a_positive_number_is_refused(timeout_s: float) -> None:
    """timeout_s must be positive and finite."""
    with pytest.raises(ValueError, match="timeout_s"):
        tool(lambda: None, name="x", timeout_s=timeout_s)


# --- signature → spec -------------------------------------------------------------------------

UserId = NewType("UserId", str)
_UNANNOTATED = object()


def _json_types(hint: object) -> frozenset[str]:
    def fn(value):  # type: ignore[no-untyped-def]
        return value

    if hint is not _UNANNOTATED:
        fn.__annotations__ = {"value": hint}
    return tool(fn).spec.parameters[0].json_types


# One hint per row, with the JSON types plan validation accepts for it (empty: any value).
HINTS = [
    pytest.param(str, {"string"}, id="str"),
    pytest.param(int, {"integer"}, id="int"),
    pytest.param(float, {"number"}, id="float"),
    pytest.param(bool, {"boolean"}, id="bool"),
    pytest.param(None, {"null"}, id="None"),
    pytest.param(list, {"array"}, id="list"),
    pytest.param(list[int], {"array"}, id="list[int]"),
    pytest.param(tuple[int, ...], {"array"}, id="tuple"),
    pytest.param(Sequence[str], {"array"}, id="Sequence"),
    pytest.param(dict, {"object"}, id="dict"),
    pytest.param(dict[str, int], {"object"}, id="dict[str, int]"),
    pytest.param(Mapping[str, Any], {"object"}, id="Mapping"),
    pytest.param(str | None, {"string", "null"}, id="str|None"),
    pytest.param(Optional[int], {"integer", "null"}, id="Optional"),  # noqa: UP045
    pytest.param(Union[int, str], {"integer", "string"}, id="Union"),  # noqa: UP007
    pytest.param(list[int] | dict[str, int], {"array", "object"}, id="list|dict"),
    pytest.param(Literal["left", "right"], {"string"}, id="Literal-str"),
    pytest.param(Literal[1, "a", None], {"integer", "string", "null"}, id="Literal-mixed"),
    pytest.param(Literal[True], {"boolean"}, id="Literal-bool"),
    pytest.param(Annotated[int, "millimetres"], {"integer"}, id="Annotated"),
    pytest.param(UserId, {"string"}, id="NewType"),
    pytest.param(Any, set(), id="Any"),
    pytest.param(object, set(), id="object"),
    pytest.param(int | Any, set(), id="union-with-Any"),
    pytest.param(_UNANNOTATED, set(), id="unannotated"),
]


@pytest.mark.parametrize(("hint", "expected"), HINTS)
def test_a_type_hint_becomes_the_json_types_of_its_parameter(
    hint: object, expected: set[str]
) -> None:
    """Each supported hint maps to the JSON types a plan arg may have."""
    assert _json_types(hint) == frozenset(expected)


def test_string_annotations_are_resolved() -> None:
    """Hints written as strings (from __future__ annotations) are evaluated."""

    @tool
    def move(x: float, label: str | None = None) -> None:
        del x, label

    assert [(p.name, p.json_types) for p in move.spec.parameters] == [
        ("x", frozenset({"number"})),
        ("label", frozenset({"string", "null"})),
    ]


def test_a_parameter_with_a_default_is_not_required() -> None:
    """Required means: no default."""

    @tool
    def move(x: float, speed: float = 1.0, label: str | None = None) -> None:
        del x, speed, label

    assert [(p.name, p.required) for p in move.spec.parameters] == [
        ("x", True),
        ("speed", False),
        ("label", False),
    ]


def test_keyword_only_parameters_are_plain_parameters() -> None:
    """A keyword-only parameter is passed by name like any other."""

    @tool
    def move(*, x: float) -> None:
        del x

    assert [p.name for p in move.spec.parameters] == ["x"]


def _star_args(*points: float) -> None:
    del points


def _star_kwargs(**options: float) -> None:
    del options


def _positional_only(x: float, /) -> None:
    del x


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        pytest.param(_star_args, r"'points' collects \*args", id="*args"),
        pytest.param(_star_kwargs, r"'options' collects \*\*kwargs", id="**kwargs"),
        pytest.param(_positional_only, "'x' is positional-only", id="positional-only"),
    ],
)
def test_a_signature_plans_cannot_call_by_name_is_refused(fn: Any, why: str) -> None:
    """*args, **kwargs and positional-only parameters are TypeErrors that say why."""
    with pytest.raises(TypeError, match=why) as info:
        tool(fn)
    assert "plan args are named JSON values" in str(info.value)


class _Plain:
    """A class pydantic has no schema for."""


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(_Plain, id="plain-class"),
        pytest.param(list[_Plain], id="list-of-plain"),
        pytest.param(Callable[[int], int], id="callable"),
        pytest.param(int | _Plain, id="union-with-plain"),
    ],
)
def test_a_hint_pydantic_cannot_validate_from_json_is_refused(hint: object) -> None:
    """A hint pydantic cannot validate from JSON is a TypeError naming the parameter."""
    with pytest.raises(TypeError, match="parameter 'value'") as info:
        _json_types(hint)
    assert "pydantic cannot validate from JSON" in str(info.value)
