"""Reading a tool's signature: the parameters a plan fills, and the secrets pev fills.

A parameter's type hint is what pydantic validates the plan's JSON value against (docs/tools.md
has the table): the signature becomes a pydantic model of the tool's args, whose JSON Schema is
the tool's schema, with each parameter's description taken from the docstring. Plan validation
checks a node's args against it and lists every error; at call time the resolved args are
validated again, and the tool receives typed values (a model, a dataclass, an enum member...). A
parameter annotated with a :class:`~pev.engine.Secret` is no plan's business: it is left out of
the schema and filled at call time (:mod:`pev.engine._secret`).
"""

from __future__ import annotations

import inspect
import logging
import types
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import docstring_parser
import pydantic
import pydantic_core

from pev.engine._secret import Secret, SecretParameter, looks_like_credential
from pev.errors import UsageError
from pev.model import JsonObject, JsonValue, ToolParameter, freeze_json, thaw_json

__all__ = ["ArgumentsRejectedError", "Signature", "read_signature", "schema_json_types"]

_log = logging.getLogger("pev.engine")

_FORBIDDEN_KINDS: Mapping[inspect._ParameterKind, str] = {
    inspect.Parameter.POSITIONAL_ONLY: "is positional-only",
    inspect.Parameter.VAR_POSITIONAL: "collects *args",
    inspect.Parameter.VAR_KEYWORD: "collects **kwargs",
}
_JSON_TYPE_OF_VALUE: Mapping[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    types.NoneType: "null",
}


class ArgumentsRejectedError(ValueError):
    """A call's resolved args do not fit the tool's schema: the tool was not called.

    Raised at dispatch, when a ``$ref`` filled an argument with a value its type refuses (plan
    validation checks every other argument before the plan is accepted).
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """What a tool's signature says: its parameters, schema, secrets and how to check args.

    Attributes:
        parameters: The parameters a plan passes, in order.
        secrets: The parameters filled from a :class:`~pev.engine.Secret` at call time.
        schema: The JSON Schema of the args object (frozen).
        descriptions: Parameter name → its description from the docstring.
        check: ``check(args, later)``: one problem per error (see :data:`pev.model.ArgsCheck`).
        convert: The resolved args as the typed values the function takes.
    """

    parameters: tuple[ToolParameter, ...]
    secrets: tuple[SecretParameter, ...]
    schema: JsonObject
    descriptions: Mapping[str, str]
    check: Callable[[Mapping[str, JsonValue], frozenset[str]], Sequence[str]]
    convert: Callable[[Mapping[str, Any]], dict[str, Any]]


def read_signature(fn: Callable[..., Any], name: str) -> Signature:
    """Read the signature of tool ``name``'s function ``fn``.

    A parameter whose name says it holds a credential (``password``, ``api_key``...) but which
    a plan would pass is logged as a warning on the ``pev`` logger: its value would be planned,
    stored and shown.

    Raises:
        TypeError: A parameter that cannot be passed by name, or whose type hint pydantic
            cannot validate from JSON.
        UsageError: A :class:`Secret` on a parameter that is not a ``str`` (or ``str | None``),
            nested inside its type, or given twice.
    """
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError, ValueError) as exc:
        raise TypeError(f"tool {name!r}: cannot read its signature ({exc})") from exc
    descriptions = parameter_descriptions(fn)
    planned: list[inspect.Parameter] = []
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
        else:
            planned.append(param)
    model = _args_model(name, planned, descriptions)
    schema = _schema(model, name, planned)
    properties = schema.get("properties")
    parameters: list[ToolParameter] = []
    for param in planned:
        prop = properties.get(param.name) if isinstance(properties, JsonObject) else None
        json_types = schema_json_types(prop) if isinstance(prop, JsonObject) else frozenset()
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
    names = tuple(param.name for param in planned)
    return Signature(
        parameters=tuple(parameters),
        secrets=tuple(secrets),
        schema=schema,
        descriptions=types.MappingProxyType(
            {key: text for key, text in descriptions.items() if key in names}
        ),
        check=_Checker(model, names),
        convert=_Converter(model, names, name),
    )


def parameter_descriptions(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter name → description, from the docstring's Google, NumPy or reST parameters."""
    doc = inspect.getdoc(fn)
    if not doc:
        return {}
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return {}
    return {
        param.arg_name: " ".join(param.description.split())
        for param in parsed.params
        if param.description
    }


def docstring_description(fn: Callable[..., Any]) -> str:
    """The docstring's description: its text before the sections (``Args:``, ``Returns:``)."""
    doc = inspect.getdoc(fn)
    if not doc:
        return ""
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return doc.strip().split("\n", 1)[0].strip()
    parts = (parsed.short_description, parsed.long_description)
    return "\n\n".join(part.strip() for part in parts if part and part.strip())


def schema_json_types(schema: JsonObject) -> frozenset[str]:
    """The JSON types a value of a (property's) JSON Schema may have; empty means any.

    Reads ``type``, ``const``, ``enum`` and ``anyOf``/``oneOf``; a ``$ref`` or any other form
    says nothing this simple reading can use, and counts as any.
    """
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, tuple) and all(isinstance(item, str) for item in kind):
        return frozenset(typing.cast("tuple[str, ...]", kind))
    if "const" in schema:
        return _value_types((schema["const"],))
    enum = schema.get("enum")
    if isinstance(enum, tuple):
        return _value_types(enum)
    branches = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(branches, tuple) and branches:
        found = [
            schema_json_types(branch) if isinstance(branch, JsonObject) else frozenset()
            for branch in branches
        ]
        return frozenset() if frozenset() in found else frozenset().union(*found)
    return frozenset()


def _value_types(values: tuple[JsonValue, ...]) -> frozenset[str]:
    found = [_JSON_TYPE_OF_VALUE.get(type(value)) for value in values]
    return frozenset() if None in found else frozenset(typing.cast("list[str]", found))


def _args_model(
    tool: str, planned: Sequence[inspect.Parameter], descriptions: Mapping[str, str]
) -> type[pydantic.BaseModel]:
    """A pydantic model of the args: one field per parameter.

    Each field has a neutral name and the parameter's as its alias, so that no parameter name
    can clash with pydantic's own (``json``, ``model_config``, a leading underscore).
    """
    fields: dict[str, Any] = {}
    for index, param in enumerate(planned):
        # No hint: any JSON value, handed over as it is; the parameters beside it keep theirs.
        hint = Any if param.annotation is inspect.Parameter.empty else param.annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[f"p{index}"] = (
            hint,
            pydantic.Field(default, alias=param.name, description=descriptions.get(param.name)),
        )
    try:
        return pydantic.create_model(
            tool,
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
    except Exception as exc:  # noqa: BLE001 - whatever pydantic makes of a hint, said as one error
        raise TypeError(_refused(tool, planned, exc)) from None


def _schema(
    model: type[pydantic.BaseModel], tool: str, planned: Sequence[inspect.Parameter]
) -> JsonObject:
    try:
        with warnings.catch_warnings():
            # A default JSON cannot hold (an object, say) is left out of the schema, which is
            # what pydantic warns about; the parameter stays optional all the same.
            warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
            schema = model.model_json_schema(by_alias=True)
    except Exception as exc:  # noqa: BLE001 - a hint not fully defined, recursive, unknown...
        raise TypeError(_refused(tool, planned, exc)) from None
    schema.pop("title", None)
    frozen = freeze_json(schema, path="schema")
    assert isinstance(frozen, JsonObject)  # noqa: S101 - a model's schema is an object
    return frozen


def _refused(tool: str, planned: Sequence[inspect.Parameter], exc: Exception) -> str:
    """The error for a signature pydantic cannot validate from JSON, naming the parameter."""
    for param in planned:
        hint = param.annotation
        if hint is inspect.Parameter.empty:
            continue
        try:
            pydantic.TypeAdapter(hint).json_schema()
        except Exception as found:  # noqa: BLE001 - any failure names this parameter
            why = (str(found).split("\n", 1)[0] or type(found).__name__)[:200]
            return (
                f"tool {tool!r}: parameter {param.name!r} has type hint {hint!r}, which "
                f"pydantic cannot validate from JSON ({why}); plan args are JSON: use str, int, "
                "float, bool, None, lists, dicts, Literal, enums, dataclasses, TypedDicts or "
                "pydantic models (docs/tools.md, Typed tools), or Any"
            )
    return f"tool {tool!r}: pydantic cannot read its parameters ({exc})"


class _Checker:
    """``check(args, later)`` for plan validation: pydantic's errors, one line each."""

    __slots__ = ("_model", "_names")

    def __init__(self, model: type[pydantic.BaseModel], names: tuple[str, ...]) -> None:
        self._model = model
        self._names = names

    def __call__(self, args: Mapping[str, JsonValue], later: frozenset[str]) -> list[str]:
        try:
            self._model.model_validate({key: thaw_json(value) for key, value in args.items()})
        except pydantic.ValidationError as exc:
            return [
                describe_error(error)
                for error in exc.errors(include_url=False)
                if not _filled_later(error, later)
            ]
        return []


def _filled_later(error: pydantic_core.ErrorDetails, later: frozenset[str]) -> bool:
    """Whether an error is one plan validation leaves to dispatch, or reports itself.

    That is an error about a ``$ref`` object (nested ones too, which stand where a value of the
    field's type will be), or a missing parameter named in ``later``.
    """
    found = error.get("input")
    if isinstance(found, dict) and len(found) == 1 and isinstance(found.get("$ref"), str):
        return True
    location = error["loc"]
    return error["type"] == "missing" and len(location) == 1 and location[0] in later


class _Converter:
    """The resolved args as typed values; only those given (the function's defaults apply)."""

    __slots__ = ("_model", "_names", "_tool", "_typed")

    def __init__(self, model: type[pydantic.BaseModel], names: tuple[str, ...], tool: str) -> None:
        self._model = model
        self._names = names
        self._tool = tool
        # A model whose every field is Any changes no value: such args pass as they are. One
        # typed field is enough to validate them all (one unannotated parameter turns none off).
        self._typed = any(info.annotation is not Any for info in model.model_fields.values())

    def __call__(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if not self._typed:
            return dict(args)
        try:
            model = self._model.model_validate(args)
        except pydantic.ValidationError as exc:
            problems = "; ".join(describe_error(error) for error in exc.errors(include_url=False))
            raise ArgumentsRejectedError(
                f"tool {self._tool!r} was not called: its resolved args do not fit its "
                f"schema: {problems}"
            ) from None
        given = model.model_fields_set
        return {
            alias: getattr(model, field)
            for field, alias in zip(self._model.model_fields, self._names, strict=True)
            if field in given
        }


def describe_error(error: pydantic_core.ErrorDetails) -> str:
    """One pydantic validation error as a line: the argument's path, the message, the input."""
    location = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"argument {location!r} is missing"
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"argument {location!r} is not a field it takes"
    shown = repr(error.get("input"))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"argument {location!r}: {error['msg']} (got {shown})"


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
