"""RFC 8785 (JCS) canonical JSON: numbers, exact integers, key order, strings, typed values.

The text new ledger events are sealed over (docs/ledger-format.md); its properties over random
values are in test_properties_jcs.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pev import codec
from pev._jcs import MAX_INTEGER_DIGITS, jcs_float, jcs_json, utf16_sorted
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


BIG_INTEGERS = [
    pytest.param(2**53, "9007199254740992", id="2**53"),
    pytest.param(-(2**53) - 1, "-9007199254740993", id="-2**53-1"),
    pytest.param(9876543210123456, "9876543210123456", id="snowflake"),
    pytest.param(2**63 - 1, "9223372036854775807", id="2**63-1"),
    pytest.param(-(2**63), "-9223372036854775808", id="-2**63"),
    pytest.param(2**64 + 1, "18446744073709551617", id="2**64+1"),
    pytest.param(-(10**39 + 7), "-1000000000000000000000000000000000000007", id="40-digits"),
]


@pytest.mark.parametrize(("value", "text"), BIG_INTEGERS)
def test_an_integer_beyond_the_double_range_is_written_exactly(value: int, text: str) -> None:
    """pev's rule: an integer is its exact decimal digits, of any size, on both ways of writing."""
    assert jcs_json(value) == text
    assert codec.dumps_jcs({"id": [value]}) == f'{{"id":[{text}]}}'


@pytest.mark.parametrize(("value", "text"), BIG_INTEGERS)
def test_an_integer_beyond_the_double_range_reads_back_exactly(value: int, text: str) -> None:
    """A number without a fraction or an exponent reads back as the integer it spells."""
    back = codec.loads(f'{{"id":{text}}}', JsonObject, jcs=True)
    assert (back["id"], type(back["id"])) == (value, int)
    assert codec.loads(text, int, jcs=True) == value


def test_an_integer_of_the_most_digits_round_trips() -> None:
    """An integer of MAX_INTEGER_DIGITS digits is written and read back exactly."""
    largest = -(10**MAX_INTEGER_DIGITS - 1)
    text = codec.dumps_jcs([largest])
    assert len(text) == MAX_INTEGER_DIGITS + 3  # "[", "-" and "]"
    assert codec.loads(text, tuple[int, ...], jcs=True) == (largest,)


def test_an_integer_of_more_digits_is_refused_with_the_way_out() -> None:
    """One digit more is refused, named by its size, saying to pass it as a string."""
    with pytest.raises(CodecError, match=r"of about 641 digits .* pass such numbers as strings"):
        codec.dumps_jcs({"id": 10**MAX_INTEGER_DIGITS})
    with pytest.raises(CodecError, match="of about 5000 digits"):
        codec.dumps_jcs(-(10**4999))


def test_a_text_with_an_integer_of_more_digits_does_not_read() -> None:
    """Reading refuses an integer past MAX_INTEGER_DIGITS digits, naming how many it has."""
    with pytest.raises(CodecError, match="an integer of 641 digits, more than the 640"):
        codec.loads("[-1" + "0" * 640 + "]", object, jcs=True)


def test_digests_write_integers_of_any_size() -> None:
    """For a digest (never stored) an integer past the most digits is written, not refused."""
    assert jcs_json(10**700, any_integer=True) == str(10**700)


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


def test_a_big_integral_float_reads_back_as_the_integer_of_its_text() -> None:
    """1e20 is written 100000000000000000000, which reads back as that integer, text unchanged."""
    text = codec.dumps_jcs({"far": 1e20, "id": 7})
    assert text == '{"far":100000000000000000000,"id":7}'
    back: JsonObject = codec.loads(text, JsonObject, jcs=True)
    assert (back["far"], type(back["far"]), back["id"]) == (10**20, int, 7)
    assert codec.dumps_jcs(back) == text
    assert back == freeze_json({"far": 1e20, "id": 7})


def test_a_float_field_reads_back_from_a_big_integral_text() -> None:
    """2.0**64 is written 18446744073709552000, and a float field reads that back as 2.0**64."""
    text = codec.dumps_jcs(2.0**64)
    assert text == "18446744073709552000"
    assert codec.loads(text, float, jcs=True) == 2.0**64


def test_times_are_written_in_utc_with_z() -> None:
    """A time is its ISO 8601 text in UTC, as in pev's own form."""
    at = datetime(2026, 1, 1, 9, 0, 0, 5, tzinfo=UTC)
    assert codec.dumps_jcs(at) == codec.dumps(at) == '"2026-01-01T09:00:00.000005Z"'
