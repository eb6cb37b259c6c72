"""Canonical JSON text through orjson, byte for byte what :mod:`pev._canonical` writes.

* :func:`pev_dumps`: pev's own canonical JSON, the text of event schema 1;
* :func:`jcs_dumps`: RFC 8785 (JCS) canonical JSON, the text of the later schemas.

Both are ``pev._canonical``'s writers of their form (the long way) made faster: orjson writes
every part of a value it writes exactly as they do, and the long way writes the rest, so that
``pev_dumps(x) == PEV_LONG_WAY.dumps(x)`` and ``jcs_dumps(x) == JCS_LONG_WAY.dumps(x)`` for every
value, and the same error is raised where the long way raises one
(tests/test_canonical_native.py holds the two to each other).
"""

from __future__ import annotations

import dataclasses
import enum
import keyword
import re
import types
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import orjson

from pev._canonical import (
    JCS_LONG_WAY,
    PEV_LONG_WAY,
    TextWriter,
    Writer,
    dataclass_fields,
    is_added,
    tag_of,
)
from pev._json import JsonObject

__all__ = ["jcs_dumps", "pev_dumps"]

# What orjson writes otherwise, and so what it leaves to the long way
#
# orjson (C) writes text many times quicker than the writers above, and writes most of a value
# exactly as they do: strings (escaped alike, UTF-8 kept), integers, true / false / null,
# arrays, and objects with sorted keys (by code point, pev's own order). It differs in the rest,
# which pev keeps writing itself (through the TextWriter of the form, "the long way"):
#
# * floats: orjson has a shortest form of its own (0.00001, 1e16) and writes NaN as null, so every
#   float becomes a fragment of the form's own text before orjson sees it;
# * dataclasses: orjson knows no `kind` tag and no ADDED field, so a built dict stands for each;
# * times: orjson hands them back (OPT_PASSTHROUGH_DATETIME); a UTC one it then writes itself;
# * sets, bytes, read-only mappings, subclasses (an enum's too, where its value is not what it
#   is), floats and UUIDs in enums, unknown classes: written the long way, as a fragment;
# * integers beyond 64 bits (its range; within it, it writes their exact digits as both forms
#   do), lone surrogates, non-text keys, nesting past its limit: orjson raises, and the long way
#   writes the whole value (or raises the error pev always raised);
# * JCS order: a key holding a character beyond U+FFFF sorts before U+E000 to U+FFFF in UTF-16
#   order, after them in orjson's; a text holding characters of both is written the long way.
#
# So that orjson never writes a float or a class of its own accord, each container's items are
# checked (one C-level pass over their classes) before orjson sees it: only classes in `as_is`
# pass as they are, the others are prepared (a float as its fragment, a tuple with a float as a
# list of prepared items). tests/test_canonical_native.py holds the two writers to each other.

# (Not OPT_PASSTHROUGH_SUBCLASS: no subclass reaches orjson unchecked, and it costs a sixth of
# the time of a call.)
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# The classes orjson writes as they are, and the enums whose members' values are all of them.
_PLAIN: frozenset[type] = frozenset({str, int, bool, type(None)})
# The UTF-8 lead bytes of a character beyond U+FFFF, and of one of U+E000 to U+FFFF.
_ASTRAL_BYTE = re.compile(rb"[\xf0-\xf4]")
_HIGH_BMP_BYTE = re.compile(rb"[\xee\xef]")
# Classes orjson does not write at all, so hands to `default`: written the long way, as one
# fragment (a set of node ids, a task's components, an evidence's artifact).
_HANDED_BACK = (frozenset, set, bytes, types.MappingProxyType)


class _NativeWriter:
    """One canonical form written through orjson, and the long way where orjson writes otherwise.

    Each class is sorted the first time a value of it is met, into the writer's own tables
    (tables of classes, not caches of values): passed to orjson as it is, built into a dict
    (a dataclass), or prepared. The one value it keeps is the last UTC time it wrote, with its
    text (:func:`_time_writer`).
    """

    def __init__(self, long_way: TextWriter, *, utf16_keys: bool) -> None:
        self._long_way = long_way
        # Classes passed to orjson as they are: written by it as the long way would, or handed
        # back to `default`, which finds them in `_hooks`.
        self._as_is: set[type] = {*_PLAIN, datetime, JsonObject}
        self._hooks: dict[type, Callable[[Any], object]] = {}
        # How to prepare a value of any other class met so far.
        self._prepares: dict[type, Callable[[Any], object]] = {}
        self._prepare = prepare = _preparer(self._as_is, self._prepares, self._sort_class)
        self._prepare_mapping = prepare_mapping = _mapping_preparer(self._as_is, prepare)
        write_float = long_way.write_float
        self._prepares.update(
            {
                float: lambda value: orjson.Fragment(write_float(value)),
                tuple: _items_preparer(self._as_is, prepare),
                list: _items_preparer(self._as_is, prepare),
                dict: prepare_mapping,
            }
        )
        self._hooks[datetime] = _time_writer(long_way.dumps)
        self._hooks[JsonObject] = lambda value: prepare_mapping(value._items)
        self.dumps: Writer = _native_dumps(
            long_way.dumps,
            as_is=self._as_is,
            hooks=self._hooks,
            prepare=prepare,
            option=_OPTIONS,
            utf16_keys=utf16_keys,
        )

    def _as_fragment(self, value: object) -> orjson.Fragment:
        return orjson.Fragment(self._long_way.dumps(value))

    def _sort_class(self, cls: type) -> Callable[[Any], object] | None:
        """Where a class first met goes: ``None`` if orjson takes it as it is, else its preparer."""
        if issubclass(cls, enum.Enum):
            if all(_written_as_its_value(member) for member in cls):
                self._as_is.add(cls)
                return None
        elif dataclasses.is_dataclass(cls) and (build := self._dataclass_builder(cls)):
            self._hooks[cls] = build
            self._as_is.add(cls)
            return None
        elif issubclass(cls, _HANDED_BACK):
            self._hooks[cls] = self._as_fragment
            self._as_is.add(cls)
            return None
        # A float's or a text's subclass, a named tuple, a time's subclass, a UUID (which orjson
        # would write its own way), a class no JSON holds (the long way raises its error).
        self._prepares[cls] = self._as_fragment
        return self._as_fragment

    def _dataclass_builder(self, cls: type) -> Callable[[Any], object] | None:
        """The builder of a dataclass's dict; ``None`` where its field names are no identifiers."""
        fields = dataclass_fields(cls)
        tag = tag_of(cls)
        if any(is_added(field) for field in fields):
            return _added_builder(fields, tag, self._long_way.key_order, self._prepare_mapping)
        names = [field.name for field in fields]
        if all(name.isidentifier() and not keyword.iskeyword(name) for name in names):
            return _dict_display(cls, names, tag, self._as_is, self._prepare_mapping)
        return None


def _native_dumps(
    reference: Writer,
    *,
    as_is: set[type],
    hooks: dict[type, Callable[[Any], object]],
    prepare: Callable[[object], object],
    option: int,
    utf16_keys: bool,
) -> Writer:
    dumps_bytes = orjson.dumps

    def default(value: object) -> object:
        # orjson hands back only classes sorted into `as_is` with a hook: a KeyError here would be
        # a bug, and the long way would still write the value.
        return hooks[type(value)](value)

    def dumps(value: object) -> str:
        try:
            text = dumps_bytes(
                value if type(value) in as_is else prepare(value), default=default, option=option
            )
        except Exception:  # noqa: BLE001 - the long way writes it, or raises pev's own error
            return reference(value)
        if (
            utf16_keys
            and not text.isascii()
            and _ASTRAL_BYTE.search(text)
            and _HIGH_BMP_BYTE.search(text)
        ):
            return reference(value)  # its keys may sort otherwise in UTF-16 order
        return text.decode()

    return dumps


def _written_as_its_value(member: enum.Enum) -> bool:
    """Whether orjson writes an enum member as the long way does: as the text of its value.

    It writes a member of a text or integer enum as the text or integer it is, which is not its
    value where ``__new__`` made them differ, and a float value its own way.
    """
    if type(member.value) not in _PLAIN:
        return False
    try:
        return orjson.dumps(member) == orjson.dumps(member.value)
    except orjson.JSONEncodeError:  # an integer beyond its range
        return False


def _time_writer(reference: Writer) -> Callable[[datetime], orjson.Fragment]:
    """The text of a time, keeping the last UTC time written and its text.

    An event's times repeat (a pending record's ``created_at`` and ``updated_at``, the times of
    one append) and so does the time of the entries sealed one after another; the text of a time
    is written once for each run of them. The time and its text are one tuple, read and replaced
    whole, so no reader ever sees one without the other.
    """
    last: tuple[datetime | None, orjson.Fragment] = (None, orjson.Fragment(b"null"))
    dumps_time = orjson.dumps

    def write_time(value: datetime) -> orjson.Fragment:
        nonlocal last
        seen = last
        # A time equal to a UTC time is the same instant, and has its text (its fields in UTC).
        if value == seen[0]:
            return seen[1]
        if value.tzinfo is not UTC:
            return orjson.Fragment(reference(value))
        # orjson writes a UTC time as _write_utc_time does, five times as quickly.
        text = orjson.Fragment(dumps_time(value, option=orjson.OPT_UTC_Z))
        last = (value, text)
        return text

    return write_time


def _preparer(
    as_is: set[type],
    prepares: dict[type, Callable[[Any], object]],
    sort_class: Callable[[type], Callable[[Any], object] | None],
) -> Callable[[object], object]:
    def prepare(item: object) -> object:
        cls = type(item)
        if cls in as_is:
            return item
        prepare_one = prepares.get(cls) or sort_class(cls)
        return item if prepare_one is None else prepare_one(item)

    return prepare


def _items_preparer(
    as_is: set[type], prepare: Callable[[object], object]
) -> Callable[[Any], object]:
    def prepare_items(items: tuple[object, ...] | list[object]) -> object:
        if as_is.issuperset(map(type, items)):
            return items
        return [prepare(item) for item in items]

    return prepare_items


def _mapping_preparer(
    as_is: set[type], prepare: Callable[[object], object]
) -> Callable[[dict[Any, object]], object]:
    def prepare_mapping(items: dict[Any, object]) -> object:
        # A key that is not exactly text (the long way writes its str()) makes orjson raise.
        if as_is.issuperset(map(type, items.values())):
            return items
        return {key: prepare(item) for key, item in items.items()}

    return prepare_mapping


def _dict_display(
    cls: type,
    names: list[str],
    tag: str | None,
    as_is: set[type],
    prepare_mapping: Callable[[dict[str, object]], object],
) -> Callable[[Any], object]:
    """The dict orjson writes for a value of ``cls``: its fields, and its ``kind`` tag.

    One dict display with constant keys, written as :mod:`dataclasses` writes ``__init__``: it
    builds the dict twice as quickly as ``dict(zip(names, values))``, and every dataclass of every
    event sealed is built so. Values not all of classes orjson takes as they are are prepared.
    """
    pairs = [f"{name!r}: value.{name}" for name in sorted(names)]
    if tag is not None:
        pairs.append(f"'kind': {tag!r}")
    source = (
        "def build(value):\n"
        f"    out = {{{', '.join(pairs)}}}\n"
        "    if as_is.issuperset(map(type, out.values())):\n"
        "        return out\n"
        "    return prepare_mapping(out)\n"
    )
    namespace: dict[str, Any] = {"as_is": as_is, "prepare_mapping": prepare_mapping}
    # Only field names (identifiers, not keywords: checked by the caller) and repr()s enter it.
    exec(compile(source, f"<pev: the dict of {cls.__qualname__}>", "exec"), namespace)  # noqa: S102
    build: Callable[[Any], object] = namespace["build"]
    return build


def _added_builder(
    fields: tuple[dataclasses.Field[Any], ...],
    tag: str | None,
    key_order: Callable[[Iterable[str]], list[str]],
    prepare_mapping: Callable[[dict[str, object]], object],
) -> Callable[[Any], object]:
    """The dict of a value of a class with :data:`ADDED` fields: those at their default left out.

    As the long way writes it: the fields compared with their defaults in the order of its keys.
    """
    defaults = {field.name: field.default for field in fields if is_added(field)}
    names = key_order([field.name for field in fields])

    def build_added(value: object) -> object:
        out: dict[str, object] = {}
        for name in names:
            item = getattr(value, name)
            if name not in defaults or item != defaults[name]:
                out[name] = item
        if tag is not None:
            out["kind"] = tag
        return prepare_mapping(out)

    return build_added


pev_dumps: Writer = _NativeWriter(PEV_LONG_WAY, utf16_keys=False).dumps
"""pev's own canonical JSON text of a value (event schema 1): sorted keys, no spaces, UTF-8.

Raises:
    CodecError: A value of a type JSON cannot hold, or a naive time.
    ValueError: A NaN or infinite float.
"""

jcs_dumps: Writer = _NativeWriter(JCS_LONG_WAY, utf16_keys=True).dumps
"""The RFC 8785 (JCS) canonical JSON text of a value (event schemas 2 and 3), integers exact.

Raises:
    CodecError: A value of a type JSON cannot hold, a naive time, or an integer of more than
        ``MAX_INTEGER_DIGITS`` digits (pass such numbers as strings).
    ValueError: A NaN or infinite float.
"""
