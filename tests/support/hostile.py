"""Hypothesis strategies of values and exceptions a careless or hostile component hands pev.

- :func:`json_values`: plain JSON values (what a well-behaved component returns).
- :func:`odd_values`: one value JSON cannot hold, or can hold only past pev's limits: NaN and
  the infinities, integers of thousands of digits, lone surrogates, bytes, sets, objects whose
  every method raises, structures nested thousands deep or containing themselves, megabytes of
  text, mappings with keys that are not text.
- :func:`values`: either, nested inside lists, tuples and dicts.
- :data:`FUZZ` and :data:`FUZZ_MARKS`: the settings and marks every fuzz test runs under.
- :func:`exceptions`: exceptions of every kind a component may raise (the builtin ``Exception``
  classes, pev's own errors, ones whose message cannot be printed), but never ``KeyboardInterrupt``,
  ``SystemExit`` or another ``BaseException`` that is not an ``Exception``: those propagate by
  design (docs/engine.md).
"""

from __future__ import annotations

import builtins
import collections
import datetime as dt
import decimal
import enum
import fractions
import functools
import uuid
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

import pev.errors

# Failing examples are reported as drawn, not shrunk: shrinking one that hangs, builds megabytes
# or runs thousands of commands would take minutes, and every drawn value is small enough to
# read as it is. Derandomized, without an example database: every run tries the same cases.
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)
"""The settings of every fuzz test (each adds its ``max_examples``)."""

FUZZ_MARKS = [
    pytest.mark.slow,
    # A failing example may hold megabytes of text: Hypothesis warns that its repr is large.
    pytest.mark.filterwarnings(
        "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
    ),
]
"""The marks of every fuzz test module."""

DEPTHS = (40, 200, 900, 2_000, 10_000)
"""How deep the nested values go: from harmless to past Python's recursion limit."""

HUGE_TEXT = (100_000, 1_100_000)
"""Sizes of the long strings, in characters."""


class Hostile:
    """An object that refuses to be printed, ordered, iterated, copied or converted."""

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("a hostile object refuses to be used")

    # Identity equality and hashing stay: Hypothesis itself compares and hashes what it draws.
    __str__ = __format__ = __bool__ = __len__ = __iter__ = __getitem__ = _refuse
    __lt__ = __float__ = __int__ = __index__ = __reduce__ = __reduce_ex__ = _refuse

    def __repr__(self) -> str:
        return "Hostile()"  # only for Hypothesis to show a failing example


class Shouting(str):
    """A ``str`` subclass whose ``__str__`` is a megabyte long."""

    __slots__ = ()

    def __str__(self) -> str:
        return "A" * 1_000_000


class Colour(enum.Enum):
    """A plain enum, not a StrEnum: JSON has no such value."""

    RED = 1


class TrickyDict(dict):  # type: ignore[type-arg]
    """A dict whose ``items`` lie about its contents."""

    def items(self) -> Any:
        return [(object(), float("nan"))]


def nested(kind: str, depth: int) -> object:
    """A list, dict or mix nested ``depth`` deep, built without recursion."""
    value: object = 0
    for level in range(depth):
        value = [value] if kind == "list" or (kind == "mixed" and level % 2) else {"d": value}
    return value


def cyclic(kind: str) -> object:
    """A list or dict that contains itself."""
    if kind == "list":
        items: list[object] = [1]
        items.append(items)
        return items
    table: dict[str, object] = {"a": 1}
    table["self"] = table
    return table


def _generator() -> Iterator[int]:
    yield 1


def json_values(*, max_leaves: int = 8) -> st.SearchStrategy[object]:
    """Plain JSON values: null, booleans, finite numbers, text, lists and objects."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=max_leaves,
    )


def surrogate_text() -> st.SearchStrategy[str]:
    """Text holding at least one lone surrogate (not encodable as UTF-8)."""
    return st.tuples(
        st.text(max_size=4), st.integers(0xD800, 0xDFFF).map(chr), st.text(max_size=4)
    ).map("".join)


def odd_values() -> st.SearchStrategy[object]:
    """One value JSON cannot hold, or holds only past pev's size and depth limits."""
    digits = st.integers(30, 12_000).map(lambda n: 10**n - 1)
    return st.one_of(
        st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e308, 5e-324]),
        st.one_of(digits, digits.map(lambda n: -n)),
        surrogate_text(),
        st.binary(max_size=8),
        st.binary(max_size=8).map(bytearray),
        st.sets(st.integers(), max_size=3),
        st.frozensets(st.text(max_size=3), max_size=3),
        st.tuples(st.integers(), st.text(max_size=3)),
        st.complex_numbers(allow_nan=True),
        st.decimals(allow_nan=True),
        st.fractions(),
        st.datetimes(),
        st.dates(),
        st.timedeltas(),
        st.uuids(),
        st.dictionaries(
            st.one_of(st.integers(), st.none(), st.booleans(), st.tuples(st.integers())),
            st.integers(),
            min_size=1,
            max_size=3,
        ),
        st.builds(nested, st.sampled_from(["list", "dict", "mixed"]), st.sampled_from(DEPTHS)),
        st.builds(cyclic, st.sampled_from(["list", "dict"])),
        st.builds(lambda n: "x" * n, st.sampled_from(HUGE_TEXT)),
        st.builds(lambda n: [0] * n, st.sampled_from((10_000, 200_000))),
        st.sampled_from(
            [
                object(),
                Hostile(),
                Shouting("loud"),
                Colour.RED,
                TrickyDict(a=1),
                MappingProxyType({"a": 1}),
                collections.OrderedDict(a=float("nan")),
                collections.Counter("ab"),
                SimpleNamespace(a=1),
                PurePosixPath("/etc/passwd"),
                Ellipsis,
                NotImplemented,
                int,
                len,
                print,
                _generator(),
                range(3),
                memoryview(b"abc"),
                decimal.Decimal("sNaN"),
                fractions.Fraction(1, 3),
                uuid.UUID(int=0),
                dt.UTC,
                ValueError("an exception as a value"),
            ]
        ),
    )


def values() -> st.SearchStrategy[object]:
    """JSON or not: odd values alone or nested among plain ones."""
    leaves = odd_values() | json_values(max_leaves=3)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(st.text(max_size=4) | surrogate_text(), inner, max_size=3),
        ),
        max_leaves=4,
    )


def _builtin_exception_classes() -> list[type[Exception]]:
    """Every concrete ``Exception`` class of the builtins that takes a message."""
    found: list[type[Exception]] = []
    for value in vars(builtins).values():
        if isinstance(value, type) and issubclass(value, Exception):
            try:
                value("a message")
            except TypeError:
                continue
            found.append(value)
    return sorted(found, key=lambda cls: cls.__name__)


class Unprintable(Exception):  # noqa: N818 - named for what it does
    """An exception whose message cannot be made: ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("this exception refuses to be printed")

    def __repr__(self) -> str:
        return "Unprintable()"  # only for Hypothesis to show a failing example


class Rambling(Exception):  # noqa: N818 - named for what it does
    """An exception whose message is a megabyte of text with a lone surrogate in it."""

    def __str__(self) -> str:
        return "\ud800" + "blah " * 200_000


def _pev_errors(message: str) -> list[Exception]:
    """One instance of each of pev's errors, as pev itself would raise it."""
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return [
        pev.errors.PevError(message),
        pev.errors.ContractError(message, field="goal"),
        pev.errors.PlanError([message]),
        pev.errors.StateError(message, task_id="t", state="planning"),
        pev.errors.CodecError(message, path="$"),
        pev.errors.UsageError(message),
        pev.errors.ComponentError(message, role="planner"),
        pev.errors.LeaseHeld("t", owner="someone", expires_at=now),
        pev.errors.LeaseLost("t", owner="someone", epoch=7),
        pev.errors.StoreError(message),
        pev.errors.ConflictError("t", 3),
        pev.errors.LedgerCorruptError(message, task_id="t", seq=2),
        pev.errors.SchemaVersionError(location="x.db", found=99, expected=1),
        pev.errors.UnknownTaskError("t"),
    ]


def _pev_error(index: int, message: str) -> Exception:
    return _pev_errors(message)[index]


def exceptions(*, bugs_propagate: bool = False) -> st.SearchStrategy[Exception]:
    """An exception of any kind a component may raise, with an odd message now and then.

    With ``bugs_propagate``, the exceptions a planner or verifier raises to report a bug in
    itself or a misuse of pev (``AssertionError``, ``UsageError``, ``StateError``) are left out:
    those propagate out of ``run`` by design (docs/engine.md, "Verification and dispatch").
    """
    messages = st.one_of(st.text(max_size=20), surrogate_text(), st.builds(lambda: "x" * 200_000))
    kinds: list[Callable[[str], Exception]] = list(_builtin_exception_classes())
    kinds += [Unprintable, Rambling, lambda m: ExceptionGroup(m, [ValueError(m), KeyError(m)])]
    kinds += [functools.partial(_pev_error, index) for index in range(len(_pev_errors("")))]
    built = st.builds(lambda make, message: make(message), st.sampled_from(kinds), messages)
    built = built | st.builds(KeyError, values()) | st.builds(ValueError, values(), values())
    if bugs_propagate:
        bugs = (AssertionError, pev.errors.UsageError, pev.errors.StateError)
        built = built.filter(lambda exc: not isinstance(exc, bugs))
    return built
