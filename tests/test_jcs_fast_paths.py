"""Every quick way to a JCS text writes floats exactly as the long way does (docs/ledger-format.md).

Two writers skip pev's pure-Python JCS writer where they can: ``jcs_json(..., any_integer=True)``
lets Python's C encoder write a value it finds no float in, and ``pev._native.jcs_dumps`` hands
values to orjson. Both must write every float as ECMAScript does: ``1e-7`` (Python writes
``1e-07``), ``1e+21``, ``0`` for ``-0.0``, ``1`` for ``1.0``, the digits of ``1e20`` in full. A
float Python writes without a decimal point is the one a check for ``.`` alone would miss.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev import _canonical, _native
from pev._jcs import jcs_float, jcs_json

REFERENCE = _canonical.JCS_LONG_WAY.dumps

# What ECMAScript's Number.prototype.toString writes (RFC 8785, section 3.2.2.3, and its
# appendix of sample numbers): the independent reference for the long way itself.
ECMASCRIPT = [
    pytest.param(0.0, "0", id="zero"),
    pytest.param(-0.0, "0", id="negative-zero"),
    pytest.param(1.0, "1", id="integral"),
    pytest.param(-12.0, "-12", id="negative-integral"),
    pytest.param(0.5, "0.5", id="fraction"),
    pytest.param(1e-7, "1e-7", id="1e-7"),
    pytest.param(1.5e-7, "1.5e-7", id="1.5e-7"),
    pytest.param(1e-6, "0.000001", id="1e-6"),
    pytest.param(1e-5, "0.00001", id="1e-5"),
    pytest.param(1e15, "1000000000000000", id="1e15"),
    pytest.param(1e16, "10000000000000000", id="1e16"),
    pytest.param(1e20, "100000000000000000000", id="1e20"),
    pytest.param(1e21, "1e+21", id="1e21"),
    pytest.param(1.5e300, "1.5e+300", id="1.5e300"),
    pytest.param(5e-324, "5e-324", id="smallest"),
    pytest.param(-5e-324, "-5e-324", id="negative-smallest"),
    pytest.param(1.7976931348623157e308, "1.7976931348623157e+308", id="largest"),
    pytest.param(2**53 + 0.0, "9007199254740992", id="2**53"),
    pytest.param(333333333.3333333, "333333333.3333333", id="rfc-sample"),
    pytest.param(4.5e-15, "4.5e-15", id="rfc-small-sample"),
    pytest.param(295147905179352830000.0, "295147905179352830000", id="rfc-big-sample"),
]

# Floats of every shape Python writes: exponent forms with and without a point, integral values,
# both zeros, subnormals, the ends of the range, and the edges where the forms change.
FLOATS = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(
        [0.0, -0.0, 1.0, -1.0, 1e-7, -1e-7, 1e-6, 1e-5, 1e15, 1e16, 1e20, 1e21, 1e22, 5e-324]
    )
    | st.integers(min_value=-(2**70), max_value=2**70).map(float)
    | st.integers(min_value=-330, max_value=308).map(lambda n: float(f"1e{n}"))
    | st.tuples(st.integers(1, 9), st.integers(-330, 308))
    .map(lambda p: float(f"{p[0]}e{p[1]}"))
    .filter(math.isfinite)  # 2e308 and above overflow to inf, which JSON has no text for
)
# Strings that look like numbers, so that a check for floats in the text must skip strings.
TEXTS = st.sampled_from(["1e-07", "1.5", "2E3", "x", ""]) | st.text(max_size=6)
SCALARS = FLOATS | st.integers(-(2**64), 2**64) | TEXTS | st.booleans() | st.none()
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXTS, inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize(("value", "text"), ECMASCRIPT)
def test_the_long_way_writes_floats_as_ecmascript_does(value: float, text: str) -> None:
    """The reference itself: each float as Number.prototype.toString writes it."""
    assert jcs_float(value) == text
    assert REFERENCE(value) == text


@pytest.mark.parametrize(("value", "text"), ECMASCRIPT)
def test_the_quick_ways_write_each_sample_float_alike(value: float, text: str) -> None:
    """A float alone, and inside an array and an object, by each quick way."""
    for wrapped, expected in (
        (value, text),
        ([value], f"[{text}]"),
        ({"n": value}, f'{{"n":{text}}}'),
    ):
        assert jcs_json(wrapped, any_integer=True) == expected
        assert _native.jcs_dumps(wrapped) == expected


@given(FLOATS)
def test_a_float_is_written_alike_by_every_way(value: float) -> None:
    """The C encoder's way, orjson's way and the long way agree on every float."""
    expected = REFERENCE(value)
    assert jcs_json(value, any_integer=True) == expected
    assert jcs_json([value], any_integer=True) == f"[{expected}]"
    assert _native.jcs_dumps(value) == expected
    assert float(json.loads(expected)) == value  # the text reads back as the same number


@given(VALUES)
def test_a_value_holding_floats_is_written_alike_by_every_way(value: object) -> None:
    """Nested floats beside strings that look like numbers: the same text every way."""
    expected = REFERENCE(value)
    assert jcs_json(value, any_integer=True) == expected
    assert _native.jcs_dumps(value) == expected
