"""Tools: plain functions that a plan may call (docs/design.md §6).

``@tool`` turns a sync or async function into a :class:`Tool` whose signature, read from its type
hints (:mod:`pev.engine._signature`), is the :class:`~pev.model.ToolSpec` that plan validation
checks node args against; parameters annotated with a :class:`~pev.engine.Secret` are left out of
it and filled when the tool is called. A :class:`ToolRegistry` holds the tools of a run;
:class:`~pev.engine.ToolExecutor` (in ``_tool_executor``) runs them.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar, overload

from pev.engine._protocols import is_async
from pev.engine._secret import Secret, SecretParameter, fill_secrets
from pev.engine._signature import read_signature
from pev.model import DeviceFailure, Effect, ExecutionRecord, ToolSpec

__all__ = [
    "PLACEMENT_RESOURCES",
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
    spec: ToolSpec = field(init=False, repr=False, compare=False)
    secrets: Mapping[str, Secret] = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)
    _secret_parameters: tuple[SecretParameter, ...] = field(init=False, repr=False, compare=False)

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
        parameters, secrets = read_signature(self.fn, self.name)
        object.__setattr__(
            self,
            "spec",
            ToolSpec(
                name=self.name,
                effect=self.effect,
                parameters=parameters,
                description=self.description,
                secrets=tuple((secret.name, secret.secret.source) for secret in secrets),
            ),
        )
        object.__setattr__(
            self,
            "secrets",
            types.MappingProxyType({secret.name: secret.secret for secret in secrets}),
        )
        object.__setattr__(self, "_secret_parameters", secrets)
        object.__setattr__(self, "is_async", is_async(self.fn))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    async def with_secrets(
        self, kwargs: MutableMapping[str, object], call: Callable[[], Awaitable[object]]
    ) -> object:
        """Fill the secret parameters into ``kwargs``, await ``call()``, and redact its outcome.

        The executor calls the tool through this. Before ``call()``, each secret is read (see
        :class:`~pev.engine.Secret`); after it, every value read is replaced by a marker naming
        its source (``[secret PAYMENTS_TOKEN]``) in what ``call()`` returned or raised, so that
        the ledger, the logs and the planner only ever see the name. A tool without secrets is
        called as it is.

        Raises:
            SecretUnavailable: A secret has no value (and its parameter no default); ``call`` was
                not made, so for an action nothing was sent.
            Exception: What ``call()`` raised, redacted in place, or a ``RedactedError`` in its
                stead when its text could not be; other base exceptions pass as they are.
        """
        if not self._secret_parameters:
            return await call()
        filled = await fill_secrets(self.name, self._secret_parameters)
        kwargs.update(filled.kwargs)
        redactor = filled.redactor
        try:
            value = await call()
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

    Raises:
        TypeError: The function takes ``*args``, ``**kwargs`` or positional-only parameters,
            or a parameter's type hint is not a JSON type (plan args are named JSON values),
            or ``reconcile`` is not callable.
        UsageError: A :class:`~pev.engine.Secret` on a parameter that is not a ``str`` (or
            ``str | None``), inside a parameter's type, or twice on one parameter.
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
            description=_first_doc_line(function) if description is None else description,
            placement=types.MappingProxyType({}) if placement is None else placement,
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
