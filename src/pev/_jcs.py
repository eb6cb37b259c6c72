r"""RFC 8785, the JSON Canonicalization Scheme (JCS): the text new ledger events are hashed in.

JCS writes a JSON value as ECMAScript's ``JSON.stringify`` would, with no whitespace and with
every object's keys sorted by their UTF-16 code units. Numbers are written as ECMAScript's
``Number.prototype.toString`` writes them (``1.0`` as ``1``, ``-0.0`` as ``0``, ``1e21`` as
``1e+21``, ``1e-7`` as ``1e-7``); strings escape only ``"``, ``\`` and the control characters
(``\b \t \n \f \r`` by name, the others as ``\u00xx``), which is exactly what Python's own
JSON encoder does with ``ensure_ascii=False``.

pev's one addition to RFC 8785 is for integers, which RFC 8785 writes as the doubles they read
as, losing those beyond ±:data:`MAX_SAFE_INTEGER`: every integer is written as its exact decimal
digits (``-`` before a negative one; no ``+``, exponent, fraction or leading zero), and a number
written without a fraction or an exponent reads back as that exact integer. Within
±:data:`MAX_SAFE_INTEGER`, and for every float, this is RFC 8785's text itself; an integral float
beyond (``1e20``, written ``100000000000000000000``) reads back as the integer it spells, whose
text is the same. An integer has at most :data:`MAX_INTEGER_DIGITS` digits. Since 1 and 1.0 are
one number, a float with an integral value reads back from a JCS text as an integer.

Any language can write these texts: docs/ledger-format.md specifies them for verifiers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring

from pev.errors import CodecError

__all__ = [
    "MAX_INTEGER_DIGITS",
    "MAX_SAFE_INTEGER",
    "jcs_float",
    "jcs_int",
    "jcs_json",
    "jcs_loads",
    "utf16_sorted",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer a double holds exactly (``Number.MAX_SAFE_INTEGER``).

Within ±this bound an integer's text is RFC 8785's own; beyond it, pev's exact digits.
"""

MAX_INTEGER_DIGITS = 640
"""The most decimal digits (its sign not counted) of an integer in a ledger text.

pev writes and reads no longer one. Python converts integers of this many digits to and from
text whatever its limit on such conversions (``sys.set_int_max_str_digits`` allows none lower).
"""

_PAST_DIGITS = 10**MAX_INTEGER_DIGITS  # the least integer of one digit too many


def jcs_int(value: int) -> str:
    """The text of an integer: its exact decimal digits, ``-`` before a negative one.

    Raises:
        CodecError: It has more than :data:`MAX_INTEGER_DIGITS` digits.
    """
    if -_PAST_DIGITS < value < _PAST_DIGITS:
        return int.__repr__(value)
    raise CodecError(
        f"the integer {_shown_integer(value)} has more than {MAX_INTEGER_DIGITS} digits, "
        "the most a ledger records; pass such numbers as strings"
    )


def _shown_integer(value: int) -> str:
    """An integer as a message shows it: in full up to 30 digits, else by its size.

    ``of about 5001 digits``: Python may refuse to write a long integer's digits at all.
    """
    if -(10**30) < value < 10**30:
        return int.__repr__(value)
    return f"of about {int(value.bit_length() * 0.30103) + 1} digits"


def jcs_float(value: float) -> str:
    """The JCS text of a finite float: ECMAScript's ``Number.prototype.toString``.

    Raises:
        ValueError: ``value`` is NaN or infinite, which JSON cannot hold.
    """
    text = float.__repr__(value)
    if text.endswith(".0"):
        # Python writes positional notation for 1e-4 <= |x| < 1e16, where ECMAScript writes the
        # same digits, without the ".0" Python adds to an integral value; -0 is 0.
        return text[:-2] if value else "0"
    if "e" in text:
        return _es_exponent_form(text)
    if "n" in text:  # "nan", "inf", "-inf"
        raise ValueError(f"{text} is not a JSON number")
    return text


def _es_exponent_form(text: str) -> str:
    """ECMAScript's text for a float Python wrote in exponent form (``1e-05``, ``1.5e+16``)."""
    mantissa, exponent = text.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")  # repr's digits: the shortest that round-trip
    k = len(digits)
    n = int(exponent) + 1  # the value is 0.<digits> x 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    power = f"e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + (digits if k == 1 else digits[0] + "." + digits[1:]) + power


def utf16_sorted(keys: Iterable[str]) -> list[str]:
    """Object keys in JCS order: by their UTF-16 code units.

    That is code-point order, except that a character beyond U+FFFF (a surrogate pair in UTF-16)
    sorts before the characters U+E000 to U+FFFF.
    """
    ordered = sorted(keys)
    if "".join(ordered).isascii():  # the usual case: code-point order is UTF-16 order
        return ordered
    return sorted(ordered, key=_utf16_units)


def _utf16_units(key: str) -> bytes:
    # Big-endian UTF-16 compares byte by byte as its code units do; a lone surrogate, which no
    # ledger text can hold, still gets an order rather than an error.
    return key.encode("utf-16-be", "surrogatepass")


def jcs_json(value: object, *, any_integer: bool = False) -> str:
    """The JCS text of a plain or frozen JSON value (mappings, lists, tuples and scalars).

    Args:
        value: The value.
        any_integer: Write an integer of more than :data:`MAX_INTEGER_DIGITS` digits too
            instead of refusing it: for a digest that only has to be stable, never for a
            ledger text.

    Raises:
        CodecError: An integer of more digits (unless ``any_integer``).
        ValueError: A NaN or infinite float.
        TypeError: Something that is not a JSON value.
    """
    if any_integer:
        text = _quick_text(value)
        if text is not None:
            return text
    return _write(value, int.__repr__ if any_integer else jcs_int)


def _items_of(value: object) -> object:
    # A frozen object (pev._json.JsonObject) hands over the dict it holds.
    items = getattr(value, "_items", None)
    if isinstance(items, dict):
        return items
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


# Python's own encoder, in C: sorted keys, no spaces, UTF-8. Where a value holds no float and no
# character beyond U+FFFF, what it writes is the JCS text already (integers are written alike,
# strings are escaped alike, and code-point order is UTF-16 order).
_SORTED_COMPACT = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    default=_items_of,
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_FLOAT = re.compile(r"[0-9][.eE]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _quick_text(value: object) -> str | None:
    """The JCS text of a value without floats or astral characters, by the C encoder; else None.

    Several times quicker than :func:`_write` on a large value (a tool's output, say), and only
    ever used where integers may be written in full, as the C encoder writes them.
    """
    text = _SORTED_COMPACT.encode(value)
    if not text.isascii() and _ASTRAL.search(text):
        return None
    # A digit before ".", "e" or "E" outside the strings is a float's.
    if _FLOAT.search(text) and _FLOAT.search(_STRINGS.sub("", text)):
        return None
    return text


def _write(value: object, write_int: Callable[[int], str]) -> str:
    if isinstance(value, str):
        return encode_basestring(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return write_int(value)
    if isinstance(value, float):
        return jcs_float(value)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"object key {key!r} is not a string")
        return (
            "{"
            + ",".join(
                [
                    f"{encode_basestring(key)}:{_write(value[key], write_int)}"
                    for key in utf16_sorted(value)
                ]
            )
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ",".join([_write(item, write_int) for item in value]) + "]"
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


def _exact_integer(text: str) -> int:
    # Every number without a fraction or an exponent is the integer it spells (pev's rule), an
    # integral double's text beyond ±MAX_SAFE_INTEGER included: it is written again the same.
    if len(text) > MAX_INTEGER_DIGITS and (digits := len(text.lstrip("-"))) > MAX_INTEGER_DIGITS:
        raise ValueError(
            f"an integer of {digits} digits, more than the {MAX_INTEGER_DIGITS} a ledger records"
        )
    return int(text)


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def jcs_loads(text: str | bytes) -> object:
    """Parse a JCS text (or any JSON) as pev's rule reads it, so that it is written again as it was.

    A number without a fraction or an exponent is the exact ``int`` it spells, of any size up to
    :data:`MAX_INTEGER_DIGITS` digits (an integral double beyond ±:data:`MAX_SAFE_INTEGER`,
    written ``100000000000000000000``, so reads back as that integer); any other is a ``float``.

    Raises:
        ValueError: Not JSON text, ``NaN`` / ``Infinity`` (which JSON does not have), or an
            integer of more than :data:`MAX_INTEGER_DIGITS` digits.
    """
    return json.loads(text, parse_int=_exact_integer, parse_constant=_refuse_constant)
