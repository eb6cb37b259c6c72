"""OTelRail on a node whose outcome was unknown until a reconciliation settled it.

The task of ``tests.support.reconciled``: ``post`` times out after taking effect, its record
ends ``unknown``, and its tool's ``reconcile`` settles it as done (or not). The node's span is
kept open until the reconciliation arrives, then ends at the record's own end, without an error
when settled as done (docs/observability.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.trace import StatusCode
from tests.support.reconciled import NOT_FOUND, run_reconciled

import pev
from pev.otel import OTelRail
from pev.otel._trace import ns_of
from pev.rails import RailEvent, RailPhase

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Spans

NODE = "execute_tool post"


async def test_a_node_reconciled_as_done_ends_without_an_error(
    rail: OTelRail, spans: Spans
) -> None:
    """Status not ERROR; pev.status stays unknown and pev.record.reconciled says succeeded."""
    await run_reconciled(pev.MemoryStore(), rails=[rail])

    span = spans.one(NODE)
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes is not None
    assert span.attributes["pev.status"] == "unknown"
    assert span.attributes["pev.record.reconciled"] == "succeeded"
    assert "error.type" not in span.attributes
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.all)


async def test_the_reconciliation_is_an_event_of_the_node_span(
    rail: OTelRail, spans: Spans
) -> None:
    """A pev.record_reconciled event carries the record, what was settled and the note."""
    await run_reconciled(pev.MemoryStore(), rails=[rail])

    [event] = spans.one(NODE).events
    assert event.name == "pev.record_reconciled"
    assert event.attributes is not None
    assert event.attributes["pev.record_id"] == "1:post"
    assert event.attributes["pev.node_id"] == "post"
    assert event.attributes["pev.record.reconciled"] == "succeeded"
    assert "reconcile" in str(event.attributes["pev.note"])


async def test_a_node_reconciled_as_not_done_ends_with_what_was_found(
    rail: OTelRail, spans: Spans
) -> None:
    """Settled as not done: ERROR, with the reconcile's finding as its description."""
    await run_reconciled(pev.MemoryStore(), done=False, rails=[rail])

    span = spans.one(NODE)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == NOT_FOUND
    assert span.attributes is not None
    assert span.attributes["error.type"] == "device_failure"
    assert span.attributes["pev.record.reconciled"] == "failed"


async def test_the_node_span_ends_when_its_record_did(rail: OTelRail, spans: Spans) -> None:
    """The span ends at the entry that ended the record unknown, not at the reconciliation's."""
    heard: list[RailEvent] = []

    await run_reconciled(pev.MemoryStore(), rails=[rail, heard.append])

    [finished] = [event for event in heard if event.phase is RailPhase.NODE_FINISHED]
    [settled] = [event for event in heard if event.phase is RailPhase.RECORD_RECONCILED]
    assert spans.one(NODE).end_time == ns_of(finished.at)
    assert spans.one(NODE).events[0].timestamp == ns_of(settled.at)


async def test_a_reconciliation_after_the_revision_ended_is_an_event_of_the_task(
    rail: OTelRail, spans: Spans
) -> None:
    """Heard after its revision's end: the node span ended unknown, the task span has the event."""
    heard: list[RailEvent] = []
    await run_reconciled(pev.MemoryStore(), rails=[heard.append])
    [settled] = [event for event in heard if event.phase is RailPhase.RECORD_RECONCILED]
    late = [event for event in heard if event is not settled]
    dispatched = next(i for i, e in enumerate(late) if e.phase is RailPhase.DISPATCHED)
    late.insert(dispatched + 1, settled)

    for event in late:
        rail.on_event(event)

    assert spans.one(NODE).status.status_code is StatusCode.ERROR
    assert [event.name for event in spans.one("pev.task").events] == ["pev.record_reconciled"]
