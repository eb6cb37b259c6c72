"""The engine's seams: planner, executor, verifier, observer, and what they receive.

See docs/design.md §6.

Each protocol has one method taking one frozen request object, so the request can grow without
breaking anyone. Implementations may be async or sync, objects with the method or plain
functions: :func:`adapt` turns any of them into the async form the engine calls, running sync
code in the drive's bounded thread pool (:mod:`pev.engine._threads`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from typing_extensions import TypeVar as DefaultedTypeVar

from pev.engine._threads import current_pool, sync_call
from pev.ledger import RevisionKind, TaskEffect, Usage
from pev.model import (
    Evidence,
    EvidencePhase,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    ToolSpec,
    Verdict,
    VerificationContract,
)

__all__ = [
    "Executor",
    "NodeContext",
    "Observation",
    "ObserveContext",
    "Observer",
    "PlanRequest",
    "Planner",
    "Verifier",
    "VerifyRequest",
    "adapt",
    "current_node_context",
    "report_usage",
]

T = TypeVar("T")

# The task's input type as a request carries it (``PlanRequest[Order]``), and as a planner or
# verifier takes it: any JSON value unless the agent has an ``input_type`` (docs/engine.md,
# "Typed agents").
InputT_co = DefaultedTypeVar("InputT_co", covariant=True, default=JsonValue)
InputT_contra = DefaultedTypeVar("InputT_contra", contravariant=True, default=JsonValue)


def _frozen_map() -> Mapping[str, Any]:
    return MappingProxyType({})


def _no_reconciled() -> Mapping[RecordId, NodeResult]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest(Generic[InputT_co]):
    """Everything a planner is told (docs/design.md §4).

    ``PlanRequest[Order]`` is the request of an agent whose ``input_type`` is ``Order``: its
    ``input`` is an ``Order``. A bare ``PlanRequest`` carries any JSON value.

    Attributes:
        kind: ``initial``, ``local`` (replace ``redo_nodes``, same ids) or ``global``.
        attempt: Which planner call of the task this is (1 for the first).
        task_id: The task.
        input: What the task was asked to do: the agent's input type, or JSON.
        contract: The verification contract.
        tools: The tool catalogue: names, signatures, effects.
        lessons: Lessons from earlier tasks, as advice.
        deadline: When the plan must be ready (the replan deadline), if there is one.
        previous_plan: The plan of the last revision, for a replan.
        verdict: The verdict that led here, for a replan.
        feedback: The verdict's feedback for the planner.
        unmet_criteria: Criteria still to meet.
        preserved_constraints: Constraints the new plan must keep.
        guidance: The verifier's advice.
        evidence_refs: References the verdict rests on.
        redo_nodes: For a local replan: the failed nodes and everything downstream of them.
        kept_results: Outputs of the nodes a local replan keeps.
        rejections: Why earlier plans of this task were rejected, one entry per problem.
        unknown_records: Action records whose outcome is unknown: do not repeat them blindly.
        effects: What the task's actions did to the world, in every revision so far (tool,
            args, key, status, result, revision, whether superseded or compensated): a node
            that intends one of these that took effect is satisfied by it, not sent again
            (docs/engine.md, "Effects happen once").
    """

    kind: RevisionKind
    attempt: int
    task_id: TaskId
    input: InputT_co
    contract: VerificationContract
    tools: tuple[ToolSpec, ...] = ()
    lessons: tuple[str, ...] = ()
    deadline: datetime | None = None
    previous_plan: Plan | None = None
    verdict: Verdict | None = None
    feedback: str = ""
    unmet_criteria: tuple[str, ...] = ()
    preserved_constraints: tuple[str, ...] = ()
    guidance: str = ""
    evidence_refs: tuple[str, ...] = ()
    redo_nodes: frozenset[str] = frozenset()
    kept_results: Mapping[str, JsonValue] = field(default_factory=_frozen_map)
    rejections: tuple[str, ...] = ()
    unknown_records: tuple[ExecutionRecord, ...] = ()
    effects: tuple[TaskEffect, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """What an executor gets with a node; also reachable via :func:`current_node_context`.

    Attributes:
        task_id: The task.
        node_id: The node being run.
        revision: The revision dispatching the node.
        record_id: The execution record of this dispatch.
        idempotency_key: Stable for this record: a tool that de-duplicates can recognise a repeat.
        deadline: Loop time (``asyncio`` clock) by which the node must finish, if it has one.
        cancelled: Set when the task is being cancelled; long-running tools should stop.
        dependencies: Outputs of the node's ``after`` nodes, by node id.
        report: Await ``report(RecordStatus.ACCEPTED)`` or ``RUNNING`` to record progress.
    """

    task_id: TaskId
    node_id: str
    revision: int
    record_id: str
    idempotency_key: str
    deadline: float | None
    cancelled: asyncio.Event
    dependencies: Mapping[str, JsonValue]
    report: Callable[[RecordStatus], Awaitable[None]]


_NODE_CONTEXT: contextvars.ContextVar[NodeContext] = contextvars.ContextVar("pev_node_context")


def current_node_context() -> NodeContext:
    """The context of the node being executed (inside a tool or executor).

    Raises:
        LookupError: Called outside a node's execution.
    """
    return _NODE_CONTEXT.get()


_USAGE: contextvars.ContextVar[list[Usage] | None] = contextvars.ContextVar(
    "pev_usage", default=None
)


def report_usage(model: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
    """Record which model produced the plan or verdict being made, and the tokens it used.

    Call it from inside a planner or verifier (the LLM adapters do); the engine writes it into
    the ``revision_started``, ``plan_rejected`` or ``verdict_recorded`` event. Several calls add
    up. Outside a planner or verifier call it does nothing. Never pass credentials.
    """
    sink = _USAGE.get()
    if sink is not None:
        sink.append(Usage(model=model, input_tokens=input_tokens, output_tokens=output_tokens))


def merged_usage(reports: list[Usage]) -> Usage | None:
    """One usage for a call that reported several (models joined, tokens added)."""
    if not reports:
        return None
    models = ", ".join(dict.fromkeys(report.model for report in reports))
    return Usage(
        model=models,
        input_tokens=sum(report.input_tokens for report in reports),
        output_tokens=sum(report.output_tokens for report in reports),
    )


@runtime_checkable
class Planner(Protocol[InputT_contra]):
    """Makes plans: the initial one, and replacements after a replan decision."""

    async def plan(self, request: PlanRequest[InputT_contra]) -> Plan | None:
        """Return a plan; for a local replan, ``None`` declines (feedback is appended instead)."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs one node. The engine schedules; an executor never retries on its own."""

    async def execute(self, node: PlanNode, context: NodeContext) -> NodeResult:
        """Run ``node`` and return its result; a raised exception is a device failure."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyRequest(Generic[InputT_co]):
    """Everything a verifier sees (lessons are advice, never evidence).

    ``VerifyRequest[Order]``: as :class:`PlanRequest`, ``input`` is the agent's input type.

    Attributes:
        task_id: The task.
        input: What the task was asked to do: the agent's input type, or JSON.
        contract: The verification contract (answer each criterion once, verbatim).
        plan: The plan that ran.
        revision: Its revision number.
        results: Node id → result, in the current lineage; for a record of unknown outcome
            that a reconciliation settled, the result it established.
        records: The execution records of the current lineage.
        evidence: Every observation captured so far.
        lessons: Lessons given to the planner, as advice.
        reconciled: Record id → the result a ``record_reconciled`` event established for a
            record whose outcome was unknown (the record itself still says ``unknown``).
    """

    task_id: TaskId
    input: InputT_co
    contract: VerificationContract
    plan: Plan
    revision: int
    results: Mapping[str, NodeResult]
    records: tuple[ExecutionRecord, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    lessons: tuple[str, ...] = ()
    reconciled: Mapping[RecordId, NodeResult] = field(default_factory=_no_reconciled)

    @property
    def evidence_refs(self) -> tuple[str, ...]:
        """Every reference a verdict may cite: ``evidence:<id>`` and ``record:<id>``."""
        return tuple(item.ref for item in self.evidence) + tuple(r.ref for r in self.records)

    def output(self, node_id: str) -> JsonValue | None:
        """The output of a node that succeeded; ``None`` for one that did not."""
        result = self.results.get(node_id)
        return result.value if isinstance(result, Success) else None

    def record_ref(self, node_id: str) -> str | None:
        """``record:<id>`` of the record behind a node's success, to cite; ``None`` if none.

        That is the node's latest record when its result is a success: one that succeeded, or
        one of unknown outcome that a reconciliation settled as a success.
        """
        if not isinstance(self.results.get(node_id), Success):
            return None
        refs = [r.ref for r in self.records if r.node_id == node_id]
        return refs[-1] if refs else None

    def node_calling(self, tool: str) -> PlanNode | None:
        """The first node of the plan that calls ``tool``."""
        return next((node for node in self.plan.nodes if node.tool == tool), None)


@runtime_checkable
class Verifier(Protocol[InputT_contra]):
    """Checks a round against the contract; the engine decides how far to trust the answer."""

    async def verify(self, request: VerifyRequest[InputT_contra]) -> Verdict:
        """Return a verdict (anything else is classified ``malformed``)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What an observer captured; the engine stamps id, time, phase and revision on it.

    Attributes:
        kind: What was observed (``state``, ``image``, ...).
        source: Who observed it.
        payload: A JSON value.
        artifact: Raw bytes such as a PNG.
        media_type: The artifact's media type.
    """

    kind: str
    source: str = "observer"
    payload: JsonValue = None
    artifact: bytes | None = None
    media_type: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserveContext:
    """What an observer is told: the task, the revision and plan, and the results so far."""

    task_id: TaskId
    revision: int
    plan: Plan
    results: Mapping[str, NodeResult]


@runtime_checkable
class Observer(Protocol):
    """Captures evidence before a revision's first action and after each execution round."""

    async def observe(
        self, phase: EvidencePhase, context: ObserveContext
    ) -> Observation | Sequence[Observation]:
        """Return one or more observations."""
        ...


def adapt(component: object, method: str) -> Callable[..., Awaitable[Any]]:
    """The async callable behind a component: its ``method``, or the component if callable.

    See :func:`as_async` for how a sync one is run.

    Raises:
        TypeError: The component has no such method and is not callable.
    """
    return as_async(callable_of(component, method))


def callable_of(component: object, method: str) -> Callable[..., Any]:
    """What calling a component calls: its ``method``, or the component itself if callable.

    Raises:
        TypeError: The component has no such method and is not callable.
    """
    target: Callable[..., Any] | None = getattr(component, method, None)
    if target is not None:
        return target
    if callable(component):
        return component
    raise TypeError(
        f"{type(component).__name__} has no {method}() method and is not callable; "
        f"pass an object with an async or sync {method}() method, or a function"
    )


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (an async function or async ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )


def as_async(target: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``target`` itself if it is async; else a coroutine function that runs it in a thread.

    A sync ``target`` runs in the process's bounded thread pool (at most
    :data:`~pev.engine._threads.MAX_THREADS` threads, shared by every drive; outside a drive,
    the loop's default executor), copying the caller's context variables. A sync call that
    times out keeps running in its thread: Python cannot stop a thread, so a sync tool should
    honour its deadline itself.
    """
    if is_async(target):
        return target

    async def run_in_thread(*args: Any) -> Any:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, sync_call, target, *args)
        result = await loop.run_in_executor(current_pool(), call)
        if inspect.isawaitable(result):
            return await result
        return result

    return run_in_thread
