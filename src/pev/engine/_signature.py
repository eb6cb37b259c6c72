"""Reading a tool's signature: the parameters a plan fills, and the secrets pev fills.

A parameter's type hint says which JSON values a plan may pass for it (docs/tools.md has the
table). A parameter annotated with a :class:`~pev.engine.Secret` is no plan's business: it is
left out of the spec and filled at call time (:mod:`pev.engine._secret`).
"""

from __future__ import annotations

import inspect
import logging
import math
import types
import typing
from collections.abc import (
    Callable,
    Iterator,
    Mapping,
    MutableMapping,
    MutableSequence,
    Sequence,
)
from typing import Any, Literal

from pev.engine._secret import Secret, SecretParameter, looks_like_credential
from pev.errors import UsageError
from pev.model import ToolParameter

__all__ = ["read_signature"]

_log = logging.getLogger("pev.engine")

# How a type hint constrains the JSON value a plan may pass: a hint names one JSON type (or
# several, for a union or a Literal); Any, object and a missing hint accept any value. Arrays and
# objects arrive as plain lists and dicts. A hint no JSON value can satisfy (a dataclass, bytes,
# an Enum) is refused at decoration: the tool would receive a dict or a string, not that type.
_ANY: frozenset[str] = frozenset()
_JSON_TYPE_OF_HINT: Mapping[object, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    None: "null",
    types.NoneType: "null",
    list: "array",
    tuple: "array",
    Sequence: "array",
    MutableSequence: "array",
    dict: "object",
    Mapping: "object",
    MutableMapping: "object",
}
_JSON_LITERAL_TYPES = (str, int, float, bool, types.NoneType)
_FORBIDDEN_KINDS: Mapping[inspect._ParameterKind, str] = {
    inspect.Parameter.POSITIONAL_ONLY: "is positional-only",
    inspect.Parameter.VAR_POSITIONAL: "collects *args",
    inspect.Parameter.VAR_KEYWORD: "collects **kwargs",
}


def read_signature(
    fn: Callable[..., Any], name: str
) -> tuple[tuple[ToolParameter, ...], tuple[SecretParameter, ...]]:
    """The parameters a plan passes, and the secret parameters filled at call time.

    A parameter whose name says it holds a credential (``password``, ``api_key``...) but which
    a plan would pass is logged as a warning on the ``pev`` logger: its value would be planned,
    stored and shown.

    Raises:
        TypeError: A parameter that cannot be passed by name, or whose hint is not a JSON type.
        UsageError: A :class:`Secret` on a parameter that is not a ``str`` (or ``str | None``),
            nested inside its type, or given twice.
    """
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError, ValueError) as exc:
        raise TypeError(f"tool {name!r}: cannot read its signature ({exc})") from exc
    parameters: list[ToolParameter] = []
    secrets: list[SecretParameter] = []
    for param in signature.parameters.values():
        why = _FORBIDDEN_KINDS.get(param.kind)
        if why is not None:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} {why}; plan args are named JSON "
                "values, so a tool takes only parameters that can be passed by name"
            )
        secret = _secret_of(param, name)
        if secret is not None:
            secrets.append(SecretParameter(param.name, secret, param.default))
            continue
        try:
            json_types = _json_types(param.annotation)
        except TypeError as exc:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} has type hint {param.annotation!r}, "
                f"{exc}; plan args are JSON: use str, int, float, bool, None, list, dict, a "
                "Literal or a union of them, or Any"
            ) from None
        if looks_like_credential(param.name) and (not json_types or "string" in json_types):
            _log.warning(
                "tool %r: parameter %r looks like a credential, and a plan's args are stored "
                "in the ledger and shown as they are; if it is one, annotate it "
                "Annotated[str, pev.Secret('ENV_NAME')] so that it is filled when the tool is "
                "called and never planned (docs/tools.md, Secrets)",
                name,
                param.name,
            )
        parameters.append(
            ToolParameter(
                name=param.name,
                json_types=json_types,
                required=param.default is inspect.Parameter.empty,
            )
        )
    return tuple(parameters), tuple(secrets)


def _secret_of(param: inspect.Parameter, tool: str) -> Secret | None:
    """The parameter's :class:`Secret`, checked to stand where it may; ``None`` if it has none."""
    hint = param.annotation
    found = list(_secrets_in(hint))
    if not found:
        return None
    where = f"tool {tool!r}: parameter {param.name!r}"
    if len(found) > 1:
        raise UsageError(f"{where} has {len(found)} Secret annotations; give it one")
    text = _annotated_text(hint)
    if text is None:
        raise UsageError(
            f"{where}: a Secret annotates the parameter's own type, as in "
            f"Annotated[str, pev.Secret(...)], not a part of it (hint {hint!r})"
        )
    if not _is_text(text):
        raise UsageError(
            f"{where} is a Secret of type {text!r}; a secret is handed to the tool as a plain "
            "str: annotate Annotated[str, pev.Secret(...)] (or str | None, with a default)"
        )
    return found[0]


def _secrets_in(hint: object) -> Iterator[Secret]:
    """Every :class:`Secret` anywhere in a hint."""
    arguments = _arguments(hint)
    if typing.get_origin(hint) is typing.Annotated:
        yield from (extra for extra in arguments[1:] if isinstance(extra, Secret))
        arguments = arguments[:1]
    for argument in arguments:
        yield from _secrets_in(argument)


def _annotated_text(hint: object) -> object | None:
    """The type a Secret annotates where a Secret may stand, else ``None``.

    That is ``Annotated[T, Secret(...)]``, alone or in a union with ``None``.
    """
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        annotated: object = typing.get_args(hint)[0]
        return annotated
    if origin is typing.Union or origin is types.UnionType:
        members = typing.get_args(hint)
        marked = [member for member in members if typing.get_origin(member) is typing.Annotated]
        rest = [member for member in members if member not in marked]
        if len(marked) == 1 and all(member is types.NoneType for member in rest):
            inner: object = typing.get_args(marked[0])[0]
            return inner
    return None


def _is_text(hint: object) -> bool:
    """Whether a hint is ``str`` (or a ``NewType`` of it), possibly in a union with ``None``."""
    if hint is str:
        return True
    if isinstance(hint, typing.NewType):
        return _is_text(hint.__supertype__)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        text = [member for member in members if member is not types.NoneType]
        return bool(text) and all(_is_text(member) for member in text)
    return False


def _arguments(hint: object) -> tuple[object, ...]:
    if typing.get_origin(hint) is Literal:
        return ()  # values, not types
    try:
        return typing.get_args(hint)
    except TypeError:  # not a hint typing can take apart
        return ()


def _json_types(hint: object) -> frozenset[str]:
    """The JSON types a hint allows; empty means any. Raises TypeError for a non-JSON hint."""
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return _ANY
    if isinstance(hint, typing.NewType):
        return _json_types(hint.__supertype__)
    alias_value = getattr(hint, "__value__", None)  # a `type X = ...` alias (Python 3.12+)
    if alias_value is not None and type(hint).__name__ == "TypeAliasType":
        return _json_types(alias_value)
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        return _json_types(arguments[0])
    if origin is typing.Union or origin is types.UnionType:
        members = [_json_types(member) for member in arguments]
        return _ANY if _ANY in members else frozenset().union(*members)
    if origin is Literal:
        bad = [value for value in arguments if not _is_json_literal(value)]
        if bad:
            raise TypeError(f"whose value {bad[0]!r} is not a JSON scalar")
        return frozenset(_JSON_TYPE_OF_HINT[type(value)] for value in arguments)
    base = hint if origin is None else origin
    try:
        json_type = _JSON_TYPE_OF_HINT.get(base)
    except TypeError:  # an unhashable hint
        json_type = None
    if json_type is None:
        raise TypeError("which no JSON value has")
    return frozenset({json_type})


def _is_json_literal(value: object) -> bool:
    # Exact types: an Enum member is a str or int subclass, but plans carry the plain value.
    return type(value) in _JSON_LITERAL_TYPES and not (
        isinstance(value, float) and not math.isfinite(value)
    )
