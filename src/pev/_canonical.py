"""Canonical JSON text written straight from pev's typed values, in Python: the long way.

The two forms ledgers hold, each a :class:`TextWriter`:

* :data:`PEV_LONG_WAY` writes pev's own canonical JSON, the text of event schema 1: keys sorted by
  code point, no spaces, UTF-8, floats as Python writes them (``1.0``, ``-0.0``, ``1e-07``).
* :data:`JCS_LONG_WAY` writes RFC 8785 (JCS) canonical JSON, integers exact (:mod:`pev._jcs`),
  the text of the later schemas: any language can write it again from the parsed JSON, and so
  re-check a chain.

Both mirror :func:`pev.codec.encode` type for type (a dataclass becomes an object of its fields,
plus ``"kind"`` for a member of a tagged union; enums their values; tuples, lists and sets
arrays, a set's items in the order of their texts; times ISO 8601 text in UTC; bytes base64).
Each writes text as it goes, without intermediate dicts. Every event the ledger seals is written
by :mod:`pev._native`'s ``pev_dumps`` and ``jcs_dumps``: through orjson wherever it writes the
very same bytes, and by these writers wherever it would not.

Values grow without changing history: a field added to a value after ledgers were written with
it carries :data:`ADDED` in its metadata, and is written only when it differs from its default.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import json
import math
import operator
import types
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any

from pev._jcs import jcs_float, jcs_int, jcs_json, jcs_loads, utf16_sorted
from pev._json import JsonObject, canonical_json
from pev.errors import CodecError

__all__ = [
    "ADDED",
    "JCS_LONG_WAY",
    "PEV_LONG_WAY",
    "TextWriter",
    "canonical_problem",
    "dataclass_fields",
    "encode_bytes",
    "encode_datetime",
    "is_added",
    "tag_of",
]

ADDED: Mapping[str, object] = types.MappingProxyType({"pev.codec.added": True})
"""Field metadata of a field added after values of its class were written to ledgers:
``field(default=..., metadata=codec.ADDED)``. It is left out of the JSON while it holds its
default, so older events keep their canonical text and their hashes."""

Writer = Callable[[Any], str]


def is_added(field: dataclasses.Field[Any]) -> bool:
    """True for a field marked :data:`ADDED`."""
    return bool(field.metadata.get("pev.codec.added"))


@functools.cache  # per class, once: a table of classes, not a cache of values
def tag_of(cls: type) -> str | None:
    """The ``kind`` a dataclass carries in JSON (a tagged union's member), or ``None``."""
    if "kind" in {field.name for field in dataclass_fields(cls)}:
        return None
    tag = getattr(cls, "kind", None)
    return tag if isinstance(tag, str) else None


@functools.cache  # per class, once: a table of classes, not a cache of values
def dataclass_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """A dataclass's fields, found once per class."""
    return dataclasses.fields(cls)


def encode_datetime(value: datetime) -> str:
    """ISO 8601 text of an aware time, in UTC with ``Z``.

    Raises:
        CodecError: The time is naive.
    """
    if value.tzinfo is None:
        raise CodecError("naive datetimes are ambiguous; use an aware UTC datetime")
    utc = value if value.tzinfo is UTC else value.astimezone(UTC)
    return utc.isoformat().replace("+00:00", "Z")


def encode_bytes(value: bytes) -> str:
    """Base64 text of bytes."""
    return base64.b64encode(value).decode("ascii")


def _write_pev_float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError("Out of range float values are not JSON compliant")
    return float.__repr__(value)


def _write_bool(value: bool) -> str:
    return "true" if value else "false"


def _write_none(_: None) -> str:
    return "null"


# A UTC time's isoformat, "Z" for "+00:00", quoted; `%` is the quickest way to fill them in.
_UTC_TIME = '"%04d-%02d-%02dT%02d:%02d:%02dZ"'
_UTC_TIME_MICROSECONDS = '"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ"'


def _write_utc_time(value: datetime) -> str:
    # What _write_any_time writes for a UTC time (isoformat, then "Z"), spelled out: it takes
    # half the time, and every event holds one or two times never written before.
    fields = (value.year, value.month, value.day, value.hour, value.minute, value.second)
    if value.microsecond:
        return _UTC_TIME_MICROSECONDS % (*fields, value.microsecond)
    return _UTC_TIME % fields


def _write_any_time(value: datetime) -> str:
    return f'"{encode_datetime(value)}"'


def _write_datetime(value: datetime) -> str:
    return _write_utc_time(value) if value.tzinfo is UTC else _write_any_time(value)


def _write_bytes(value: bytes) -> str:
    return f'"{encode_bytes(value)}"'


def _literal(text: str) -> str:
    """``text`` as it must appear in a ``%`` template to come out unchanged."""
    return text.replace("%", "%%")


def _dispatcher(table: dict[type, Writer], writer_for: Callable[[type], Writer]) -> Writer:
    """``dumps``: the writer of the value's class, found in ``table`` (or made and kept there)."""

    def dumps(value: object) -> str:
        writer = table.get(type(value))
        if writer is None:
            writer = writer_for(type(value))
        return writer(value)

    return dumps


def _mapping_writer(dumps: Writer, key_order: Callable[[Iterable[str]], list[str]]) -> Writer:
    def write_mapping(value: Mapping[object, object]) -> str:
        if not value:
            return "{}"
        items = {str(key): item for key, item in value.items()}
        return (
            "{"
            + ",".join(
                [f"{encode_basestring(key)}:{dumps(items[key])}" for key in key_order(items)]
            )
            + "}"
        )

    return write_mapping


def _sequence_writer(table: dict[type, Writer], writer_for: Callable[[type], Writer]) -> Writer:
    def write_sequence(value: tuple[object, ...] | list[object]) -> str:
        if not value:
            return "[]"
        # `dumps` inlined, as in write_dataclass
        return (
            "["
            + ",".join([(table.get(type(item)) or writer_for(type(item)))(item) for item in value])
            + "]"
        )

    return write_sequence


def _set_writer(dumps: Writer) -> Writer:
    def write_set(value: frozenset[object] | set[object]) -> str:
        return "[" + ",".join(sorted([dumps(item) for item in value])) + "]"

    return write_set


class TextWriter:
    """The writers of one canonical form, which differ in their numbers and order of keys.

    The writer of each class is found the first time a value of it is met and kept in the
    writer's own table (a table of classes, not a cache of values).
    """

    def __init__(
        self,
        *,
        write_int: Writer,
        write_float: Writer,
        key_order: Callable[[Iterable[str]], list[str]],
    ) -> None:
        self._key_order = self.key_order = key_order
        self._write_int = write_int
        self._write_float = self.write_float = write_float
        self._table: dict[type, Writer] = {}
        # Closures, not methods: every event sealed runs through these, and a closure's cells
        # are quicker to reach than an object's attributes.
        self.dumps = dumps = _dispatcher(self._table, self._writer_for)
        self._write_mapping = _mapping_writer(dumps, key_order)
        self._write_sequence = _sequence_writer(self._table, self._writer_for)
        self._write_set = _set_writer(dumps)
        self._table.update(
            {
                str: encode_basestring,
                int: write_int,
                float: write_float,
                bool: _write_bool,
                type(None): _write_none,
                dict: self._write_mapping,
                JsonObject: self._write_mapping,
                types.MappingProxyType: self._write_mapping,
                tuple: self._write_sequence,
                list: self._write_sequence,
                frozenset: self._write_set,
                set: self._write_set,
                datetime: _write_datetime,
                bytes: _write_bytes,
            }
        )

    def _enum_writer(self) -> Writer:
        # An enum's members are constants, so each one's text is written once (a per-class table).
        texts: dict[enum.Enum, str] = {}
        dumps = self.dumps

        def write_enum(value: enum.Enum) -> str:
            text = texts.get(value)
            if text is None:
                text = texts[value] = dumps(value.value)
            return text

        return write_enum

    def _dataclass_writer(self, cls: type) -> Writer:
        fields = dataclass_fields(cls)
        tag = tag_of(cls)
        if any(is_added(field) for field in fields):
            return self._added_writer(fields, tag)
        names = {field.name for field in fields}
        keys = self._key_order([*names, "kind"] if tag is not None else names)
        # A `%` template of the sorted keys, with the tag's text in place and a slot per field.
        parts = [
            _literal(f"{encode_basestring(key)}:")
            + ("%s" if key in names else _literal(encode_basestring(str(tag))))
            for key in keys
        ]
        template = "{" + ",".join(parts) + "}"
        slots = [key for key in keys if key in names]
        dumps = self.dumps
        if not slots:
            return lambda _: template % ()
        if len(slots) == 1:
            get_one = operator.attrgetter(slots[0])
            return lambda value: template % dumps(get_one(value))
        get_all = operator.attrgetter(*slots)
        table, writer_for = self._table, self._writer_for

        def write_dataclass(value: object) -> str:
            # `dumps` inlined: most fields are strings and numbers, whose writers are C functions.
            return template % tuple(
                [(table.get(type(item)) or writer_for(type(item)))(item) for item in get_all(value)]
            )

        return write_dataclass

    def _added_writer(self, fields: tuple[dataclasses.Field[Any], ...], tag: str | None) -> Writer:
        # Which keys appear depends on the value: no fixed template (such classes are rare and
        # written seldom, a task's policy once per task).
        defaults = {field.name: field.default for field in fields if is_added(field)}
        names = {field.name for field in fields}
        keys = self._key_order([*names, "kind"] if tag is not None else names)
        tag_pair = f'"kind":{encode_basestring(str(tag))}'
        dumps = self.dumps

        def write_added(value: object) -> str:
            parts: list[str] = []
            for key in keys:
                if key not in names:
                    parts.append(tag_pair)
                    continue
                item = getattr(value, key)
                if key not in defaults or item != defaults[key]:
                    parts.append(f"{encode_basestring(key)}:{dumps(item)}")
            return "{" + ",".join(parts) + "}"

        return write_added

    def _writer_for(self, cls: type) -> Writer:
        writer: Writer
        if issubclass(cls, enum.Enum):
            writer = self._enum_writer()
        elif dataclasses.is_dataclass(cls):
            writer = self._dataclass_writer(cls)
        elif issubclass(cls, bool):
            writer = _write_bool
        elif issubclass(cls, str):
            writer = encode_basestring
        elif issubclass(cls, int):
            writer = self._write_int
        elif issubclass(cls, float):
            writer = self._write_float
        elif issubclass(cls, Mapping):
            writer = self._write_mapping
        elif issubclass(cls, tuple | list):
            writer = self._write_sequence
        elif issubclass(cls, frozenset | set):
            writer = self._write_set
        elif issubclass(cls, datetime):
            writer = _write_datetime if cls is datetime else _write_any_time
        elif issubclass(cls, bytes):
            writer = _write_bytes
        else:
            raise CodecError(f"a value of type {cls.__name__} cannot be encoded as JSON")
        self._table[cls] = writer
        return writer


PEV_LONG_WAY = TextWriter(write_int=int.__repr__, write_float=_write_pev_float, key_order=sorted)
"""pev's own canonical JSON (event schema 1), written in Python: :mod:`pev._native`'s long way."""

JCS_LONG_WAY = TextWriter(write_int=jcs_int, write_float=jcs_float, key_order=utf16_sorted)
"""RFC 8785 (JCS) canonical JSON, written in Python: :mod:`pev._native`'s long way."""


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def canonical_problem(text: str, *, jcs: bool) -> str:
    """Why ``text`` is not the canonical text of its own parse, in one form; ``""`` if it is.

    Args:
        text: A stored text.
        jcs: The form: RFC 8785 with exact integers (:func:`pev._jcs.jcs_loads`), else
            pev's own (:func:`pev._json.canonical_json`, numbers read as written).

    Returns:
        ``""``, or the reason as the end of a sentence ("is not JSON text: ...").
    """
    try:
        parsed = jcs_loads(text) if jcs else json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        return f"is not JSON text: {exc}"
    try:
        canonical = jcs_json(parsed) if jcs else canonical_json(parsed)
    except (CodecError, ValueError, TypeError, RecursionError) as exc:
        return f"holds what no canonical text can: {exc}"
    if canonical != text:
        return "is not the canonical JSON of its form: it was changed outside pev"
    return ""
