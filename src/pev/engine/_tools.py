"""Tools: plain functions that a plan may call (docs/design.md §6).

``@tool`` turns a sync or async function into a :class:`Tool` whose signature, read from its type
hints, is the :class:`~pev.model.ToolSpec` that plan validation checks node args against. A
:class:`ToolRegistry` holds the tools of a run; :class:`~pev.engine.ToolExecutor` (in
``_tool_executor``) runs them.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    MutableSequence,
    Sequence,
)
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar, overload

from pev.engine._protocols import is_async
from pev.model import (
    Effect,
    ExecutionRecord,
    ToolParameter,
    ToolSpec,
)

__all__ = [
    "Reconciler",
    "Tool",
    "ToolLike",
    "ToolRegistry",
    "check_timeout",
    "tool",
]

P = ParamSpec("P")
R = TypeVar("R")

EffectName: TypeAlias = Effect | Literal["query", "action"]

Reconciler: TypeAlias = Callable[[ExecutionRecord], Any]
"""Settles a record of a tool call whose outcome is unknown: ``reconcile(record)``, sync or async.

It looks at the world (by the record's ``idempotency_key``, say) and returns what the call really
did: a :class:`~pev.model.NodeResult`, a plain value meaning ``Success(value)``, or ``None`` when
it cannot tell (the record stays ``unknown``).
"""

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool(Generic[P, R]):
    """A function registered for plans to call; calling the tool calls the function.

    Build one with :func:`tool`. Construction checks the options and reads the signature.

    Attributes:
        fn: The function, sync or async.
        name: The name plans use in ``PlanNode.tool``.
        effect: ``query`` (read-only, safe to repeat) or ``action`` (side effects).
        resource: Tools with the same resource name never run at the same time.
        timeout_s: How long one call may take; ``None`` falls back to the executor's default.
        description: What the tool does, for the planner (default: the docstring's first line).
        reconcile: Settles a call of this tool whose outcome is unknown (a timed-out action,
            say), see :data:`Reconciler`; ``None``: such a call stays ``unknown``.
        spec: The name, effect and parameters that plan validation checks args against.
        is_async: Whether calling ``fn`` gives an awaitable to await (else it runs in a thread).
    """

    fn: Callable[P, R]
    name: str
    effect: Effect = Effect.ACTION
    resource: str | None = None
    timeout_s: float | None = None
    description: str = ""
    reconcile: Reconciler | None = field(default=None, repr=False, compare=False)
    spec: ToolSpec = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.fn, Tool):
            raise TypeError(f"{self.fn!r} is already a tool; apply @tool to a function once")
        if not callable(self.fn):
            raise TypeError(f"a tool must be a function, got a {type(self.fn).__name__}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"a tool name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "effect", _effect(self.effect))
        if self.resource is not None and (
            not isinstance(self.resource, str) or not self.resource.strip()
        ):
            raise ValueError(f"tool {self.name!r}: resource must be a non-empty name or None")
        check_timeout(self.timeout_s, f"tool {self.name!r}: timeout_s")
        if self.reconcile is not None and not callable(self.reconcile):
            raise TypeError(
                f"tool {self.name!r}: reconcile must be a function of the record, "
                f"got a {type(self.reconcile).__name__}"
            )
        parameters = _parameters(self.fn, self.name)
        object.__setattr__(
            self,
            "spec",
            ToolSpec(
                name=self.name,
                effect=self.effect,
                parameters=parameters,
                description=self.description,
            ),
        )
        object.__setattr__(self, "is_async", is_async(self.fn))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        options = [f"effect={self.effect.value!r}"]
        if self.resource is not None:
            options.append(f"resource={self.resource!r}")
        if self.timeout_s is not None:
            options.append(f"timeout_s={self.timeout_s!r}")
        return f"Tool({self.name!r}, {', '.join(options)})"


@overload
def tool(
    fn: Callable[P, R],
    /,
    *,
    name: str | None = None,
    effect: EffectName = "action",
    resource: str | None = None,
    timeout_s: float | None = None,
    description: str | None = None,
    reconcile: Reconciler | None = None,
) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    effect: EffectName = "action",
    resource: str | None = None,
    timeout_s: float | None = None,
    description: str | None = None,
    reconcile: Reconciler | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    effect: EffectName = "action",
    resource: str | None = None,
    timeout_s: float | None = None,
    description: str | None = None,
    reconcile: Reconciler | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a sync or async function into a :class:`Tool`: ``@tool`` or ``@tool(effect=...)``.

    Args:
        fn: The function (when used as ``@tool`` without parentheses).
        name: The name plans use; default: the function's name.
        effect: ``"action"`` (the default, the safe assumption) or ``"query"`` (read-only).
        resource: Tools sharing this name (one robot arm, say) never run at the same time.
        timeout_s: How long one call may take; default: the executor's ``node_timeout_s``.
        description: What it does, for the planner; default: the docstring's first line.
        reconcile: ``reconcile(record)``, which tells what a call whose outcome is unknown
            really did (a timed-out action that may have taken effect): a result, a value
            meaning success, or ``None`` when it cannot tell. The engine asks it right after the
            round in which the call ended ``unknown``, and on resume for calls a crash left
            unfinished; what it establishes is a ``record_reconciled`` event.

    Raises:
        TypeError: The function takes ``*args``, ``**kwargs`` or positional-only parameters,
            or a parameter's type hint is not a JSON type (plan args are named JSON values),
            or ``reconcile`` is not callable.
        ValueError: An unknown effect, an empty name or resource, or a timeout that is not a
            positive number of seconds.
    """

    def decorate(function: Callable[P, R]) -> Tool[P, R]:
        if isinstance(function, Tool):
            raise TypeError(f"{function!r} is already a tool; apply @tool to a function once")
        return Tool(
            fn=function,
            name=_default_name(function) if name is None else name,
            effect=_effect(effect),
            resource=resource,
            timeout_s=timeout_s,
            description=_first_doc_line(function) if description is None else description,
            reconcile=reconcile,
        )

    return decorate if fn is None else decorate(fn)


ToolLike: TypeAlias = Tool[..., Any] | Callable[..., Any]
"""A tool, or a plain function that becomes one with :func:`tool`'s defaults."""


class ToolRegistry(Mapping[str, Tool[..., Any]]):
    """The tools of a run, by name: an immutable mapping.

    Build it with :meth:`of`, from a tool, a function, an iterable of them, or a mapping of
    name to tool (the mapping's key becomes the tool's name).
    """

    __slots__ = ("_specs", "_tools")

    def __init__(self, tools: ToolLike | Iterable[ToolLike] | Mapping[str, ToolLike] = ()) -> None:
        """Register ``tools``; see :meth:`of`."""
        registered: dict[str, Tool[..., Any]] = {}
        for item in _tool_items(tools):
            if item.name in registered:
                raise ValueError(
                    f"two tools are named {item.name!r}; give one another name with @tool(name=...)"
                )
            registered[item.name] = item
        self._tools: Mapping[str, Tool[..., Any]] = types.MappingProxyType(registered)
        self._specs: Mapping[str, ToolSpec] = types.MappingProxyType(
            {name: item.spec for name, item in registered.items()}
        )

    @classmethod
    def of(cls, tools: ToolLike | Iterable[ToolLike] | Mapping[str, ToolLike]) -> ToolRegistry:
        """A registry of ``tools``; a registry given is returned as it is.

        Raises:
            ValueError: Two tools have the same name.
            TypeError: Something that is neither a tool nor a function.
        """
        return tools if isinstance(tools, ToolRegistry) else cls(tools)

    @property
    def specs(self) -> Mapping[str, ToolSpec]:
        """Name → :class:`~pev.model.ToolSpec`: what :func:`~pev.model.validate_plan` takes."""
        return self._specs

    def __getitem__(self, name: str) -> Tool[..., Any]:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"


def _tool_items(
    tools: ToolLike | Iterable[ToolLike] | Mapping[str, ToolLike],
) -> Iterator[Tool[..., Any]]:
    if isinstance(tools, Mapping):
        for name, item in tools.items():
            if isinstance(item, Tool):
                yield item if item.name == name else replace(item, name=name)
            else:
                yield tool(_callable(item), name=name)
    elif callable(tools):
        yield tools if isinstance(tools, Tool) else tool(tools)
    elif isinstance(tools, Iterable) and not isinstance(tools, str | bytes):
        for item in tools:
            yield item if isinstance(item, Tool) else tool(_callable(item))
    else:
        raise TypeError(
            f"expected tools: a function, a Tool, an iterable or a mapping of them; "
            f"got a {type(tools).__name__}"
        )


def _callable(item: object) -> Callable[..., Any]:
    if not callable(item):
        raise TypeError(f"expected a tool or a function, got {item!r}")
    return item


def _effect(effect: object) -> Effect:
    if isinstance(effect, str) and effect in {e.value for e in Effect}:
        return Effect(effect)
    allowed = ", ".join(repr(e.value) for e in Effect)
    raise ValueError(f"effect must be one of {allowed}; got {effect!r}")


def check_timeout(seconds: object, what: str) -> None:
    """Refuse a timeout that is not a positive, finite number of seconds (``None`` is fine).

    Raises:
        ValueError: Naming ``what`` and the value.
    """
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{what} must be a number of seconds or None, got {seconds!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{what} must be a positive, finite number of seconds; got {seconds!r}")


def _default_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"{fn!r} has no __name__ to name the tool by; pass name=...")
    return name


def _first_doc_line(fn: Callable[..., Any]) -> str:
    target = fn.func if isinstance(fn, functools.partial) else fn
    doc = inspect.getdoc(target) or ""
    return doc.strip().split("\n", 1)[0].strip()


def _parameters(fn: Callable[..., Any], name: str) -> tuple[ToolParameter, ...]:
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError, ValueError) as exc:
        raise TypeError(f"tool {name!r}: cannot read its signature ({exc})") from exc
    parameters = []
    for param in signature.parameters.values():
        why = _FORBIDDEN_KINDS.get(param.kind)
        if why is not None:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} {why}; plan args are named JSON "
                "values, so a tool takes only parameters that can be passed by name"
            )
        try:
            json_types = _json_types(param.annotation)
        except TypeError as exc:
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} has type hint {param.annotation!r}, "
                f"{exc}; plan args are JSON: use str, int, float, bool, None, list, dict, a "
                "Literal or a union of them, or Any"
            ) from None
        parameters.append(
            ToolParameter(
                name=param.name,
                json_types=json_types,
                required=param.default is inspect.Parameter.empty,
            )
        )
    return tuple(parameters)


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
