"""RFC 8785 (JCS) canonical JSON: numbers, key order, strings, bounds, and typed values.

The text new ledger events are sealed over (docs/ledger-format.md); its properties over random
values are in test_properties_jcs.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pev import codec
from pev._jcs import MAX_SAFE_INTEGER, jcs_float, jcs_json, utf16_sorted
from pev._json import JsonObject, freeze_json
from pev.errors import CodecError
from pev.policy import RecoveryPolicy


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(1.0, "1", id="integral"),
        pytest.param(-0.0, "0", id="negative-zero"),
        pytest.param(0.0, "0", id="zero"),
        pytest.param(1e21, "1e+21", id="1e21"),
        pytest.param(1e20, "100000000000000000000", id="1e20-positional"),
        pytest.param(1e-7, "1e-7", id="1e-7"),
        pytest.param(1e-6, "0.000001", id="1e-6-positional"),
        pytest.param(1.5e-7, "1.5e-7", id="mantissa-exponent"),
        pytest.param(123.456, "123.456", id="plain"),
        pytest.param(-2.5e25, "-2.5e+25", id="negative-exponent-form"),
        pytest.param(5e-324, "5e-324", id="smallest"),
        pytest.param(1.7976931348623157e308, "1.7976931348623157e+308", id="largest"),
        pytest.param(4.35, "4.35", id="shortest-round-trip"),
        pytest.param(0.1 + 0.2, "0.30000000000000004", id="seventeen-digits"),
        pytest.param(1e16, "10000000000000000", id="1e16"),
    ],
)
def test_floats_are_written_as_ecmascript_writes_them(value: float, text: str) -> None:
    """A float's JCS text is ECMAScript's Number.prototype.toString of it."""
    assert jcs_float(value) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_floats_have_no_text(value: float) -> None:
    """NaN and the infinities are not JSON numbers."""
    with pytest.raises(ValueError, match="not a JSON number"):
        jcs_float(value)


def test_keys_sort_by_utf16_code_units() -> None:
    """A character beyond U+FFFF (a surrogate pair) sorts before U+E000..U+FFFF, as in JCS."""
    keys = ["\ufb01", "\U0001f600", "a", "\u00e9", "\ue000"]
    assert utf16_sorted(keys) == ["a", "\u00e9", "\U0001f600", "\ue000", "\ufb01"]
    assert sorted(keys) != utf16_sorted(keys)  # code-point order differs here


def test_strings_escape_only_quotes_backslashes_and_control_characters() -> None:
    """Control characters are escaped (named ones by name); non-ASCII text is written as is."""
    text = 'q"b\\\b\f\n\r\t\x00\x1f\x7f é 😀 \u2028'
    assert jcs_json(text) == '"q\\"b\\\\\\b\\f\\n\\r\\t\\u0000\\u001f\x7f é 😀 \u2028"'


def test_the_rfc_example_object_is_written_as_the_rfc_writes_it() -> None:
    """RFC 8785's sorting example, parsed and written again, comes out as the RFC shows."""
    source = (
        '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet '
        'With Dagesh", "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": '
        '"Control", "\\u00f6": "Latin Small Letter O With Diaeresis"}'
    )
    keys = [key for key, _ in json.loads(jcs_json(json.loads(source)), object_pairs_hook=list)]
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_an_integer_beyond_the_safe_range_is_refused_with_the_way_out() -> None:
    """2**53 has no exact JCS number: the error says to pass it as a string."""
    assert jcs_json(MAX_SAFE_INTEGER) == "9007199254740991"
    with pytest.raises(CodecError, match="pass such numbers as strings"):
        jcs_json({"id": MAX_SAFE_INTEGER + 1})
    with pytest.raises(CodecError, match="as strings"):
        codec.dumps_jcs([-(MAX_SAFE_INTEGER + 1)])


def test_a_huge_integer_is_named_by_its_size() -> None:
    """A 5,000-digit integer is refused without Python's own digit limit getting in the way."""
    with pytest.raises(CodecError, match="of 5000 digits"):
        codec.dumps_jcs(10**4999)


def test_digests_write_big_integers_in_full() -> None:
    """For a digest (never stored) an integer beyond the bound is written, not refused."""
    assert jcs_json(2**60, any_integer=True) == str(2**60)


def test_typed_values_are_written_in_jcs_form() -> None:
    """codec.dumps_jcs writes a dataclass as codec.dumps does, numbers in ECMAScript's form."""
    policy = RecoveryPolicy(replan_timeout_s=120.0, node_timeout_s=0.5)
    text = codec.dumps_jcs(policy)
    assert '"replan_timeout_s":120,' in text
    assert '"node_timeout_s":0.5,' in text
    assert text == jcs_json(json.loads(codec.dumps(policy)))


def test_a_float_field_reads_back_from_its_jcs_integer() -> None:
    """A float field written as 120 decodes as the float 120.0, equal to what was written."""
    policy = RecoveryPolicy(replan_timeout_s=120.0)
    back: RecoveryPolicy = codec.loads(codec.dumps_jcs(policy), RecoveryPolicy)
    assert back == policy
    assert isinstance(back.replan_timeout_s, float)


def test_json_values_read_back_as_equal_values() -> None:
    """A JSON value with 1.0 and -0.0 reads back from JCS as 1 and 0: equal, with one digest."""
    value = freeze_json({"x": [1.0, -0.0, 2.5]})
    back: JsonObject = codec.loads(codec.dumps_jcs(value), JsonObject)
    assert back == value
    assert back["x"] == (1, 0, 2.5)
    assert codec.dumps_jcs(back) == codec.dumps_jcs(value)


def test_a_big_integral_float_reads_back_as_that_float() -> None:
    """1e20 is written 100000000000000000000 and read back by JCS rules as the float 1e20."""
    text = codec.dumps_jcs({"far": 1e20, "id": 7})
    assert text == '{"far":100000000000000000000,"id":7}'
    back: JsonObject = codec.loads(text, JsonObject, jcs=True)
    assert (back["far"], type(back["far"]), back["id"], type(back["id"])) == (1e20, float, 7, int)
    assert codec.dumps_jcs(back) == text


def test_times_are_written_in_utc_with_z() -> None:
    """A time is its ISO 8601 text in UTC, as in pev's own form."""
    at = datetime(2026, 1, 1, 9, 0, 0, 5, tzinfo=UTC)
    assert codec.dumps_jcs(at) == codec.dumps(at) == '"2026-01-01T09:00:00.000005Z"'
