"""OTelRail on what befalls effects: reused nodes, compensations, superseded effects, unwinds.

The tasks of ``tests.support.effect_surfaces``: ``paid`` refunds a payment its local replan
replaces and reuses both its effects in a global replan; ``unwound`` fails and undoes its
effects, the refund failing (docs/observability.md, "Effects").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.trace import StatusCode
from tests.support.effect_surfaces import CLOSED, run_paid, run_unwound

import pev
from pev.otel import OTelRail
from pev.otel._trace import ns_of
from pev.rails import RailEvent, RailPhase

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from opentelemetry.sdk.trace import ReadableSpan

    from conftest import Spans


def _attribute(span: ReadableSpan, name: str) -> object:
    assert span.attributes is not None
    return span.attributes.get(name)


def _with(spans: Spans, name: str, attribute: str) -> list[ReadableSpan]:
    """The spans called ``name`` that carry ``attribute``, in order of their start."""
    return [span for span in spans.named(name) if _attribute(span, attribute) is not None]


async def test_a_reused_node_is_a_span_of_no_length_naming_its_record(
    rail: OTelRail, spans: Spans
) -> None:
    """execute_tool ship under revision 3, at the node_reused entry, reused from 1:ship."""
    heard: list[RailEvent] = []
    await run_paid(pev.MemoryStore(), rails=[rail, heard.append])

    [ship] = _with(spans, "execute_tool ship", "pev.node.reused_from")
    first_reuse = next(event for event in heard if event.phase is RailPhase.NODE_REUSED)
    assert _attribute(ship, "pev.node.reused_from") == "1:ship"
    assert (_attribute(ship, "pev.revision"), _attribute(ship, "pev.node_id")) == (3, "ship")
    assert ship.start_time == ship.end_time == ns_of(first_reuse.at)
    assert ship.status.status_code is StatusCode.UNSET
    assert _attribute(ship, "pev.record_id") is None  # it sent nothing: no record of its own
    assert ship.parent is not None
    revision = spans.named("pev.revision")[2]
    assert revision.context is not None
    assert ship.parent.span_id == revision.context.span_id


async def test_a_compensation_is_a_tool_span_of_the_revision_it_precedes(
    rail: OTelRail, spans: Spans
) -> None:
    """execute_tool pay, pev.compensation.of 1:pay, in revision 2, ended before 2:pay began."""
    await run_paid(pev.MemoryStore(), rails=[rail])

    [refund] = _with(spans, "execute_tool pay", "pev.compensation.of")
    [repaid] = [
        s for s in spans.named("execute_tool pay") if _attribute(s, "pev.record_id") == "2:pay"
    ]
    assert _attribute(refund, "pev.compensation.of") == "1:pay"
    assert _attribute(refund, "pev.record_id") == "undo:1:pay"
    assert _attribute(refund, "pev.status") == "succeeded"
    assert refund.status.status_code is StatusCode.UNSET
    assert refund.parent is not None
    assert repaid.parent is not None
    assert refund.parent.span_id == repaid.parent.span_id  # revision 2's span
    assert refund.end_time is not None
    assert repaid.start_time is not None
    assert refund.end_time <= repaid.start_time


async def test_a_superseded_effect_is_an_event_of_its_revision(
    rail: OTelRail, spans: Spans
) -> None:
    """pev.effect_superseded on revision 2's span: the record, the revision and why."""
    await run_paid(pev.MemoryStore(), rails=[rail])

    second = spans.named("pev.revision")[1]
    [event] = [event for event in second.events if event.name == "pev.effect_superseded"]
    assert event.attributes is not None
    assert dict(event.attributes) == {
        "pev.record_id": "1:pay",
        "pev.revision": 2,
        "pev.reason": "revision 2 redoes node 'pay' with another call",
    }


async def test_a_failed_compensation_ends_with_an_error(rail: OTelRail, spans: Spans) -> None:
    """The refund that raised: ERROR with its error; the unship that worked: no error."""
    await run_unwound(pev.MemoryStore(), rails=[rail])

    [refund] = _with(spans, "execute_tool pay", "pev.compensation.of")
    [unship] = _with(spans, "execute_tool ship", "pev.compensation.of")
    assert refund.status.status_code is StatusCode.ERROR
    assert CLOSED in str(refund.status.description)
    assert _attribute(refund, "error.type") == "device_failure"
    assert unship.status.status_code is StatusCode.UNSET
    assert _attribute(unship, "pev.compensation.of") == "1:ship"


async def test_compensations_while_unwinding_are_spans_of_the_task(
    rail: OTelRail, spans: Spans
) -> None:
    """The last revision has ended when the task unwinds: the compensations sit under the task."""
    await run_unwound(pev.MemoryStore(), rails=[rail])

    task = spans.one("pev.task")
    assert spans.tree(task)[1][-2:] == [["execute_tool pay", []], ["execute_tool ship", []]]


async def test_the_unwind_is_an_event_of_the_task_span(rail: OTelRail, spans: Spans) -> None:
    """pev.unwind_started on the task's span, with how it was to end; pev.unwound set."""
    await run_unwound(pev.MemoryStore(), rails=[rail])

    task = spans.one("pev.task")
    [event] = task.events
    assert event.name == "pev.unwind_started"
    assert event.attributes is not None
    assert dict(event.attributes) == {
        "pev.status": "failed",
        "pev.reason": "replan_budget_exhausted",
        "pev.detail": "verifier blamed pay",
    }
    assert _attribute(task, "pev.unwound") is True
    assert _attribute(task, "pev.status") == "partial"
