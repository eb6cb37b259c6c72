"""The canonical writers through orjson write every value exactly as pev's own writers did.

The reference is ``pev._canonical``'s pure-Python writers, the long way: the very writers every
text went through before orjson (unchanged, and still what the native writer falls back to).
Every property here writes one value with both, in both forms (pev's own, schema 1, and
RFC 8785, schemas 2 and 3), and asks for the same text, or the same error: a ledger's texts and
hashes must not change by a byte. The golden ledgers (tests/ledger/golden) hold the bytes of
earlier releases on their own.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.builders import dispatched, finished
from tests.support.strategies import events, json_values, times

from pev import _canonical, _native, codec
from pev._canonical import ADDED
from pev._jcs import MAX_INTEGER_DIGITS, MAX_SAFE_INTEGER
from pev._json import JsonObject, freeze_json
from pev.ledger import Event, LedgerEntry, NodeFinished
from pev.model import Effect, RecordStatus, Success
from pev.policy import RecoveryPolicy

GOLDEN = Path(__file__).resolve().parent / "ledger" / "golden"

PEV_REFERENCE = _canonical.PEV_LONG_WAY.dumps
JCS_REFERENCE = _canonical.JCS_LONG_WAY.dumps


def outcome(dumps: Callable[[object], str], value: object) -> tuple[str, str]:
    """What writing ``value`` gives: ``("text", text)`` or ``(error class, message)``."""
    try:
        return "text", dumps(value)
    except RecursionError:
        # Where the stack runs out (its message names the call it ran out in) depends on how
        # deep the caller already was: under a tracer it differs from run to run.
        return "RecursionError", ""
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc).__name__, str(exc)


def assert_written_alike(value: object) -> None:
    """Both forms write ``value`` as the long way does, or raise as it does."""
    assert outcome(_native.pev_dumps, value) == outcome(PEV_REFERENCE, value)
    assert outcome(_native.jcs_dumps, value) == outcome(JCS_REFERENCE, value)


# -- values -------------------------------------------------------------------------------------

# Characters where the writers could part: controls, U+007F, the line separators, quotes, the
# last characters before and in the private use area, and characters beyond U+FFFF (UTF-16
# surrogate pairs, which JCS sorts before U+E000 to U+FFFF).
EDGE_CHARACTERS = st.sampled_from(
    [
        "\x00",
        "\x08",
        "\t",
        "\n",
        "\x1f",
        '"',
        "\\",
        "/",
        "\x7f",
        "é",
        "\u2028",
        "\u2029",
        "\ud7ff",
        "\ue000",
        "\uffff",
        "\U00010000",
        "\U0001f600",
        "\U0010ffff",
    ]
)
TEXTS = st.text(st.characters(codec="utf-8") | EDGE_CHARACTERS, max_size=10)
KEYS = st.text(EDGE_CHARACTERS | st.sampled_from("ab"), max_size=3) | TEXTS
BOUND = 2**53
INTEGERS = (
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.integers(min_value=BOUND - 3, max_value=BOUND + 3).flatmap(
        lambda n: st.sampled_from([n, -n])
    )
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40])
    # Beyond 64 bits (which orjson refuses), up to and just past the most digits a ledger holds.
    | st.integers(min_value=-(10**MAX_INTEGER_DIGITS), max_value=10**MAX_INTEGER_DIGITS)
)
FLOATS = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e21, 1e20, 1e-7, 1e-6, 1e16, 1e15, 5e-324, 1e-5])
    | st.integers(min_value=-(2**60), max_value=2**60).map(float)
    | st.floats(min_value=1e-320, max_value=1e-300)
    | st.floats(min_value=1e300, allow_infinity=False)
)
PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | INTEGERS | FLOATS | TEXTS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(KEYS, children, max_size=5)
    ),
    max_leaves=20,
)


class Gauge(enum.Enum):
    """An enum whose values orjson would write in its own way (a float, a tuple)."""

    FULL = 1.0
    TINY = 1e-05
    PAIR = (1, 1e16)


class Shouted(enum.StrEnum):
    """A text enum whose values are not the texts its members are."""

    QUIET = "quiet"

    def __new__(cls, text: str) -> Shouted:
        member = str.__new__(cls, text)
        member._value_ = text.upper()
        return member


class Huge(enum.IntEnum):
    """An integer enum with a value beyond ±2**53 (and beyond 64 bits)."""

    SMALL = 1
    LARGE = 2**70


class Tag(str):
    """A subclass of text, written as text but converted to a key by str()."""

    def __str__(self) -> str:
        return f"tag:{str.__str__(self)}"


class Count(int):
    """A subclass of int."""


Point = collections.namedtuple("Point", "x y")


@dataclass(frozen=True, slots=True)
class Boxed:
    """A member of a tagged union holding anything."""

    kind: ClassVar[str] = "boxed"
    item: object
    note: str = ""


@dataclass(frozen=True, slots=True)
class Grown:
    """A value with a field added later (written only when it is not its default)."""

    item: object
    extra: object = field(default=0.5, metadata=ADDED)


# Values pev's codec carries beside JSON, and a few it refuses (the refusal must be the same).
ODD_LEAVES = st.one_of(
    times,
    st.datetimes(timezones=st.none() | st.just(UTC)),  # naive ones are refused
    st.binary(max_size=8),
    st.frozensets(TEXTS | INTEGERS, max_size=3),
    st.sets(FLOATS, max_size=3),
    st.sampled_from([*Effect, *RecordStatus, *Gauge, *Shouted, *Huge]),
    TEXTS.map(Tag),
    INTEGERS.map(Count),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.sampled_from(["\ud800", "a\udfff", "\udc00\ud800"]),  # lone surrogates
    st.just(uuid.UUID(int=7)) | st.just(date(2026, 1, 1)) | st.just(object()),
    st.builds(
        RecoveryPolicy,
        lease_s=st.sampled_from([30.0, 31.5, 1e-7]),
        max_value_depth=st.sampled_from([64, 8]),
    ),
)
TYPED = st.recursive(
    ODD_LEAVES | st.none() | st.booleans() | INTEGERS | FLOATS | TEXTS,
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.builds(Point, children, children)
        | st.dictionaries(KEYS, children, max_size=3)
        | st.dictionaries(KEYS, children, max_size=3).map(MappingProxyType)
        | st.dictionaries(KEYS, children, max_size=3).map(JsonObject)
        | st.dictionaries(st.integers(0, 3) | st.booleans() | TEXTS.map(Tag), children, max_size=2)
        | st.builds(Boxed, children, TEXTS)
        | st.builds(Grown, children, st.sampled_from([0.5, 1, "x"]) | children)
    ),
    max_leaves=12,
)


@settings(max_examples=500)
@given(PLAIN_JSON)
def test_plain_json_is_written_as_before(value: object) -> None:
    """Any JSON value: keys beyond U+FFFF, any float, integers of any size, any text."""
    assert_written_alike(value)


# Integers beyond ±(2**53-1), where RFC 8785's doubles would lose digits, of up to the most
# digits a ledger holds; nested in arrays and objects with plain keys (code-point order is
# UTF-16 order there, so Python's own encoder writes the expected text).
BIG_INTEGERS = st.integers(
    min_value=MAX_SAFE_INTEGER + 1, max_value=10**MAX_INTEGER_DIGITS - 1
).flatmap(lambda n: st.sampled_from([n, -n]))
NESTED_BIG_INTEGERS = st.recursive(
    BIG_INTEGERS | st.sampled_from([2**63 - 1, 2**64 - 1, 2**64, 2**64 + 1, -(2**63) - 1]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(st.text("abkz", max_size=3), children, max_size=4)
        | st.dictionaries(st.text("abkz", max_size=3), children, max_size=4).map(JsonObject)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(NESTED_BIG_INTEGERS)
def test_big_integers_are_written_exactly_both_ways(value: object) -> None:
    """Integers of any size, nested: orjson's way and the long way write their exact digits."""
    assert_written_alike(value)
    exact = json.dumps(value, sort_keys=True, separators=(",", ":"), default=dict)
    assert _native.jcs_dumps(value) == exact


@settings(max_examples=300)
@given(PLAIN_JSON.map(freeze_json) | json_values)
def test_frozen_json_is_written_as_before(value: object) -> None:
    """Frozen JSON values (objects as JsonObject, arrays as tuples), as events hold them."""
    assert_written_alike(value)


@settings(max_examples=300)
@given(st.dictionaries(KEYS, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_are_sorted_as_before(value: dict[str, int]) -> None:
    """Keys mixing U+E000 to U+FFFF and characters beyond: UTF-16 order in JCS, else code point."""
    assert_written_alike(value)
    assert_written_alike(JsonObject(value))


@settings(max_examples=500)
@given(TYPED)
def test_typed_values_are_written_as_before(value: object) -> None:
    """Times, bytes, sets, enums, subclasses, ADDED fields, and what the codec refuses."""
    assert_written_alike(value)


@settings(max_examples=500)
@given(events)
def test_events_are_written_as_before(event: Event) -> None:
    """Every kind of ledger event, drawn as the codec's own property tests draw them."""
    assert_written_alike(event)


@settings(max_examples=200)
@given(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=8), st.data())
def test_repeated_times_are_written_as_before(picks: list[int], data: st.DataObject) -> None:
    """Times written one after another (the writers keep the last one) keep their own texts."""
    shift = timedelta(microseconds=data.draw(st.integers(-(10**15), 10**15)))
    instant = datetime(2026, 1, 1, 9, tzinfo=UTC) + shift
    zones = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(0))]
    pool = [
        instant,
        instant.astimezone(zones[data.draw(st.integers(0, 2))]),
        instant + timedelta(microseconds=1),
    ]
    for pick in picks:
        assert_written_alike(pool[pick])
        assert_written_alike(
            NodeFinished(record_id="r", status=RecordStatus.SUCCEEDED, result=None, at=pool[pick])
        )


def test_golden_events_are_written_as_before() -> None:
    """The events of the golden ledgers, as the engine wrote them."""
    lines = [
        line
        for path in sorted(GOLDEN.glob("*.jsonl"))
        for line in path.read_text("utf-8").splitlines()
    ]
    assert lines
    for line in lines:
        entry = codec.loads(line, LedgerEntry)
        assert_written_alike(entry.event)
        assert_written_alike(entry.at)


@pytest.mark.parametrize("member", [*Effect, *RecordStatus, *Gauge, *Shouted, *Huge], ids=repr)
def test_enums_are_written_as_before(member: enum.Enum) -> None:
    """Each member alone, in an array and as a field: as the text of its value."""
    assert_written_alike(member)
    assert_written_alike((member, [member]))
    assert_written_alike(Boxed(member))


def test_dataclasses_with_odd_field_names_are_written_as_before() -> None:
    """Field names no dict display can spell (not identifiers, keywords) are still written."""
    odd = dataclasses.dataclass(init=False, repr=False, eq=False)(
        type("Odd", (), {"__annotations__": {"a-b": float, "class": str}, "kind": "odd"})
    )
    value = odd()
    setattr(value, "a-b", 1.0)
    setattr(value, "class", "x")
    assert_written_alike(value)
    assert_written_alike([value, value])


def test_deep_values_are_written_as_before() -> None:
    """Nesting past orjson's own limit is written the long way."""
    value: Any = 1.5
    frozen: Any = 1.5
    for _ in range(300):
        value = [value]
        frozen = JsonObject({"a": (frozen,)})
    assert_written_alike(value)
    assert_written_alike(frozen)


# -- the quick way is the one taken ---------------------------------------------------------------


class CountingLongWay:
    """A form's pure-Python writer that counts what it is asked to write whole."""

    def __init__(self, long_way: Any) -> None:
        self.long_way = long_way
        self.key_order = long_way.key_order
        self.write_float = long_way.write_float
        self.whole: list[object] = []

    def dumps(self, value: object) -> str:
        self.whole.append(value)
        text: str = self.long_way.dumps(value)
        return text


def test_64_bit_integers_take_the_quick_way() -> None:
    """orjson writes integers up to 64 bits itself under JCS; only larger ones go the long way."""
    long_way = CountingLongWay(_canonical.JCS_LONG_WAY)
    writer = _native._NativeWriter(long_way, utf16_keys=True)  # type: ignore[arg-type]
    within = {"id": 9876543210123456, "ids": [2**63 - 1, -(2**63), 2**64 - 1]}
    assert writer.dumps(within) == JCS_REFERENCE(within)
    assert long_way.whole == []
    beyond = {"id": 2**64 + 1}
    assert writer.dumps(beyond) == '{"id":18446744073709551617}'
    assert long_way.whole == [beyond]


@pytest.mark.parametrize("jcs", [False, True], ids=["pev", "jcs"])
def test_typical_events_take_the_quick_way(jcs: bool) -> None:
    """A node's events (its record, its result, their times) are written by orjson alone."""
    long_way = CountingLongWay(_canonical.JCS_LONG_WAY if jcs else _canonical.PEV_LONG_WAY)
    writer = _native._NativeWriter(long_way, utf16_keys=jcs)  # type: ignore[arg-type]
    value = freeze_json({"cup": "red", "at": [0.4, 0.1], "n": 3})
    typical = [
        dispatched("rec-1", "look"),
        finished("rec-1", Success(value=value)),
        finished("rec-1", Success(value=None)),
        replace(
            dispatched("rec-2", "grab"),
            record=replace(dispatched("rec-2", "grab").record, error="x"),
        ),
    ]
    for event in typical:
        old = JCS_REFERENCE(event) if jcs else PEV_REFERENCE(event)
        assert writer.dumps(event) == old
    assert long_way.whole == []
