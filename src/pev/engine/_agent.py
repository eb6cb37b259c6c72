"""``pev.Agent``: one frozen, typed definition of an agent, and the types its parts may have.

An agent is a planner, tools (or an executor), a verifier, an observer, and the contract, policy
and rails its runs use by default. ``run``, ``run_sync`` and ``resume`` take ``agent=``; the
keyword form of ``run`` (``planner=..., tools=...``) builds one. Bound to a module-level name
(``booking = pev.Agent(...)`` in ``myapp/agents.py``), an agent is what the ledger records
(``myapp.agents:booking``), so that another process rebuilds exactly this agent
(see docs/engine.md).

Each part is typed with the protocols of ``pev.engine``, so an editor and mypy can tell a planner
from a verifier: a component is an object with the protocol's method (async or sync) or a
function of the same shape.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeAlias, TypeVar, cast, runtime_checkable

from pev.engine._protocols import (
    Executor,
    InputT_contra,
    NodeContext,
    Observation,
    ObserveContext,
    Planner,
    PlanRequest,
    VerifyRequest,
    callable_of,
)
from pev.engine._tool_executor import Resources
from pev.engine._tools import Tool, ToolRegistry
from pev.engine._typed import AgentTypes, In, Out, OutputLike
from pev.errors import ComponentError, ContractError
from pev.model import (
    Evidence,
    EvidencePhase,
    NodeResult,
    Plan,
    PlanNode,
    Verdict,
    VerificationContract,
    VerificationMode,
    check_contract,
)
from pev.policy import RecoveryPolicy
from pev.rails import RailLike

__all__ = [
    "Agent",
    "ExecutorLike",
    "ObserverLike",
    "PlannerLike",
    "ToolsLike",
    "VerifierLike",
    "VerifierReply",
]

T = TypeVar("T")


@runtime_checkable
class SyncPlanner(Protocol[InputT_contra]):
    """A planner whose ``plan`` is a plain method (pev runs it in a thread)."""

    def plan(self, request: PlanRequest[InputT_contra]) -> Plan | None:
        """Return a plan; for a local replan, ``None`` declines."""
        ...


PlannerLike: TypeAlias = (
    Planner[In]
    | SyncPlanner[In]
    | Callable[[PlanRequest[In]], Awaitable[Plan | None]]
    | Callable[[PlanRequest[In]], Plan | None]
)
"""A planner: an object with an async or sync ``plan(request)``, or such a function
(``PlannerLike[Order]`` takes ``PlanRequest[Order]``)."""

VerifierReply: TypeAlias = Verdict | str | Mapping[str, Any]
"""What a verifier may return: a :class:`~pev.model.Verdict`, or its JSON text or mapping (an
LLM judge's raw reply); the engine classifies it, and anything else is ``malformed``."""


@runtime_checkable
class ReplyingVerifier(Protocol[InputT_contra]):
    """A verifier whose async ``verify`` returns a verdict or its JSON (text or mapping)."""

    async def verify(self, request: VerifyRequest[InputT_contra]) -> VerifierReply:
        """Judge the round."""
        ...


@runtime_checkable
class SyncVerifier(Protocol[InputT_contra]):
    """A verifier whose ``verify`` is a plain method (pev runs it in a thread)."""

    def verify(self, request: VerifyRequest[InputT_contra]) -> VerifierReply:
        """Judge the round."""
        ...


VerifierLike: TypeAlias = (
    ReplyingVerifier[In]
    | SyncVerifier[In]
    | Callable[[VerifyRequest[In]], Awaitable[VerifierReply]]
    | Callable[[VerifyRequest[In]], VerifierReply]
)
"""A verifier: an object with an async or sync ``verify(request)``, or such a function
(``VerifierLike[Order]`` takes ``VerifyRequest[Order]``)."""


@runtime_checkable
class SyncExecutor(Protocol):
    """An executor whose ``execute`` is a plain method (pev runs it in a thread)."""

    def execute(self, node: PlanNode, context: NodeContext) -> NodeResult:
        """Run ``node``; a raised exception is a device failure."""
        ...


ExecutorLike: TypeAlias = (
    Executor
    | SyncExecutor
    | Callable[[PlanNode, NodeContext], Awaitable[NodeResult]]
    | Callable[[PlanNode, NodeContext], NodeResult]
)
"""An executor: an object with an async or sync ``execute(node, context)`` (and, optionally,
``reconcile(record)``), or such a function."""

ObserverReply: TypeAlias = Observation | Evidence | Sequence[Observation | Evidence]
"""What an observer returns: one observation or several."""


@runtime_checkable
class AsyncObserver(Protocol):
    """An observer whose ``observe`` is async."""

    async def observe(self, phase: EvidencePhase, context: ObserveContext) -> ObserverReply:
        """Capture evidence."""
        ...


@runtime_checkable
class SyncObserver(Protocol):
    """An observer whose ``observe`` is a plain method (pev runs it in a thread)."""

    def observe(self, phase: EvidencePhase, context: ObserveContext) -> ObserverReply:
        """Capture evidence."""
        ...


ObserverLike: TypeAlias = (
    AsyncObserver
    | SyncObserver
    | Callable[[EvidencePhase, ObserveContext], Awaitable[ObserverReply]]
    | Callable[[EvidencePhase, ObserveContext], ObserverReply]
)
"""An observer: an object with an async or sync ``observe(phase, context)``, or such a function."""

ToolsLike: TypeAlias = (
    Tool[..., Any]
    | Callable[..., Any]
    | Iterable[Tool[..., Any] | Callable[..., Any]]
    | Mapping[str, Tool[..., Any] | Callable[..., Any]]
)
"""Tools: functions decorated with ``@pev.tool`` (or plain functions, which get the defaults),
as one, an iterable, a mapping of name to tool, or a :class:`~pev.engine.ToolRegistry`."""

# The method each role is called through; a plain function (any callable) also does.
METHOD_OF_ROLE: Mapping[str, str] = {
    "planner": "plan",
    "verifier": "verify",
    "executor": "execute",
    "observer": "observe",
}


@dataclass(frozen=True, slots=True, init=False)
class Agent(Generic[In, Out]):
    """One frozen, typed definition of an agent: what plans, acts, checks and observes.

    ``pev.Agent[In, Out]`` is typed end to end (docs/engine.md, "Typed agents"): with
    ``input_type=``, the input is validated where a task is made (``run``, ``start``,
    ``submit``, task files) and the planner and verifier get a typed ``request.input``; with
    ``output=``, a succeeded task's ``RunResult.output`` is a typed value, recorded as JSON.

    Args:
        planner: Makes plans (an object with ``plan(request)``, or such a function).
        verifier: Checks each round against the contract; needed by every verification mode
            but ``off``.
        tools: Functions decorated with ``@pev.tool``; give tools or an executor, not both.
        executor: Instead of ``tools``: an object with ``execute(node, context)`` and,
            optionally, ``reconcile(record)``.
        observer: Captures evidence before a revision's first action and after each round.
        contract: The contract its runs use unless ``run`` is given one; by default ``off``
            without a verifier and ``recovery`` (goal: the input) with one.
        policy: The recovery policy its runs use unless ``run`` is given one.
        rails: Observers of the loop, added to those a run is given.
        resources: The locks that keep tools naming one resource (a robot arm) from running at
            once: by default the agent's own, shared by all its runs; give agents that drive
            the same device the same :class:`~pev.engine.Resources`.
        defined_in: The module in which the agent's module-level name is looked up, to record
            its import path; by default the module whose code calls ``Agent(...)``.
        input_type: The type of the task's input (a pydantic model, a dataclass, a TypedDict,
            a JSON type): the input is validated as it and recorded as its JSON, and
            ``request.input`` is one. By default any JSON value, unchecked.
        output: What a succeeded task gives back as ``RunResult.output``: a function of the
            succeeded nodes' outputs (node id → value; its return annotation, if any, is
            checked), or the id of the node whose output it is. By default none.

    Raises:
        ComponentError: No planner, neither or both of tools and executor, tools that are not
            functions (or share a name), a part that has neither its method nor is callable,
            an input type pydantic cannot validate, or an output that is neither a function
            nor a node id.
        ContractError: A contract whose mode needs a verifier, or evidence an observer must
            capture, without one.

    Example::

        booking = pev.Agent(planner, tools=[search, book], verifier=judge)
        result = await pev.run("a table for two", agent=booking)
    """

    planner: PlannerLike[In]
    verifier: VerifierLike[In] | None
    tools: ToolRegistry
    executor: ExecutorLike | None
    observer: ObserverLike | None
    contract: VerificationContract | None
    policy: RecoveryPolicy | None
    rails: tuple[RailLike, ...]
    resources: Resources = field(repr=False, compare=False)
    # The module whose code built the agent, where its module-level name (if any) is looked for.
    defined_in: str | None = field(default=None, repr=False, compare=False)
    input_type: type[In] | None = None
    output: OutputLike[Out] | None = None
    # The checks of the input type and the output (pev.engine._typed).
    types: AgentTypes = field(init=False, repr=False, compare=False)
    # What the engine derives from the agent once and keeps (its import paths): see `derived`.
    _derived: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        planner: PlannerLike[In],
        *,
        verifier: VerifierLike[In] | None = None,
        tools: ToolsLike = (),
        executor: ExecutorLike | None = None,
        observer: ObserverLike | None = None,
        contract: VerificationContract | None = None,
        policy: RecoveryPolicy | None = None,
        rails: Iterable[RailLike] = (),
        resources: Resources | None = None,
        defined_in: str | None = None,
        input_type: type[In] | None = None,
        output: OutputLike[Out] | None = None,
    ) -> None:
        registry = _registry(tools)
        if planner is None:
            raise ComponentError("an agent needs a planner: pass planner=...", role="planner")
        if (not registry) == (executor is None):
            raise ComponentError(
                "pass exactly one of tools=[...] (functions decorated with @pev.tool) or "
                "executor=...",
                role="executor" if not registry else "tools",
            )
        for role, part in (
            ("planner", planner),
            ("verifier", verifier),
            ("executor", executor),
            ("observer", observer),
        ):
            check_component(role, part)
        if contract is not None:
            check_contract(contract, has_observer=observer is not None)
            check_verifier(contract, verifier)
        types = AgentTypes.of(input_type, output)
        if defined_in is None:
            # The caller's module, read from its frame as the standard library's enum does.
            defined_in = sys._getframe(1).f_globals.get("__name__")
        for name, value in (
            ("planner", planner),
            ("verifier", verifier),
            ("tools", registry),
            ("executor", executor),
            ("observer", observer),
            ("contract", contract),
            ("policy", policy),
            ("rails", tuple(rails)),
            ("resources", resources if resources is not None else Resources()),
            ("defined_in", defined_in),
            ("input_type", input_type),
            ("output", output),
            ("types", types),
            ("_derived", {}),
        ):
            object.__setattr__(self, name, value)

    def derived(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for; the same value every time after.

        For what the engine computes from the agent's fixed parts and needs at every run (its
        import paths), so that a task costs only what changes from run to run.
        """
        try:
            return cast("T", self._derived[key])
        except KeyError:
            value = self._derived[key] = make()
            return value


def _registry(tools: ToolsLike | None) -> ToolRegistry:
    if tools is None:
        return ToolRegistry()
    try:
        return ToolRegistry.of(tools)
    except (TypeError, ValueError) as exc:
        raise ComponentError(str(exc), role="tools") from None


def check_component(role: str, part: object) -> None:
    """Refuse a part that has neither its role's method nor is callable.

    Raises:
        ComponentError: Naming the role, what was given, and what would do.
    """
    if part is None:
        return
    try:
        callable_of(part, METHOD_OF_ROLE[role])
    except TypeError as exc:
        raise ComponentError(f"the {role} cannot be called: {exc}", role=role) from None


def check_verifier(contract: VerificationContract, verifier: object | None) -> None:
    """Refuse a contract whose mode calls a verifier, when there is none.

    Raises:
        ContractError: On the contract's ``mode``.
    """
    if verifier is None and contract.mode is not VerificationMode.OFF:
        raise ContractError(
            f"mode {contract.mode} calls a verifier, but none was given; pass verifier=... "
            "or use a contract with mode 'off'",
            field="mode",
        )
