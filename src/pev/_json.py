"""Immutable JSON values and their canonical text form.

Plan args, tool outputs and evidence payloads are JSON. pev keeps them frozen (objects become a
hashable read-only :class:`JsonObject`, arrays become tuples) so a value in the ledger can never
change after it was recorded. Digests and equality go by their RFC 8785 (JCS) text
(:mod:`pev._jcs`), the text ledgers keep, so a value read back has the digest it was written
with; :func:`canonical_json` is pev's older canonical form, for display.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import TypeAlias, TypeGuard, TypeVar, overload

from pev._jcs import MAX_INTEGER_DIGITS, jcs_int, jcs_json
from pev.errors import CodecError

__all__ = [
    "DEFAULT_MAX_VALUE_BYTES",
    "DEFAULT_MAX_VALUE_DEPTH",
    "MAX_INTEGER_DIGITS",
    "MAX_NESTING",
    "JsonObject",
    "JsonValue",
    "ValueLimits",
    "canonical_json",
    "digest",
    "freeze_json",
    "is_json_object",
    "json_type_name",
    "thaw_json",
    "value_problem",
]


MAX_NESTING = 256
"""The deepest nesting pev's recursive codec handles; :func:`freeze_json` refuses deeper values
(a :class:`ValueError`, never a :class:`RecursionError`), and no depth limit may exceed it."""

DEFAULT_MAX_VALUE_DEPTH = 64
"""How deeply a value from a component (plan args, a tool's output) may nest by default."""

DEFAULT_MAX_VALUE_BYTES = 1 << 20
"""How large the JSON text of a value from a component may be by default (1 MiB)."""

_T = TypeVar("_T")

JsonValue: TypeAlias = (
    "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
"""A JSON value. pev stores them frozen: arrays as tuples, objects as :class:`JsonObject`."""


class JsonObject(Mapping[str, "JsonValue"]):
    """A read-only, hashable JSON object: plan args, tool outputs, evidence payloads.

    Equality is JSON equality (the RFC 8785 texts are compared), so it agrees with the hash:
    an array equals it whether held as a tuple or a list, ``1`` and ``1.0`` are one JSON number
    (as a ledger reads them back), and ``true`` differs from both.
    """

    __slots__ = ("_hash", "_items", "_text")

    def __init__(self, items: Mapping[str, JsonValue] | None = None) -> None:
        self._items: dict[str, JsonValue] = dict(items) if items else {}
        self._hash: int | None = None
        self._text: str | None = None

    def _canonical(self) -> str:
        """The object's identity text: its RFC 8785 (JCS) text, kept once written."""
        if self._text is None:
            # Empty args, which most plan nodes have, need no writer at all. Integers of more
            # than MAX_INTEGER_DIGITS digits are written too: this text identifies, never stored.
            self._text = jcs_json(self._items, any_integer=True) if self._items else "{}"
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
        # Python's == would call 1 and True equal while their texts (and so the hashes) differ;
        # comparing the texts keeps equality and hashing consistent.
        try:
            theirs = (
                other._canonical()
                if isinstance(other, JsonObject)
                else jcs_json(freeze_json(other), any_integer=True)
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
            (a lone surrogate), which no UTF-8 ledger could store, or it nests deeper than
            :data:`MAX_NESTING`.
    """
    return _freeze(value, path, 0)


def _freeze(value: object, path: str, depth: int) -> JsonValue:
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
    if depth >= MAX_NESTING and isinstance(value, Mapping | list | tuple):
        # Refused before Python's recursion limit is: a RecursionError would be nobody's error.
        raise ValueError(f"{_shortened(path)}: nested deeper than {MAX_NESTING} levels")
    if isinstance(value, Mapping):
        frozen: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: object key {key!r} is not a string")
            _check_text(key, path)
            frozen[key] = _freeze(item, f"{path}.{key}", depth + 1)
        return JsonObject(frozen)
    if isinstance(value, list | tuple):
        return tuple(
            [_freeze(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
        )
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
    """The canonical text of a JSON value in pev's own form: sorted keys, no spaces, UTF-8.

    Floats are written as Python writes them (``1.0``, ``1e-07``): the text of ledger events of
    schema 1, and what pev shows. Digests and new ledger events use RFC 8785 (:func:`digest`).
    """
    return _CANONICAL.encode(value)


def digest(value: object) -> str:
    """The sha256 hex digest of the RFC 8785 (JCS) canonical JSON of ``value``.

    JCS, the text ledger events are kept in, so that a value read back from a ledger has the
    digest it had when written (a float with an integral value reads back as an integer: ``1.0``
    and ``1`` are one JSON number, with one digest). Integers are written in full, of any size.
    """
    # A JsonObject (plan args) keeps its text, so it is encoded at most once.
    if isinstance(value, JsonObject):
        text = value._canonical()
    else:
        text = jcs_json(value, any_integer=True)
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


# -- what a component may hand pev ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValueLimits:
    """How deep and how large a value from a component may be; a task's policy sets both.

    Attributes:
        max_depth: The most arrays and objects nested in one another (``{}`` is 1 deep).
        max_bytes: The most UTF-8 bytes of the value's canonical JSON text.
    """

    max_depth: int = DEFAULT_MAX_VALUE_DEPTH
    max_bytes: int = DEFAULT_MAX_VALUE_BYTES


_KEY_SHOWN = 40  # characters of a key shown in a path
_PATH_SHOWN = 160  # characters of a path shown
_END = object()


class _Frame:
    """A container being walked: its items, its depth, and the key or index of the item now."""

    __slots__ = ("depth", "items", "step")

    def __init__(self, items: Iterator[tuple[str | int, object]], depth: int) -> None:
        self.items = items
        self.depth = depth
        self.step: str | int = 0


def value_problem(
    value: object, limits: ValueLimits | None = None, *, path: str = "$"
) -> str | None:
    """The first reason pev cannot record ``value`` as JSON, or ``None`` when it can.

    A value can be recorded when it holds only ``None``, booleans, integers of at most
    :data:`MAX_INTEGER_DIGITS` digits (recorded exactly), finite floats, valid Unicode text,
    lists or tuples, and mappings with text keys, nests at most ``limits.max_depth`` deep and
    writes at most ``limits.max_bytes`` bytes of canonical JSON. The walk is iterative (a value
    nested 100,000 deep is a problem, not a :class:`RecursionError`), stops at the first problem
    or once past a limit, and never raises: a mapping whose items cannot be read is a problem
    too. The message names the place (``$.rooms[2]``), and a limit by its ``RecoveryPolicy``
    field.
    """
    limits = limits or ValueLimits()
    stack: list[_Frame] = []
    try:
        size, problem = _walk(value, limits, stack)
    except Exception as exc:  # noqa: BLE001 - a component's own object may refuse to be read
        size, problem = 0, f"reading it raised {type(exc).__name__}"
    if problem is not None:
        return _safe_text(f"{_spell(path, stack)}: {problem}")
    if size > limits.max_bytes:
        return _safe_text(
            f"{path}: more than {limits.max_bytes} bytes as JSON, past the limit "
            f"RecoveryPolicy.max_value_bytes={limits.max_bytes}"
        )
    return None


def _walk(value: object, limits: ValueLimits, stack: list[_Frame]) -> tuple[int, str | None]:
    """The bytes of ``value`` as JSON (up to just past the budget), or its first problem."""
    budget, max_depth = limits.max_bytes, limits.max_depth
    size, problem = _scalar_size(value, budget)
    if size < 0:
        size, problem = _open(value, stack, 1, max_depth, budget)
    while stack and problem is None and size <= budget:
        frame = stack[-1]
        step, item = next(frame.items, (0, _END))
        if item is _END:
            stack.pop()
            continue
        frame.step = step
        if isinstance(step, str):  # an object's key, then its colon
            added = _text_size(step, budget - size)
            if added < 0:
                return size, f"object key: {_bad_text(step)}"
            size += added + 1
        added, problem = _scalar_size(item, budget - size)
        if added < 0:
            added, problem = _open(item, stack, frame.depth + 1, max_depth, budget - size)
        size += added
    return size, problem


def _scalar_size(item: object, budget: int) -> tuple[int, str | None]:
    """The bytes of a scalar as JSON, or why it cannot be; ``-1`` for anything else."""
    if isinstance(item, str):
        added = _text_size(item, budget)
        return (0, _bad_text(item)) if added < 0 else (added, None)
    if item is None or item is True:
        return 4, None
    if item is False:
        return 5, None
    if isinstance(item, int):
        try:
            return len(jcs_int(item)), None
        except CodecError as exc:
            return 0, str(exc)
    if isinstance(item, float):
        if math.isfinite(item):
            return len(float.__repr__(item)), None
        return 0, f"{item} is not a JSON number"
    return -1, None


def _open(
    item: object, stack: list[_Frame], depth: int, max_depth: int, budget: int
) -> tuple[int, str | None]:
    """Start walking a container: its own bytes (brackets, commas), or why it cannot be."""
    if isinstance(item, list | tuple):
        items: list[tuple[str | int, object]] | Iterator[tuple[str | int, object]]
        items, count = enumerate(item), len(item)
    elif isinstance(item, Mapping):
        try:
            # A component's own mapping may fail to be read; a JsonObject is read directly.
            pairs = list(item._items.items() if isinstance(item, JsonObject) else item.items())
        except Exception as exc:  # noqa: BLE001 - whatever it raised is the problem
            return 0, f"reading its items raised {type(exc).__name__}"
        for key, _ in pairs:
            if not isinstance(key, str):
                return 0, f"object key {_shown(key)} is not a string"
        items, count = iter(pairs), len(pairs)
    else:
        return 0, f"a {type(item).__name__} is not a JSON value"
    if depth > max_depth:
        return 0, (
            f"nested deeper than {max_depth} levels, past the limit "
            f"RecoveryPolicy.max_value_depth={max_depth}"
        )
    size = 1 + max(count, 1)  # the brackets and the commas
    if size <= budget:
        stack.append(_Frame(iter(items), depth))
    return size, None


def _text_size(text: str, budget: int) -> int:
    """The bytes of ``text`` as a JSON string; -1 if it is not valid Unicode.

    Past ``budget`` the size is only bounded below: the caller stops there anyway.
    """
    if len(text) > budget:
        return len(text) + 2  # every character is at least one byte
    quoted = encode_basestring(text)
    if text.isascii():
        return len(quoted)
    try:
        return len(quoted.encode("utf-8"))
    except UnicodeEncodeError:
        return -1


def _shown(value: object) -> str:
    """A short ``repr`` of a value, which may refuse to be shown."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a component's own object
        return f"of type {type(value).__name__}"
    return text if len(text) <= _KEY_SHOWN else text[:_KEY_SHOWN] + "…"


def _bad_text(text: str) -> str:
    index = next((i for i, char in enumerate(text) if "\ud800" <= char <= "\udfff"), 0)
    return f"text that is not valid Unicode (a lone surrogate at index {index})"


def _spell(root: str, stack: list[_Frame]) -> str:
    text = root
    for frame in stack:
        step = frame.step
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text += f".{step if len(step) <= _KEY_SHOWN else step[:_KEY_SHOWN] + '…'}"
    return _shortened(text)


def _shortened(path: str) -> str:
    """A path of at most about :data:`_PATH_SHOWN` characters: its start and its end."""
    if len(path) <= _PATH_SHOWN:
        return path
    return f"{path[: _PATH_SHOWN // 2]}…{path[-_PATH_SHOWN // 2 :]}"


def _safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (a lone surrogate) escaped, so it can be stored."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
