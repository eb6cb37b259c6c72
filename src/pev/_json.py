"""Immutable JSON values and their canonical text form.

Plan args, tool outputs and evidence payloads are JSON. pev keeps them frozen (objects become a
hashable read-only :class:`JsonObject`, arrays become tuples) so a value in the ledger can never
change after it was recorded, and it writes them in one canonical form so that digests and the
hash chain are stable.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import TypeAlias, TypeGuard, TypeVar, overload

__all__ = [
    "JsonObject",
    "JsonValue",
    "canonical_json",
    "digest",
    "freeze_json",
    "is_json_object",
    "json_type_name",
    "thaw_json",
]

_T = TypeVar("_T")

JsonValue: TypeAlias = (
    "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
"""A JSON value. pev stores them frozen: arrays as tuples, objects as :class:`JsonObject`."""


class JsonObject(Mapping[str, "JsonValue"]):
    """A read-only, hashable JSON object: plan args, tool outputs, evidence payloads.

    Equality is JSON equality (the canonical texts are compared), so it agrees with the hash:
    an array equals it whether held as a tuple or a list, and ``1``, ``1.0`` and ``true`` differ.
    """

    __slots__ = ("_hash", "_items", "_text")

    def __init__(self, items: Mapping[str, JsonValue] | None = None) -> None:
        self._items: dict[str, JsonValue] = dict(items) if items else {}
        self._hash: int | None = None
        self._text: str | None = None

    def _canonical(self) -> str:
        if self._text is None:
            # The dict itself, which spares the encoder its call back to _default; empty args,
            # which most plan nodes have, need no encoder at all.
            self._text = canonical_json(self._items) if self._items else "{}"
        return self._text

    def __getitem__(self, key: str) -> JsonValue:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # The read-only views of the dict behind it: the Mapping mixins would go through
    # __getitem__ one key at a time (and `get` / `in` through a KeyError for a missing key).
    def __contains__(self, key: object) -> bool:
        return key in self._items

    @overload
    def get(self, key: str, /) -> JsonValue | None: ...

    @overload
    def get(self, key: str, /, default: JsonValue | _T) -> JsonValue | _T: ...

    def get(self, key: str, /, default: object = None) -> object:
        return self._items.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._items.keys()

    def values(self) -> ValuesView[JsonValue]:
        return self._items.values()

    def items(self) -> ItemsView[str, JsonValue]:
        return self._items.items()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._canonical())
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        # Python's == would call 1, 1.0 and True equal while their canonical texts (and so the
        # hashes) differ; comparing the texts keeps equality and hashing consistent.
        try:
            theirs = (
                other._canonical()
                if isinstance(other, JsonObject)
                else canonical_json(freeze_json(other))
            )
            return self._canonical() == theirs
        except (TypeError, ValueError):
            # Something JSON cannot hold (only possible when built unfrozen): compare as Python.
            return self._items == dict(other)

    def __repr__(self) -> str:
        return f"JsonObject({self._items!r})"


def freeze_json(value: object, *, path: str = "$") -> JsonValue:
    """Return ``value`` as an immutable JSON value.

    Lists and tuples become tuples, mappings become :class:`JsonObject`; scalars are kept.

    Raises:
        TypeError: ``value`` holds something JSON cannot represent (the message names where).
        ValueError: ``value`` holds a NaN or infinite float, or text that is not valid Unicode
            (a lone surrogate), which no UTF-8 ledger could store.
    """
    if isinstance(value, str):
        _check_text(value, path)
        return value
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not a JSON number")
        return value
    if isinstance(value, JsonObject):
        return value
    if isinstance(value, Mapping):
        frozen: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: object key {key!r} is not a string")
            _check_text(key, path)
            frozen[key] = freeze_json(item, path=f"{path}.{key}")
        return JsonObject(frozen)
    if isinstance(value, list | tuple):
        return tuple(freeze_json(item, path=f"{path}[{index}]") for index, item in enumerate(value))
    raise TypeError(f"{path}: a {type(value).__name__} is not a JSON value")


def _check_text(text: str, path: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{path}: {text!r} is not valid Unicode text ({exc.reason})") from exc


def thaw_json(value: JsonValue) -> object:
    """Return plain ``dict`` / ``list`` structures for a frozen JSON value."""
    if isinstance(value, JsonObject):
        return {key: thaw_json(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thaw_json(item) for item in value]
    return value


def _default(value: object) -> object:
    if isinstance(value, JsonObject):
        return value._items
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


# One encoder for the process: json.dumps with these options would build a new one per call,
# and every event the ledger seals is encoded at least twice.
_CANONICAL = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    default=_default,
)


def canonical_json(value: object) -> str:
    """The canonical text of a JSON value: sorted keys, no spaces, UTF-8, no NaN."""
    return _CANONICAL.encode(value)


def digest(value: object) -> str:
    """The sha256 hex digest of the canonical JSON of ``value``."""
    # A JsonObject (plan args) keeps its canonical text, so it is encoded at most once.
    text = value._canonical() if isinstance(value, JsonObject) else canonical_json(value)
    return hashlib.sha256(text.encode()).hexdigest()


def is_json_object(value: object) -> TypeGuard[Mapping[str, JsonValue]]:
    """True when ``value`` is a mapping with string keys (a JSON object)."""
    return isinstance(value, Mapping) and all(isinstance(key, str) for key in value)


def json_type_name(value: object) -> str:
    """The JSON Schema type name of a value: ``null``, ``boolean``, ``integer``, ``number``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__
