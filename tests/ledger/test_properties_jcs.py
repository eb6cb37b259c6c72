"""Properties of RFC 8785 (JCS) texts and of chains checked from their stored texts.

JCS texts parse back to the same JSON (integers of any size exactly), their numbers match a
reference written from the ECMAScript specification, digests' quick texts are JCS texts, chains
of generated histories verify from their texts (with a key and without), and a change to any
one byte of a stored event's text is caught at that event.
"""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import ROUND_HALF_EVEN, Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.histories import HISTORIES, TASK, Story, stories

from pev._jcs import MAX_INTEGER_DIGITS, _write, jcs_float, jcs_json, jcs_loads
from pev._json import freeze_json
from pev.ledger import (
    GENESIS_HASH,
    EventSchema,
    LedgerEntry,
    RawEntry,
    seal,
    verify_raw,
)
from pev.ledger._chain import raw_entry

KEY = b"property key"

FINITE = st.floats(allow_nan=False, allow_infinity=False)
INTEGERS = st.integers() | st.integers(
    min_value=-(10**MAX_INTEGER_DIGITS - 1), max_value=10**MAX_INTEGER_DIGITS - 1
)
PLAIN = st.recursive(
    st.none() | st.booleans() | INTEGERS | FINITE | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


def _reference_number(value: float) -> str:
    """ECMAScript's Number::toString, step by step from its specification (a second opinion)."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + _reference_number(-value)
    digits, n = _shortest_digits(value)
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    sign = "+" if n - 1 > 0 else "-"
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{mantissa}e{sign}{abs(n - 1)}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """The fewest digits s, with n, such that s x 10**(n - len(s)) reads back as ``value``.

    Of two candidates of that length, the closer to the exact value; of two as close, the even
    one (the specification's note).
    """
    exact = Decimal(value)
    for k in range(1, 18):
        n = exact.adjusted() + 1
        step = Decimal(1).scaleb(n - k)
        nearest = exact.quantize(step, rounding=ROUND_HALF_EVEN)
        fits = [c for c in (nearest - step, nearest, nearest + step) if float(c) == value and c > 0]
        if fits:
            best = min(fits, key=lambda c: (abs(c - exact), int(c.scaleb(k - n)) % 2))
            digits = str(int(best.scaleb(k - n)))
            n += len(digits) - k  # a carry (9.99 -> 10.0) adds a digit
            return digits.rstrip("0"), n
    raise AssertionError(f"no digits for {value!r}")


def _same_json(left: object, right: object) -> bool:
    """JSON equality: numbers by value (1 == 1.0), true apart from 1, -0.0 as 0.

    An integral float reads back as the integer its text spells (6.171554439719727e16 as
    61715544397197270), which is that float once rounded to a double.
    """
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        if type(left) is not type(right):
            return float(left) == float(right)
        return left == right or (math.isnan(left) and math.isnan(right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same_json(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same_json, left, right))
    return type(left) is type(right) and left == right


@settings(max_examples=500)
@given(FINITE)
def test_numbers_match_the_ecmascript_reference(value: float) -> None:
    """Every finite float is written as the specification's Number::toString writes it."""
    assert jcs_float(value) == _reference_number(value)


@given(PLAIN)
def test_jcs_text_parses_back_to_the_same_json(value: object) -> None:
    """Parsing a JCS text gives the value it was written from, and writing it again the text."""
    text = jcs_json(value)
    parsed = jcs_loads(text)
    assert _same_json(parsed, value)
    assert jcs_json(parsed) == text


def _raws(entries: tuple[LedgerEntry, ...]) -> list[RawEntry]:
    return [raw_entry(entry) for entry in entries]


def _resealed(story: Story, key: bytes | None) -> tuple[LedgerEntry, ...]:
    """The story's events sealed again in one batch, with ``key`` (or without)."""
    events = [entry.event for entry in story.entries]
    at = story.entries[-1].at
    return seal(TASK, events, after_seq=0, prev_hash=GENESIS_HASH, at=at, key=key)


@HISTORIES
@given(stories(), st.sampled_from([None, KEY]))
def test_written_chains_verify_from_their_texts(story: Story, key: bytes | None) -> None:
    """A chain as written verifies from its stored texts, against its head, with its key."""
    entries = _resealed(story, key)
    expected = EventSchema.JCS_HMAC_SHA256 if key else EventSchema.JCS_SHA256
    assert {entry.schema for entry in entries} == {expected}
    report = verify_raw(
        TASK, _raws(entries), head_count=len(entries), head_hash=entries[-1].hash, key=key
    )
    assert report.ok, report.problem
    assert report.keyed_events == (len(entries) if key else 0)


@HISTORIES
@given(stories(), st.sampled_from([None, KEY]), st.data())
def test_any_changed_byte_of_an_event_text_is_caught_there(
    story: Story, key: bytes | None, data: st.DataObject
) -> None:
    """Changing any one byte of a stored event's text is caught at that event, never raised."""
    raws = _raws(_resealed(story, key))
    index = data.draw(st.integers(0, len(raws) - 1), label="entry")
    stored = raws[index].event.encode()
    at = data.draw(st.integers(0, len(stored) - 1), label="byte")
    new = data.draw(st.integers(0, 255).filter(lambda byte: byte != stored[at]), label="value")
    changed = stored[:at] + bytes([new]) + stored[at + 1 :]
    raws[index] = replace(raws[index], event=changed.decode("utf-8", "surrogateescape"))
    report = verify_raw(TASK, raws, key=key)
    assert not report.ok
    assert report.first_bad_seq == index + 1


ASTRAL_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\ufb01", "\U0001f600", '"', "\\", "\n"]))
IDENTITY = st.recursive(
    st.none() | st.booleans() | st.integers() | FINITE | ASTRAL_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(ASTRAL_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@given(IDENTITY)
def test_identity_texts_are_jcs_texts(value: object) -> None:
    """The quick path of digests' texts writes exactly what the writer of JCS texts writes."""
    frozen = freeze_json(value)
    assert jcs_json(frozen, any_integer=True) == _write(frozen, int.__repr__)
