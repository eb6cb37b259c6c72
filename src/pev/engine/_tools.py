"""Tools: plain functions that a plan may call (docs/design.md §6).

``@tool`` turns a sync or async function into a :class:`Tool` whose signature, read from its type
hints (:mod:`pev.engine._signature`), is the :class:`~pev.model.ToolSpec` that plan validation
checks node args against; parameters annotated with a :class:`~pev.engine.Secret` are left out of
it and filled when the tool is called. A :class:`ToolRegistry` holds the tools of a run;
:class:`~pev.engine.ToolExecutor` (in ``_tool_executor``) runs them.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar, overload

import pydantic_core

from pev.engine._protocols import is_async
from pev.engine._redact import remember
from pev.engine._retry import Retry, check_retry
from pev.engine._secret import Secret, SecretParameter, fill_secrets
from pev.engine._signature import (
    ArgumentsRejectedError,
    docstring_description,
    read_signature,
    schema_json_types,
)
from pev.ledger import TaskEffect
from pev.model import (
    ArgsCheck,
    DeviceFailure,
    Effect,
    ExecutionRecord,
    JsonObject,
    NodeResult,
    ToolParameter,
    ToolSpec,
    freeze_json,
    thaw_json,
)

__all__ = [
    "PLACEMENT_RESOURCES",
    "Compensator",
    "Reconciler",
    "Tool",
    "ToolLike",
    "ToolRegistry",
    "check_placement",
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


Compensator: TypeAlias = "Callable[[TaskEffect], Any] | Tool[..., Any]"
"""Undoes one effect of a tool: ``compensate(effect)``, sync or async, or a tool.

A function is given the :class:`~pev.ledger.TaskEffect` (its ``args``, ``result``, ``value`` and
``key``); a :class:`Tool` is called with the effect's args, typed by its own schema (a tool that
mirrors the action: ``cancel_booking(room, day)`` for ``book(room, day)``). Returning (``None``
or any value) means undone; raising, or returning a failure, means it was not; running past the
tool's timeout leaves it unknown. Inside, ``current_node_context().idempotency_key`` is the
compensation's own key, the same for every try of the same compensation.
"""


PLACEMENT_RESOURCES = ("num_cpus", "num_gpus", "memory")
"""The placement keys that are not custom resources: CPUs, GPUs and memory in bytes."""


def check_placement(placement: object, name: str) -> Mapping[str, float]:
    """A tool's placement as a read-only mapping, or a ``ValueError`` naming what is wrong."""
    if not isinstance(placement, Mapping):
        raise ValueError(  # noqa: TRY004 - tool()'s documented error for any bad placement
            f"tool {name!r}: placement must be a mapping of resource names to amounts, such as "
            f"{{'num_cpus': 1, 'arm0': 1}}; got a {type(placement).__name__}"
        )
    checked: dict[str, float] = {}
    for key, amount in placement.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"tool {name!r}: a placement resource needs a name, got {key!r}")
        if (
            isinstance(amount, bool)
            or not isinstance(amount, int | float)
            or not math.isfinite(amount)
            or amount < 0
        ):
            raise ValueError(
                f"tool {name!r}: placement {key!r} must be a finite amount not below zero, "
                f"got {amount!r}"
            )
        checked[key] = amount
    return types.MappingProxyType(checked)


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
        placement: What a call needs of the machine it runs on, for executors that place calls
            (``pev.ray.RayExecutor``): ``num_cpus``, ``num_gpus``, ``memory`` (bytes) and custom
            resources such as ``{"arm0": 1}`` for the one host that has the arm. The local
            executor runs every call here and ignores it.
        reconcile: Settles a call of this tool whose outcome is unknown (a timed-out action,
            say), see :data:`Reconciler`; ``None``: such a call stays ``unknown``.
        compensate: Undoes one effect of this tool (see :data:`Compensator`) when a replan
            replaces it or a task unwinds (docs/engine.md, "Compensation"); ``None``: its
            effects cannot be undone, and stay in place (listed as superseded).
        retry: How a call that raised is tried again (:class:`~pev.Retry`; an action only on
            :class:`~pev.NotSent`); ``None``: each call is made once.
        input_schema: Given, the JSON Schema of the args object, for a tool whose function
            takes ``**kwargs`` (an MCP server's tool, say): its signature is not read, and it
            receives the args as plain JSON values. ``None`` (the default): the schema comes
            from the function's signature and type hints (see :attr:`schema`).
        check: With ``input_schema``, checks args against it (:data:`~pev.model.ArgsCheck`),
            at plan validation and again at call time; ``None``: only the parameters' names
            and top-level JSON types are checked.
        spec: The name, effect and parameters that plan validation checks args against.
        secrets: Parameter name → :class:`~pev.engine.Secret`, for the parameters annotated
            ``Annotated[str, Secret(...)]``: left out of ``spec``, filled when the tool is called.
        is_async: Whether calling ``fn`` gives an awaitable to await (else it runs in a thread).
    """

    fn: Callable[P, R]
    name: str
    effect: Effect = Effect.ACTION
    resource: str | None = None
    timeout_s: float | None = None
    description: str = ""
    placement: Mapping[str, float] = field(
        default_factory=lambda: types.MappingProxyType({}), compare=False
    )
    reconcile: Reconciler | None = field(default=None, repr=False, compare=False)
    retry: Retry | None = field(default=None, compare=False)
    compensate: Compensator | None = field(default=None, repr=False, compare=False)
    input_schema: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    check: ArgsCheck | None = field(default=None, repr=False, compare=False)
    spec: ToolSpec = field(init=False, repr=False, compare=False)
    secrets: Mapping[str, Secret] = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)
    _secret_parameters: tuple[SecretParameter, ...] = field(init=False, repr=False, compare=False)
    _convert: Callable[[Mapping[str, Any]], dict[str, Any]] = field(
        init=False, repr=False, compare=False
    )

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
        object.__setattr__(self, "placement", check_placement(self.placement, self.name))
        if self.reconcile is not None and not callable(self.reconcile):
            raise TypeError(
                f"tool {self.name!r}: reconcile must be a function of the record, "
                f"got a {type(self.reconcile).__name__}"
            )
        if self.compensate is not None and not callable(self.compensate):
            raise TypeError(
                f"tool {self.name!r}: compensate must be a function of the effect, or a tool, "
                f"got a {type(self.compensate).__name__}"
            )
        if self.compensate is not None and self.effect is Effect.QUERY:
            raise ValueError(
                f"tool {self.name!r}: a query changes nothing, so it has nothing to compensate; "
                "drop compensate= or declare the tool effect='action'"
            )
        check_retry(self.retry, tool=self.name, effect=self.effect)
        if self.input_schema is None:
            if self.check is not None:
                raise TypeError(
                    f"tool {self.name!r}: check goes with input_schema; a tool read from its "
                    "signature is checked by its type hints"
                )
            signature = read_signature(self.fn, self.name)
            parameters, secrets = signature.parameters, signature.secrets
            schema, convert = signature.schema, signature.convert
            check: ArgsCheck | None = signature.check
        else:
            schema = _given_schema(self.input_schema, self.name)
            parameters, secrets = _schema_parameters(schema), ()
            check, convert = self.check, _Checked(self.name, self.check)
        object.__setattr__(
            self,
            "spec",
            ToolSpec(
                name=self.name,
                effect=self.effect,
                parameters=parameters,
                description=self.description,
                secrets=tuple((secret.name, secret.secret.source) for secret in secrets),
                schema=schema,
                check=check,
            ),
        )
        object.__setattr__(self, "_convert", convert)
        object.__setattr__(
            self,
            "secrets",
            types.MappingProxyType({secret.name: secret.secret for secret in secrets}),
        )
        object.__setattr__(self, "_secret_parameters", secrets)
        object.__setattr__(self, "is_async", is_async(self.fn))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's args object (a fresh copy).

        Read from the signature through pydantic (or the ``input_schema`` given): one property
        per parameter a plan passes, with its description from the docstring, ``required`` for
        those without a default, and no other property allowed. Secrets are not in it.
        """
        schema = self.spec.schema
        assert schema is not None  # noqa: S101 - a Tool's spec always has one
        copied = thaw_json(schema)
        assert isinstance(copied, dict)  # noqa: S101 - a schema is an object
        return copied

    async def call_with(
        self, kwargs: MutableMapping[str, object], call: Callable[[], Awaitable[object]]
    ) -> object:
        """Type ``kwargs``, fill in the secrets, await ``call()``, and make its outcome recordable.

        The executor calls the tool through this. First the resolved args are validated against
        the tool's schema and replaced by the typed values the function takes (a model, an enum
        member...). Before ``call()``, each secret is read (see :class:`~pev.engine.Secret`);
        after it, what it returned is turned into JSON (a model or dataclass into its JSON form)
        and every secret value read is replaced by a marker naming its source
        (``[secret PAYMENTS_TOKEN]``) in what ``call()`` returned or raised, so that the ledger,
        the logs and the planner only ever see the name.

        Raises:
            ArgumentsRejectedError: The resolved args do not fit the schema (a ``$ref`` filled one
                with a value of another type); ``call`` was not made.
            SecretUnavailable: A secret has no value (and its parameter no default); ``call`` was
                not made, so for an action nothing was sent.
            Exception: What ``call()`` raised, redacted in place, or a ``RedactedError`` in its
                stead when its text could not be; other base exceptions pass as they are.
        """
        typed = self._convert(kwargs)
        kwargs.clear()
        kwargs.update(typed)
        if not self._secret_parameters:
            return as_json(await call())
        filled = await fill_secrets(self.name, self._secret_parameters)
        kwargs.update(filled.kwargs)
        redactor = filled.redactor
        # Whatever else comes to quote a value (a planner's error, a rail's), the logs never do.
        remember(redactor)
        try:
            value = as_json(await call())
        except Exception as exc:
            redacted = redactor.exception(exc)
            if redacted is exc:
                raise
            failure = redacted
        else:
            try:
                return redactor.value(value)
            except Exception as exc:  # noqa: BLE001 - a mapping of the tool's own failed to read
                # The tool ran: an action's outcome is unknown, as for any value not recorded.
                return DeviceFailure(
                    "",
                    f"tool {self.name!r} returned a value that could not be searched for its "
                    f"secrets ({type(exc).__name__}); it is not recorded",
                    outcome_unknown=self.effect is Effect.ACTION,
                )
        # Raised outside the handler, so the original (which holds the secret) is not chained.
        raise failure from None

    def __repr__(self) -> str:
        options = [f"effect={self.effect.value!r}"]
        if self.resource is not None:
            options.append(f"resource={self.resource!r}")
        if self.timeout_s is not None:
            options.append(f"timeout_s={self.timeout_s!r}")
        if self.placement:
            options.append(f"placement={dict(self.placement)!r}")
        if self.retry is not None:
            options.append(f"retry={self.retry!r}")
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
    placement: Mapping[str, float] | None = None,
    reconcile: Reconciler | None = None,
    retry: Retry | None = None,
    compensate: Compensator | None = None,
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
    placement: Mapping[str, float] | None = None,
    reconcile: Reconciler | None = None,
    retry: Retry | None = None,
    compensate: Compensator | None = None,
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
    placement: Mapping[str, float] | None = None,
    reconcile: Reconciler | None = None,
    retry: Retry | None = None,
    compensate: Compensator | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a sync or async function into a :class:`Tool`: ``@tool`` or ``@tool(effect=...)``.

    Args:
        fn: The function (when used as ``@tool`` without parentheses).
        name: The name plans use; default: the function's name.
        effect: ``"action"`` (the default, the safe assumption) or ``"query"`` (read-only).
        resource: Tools sharing this name (one robot arm, say) never run at the same time.
        timeout_s: How long one call may take; default: the executor's ``node_timeout_s``.
        description: What it does, for the planner; default: the docstring's first line.
        placement: Where a call may run, for an executor that places calls on a cluster
            (``pev.ray.RayExecutor``, docs/ray.md): ``num_cpus``, ``num_gpus``, ``memory`` in
            bytes, and custom resources (``{"arm0": 1}``: only the host that has the arm).
            Ignored by the local executor.
        reconcile: ``reconcile(record)``, which tells what a call whose outcome is unknown
            really did (a timed-out action that may have taken effect): a result, a value
            meaning success, or ``None`` when it cannot tell. The engine asks it right after the
            round in which the call ended ``unknown``, and on resume for calls a crash left
            unfinished; what it establishes is a ``record_reconciled`` event.
        retry: How a call that raised is tried again, within the node's deadline:
            ``Retry(attempts=3, on=(ConnectionError,))`` (docs/tools.md, "Retries"). A query
            retries on the exceptions listed; an action only on :class:`~pev.NotSent`.
        compensate: Undoes one effect of this action (see :data:`Compensator`): a function of
            the effect, or a tool called with the effect's args. pev calls it, once per effect,
            when a replan replaces the effect or a task unwinds (docs/engine.md,
            "Compensation").

    Raises:
        TypeError: The function takes ``*args``, ``**kwargs`` or positional-only parameters,
            or a parameter's type hint is one pydantic cannot validate from JSON (plan args are
            named JSON values), or ``reconcile`` is not callable.
        UsageError: A :class:`~pev.engine.Secret` on a parameter that is not a ``str`` (or
            ``str | None``), inside a parameter's type, or twice on one parameter; a
            ``retry`` that is not a :class:`~pev.Retry`, or that lists exceptions other than
            ``NotSent`` for an action tool.
        ValueError: An unknown effect, an empty name or resource, a timeout that is not a
            positive number of seconds, or a placement that is not names of resources with
            amounts that are finite numbers not below zero.
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
            description=_description(function) if description is None else description,
            placement=types.MappingProxyType({}) if placement is None else placement,
            reconcile=reconcile,
            retry=retry,
            compensate=compensate,
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


def _description(fn: Callable[..., Any]) -> str:
    return docstring_description(fn.func if isinstance(fn, functools.partial) else fn)


def as_json(value: object) -> object:
    """What a tool returned, with models, dataclasses, enums, dates and sets as their JSON form.

    Lists, tuples and dicts are walked; any other value that is not a JSON scalar or a node
    result is serialized by pydantic, nested models and all. What cannot be turned into JSON
    (an object pydantic does not know, a dict with keys that are not strings, a value nested
    too deep) is left as it is: recording it then fails, naming the problem.
    """
    try:
        return _as_json(value)
    except RecursionError:
        return value


def _as_json(value: object) -> object:
    if value is None or isinstance(value, str | int | float | NodeResult):
        return value
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            return value
        return {key: _as_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(item) for item in value]
    try:
        return pydantic_core.to_jsonable_python(value)
    except Exception:  # noqa: BLE001 - an unknown type, too deep, a serializer that raised
        return value


def _given_schema(schema: object, tool: str) -> JsonObject:
    """An ``input_schema`` given, checked to be a JSON object schema and frozen."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise TypeError(
            f"tool {tool!r}: input_schema must be the JSON Schema of an object, such as "
            '{"type": "object", "properties": {...}}; got ' + repr(schema)[:80]
        )
    try:
        frozen = freeze_json(schema, path="input_schema")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool {tool!r}: input_schema is not JSON ({exc})") from None
    assert isinstance(frozen, JsonObject)  # noqa: S101 - checked a mapping above
    return frozen


def _schema_parameters(schema: JsonObject) -> tuple[ToolParameter, ...]:
    """The parameters an object schema names: its properties, required where it says so."""
    properties = schema.get("properties")
    required = schema.get("required")
    needed = set(required) if isinstance(required, tuple) else set()
    if not isinstance(properties, JsonObject):
        return ()
    return tuple(
        ToolParameter(
            name=name,
            json_types=schema_json_types(prop) if isinstance(prop, JsonObject) else frozenset(),
            required=name in needed,
        )
        for name, prop in properties.items()
    )


class _Checked:
    """Call-time conversion of a tool given its schema: args checked, passed as plain JSON."""

    __slots__ = ("_check", "_tool")

    def __init__(self, tool: str, check: ArgsCheck | None) -> None:
        self._tool = tool
        self._check = check

    def __call__(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self._check is not None:
            problems = list(self._check(freeze_json(args), frozenset()))  # type: ignore[arg-type]
            if problems:
                raise ArgumentsRejectedError(
                    f"tool {self._tool!r} was not called: its resolved args do not fit its "
                    f"schema: {'; '.join(problems)}"
                )
        return dict(args)
