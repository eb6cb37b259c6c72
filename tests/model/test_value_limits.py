"""What pev can record of a component's value: the iterative walk and its limits.

See docs/model.md, "Values pev can record".
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from pev._json import (
    MAX_INTEGER_DIGITS,
    MAX_NESTING,
    ValueLimits,
    canonical_json,
    freeze_json,
    value_problem,
)


def _nested_list(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def _nested_dict(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param({"a": [1, 2.5, 'x\n"é\x01', None, True, False, {"k": []}]}, id="mixed"),
        pytest.param([], id="empty-list"),
        pytest.param({}, id="empty-object"),
        pytest.param("😀 é" * 3, id="unicode"),
        pytest.param(2**53 - 1, id="largest-double-integer"),
        pytest.param(9876543210123456, id="64-bit-id"),
        pytest.param(-(2**70), id="beyond-64-bits"),
        pytest.param(10**MAX_INTEGER_DIGITS - 1, id="largest-integer"),
        pytest.param(-(10**MAX_INTEGER_DIGITS - 1), id="smallest-integer"),
        pytest.param(1e300, id="large-float"),
        pytest.param((1, (2, 3)), id="tuples"),
    ],
)
def test_a_json_value_of_exactly_the_byte_limit_is_recordable(value: object) -> None:
    """The walk counts the canonical JSON bytes exactly: at the limit passes, one under fails."""
    size = len(canonical_json(value).encode("utf-8"))
    assert value_problem(value, ValueLimits(max_bytes=size)) is None
    assert value_problem(value, ValueLimits(max_bytes=size - 1)) is not None


@pytest.mark.parametrize(
    ("value", "found"),
    [
        pytest.param({"a": [1, {"b": math.nan}]}, "$.a[1].b: nan is not a JSON number", id="nan"),
        pytest.param([math.inf], "$[0]: inf is not a JSON number", id="inf"),
        pytest.param({"x": -math.inf}, "$.x: -inf is not a JSON number", id="minus-inf"),
        pytest.param({"x": object()}, "$.x: a object is not a JSON value", id="object"),
        pytest.param({"x": b"raw"}, "$.x: a bytes is not a JSON value", id="bytes"),
        pytest.param({"x": {1, 2}}, "$.x: a set is not a JSON value", id="set"),
        pytest.param({1: "one"}, "$: object key 1 is not a string", id="int-key"),
        pytest.param(
            ["ok", "bad\ud800"],
            "$[1]: text that is not valid Unicode (a lone surrogate at index 3)",
            id="surrogate",
        ),
        pytest.param(
            {"k\udc00": 1},
            "$.k\\udc00: object key: text that is not valid Unicode (a lone surrogate at index 1)",
            id="surrogate-key",
        ),
    ],
)
def test_a_value_json_cannot_hold_is_named_at_its_place(value: object, found: str) -> None:
    """Each problem is found, at its place, in text that can itself be stored."""
    assert value_problem(value) == found


@pytest.mark.parametrize(
    "value",
    [2**53, -(2**53) - 1, 2**63 - 1, 2**64 + 1, -(10**39 + 7), 10**MAX_INTEGER_DIGITS - 1],
    ids=["2**53", "-2**53-1", "2**63-1", "2**64+1", "40-digits", "640-digits"],
)
def test_an_integer_past_two_to_the_53_is_recordable(value: int) -> None:
    """Integers beyond ±(2**53-1) are recorded exactly, up to MAX_INTEGER_DIGITS digits."""
    assert value_problem({"n": [value]}) is None


def test_an_integer_of_more_digits_than_the_bound_is_named_by_its_size() -> None:
    """Past MAX_INTEGER_DIGITS digits an integer is refused, named by its size, not its digits."""
    assert value_problem(-(10**MAX_INTEGER_DIGITS)) is not None
    problem = value_problem({"n": 10**5000})
    assert problem == (
        "$.n: the integer of about 5001 digits has more than 640 digits, the most a ledger "
        "records; pass such numbers as strings"
    )


def test_a_value_nested_100000_deep_is_a_problem_not_a_recursion_error() -> None:
    """The walk is iterative: depth is a problem named with its setting, never RecursionError."""
    problem = value_problem(_nested_list(100_000))
    assert problem is not None
    assert problem.endswith(
        "nested deeper than 64 levels, past the limit RecoveryPolicy.max_value_depth=64"
    )


def test_the_depth_limit_counts_arrays_and_objects() -> None:
    """A value exactly max_depth deep passes; one level more fails."""
    assert value_problem(_nested_dict(5), ValueLimits(max_depth=5)) is None
    assert value_problem(_nested_dict(6), ValueLimits(max_depth=5)) is not None
    assert value_problem(_nested_list(64)) is None


def test_a_value_that_contains_itself_ends_at_the_depth_limit() -> None:
    """A cycle is not walked for ever: it is too deep."""
    looped: list[object] = [1]
    looped.append(looped)
    problem = value_problem(looped)
    assert problem is not None
    assert "RecoveryPolicy.max_value_depth" in problem


def test_a_value_past_the_byte_limit_names_the_setting() -> None:
    """Past max_value_bytes the problem names the limit and its setting."""
    problem = value_problem({"blob": "x" * 2_000_000}, path="value")
    assert problem == (
        "value: more than 1048576 bytes as JSON, past the limit "
        "RecoveryPolicy.max_value_bytes=1048576"
    )


def test_a_mapping_that_fails_to_be_read_is_a_problem() -> None:
    """A component's own mapping that raises when read is a problem, not an exception."""

    class Broken(dict[str, object]):
        def items(self) -> Any:
            raise RuntimeError("no")

    assert value_problem({"x": Broken(a=1)}) == "$.x: reading its items raised RuntimeError"


def test_a_long_path_is_shortened() -> None:
    """The place of a problem deep inside is shown by its start and its end."""
    problem = value_problem(_nested_list(1000))
    assert problem is not None
    assert problem.startswith("$[0][0][0]")
    assert "…" in problem
    assert len(problem) < 300


def test_freeze_json_refuses_values_deeper_than_the_codec_handles() -> None:
    """freeze_json raises ValueError, not RecursionError, past MAX_NESTING levels."""
    freeze_json(_nested_list(MAX_NESTING - 1))
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_NESTING} levels"):
        freeze_json(_nested_list(100_000))
