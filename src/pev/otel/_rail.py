"""OTelRail: the loop's phase boundaries as OpenTelemetry spans (docs/observability.md)."""

from __future__ import annotations

import time
from collections import OrderedDict
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.trace import Tracer, TracerProvider, get_tracer

from pev.ledger import (
    ApprovalRequested,
    Approved,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    EffectCompensated,
    EffectSuperseded,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    PlanRejected,
    RecordReconciled,
    Rejected,
    RevisionStarted,
    RoundExecuted,
    TaskFinished,
    UnwindStarted,
    VerdictRecorded,
)
from pev.otel._attributes import diagnosis_attributes, evidence_attributes
from pev.otel._trace import TaskTrace, ns_of
from pev.rails import RailEvent, RailPhase

__all__ = ["OTelRail"]

_SCOPE = "pev"


class OTelRail:
    """A rail that traces each task: one span per task, revision, planner call, node and verdict.

    The spans nest as the loop does: ``pev.task`` holds one ``pev.revision`` per revision, and
    each revision holds its planner calls (``invoke_agent planner``, the rejected ones too), its
    nodes (``execute_tool <tool>``) and its verifier call (``invoke_agent verifier``). The
    planner and verifier calls carry the model and token usage they reported, in the names of
    the OpenTelemetry GenAI semantic conventions; every span carries pev's ids (``pev.task_id``,
    ``pev.revision``, ``pev.node_id``, ``pev.record_id``). A failed node, a refused plan, an
    unreadable verdict and a failed task end with status ERROR; a node whose outcome was unknown
    and that a reconciliation settled as done does not (``pev.record.reconciled``). A node
    satisfied by an effect the task already had is a span of no length naming the record it
    reuses (``pev.node.reused_from``); a compensation is an ``execute_tool <tool>`` span too
    (``pev.compensation.of``), ERROR unless it undid its effect. Evidence, diagnoses, decisions,
    approvals and superseded effects are events of their revision's span; a task that unwinds
    its effects before it ends gets a ``pev.unwind_started`` event on its own. Spans take the times
    of the ledger entries, not of the moment the rail hears of them. See docs/observability.md.

    Like every rail it observes and never decides, and runs behind the loop on its own queue.
    Each call is quick (it makes spans and hands them to the provider's span processors): give
    the provider a ``BatchSpanProcessor``, so that exporting never happens on the event loop.

    A task span stays open until the task ends. Call :meth:`close` when no more events will come
    (a drive stopped before its task ended: the process is shutting down, or the task waits for
    a person) to end what is still open; tasks past ``max_open_tasks`` are ended that way too,
    oldest first. A task the rail first hears of part-way through (a resumed task) gets a new
    task span, marked ``pev.resumed``.

    Args:
        tracer_provider: Where spans go; the global provider (``opentelemetry.trace``) when
            not given, looked up when the first span is made.
        max_open_tasks: How many unfinished tasks the rail keeps spans open for.

    Raises:
        TypeError: ``tracer_provider`` is not a tracer provider.
        ValueError: ``max_open_tasks`` is not a positive integer.
    """

    name = "otel"

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, max_open_tasks: int = 1000
    ) -> None:
        if tracer_provider is not None and not callable(
            getattr(tracer_provider, "get_tracer", None)
        ):
            raise TypeError(
                f"tracer_provider must be an OpenTelemetry TracerProvider (with get_tracer), "
                f"got {type(tracer_provider).__name__}"
            )
        if (
            isinstance(max_open_tasks, bool)
            or not isinstance(max_open_tasks, int)
            or max_open_tasks < 1
        ):
            raise ValueError(f"max_open_tasks must be a positive integer, got {max_open_tasks!r}")
        self._tracer: Tracer = get_tracer(_SCOPE, _pev_version(), tracer_provider)
        self._max_open = max_open_tasks
        self._tasks: OrderedDict[str, TaskTrace] = OrderedDict()

    @property
    def open_tasks(self) -> tuple[str, ...]:
        """The ids of the tasks whose spans are still open, oldest first."""
        return tuple(self._tasks)

    def on_event(self, event: RailEvent) -> None:
        """Turn one phase boundary into the start or end of spans, or an event of one."""
        at_ns = ns_of(event.at)
        trace = self._trace(event, at_ns)
        match event.event:
            case RevisionStarted() as started:
                trace.planned(started, at_ns)
            case PlanRejected() as rejected:
                trace.plan_rejected(rejected, at_ns)
            case NodeDispatched(record=record):
                trace.node_started(record, at_ns)
            case NodeFinished() as finished:
                trace.node_finished(finished, event.record, at_ns)
            case RecordReconciled() as settled:
                trace.reconciled(settled, event.record, at_ns)
            case NodeReused() as reused:
                trace.reused(reused, event.record, at_ns)
            case EffectSuperseded() as superseded:
                trace.superseded(superseded, at_ns)
            case CompensationDispatched(effect=effect, record=record):
                trace.compensation_started(record, str(effect), at_ns)
            case EffectCompensated() | CompensationFailed() as ended:
                trace.compensation_finished(ended, event.record, at_ns)
            case UnwindStarted() as unwind:
                trace.unwind_started(unwind, at_ns)
            case RoundExecuted(executed_ok=ok):
                trace.event("pev.executed", {"pev.executed_ok": ok}, at_ns)
            case EvidenceCaptured(evidence=evidence):
                trace.event("pev.evidence_captured", evidence_attributes(evidence), at_ns)
            case VerdictRecorded() as recorded:
                trace.verified(recorded, at_ns)
            case Diagnosed(diagnosis=diagnosis):
                trace.event("pev.diagnosed", diagnosis_attributes(diagnosis), at_ns)
            case Dispatched() as dispatched:
                trace.dispatched(dispatched, at_ns)
            case ApprovalRequested() | Approved() | Rejected() as asked:
                trace.approval(asked, at_ns)
            case TaskFinished() as finished_task:
                del self._tasks[event.task_id]
                trace.finished(finished_task, at_ns)
                return
            case _:  # task_created opened the span above; no rail hears of any other event
                pass
        trace.last_ns = max(trace.last_ns, at_ns)

    def close(self) -> None:
        """End every span still open, marked ``pev.incomplete``: no more events will come.

        The rail can be used again afterwards; a task it hears of later gets a new span.
        """
        now_ns = time.time_ns()
        while self._tasks:
            _, trace = self._tasks.popitem(last=False)
            trace.abandon(max(now_ns, trace.last_ns))

    def _trace(self, event: RailEvent, at_ns: int) -> TaskTrace:
        """The task's open spans, its span opened now if this is the first the rail hears of it."""
        trace = self._tasks.get(event.task_id)
        if trace is not None:
            return trace
        trace = TaskTrace.start(
            self._tracer,
            str(event.task_id),
            event.contract,
            at_ns=at_ns,
            resumed=event.phase is not RailPhase.TASK_STARTED,
        )
        self._tasks[event.task_id] = trace
        while len(self._tasks) > self._max_open:
            _, oldest = self._tasks.popitem(last=False)
            oldest.abandon(max(time.time_ns(), oldest.last_ns))
        return trace


def _pev_version() -> str:
    try:
        return version("pev-agent")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0"
