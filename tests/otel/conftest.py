"""An OTelRail on a tracer provider of its own, its spans kept in memory for the tests to read.

No test sets the global tracer provider: each rail is handed ``provider``, whose
``SimpleSpanProcessor`` puts every span in ``exporter`` the moment it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel tests need the otel extra")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from pev.otel import OTelRail


class Spans:
    """The spans a rail ended, with the tree they make."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    @property
    def all(self) -> tuple[ReadableSpan, ...]:
        """Every span ended so far, in the order they ended."""
        return tuple(self._exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The spans called ``name``, in order of their start."""
        return sorted((s for s in self.all if s.name == name), key=_start)

    def one(self, name: str) -> ReadableSpan:
        """The one span called ``name``."""
        [span] = self.named(name)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The spans whose parent is ``parent``, in order of their start (then of their end)."""
        assert parent.context is not None
        found = [
            span
            for span in self.all
            if span.parent is not None and span.parent.span_id == parent.context.span_id
        ]
        return sorted(found, key=lambda s: (_start(s), s.end_time or 0))

    def tree(self, root: ReadableSpan) -> list[object]:
        """``[name, [children's trees...]]`` below ``root``, for an assertion at a glance."""
        return [root.name, [self.tree(child) for child in self.children(root)]]

    def roots(self) -> list[ReadableSpan]:
        """The spans without a parent."""
        return [span for span in self.all if span.parent is None]


def _start(span: ReadableSpan) -> int:
    return span.start_time or 0


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Where the provider's spans go."""
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A tracer provider of the test's own (never the global one)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def rail(provider: TracerProvider) -> OTelRail:
    """The rail under test, on the test's provider."""
    return OTelRail(provider)


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Spans:
    """The spans ended so far."""
    return Spans(exporter)


@pytest.fixture(autouse=True)
def _rail_never_fails(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No test passes while the rail raised: the bus would only log it, on ``pev.rails``."""
    caplog.set_level(logging.WARNING, logger="pev.rails")
    yield
    failures = [r.getMessage() for r in caplog.records if r.name == "pev.rails"]
    assert failures == []
