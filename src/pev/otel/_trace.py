"""The open spans of one task, and the rules for when each begins and ends.

A task span holds one span per revision; a revision span holds its planner calls, its nodes and
its verifier call. A revision's span begins when the planning of it began (the task's start, or
the decision to replan) and ends with the kernel's decision on it, so the planner calls that led
to it (the rejected ones too) fall inside it. Every time is the ledger entry's own, so spans are
right however far behind the rail runs.

A node whose record ended ``unknown`` may be settled by a reconciliation written after it: its
span is kept open until the reconciliation arrives or its revision ends, whichever is first, and
ends then (at the record's own end), so that a record settled as done ends without an error.

What befalls an effect is traced too. A node satisfied by an effect the task already had (it
sent nothing) is a span of no length, at its ``node_reused`` entry, under its revision's span,
that names the record it reuses (``pev.node.reused_from``). A compensation is a call like a
node's: its span runs from ``compensation_dispatched`` to the entry that ended it, under the
revision that runs it, or under the task's span while the task unwinds (its last revision has
ended). An effect a revision supersedes is an event of that revision's span; a task that begins
unwinding its effects is an event of the task's span.

The ledger does not show a rail when a planner call begins: a call is taken to begin at the
entry before it (the task's start, the replan decision, a reviewer's rejection or the previous
rejected plan), and a verifier call at the entry before its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

from pev.kernel import GlobalReplan, LocalReplan, TerminalReason
from pev.ledger import (
    ApprovalRequested,
    Approved,
    CompensationFailed,
    Dispatched,
    EffectCompensated,
    EffectSuperseded,
    NodeFinished,
    NodeReused,
    PlanRejected,
    RecordReconciled,
    Rejected,
    RevisionStarted,
    TaskFinished,
    UnwindStarted,
    VerdictRecorded,
)
from pev.model import ExecutionRecord, RecordStatus, VerificationContract
from pev.otel._attributes import (
    PLANNER,
    REVISION_SPAN,
    TASK_SPAN,
    VERIFIER,
    Attributes,
    Failure,
    agent_call,
    compensation_attributes,
    decision_attributes,
    finish_attributes,
    finish_failure,
    node_attributes,
    node_outcome,
    node_span_name,
    plan_rejection,
    reconciliation,
    reused_attributes,
    revision_attributes,
    superseded_attributes,
    task_attributes,
    unwind_attributes,
    verdict_attributes,
    verdict_failure,
)

__all__ = ["TaskTrace", "ns_of"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_INCOMPLETE: Attributes = {"pev.incomplete": True}


@dataclass(slots=True)
class _Open:
    """A span not yet ended, and when it started (an end is never put before it)."""

    span: Span
    start_ns: int

    def end(self, at_ns: int, failure: Failure | None = None) -> None:
        if failure is not None:
            self.span.set_attribute("error.type", failure.error_type)
            self.span.set_status(Status(StatusCode.ERROR, failure.description))
        self.span.end(end_time=max(at_ns, self.start_ns))


@dataclass(frozen=True, slots=True)
class _Unsettled:
    """A node span whose record ended ``unknown``, kept open for a reconciliation."""

    open: _Open
    end_ns: int
    failure: Failure | None

    def end(self) -> None:
        """End it as the record ended: unknown, an error."""
        self.open.end(self.end_ns, self.failure)


@dataclass(frozen=True, slots=True)
class _RejectedCall:
    """A planner call whose plan was refused, kept until its revision's span exists."""

    start_ns: int
    end_ns: int
    rejected: PlanRejected


@dataclass(slots=True)
class _Revision:
    number: int
    open: _Open
    context: Context


@dataclass(slots=True)
class TaskTrace:
    """The spans of one task that are still open, fed one ledger event at a time.

    Args:
        tracer: Where spans are made.
        task_id: The task.
        contract: Its verification contract.
        at_ns: When the first event the rail saw of it was written.
        resumed: The first event seen was not the task's creation (a resumed task, or a rail
            that joined late): the span says so, and nothing is known of a planner call yet.
    """

    tracer: Tracer
    task_id: str
    task: _Open
    context: Context
    revision: _Revision | None = None
    nodes: dict[str, _Open] = field(default_factory=dict)
    # Node spans of records that ended unknown, by record id, until settled or their revision ends.
    unsettled: dict[str, _Unsettled] = field(default_factory=dict)
    # When the planning of the next revision began, and when the planner call now running
    # began; None when no planning is known to be under way.
    planning_since: int | None = None
    call_since: int | None = None
    rejected: list[_RejectedCall] = field(default_factory=list)
    # When the last event of the task was written: the start of a verifier call.
    last_ns: int = 0

    @classmethod
    def start(
        cls,
        tracer: Tracer,
        task_id: str,
        contract: VerificationContract,
        *,
        at_ns: int,
        resumed: bool,
    ) -> TaskTrace:
        """Open the task's span (a child of the current span, if there is one)."""
        attributes = task_attributes(task_id, contract)
        if resumed:
            attributes["pev.resumed"] = True
        span = tracer.start_span(
            TASK_SPAN, kind=SpanKind.INTERNAL, attributes=attributes, start_time=at_ns
        )
        planning = None if resumed else at_ns
        return cls(
            tracer=tracer,
            task_id=task_id,
            task=_Open(span, at_ns),
            context=set_span_in_context(span),
            planning_since=planning,
            call_since=planning,
            last_ns=at_ns,
        )

    # -- planning ---------------------------------------------------------------------------

    def planned(self, started: RevisionStarted, at_ns: int) -> None:
        """A plan was accepted: the revision's span, its planner calls, and its own call."""
        if self.revision is not None and self.revision.number == started.number:
            return  # the same entry, heard again as revision_started
        self._end_revision(at_ns)
        since = self.planning_since if self.planning_since is not None else at_ns
        revision = self._open_revision(revision_attributes(self.task_id, started), since)
        self._flush_rejected(revision.context)
        name, attributes = agent_call(PLANNER, self.task_id, started.usage)
        attributes |= {
            "pev.planning": str(started.revision_kind),
            "pev.plan.accepted": True,
            "pev.revision": started.number,
        }
        call_since = self.call_since if self.call_since is not None else at_ns
        self._span(name, attributes, revision.context, call_since).end(at_ns)
        self.planning_since = self.call_since = None

    def plan_rejected(self, rejected: PlanRejected, at_ns: int) -> None:
        """A planner call's plan was refused; the planner is asked again (or the task ends)."""
        call_since = self.call_since if self.call_since is not None else at_ns
        if self.planning_since is None:
            self.planning_since = call_since
        self.rejected.append(_RejectedCall(call_since, at_ns, rejected))
        self.call_since = at_ns

    def _flush_rejected(self, parent: Context) -> None:
        for call in self.rejected:
            name, attributes = agent_call(PLANNER, self.task_id, call.rejected.usage)
            extra, failure = plan_rejection(call.rejected)
            self._span(name, attributes | extra, parent, call.start_ns).end(call.end_ns, failure)
        self.rejected.clear()

    # -- a revision's life ----------------------------------------------------------------

    def node_started(self, record: ExecutionRecord, at_ns: int) -> None:
        """A node was dispatched: its span opens under its revision's."""
        revision = self._revision_numbered(record.revision, at_ns)
        span = self._span(node_span_name(record), node_attributes(record), revision.context, at_ns)
        previous = self.nodes.pop(str(record.id), None)
        if previous is not None:  # dispatched twice (a resumed drive): the first never ended
            previous.span.set_attributes(_INCOMPLETE)
            previous.end(at_ns)
        self.nodes[str(record.id)] = span

    def node_finished(
        self, finished: NodeFinished, record: ExecutionRecord | None, at_ns: int
    ) -> None:
        """A node ended: its span ends, with status ERROR unless it succeeded (or was cancelled)."""
        span = self.nodes.pop(str(finished.record_id), None)
        if span is None:
            if record is None:
                return  # nothing to say what node it was
            # Its start was never seen (a resumed task): the span starts when its record did.
            revision = self._revision_numbered(record.revision, at_ns)
            start = min(ns_of(record.created_at), at_ns)
            span = self._span(
                node_span_name(record), node_attributes(record), revision.context, start
            )
        attributes, failure = node_outcome(
            finished.status, finished.result, settled_on_resume=finished.settled_on_resume
        )
        span.span.set_attributes(attributes)
        if finished.status is RecordStatus.UNKNOWN:
            self.unsettled[str(finished.record_id)] = _Unsettled(span, at_ns, failure)
        else:
            span.end(at_ns, failure)

    def reconciled(
        self, settled: RecordReconciled, record: ExecutionRecord | None, at_ns: int
    ) -> None:
        """A record of unknown outcome was settled: its node span says so, and ends.

        The span keeps the record's end as its own, and gets a ``pev.record_reconciled`` event;
        settled as done, it ends without an error. A span already ended (its revision ended
        first) or never seen (a resumed task) cannot change: the event goes to the revision's
        span, or the task's, instead.
        """
        attributes, event, failure = reconciliation(settled, record)
        held = self.unsettled.pop(str(settled.record_id), None)
        if held is None:
            self.event("pev.record_reconciled", event, at_ns)
            return
        held.open.span.set_attributes(attributes)
        held.open.span.add_event("pev.record_reconciled", attributes=event, timestamp=at_ns)
        held.open.end(held.end_ns, failure)

    # -- effects --------------------------------------------------------------------------

    def reused(self, reused: NodeReused, record: ExecutionRecord | None, at_ns: int) -> None:
        """A node was satisfied by an effect the task already had: a span of no length."""
        revision = self._revision_numbered(reused.revision, at_ns)
        name = "execute_tool" if record is None else node_span_name(record)
        attributes = reused_attributes(reused, record, self.task_id)
        self._span(name, attributes, revision.context, at_ns).end(at_ns)

    def superseded(self, superseded: EffectSuperseded, at_ns: int) -> None:
        """A revision replaced an effect: an event of its span."""
        self.event("pev.effect_superseded", superseded_attributes(superseded), at_ns)

    def compensation_started(self, record: ExecutionRecord, effect: str, at_ns: int) -> None:
        """A compensation was dispatched: its span opens, as a node's does."""
        span = self._span(
            node_span_name(record),
            compensation_attributes(record, effect),
            self._context_of(record.revision),
            at_ns,
        )
        self.nodes[str(record.id)] = span

    def compensation_finished(
        self,
        ended: EffectCompensated | CompensationFailed,
        record: ExecutionRecord | None,
        at_ns: int,
    ) -> None:
        """A compensation ended: its span ends, with status ERROR unless it undid the effect."""
        span = self.nodes.pop(str(ended.record_id), None)
        if span is None:
            if record is None:
                return  # nothing to say what call it was
            # Its start was never seen (a resumed task): the span starts when its record did.
            start = min(ns_of(record.created_at), at_ns)
            attributes = compensation_attributes(record, str(ended.effect))
            span = self._span(
                node_span_name(record), attributes, self._context_of(record.revision), start
            )
        if isinstance(ended, EffectCompensated):
            outcome, failure = node_outcome(RecordStatus.SUCCEEDED, ended.result)
        else:
            outcome, failure = node_outcome(
                ended.status, ended.result, settled_on_resume=ended.settled_on_resume
            )
        span.span.set_attributes(outcome)
        span.end(at_ns, failure)

    def unwind_started(self, unwind: UnwindStarted, at_ns: int) -> None:
        """The task undoes its effects before it ends: an event of the task's span."""
        self.task.span.set_attribute("pev.unwound", True)
        self.task.span.add_event(
            "pev.unwind_started", attributes=unwind_attributes(unwind), timestamp=at_ns
        )

    def verified(self, recorded: VerdictRecorded, at_ns: int) -> None:
        """A verdict was recorded: the verifier call's span (none when it was not called)."""
        revision = self._revision_numbered(recorded.revision, at_ns)
        verdict = verdict_attributes(recorded)
        revision.open.span.set_attributes(verdict)
        if recorded.evidence_missing:
            self.event("pev.verifier_skipped", verdict, at_ns)
            return
        name, attributes = agent_call(VERIFIER, self.task_id, recorded.usage)
        attributes["pev.revision"] = recorded.revision
        span = self._span(name, attributes | verdict, revision.context, self.last_ns)
        span.end(at_ns, verdict_failure(recorded))

    def dispatched(self, dispatched: Dispatched, at_ns: int) -> None:
        """The kernel decided: the revision's span ends; a replan begins the next one's planning."""
        attributes = decision_attributes(dispatched.decision)
        self.event("pev.dispatched", attributes, at_ns)
        if self.revision is not None:
            self.revision.open.span.set_attributes(attributes)
        self._end_revision(at_ns)
        if isinstance(dispatched.decision, LocalReplan | GlobalReplan):
            self.planning_since = self.call_since = at_ns

    def approval(self, event: ApprovalRequested | Approved | Rejected, at_ns: int) -> None:
        """A person was asked, or answered: an event of the revision's span.

        A rejection ends the revision, and the planner is asked again with the reason.
        """
        match event:
            case ApprovalRequested(actions=actions):
                self.event("pev.approval_requested", {"pev.actions": list(actions)}, at_ns)
            case Approved(by=by):
                self.event("pev.approved", {"pev.by": by}, at_ns)
            case Rejected(by=by, reason=reason):
                self.event("pev.rejected", {"pev.by": by, "pev.reason": reason}, at_ns)
                if self.revision is not None:
                    self.revision.open.span.set_attributes({"pev.rejected_by": by})
                self._end_revision(at_ns)
                self.planning_since = self.call_since = at_ns

    def event(self, name: str, attributes: Attributes, at_ns: int) -> None:
        """Add an event to the revision's span, or to the task's between revisions."""
        target = self.revision.open.span if self.revision is not None else self.task.span
        target.add_event(name, attributes=attributes, timestamp=at_ns)

    # -- the end --------------------------------------------------------------------------

    def finished(self, finished: TaskFinished, at_ns: int) -> None:
        """The task ended: every span of it still open ends now, the task's last."""
        self._end_nodes(at_ns)
        if self.rejected:  # planner calls that never led to a revision
            self._flush_rejected(self.context)
        if finished.reason is TerminalReason.PLANNER_UNAVAILABLE and self.call_since is not None:
            name, attributes = agent_call(PLANNER, self.task_id, None)
            failure = Failure(str(finished.reason), finished.detail or str(finished.reason))
            self._span(name, attributes, self.context, self.call_since).end(at_ns, failure)
        self._end_revision(at_ns)
        self.task.span.set_attributes(finish_attributes(finished))
        self.task.end(at_ns, finish_failure(finished))

    def abandon(self, at_ns: int) -> None:
        """End every open span of a task whose end the rail will not see, marked incomplete."""
        self._end_nodes(at_ns)
        if self.rejected:
            self._flush_rejected(self.context)
        self._end_revision(at_ns, incomplete=True)
        self.task.span.set_attributes(_INCOMPLETE)
        self.task.end(at_ns)

    # -- helpers --------------------------------------------------------------------------

    def _span(self, name: str, attributes: Attributes, parent: Context, start_ns: int) -> _Open:
        span = self.tracer.start_span(
            name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start_ns
        )
        return _Open(span, start_ns)

    def _context_of(self, number: int) -> Context:
        """Where a call of revision ``number`` goes: under its span while open, else the task's."""
        if self.revision is not None and self.revision.number == number:
            return self.revision.context
        return self.context

    def _open_revision(self, attributes: Attributes, start_ns: int) -> _Revision:
        opened = self._span(REVISION_SPAN, attributes, self.context, start_ns)
        number = attributes["pev.revision"]
        assert isinstance(number, int)  # noqa: S101 - revision_attributes always sets it
        self.revision = _Revision(number, opened, set_span_in_context(opened.span, self.context))
        return self.revision

    def _revision_numbered(self, number: int, at_ns: int) -> _Revision:
        """The span of revision ``number``, opened now if the rail never saw it begin."""
        if self.revision is not None and self.revision.number == number:
            return self.revision
        self._end_revision(at_ns, incomplete=True)
        return self._open_revision(revision_attributes(self.task_id, number), at_ns)

    def _end_revision(self, at_ns: int, *, incomplete: bool = False) -> None:
        self._end_unsettled()
        revision, self.revision = self.revision, None
        if revision is not None:
            if incomplete:
                revision.open.span.set_attributes(_INCOMPLETE)
            revision.open.end(at_ns)

    def _end_unsettled(self) -> None:
        """End the spans of unknown records no reconciliation settled while their revision ran."""
        for held in self.unsettled.values():
            held.end()
        self.unsettled.clear()

    def _end_nodes(self, at_ns: int) -> None:
        """End the spans of nodes whose end was never written (the task ended around them)."""
        for span in self.nodes.values():
            span.span.set_attributes(_INCOMPLETE)
            span.end(at_ns)
        self.nodes.clear()


def ns_of(at: datetime) -> int:
    """``at`` in nanoseconds since the epoch, as OpenTelemetry takes times (naive means UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // timedelta(microseconds=1) * 1_000
