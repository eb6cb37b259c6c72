"""The one codec between pev's frozen values and JSON.

Domain types know nothing of JSON: stores, the ledger and adapters call :func:`encode` /
:func:`decode` (plain JSON structures) or :func:`dumps` / :func:`loads` (canonical text;
:func:`dumps_jcs` for the RFC 8785 text new ledger events are hashed in). Decoding
is driven by type hints and is strict: an unknown field, a missing required field, a wrong type
or an unknown ``kind`` is a :class:`~pev.errors.CodecError` naming where it is.

Conventions: a dataclass becomes an object of its fields; a member of a tagged union (a class
with a ``kind`` class variable) also carries ``"kind"``; enums become their values; tuples and
frozensets become arrays (frozensets sorted); datetimes become ISO 8601 text in UTC; bytes
become base64 text; JSON values pass through.

Values grow without changing history: a field added to a value after ledgers were written with
it carries :data:`ADDED` in its metadata, and is encoded only when it differs from its default.
An event written before the field existed then encodes, and hashes, exactly as it did.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, Union, cast

from pev._canonical import (
    ADDED,
    dataclass_fields,
    encode_bytes,
    encode_datetime,
    is_added,
    tag_of,
)
from pev._jcs import MAX_INTEGER_DIGITS, MAX_SAFE_INTEGER, jcs_loads
from pev._json import JsonObject, JsonValue, canonical_json, freeze_json
from pev._native import jcs_dumps, pev_dumps
from pev.errors import CodecError, PevError

__all__ = [
    "ADDED",
    "MAX_INTEGER_DIGITS",
    "MAX_SAFE_INTEGER",
    "decode",
    "dumps",
    "dumps_jcs",
    "encode",
    "loads",
]

T = TypeVar("T")


class _JsonValueHint:
    """Stands for the recursive ``JsonValue`` alias while hints are resolved."""


_LOCAL_HINTS = {"JsonValue": _JsonValueHint}


def encode(value: object) -> object:
    """Turn a pev value into plain JSON structures (dicts, lists, scalars)."""
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = _encoder_for(type(value))
    return encoder(value)


# The encoder of each type, found once per type: the ledger encodes every event it seals, so
# this is on pev's hot path.
def _same(value: object) -> object:
    return value


def _encode_mapping(value: Mapping[object, object]) -> object:
    return {str(key): encode(item) for key, item in value.items()}


def _encode_sequence(value: tuple[object, ...] | list[object]) -> object:
    return [encode(item) for item in value]


def _encode_set(value: frozenset[object] | set[object]) -> object:
    return sorted((encode(item) for item in value), key=canonical_json)


def _encoder_for(cls: type) -> Callable[[Any], object]:
    encoder: Callable[[Any], object]
    if issubclass(cls, enum.Enum):
        encoder = _encode_enum
    elif dataclasses.is_dataclass(cls):
        encoder = _dataclass_encoder(cls)
    elif issubclass(cls, bool | int | float | str):
        encoder = _same
    elif issubclass(cls, Mapping):
        encoder = _encode_mapping
    elif issubclass(cls, tuple | list):
        encoder = _encode_sequence
    elif issubclass(cls, frozenset | set):
        encoder = _encode_set
    elif issubclass(cls, datetime):
        encoder = encode_datetime
    elif issubclass(cls, bytes):
        encoder = encode_bytes
    else:
        raise CodecError(f"a value of type {cls.__name__} cannot be encoded as JSON")
    _ENCODERS[cls] = encoder
    return encoder


def _encode_enum(value: enum.Enum) -> object:
    return encode(value.value)


def _dataclass_encoder(cls: type) -> Callable[[Any], object]:
    names = tuple(field.name for field in dataclass_fields(cls) if not is_added(field))
    added = tuple((field.name, field.default) for field in dataclass_fields(cls) if is_added(field))
    tag = tag_of(cls)

    def encode_dataclass(value: object) -> object:
        out: dict[str, object] = {"kind": tag} if tag is not None else {}
        for name in names:
            out[name] = encode(getattr(value, name))
        for name, default in added:
            item = getattr(value, name)
            if item != default:
                out[name] = encode(item)
        return out

    return encode_dataclass


def dumps(value: object) -> str:
    """The canonical JSON text of a value in pev's own form: sorted keys, no spaces, UTF-8, no NaN.

    It is exactly ``canonical_json(encode(value))``, written without that detour. It is the text
    of event schema 1 (floats as Python writes them: ``1.0``, ``-0.0``, ``1e-07``); new ledger
    events are written with :func:`dumps_jcs`.
    """
    return pev_dumps(value)


def dumps_jcs(value: object) -> str:
    """The RFC 8785 (JCS) canonical JSON text of a value: the text new ledger events are hashed in.

    Floats are written as ECMAScript writes them (``1.0`` as ``1``, ``1e-7`` as ``1e-7``),
    integers of any size as their exact decimal digits (``9876543210123457``, where ECMAScript
    would lose the last digits past ±:data:`MAX_SAFE_INTEGER`), and object keys sorted by
    UTF-16 code units, so any language can write the text again from the parsed JSON
    (docs/ledger-format.md). A float with an integral value so reads back as an int; a
    float-typed field decodes it as a float again.

    Raises:
        CodecError: A value JSON cannot hold, or an integer of more than
            :data:`MAX_INTEGER_DIGITS` digits (pass such numbers as strings).
        ValueError: A NaN or infinite float.
    """
    return jcs_dumps(value)


def loads(text: str | bytes, into: type[T] | Any, *, jcs: bool = False) -> T:
    """Parse canonical (or any) JSON text into ``into``.

    Args:
        text: The JSON text.
        into: The type to build.
        jcs: Read numbers as :func:`dumps_jcs` writes them: a number without a fraction or
            an exponent is the exact integer it spells (at most :data:`MAX_INTEGER_DIGITS`
            digits), an integral float's text too, and any other a float.

    Raises:
        CodecError: The text is not JSON or does not fit the type.
    """
    try:
        data = jcs_loads(text) if jcs else json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"not valid JSON: {exc}") from exc
    return cast("T", decode(data, into))


def decode(data: object, into: type[T] | Any, *, path: str = "$") -> T:
    """Build a value of type ``into`` from plain JSON structures.

    Raises:
        CodecError: ``data`` does not fit ``into``; the error's ``path`` says where.
    """
    return cast("T", _decode(data, into, path))


# Filled once per class: a table of classes, not a cache of values.
_ENCODERS: dict[type, Callable[[Any], object]] = {
    str: _same,
    int: _same,
    float: _same,
    bool: _same,
    type(None): _same,
    dict: _encode_mapping,
    JsonObject: _encode_mapping,
    types.MappingProxyType: _encode_mapping,
    tuple: _encode_sequence,
    list: _encode_sequence,
    frozenset: _encode_set,
    set: _encode_set,
    datetime: encode_datetime,
    bytes: encode_bytes,
}


@functools.cache  # per class, once: a table of classes, not a cache of values
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, localns=_LOCAL_HINTS)


def _fail(path: str, message: str) -> typing.NoReturn:
    raise CodecError(message, path=path)


def _decode(data: object, tp: Any, path: str) -> object:
    if tp is _JsonValueHint or tp is object or tp is Any:
        try:
            return freeze_json(data, path=path)
        except (TypeError, ValueError) as exc:
            _fail(path, str(exc))
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # a NewType
        return _decode(data, supertype, path)
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _decode_union(data, typing.get_args(tp), path)
    if origin is Literal:
        if data not in typing.get_args(tp):
            _fail(path, f"expected one of {list(typing.get_args(tp))}, got {data!r}")
        return data
    if origin is tuple:
        return _decode_tuple(data, typing.get_args(tp), path)
    if origin is frozenset:
        (item_tp,) = typing.get_args(tp)
        items = _expect(data, list, path)
        return frozenset(_decode(item, item_tp, f"{path}[{i}]") for i, item in enumerate(items))
    if origin is dict or origin is Mapping:  # typing.Mapping[...] has this origin too
        _, value_tp = typing.get_args(tp)
        obj = _expect(data, dict, path)
        decoded = {key: _decode(v, value_tp, f"{path}.{key}") for key, v in obj.items()}
        return JsonObject(cast("dict[str, JsonValue]", decoded))
    if isinstance(tp, type):
        return _decode_class(data, tp, path)
    _fail(path, f"pev's codec does not handle the type {tp!r}")


def _expect(data: object, kind: type[T], path: str) -> T:
    if not isinstance(data, kind):
        names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
        _fail(path, f"expected {names.get(kind, kind.__name__)}, got {_describe(data)}")
    return data


def _describe(data: object) -> str:
    if data is None:
        return "null"
    return f"{type(data).__name__} {data!r}"[:80]


def _decode_union(data: object, members: tuple[Any, ...], path: str) -> object:
    if data is None and type(None) in members:
        return None
    options = tuple(member for member in members if member is not type(None))
    if len(options) == 1:
        return _decode(data, options[0], path)
    tagged = _tags(options)
    if tagged and isinstance(data, dict):
        tag = data.get("kind")
        if tag not in tagged:
            _fail(path, f"unknown kind {tag!r}; expected one of {sorted(map(str, tagged))}")
        return _decode(data, tagged[tag], path)
    errors: list[str] = []
    for option in options:
        try:
            return _decode(data, option, path)
        except CodecError as exc:
            errors.append(str(exc))
    _fail(path, f"{_describe(data)} fits none of the expected types ({'; '.join(errors)})")


@functools.cache  # per union, once: a table of classes, not a cache of values
def _tags(options: tuple[Any, ...]) -> dict[str, type]:
    """Tag → class for the tagged dataclasses among a union's members."""
    return {
        tag: member
        for member in options
        if isinstance(member, type)
        and dataclasses.is_dataclass(member)
        and (tag := tag_of(member)) is not None
    }


def _decode_tuple(data: object, args: tuple[Any, ...], path: str) -> tuple[object, ...]:
    items = _expect(data, list, path)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(item, args[0], f"{path}[{i}]") for i, item in enumerate(items))
    if len(items) != len(args):
        _fail(path, f"expected {len(args)} items, got {len(items)}")
    return tuple(
        _decode(item, item_tp, f"{path}[{i}]")
        for i, (item, item_tp) in enumerate(zip(items, args, strict=True))
    )


def _decode_class(data: object, cls: type, path: str) -> object:
    if issubclass(cls, enum.Enum):
        try:
            return cls(data)
        except ValueError:
            allowed = [member.value for member in cls]
            _fail(path, f"expected one of {allowed}, got {data!r}")
    if cls is bool:
        return _expect(data, bool, path)
    if cls is int:
        if isinstance(data, bool) or not isinstance(data, int):
            _fail(path, f"expected an integer, got {_describe(data)}")
        return data
    if cls is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            _fail(path, f"expected a number, got {_describe(data)}")
        return float(data)
    if cls is str:
        return _expect(data, str, path)
    if cls is datetime:
        return _decode_datetime(_expect(data, str, path), path)
    if cls is bytes:
        try:
            return base64.b64decode(_expect(data, str, path), validate=True)
        except binascii.Error as exc:
            _fail(path, f"not valid base64: {exc}")
    if cls is JsonObject:
        frozen = _decode(data, _JsonValueHint, path)
        if not isinstance(frozen, JsonObject):
            _fail(path, f"expected an object, got {_describe(data)}")
        return frozen
    if dataclasses.is_dataclass(cls):
        return _decode_dataclass(data, cls, path)
    _fail(path, f"pev's codec does not handle the type {cls.__name__}")


def _decode_datetime(text: str, path: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
        if value.tzinfo is None:
            _fail(path, f"time {text!r} has no UTC offset")
        return value.astimezone(UTC)
    except (ValueError, OverflowError):
        _fail(path, f"expected an ISO 8601 time, got {text!r}")


def _decode_dataclass(data: object, cls: type, path: str) -> object:
    obj = _expect(data, dict, path)
    tag = tag_of(cls)
    fields = {field.name: field for field in dataclass_fields(cls)}
    for key in obj:
        if key not in fields and not (key == "kind" and tag is not None):
            _fail(path, f"{cls.__name__} has no field {key!r}")
    if tag is not None and obj.get("kind", tag) != tag:
        _fail(path, f"expected kind {tag!r}, got {obj.get('kind')!r}")
    hints = _hints(cls)
    kwargs: dict[str, object] = {}
    for name, field in fields.items():
        if name in obj:
            kwargs[name] = _decode(obj[name], hints[name], f"{path}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            _fail(path, f"{cls.__name__} is missing the required field {name!r}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, PevError) as exc:
        _fail(path, f"not a valid {cls.__name__}: {exc}")
