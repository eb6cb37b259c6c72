"""Frozen JSON values: freeze_json, JsonObject, canonical_json and digest."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev._jcs import jcs_json
from pev.model import JsonObject, canonical_json, digest, freeze_json, thaw_json

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
PLAIN_JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def _holds_mutable(value: object) -> bool:
    if isinstance(value, list | dict):
        return True
    if isinstance(value, Mapping):
        return any(_holds_mutable(item) for item in value.values())
    if isinstance(value, tuple):
        return any(_holds_mutable(item) for item in value)
    return False


def test_freeze_turns_lists_into_tuples() -> None:
    """A list, nested or not, becomes a tuple."""
    assert freeze_json([1, [2, 3]]) == (1, (2, 3))


def test_freeze_turns_dicts_into_json_objects() -> None:
    """A dict becomes a JsonObject, and so does a dict nested in a list."""
    frozen = freeze_json({"a": [{"b": 1}]})

    assert isinstance(frozen, JsonObject)
    inner = frozen["a"]
    assert isinstance(inner, tuple)
    assert isinstance(inner[0], JsonObject)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(True, id="bool"),
        pytest.param(-7, id="int"),
        pytest.param(2.5, id="float"),
        pytest.param("text", id="str"),
    ],
)
def test_freeze_keeps_scalars(value: object) -> None:
    """JSON scalars come back as they went in."""
    assert freeze_json(value) is value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param({"a": [-math.inf]}, id="nested-inf"),
    ],
)
def test_freeze_rejects_non_finite_numbers(value: object) -> None:
    """NaN and infinities are not JSON numbers."""
    with pytest.raises(ValueError, match="not a JSON number"):
        freeze_json(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1: "x"}, id="int-key"),
        pytest.param({"ok": {None: 1}}, id="nested-none-key"),
    ],
)
def test_freeze_rejects_non_string_keys(value: object) -> None:
    """Object keys must be strings."""
    with pytest.raises(TypeError, match="is not a string"):
        freeze_json(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1, 2}, id="set"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(object(), id="object"),
    ],
)
def test_freeze_rejects_values_json_cannot_hold(value: object) -> None:
    """Sets, bytes and arbitrary objects are not JSON values."""
    with pytest.raises(TypeError, match="is not a JSON value"):
        freeze_json(value)


def test_freeze_error_names_the_path() -> None:
    """The error says where in the value the bad item is."""
    with pytest.raises(TypeError, match=r"args\.pose\[1\]"):
        freeze_json({"pose": [1, {2}]}, path="args")


@given(PLAIN_JSON)
def test_freeze_leaves_nothing_mutable(value: object) -> None:
    """A frozen value holds no list and no dict anywhere."""
    assert not _holds_mutable(freeze_json(value))


@given(PLAIN_JSON)
def test_thaw_undoes_freeze(value: object) -> None:
    """Thawing a frozen value gives back the plain structure."""
    assert thaw_json(freeze_json(value)) == value


def test_json_object_is_read_only() -> None:
    """A JsonObject has no item assignment."""
    obj = JsonObject({"a": 1})

    with pytest.raises(TypeError):
        obj["a"] = 2  # type: ignore[index]


def test_json_object_reads_like_the_dict_it_holds() -> None:
    """get, in, keys, values and items answer as a dict's would, in insertion order."""
    source = {"b": 1, "a": None}
    obj = JsonObject(source)

    assert (obj.get("b"), obj.get("a", 5), obj.get("z"), obj.get("z", 5)) == (1, None, None, 5)
    assert ("a" in obj, "z" in obj) == (True, False)
    assert (list(obj.keys()), list(obj.values())) == (["b", "a"], [1, None])
    assert list(obj.items()) == [("b", 1), ("a", None)]
    assert obj.items() == source.items()


def test_json_object_does_not_share_the_source_dict() -> None:
    """Changing the dict a JsonObject was built from does not change the JsonObject."""
    source: dict[str, object] = {"a": 1}
    obj = JsonObject(source)  # type: ignore[arg-type]

    source["a"] = 2

    assert obj["a"] == 1


def test_json_object_is_hashable() -> None:
    """Equal objects hash alike, so they can key a dict or sit in a set."""
    one = freeze_json({"a": [1, 2], "b": {"c": None}})
    two = freeze_json({"b": {"c": None}, "a": [1, 2]})

    assert hash(one) == hash(two)
    assert len({one, two}) == 1


def test_json_object_equals_the_dict_it_was_frozen_from() -> None:
    """A frozen object compares equal to its plain source, nested lists included."""
    plain = {"a": [1, {"b": [2]}], "c": "x"}

    assert freeze_json(plain) == plain
    assert plain == freeze_json(plain)


def test_json_object_differs_from_a_different_dict() -> None:
    """A changed value makes the objects unequal."""
    assert freeze_json({"a": 1}) != {"a": 2}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param({"a": 1}, {"a": True}, id="int-vs-bool"),
        pytest.param({"a": [0]}, {"a": [False]}, id="nested-int-vs-bool"),
    ],
)
def test_json_object_equality_is_json_equality(left: object, right: object) -> None:
    """Values whose JSON text differs are unequal, keeping equality consistent with the hash."""
    assert freeze_json(left) != freeze_json(right)


@given(PLAIN_JSON, PLAIN_JSON)
def test_equal_json_objects_hash_alike(left: object, right: object) -> None:
    """Whenever two JsonObjects are equal, their hashes are equal."""
    one, two = JsonObject({"v": freeze_json(left)}), JsonObject({"v": freeze_json(right)})

    if one == two:
        assert hash(one) == hash(two)


def test_json_object_equality_takes_one_and_one_point_zero_for_one_number() -> None:
    """1 and 1.0 are one JSON number (as a JCS ledger reads them back): equal, one hash."""
    left, right = freeze_json({"a": [1, -0.0]}), freeze_json({"a": [1.0, 0]})

    assert left == right
    assert hash(left) == hash(right)


def test_json_object_is_not_equal_to_a_non_mapping() -> None:
    """A JsonObject never equals a list or a string."""
    assert JsonObject({"a": 1}) != [("a", 1)]
    assert JsonObject() != ""


def test_canonical_json_sorts_keys_and_drops_spaces() -> None:
    """Keys are sorted at every level and there is no whitespace."""
    value = {"b": 1, "a": {"d": [1, 2], "c": None}}

    assert canonical_json(value) == '{"a":{"c":null,"d":[1,2]},"b":1}'


def test_canonical_json_keeps_unicode() -> None:
    """Non-ASCII text is written as itself, not escaped."""
    assert canonical_json({"name": "Grüße"}) == '{"name":"Grüße"}'


def test_canonical_json_writes_frozen_values() -> None:
    """A frozen value and its plain source have the same canonical text."""
    plain = {"z": [1, {"y": True}], "a": "x"}

    assert canonical_json(freeze_json(plain)) == canonical_json(plain)


def test_canonical_json_rejects_nan() -> None:
    """NaN has no canonical text."""
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"a": math.nan})


@given(st.dictionaries(st.text(max_size=5), SCALARS, max_size=6), st.randoms())
def test_canonical_json_ignores_insertion_order(value: dict[str, object], random: Random) -> None:
    """Re-inserting the same keys in another order gives the same text."""
    keys = list(value)
    random.shuffle(keys)
    shuffled = {key: value[key] for key in keys}

    assert canonical_json(shuffled) == canonical_json(value)


def test_digest_is_sha256_of_the_canonical_text() -> None:
    """digest() hashes the canonical JSON, so key order does not matter."""
    expected = hashlib.sha256(b'{"a":1,"b":2}').hexdigest()

    assert digest({"b": 2, "a": 1}) == expected
    assert digest(freeze_json({"a": 1, "b": 2})) == expected


@given(st.dictionaries(st.text(max_size=5), PLAIN_JSON, max_size=4))
def test_digest_of_a_json_object_matches_its_plain_source(value: dict[str, object]) -> None:
    """A JsonObject's kept JCS text digests exactly like the plain dict, empty included."""
    frozen = freeze_json(value)
    expected = hashlib.sha256(jcs_json(value, any_integer=True).encode()).hexdigest()

    assert digest(frozen) == expected
    assert digest(frozen) == expected  # again, from the text it kept
