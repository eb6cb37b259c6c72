"""OTelRail's spans reach an OTLP collector: OTLP/HTTP protobuf, to a stand-in on 127.0.0.1.

The stand-in collector is a plain HTTP server that decodes what the SDK's OTLP exporter posts
to ``/v1/traces``; nothing leaves the machine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http",
    reason="needs opentelemetry-exporter-otlp-proto-http (docs/observability.md)",
)

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import pev
from pev.model import Plan, PlanNode, VerificationContract
from pev.otel import OTelRail
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier


class _Collector(ThreadingHTTPServer):
    """Keeps every OTLP trace export request it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"


class _Receive(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        self.server.paths.append(self.path)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        pass  # quiet: the test reads what arrived


@pytest.fixture
def collector() -> Iterator[_Collector]:
    """A stand-in OTLP/HTTP collector on a free port of 127.0.0.1."""
    server = _Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


async def test_spans_are_exported_to_an_otlp_collector(
    collector: _Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's spans arrive at the collector, batched, with the service name and pev's ids."""
    for proxy in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    provider = TracerProvider(resource=Resource.create({"service.name": "garden-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.url)))
    contract = VerificationContract("recovery", "water the plants", ["the soil is damp"])
    plan = Plan("water the plants", (PlanNode("pour", "pour two litres", tool="can"),))
    try:
        result = await pev.run(
            "water the plants",
            planner=ScriptedPlanner(plan),
            executor=FunctionExecutor({"can": lambda: {"litres": 2}}),
            verifier=ScriptedVerifier.passing(),
            contract=contract,
            rails=[OTelRail(provider)],
        )
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    assert set(collector.paths) == {"/v1/traces"}
    spans = {}
    for request in collector.requests:
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert service["service.name"] == "garden-agent"
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "pev"
                for span in scope_spans.spans:
                    spans[span.name] = span
    assert sorted(spans) == [
        "execute_tool can",
        "invoke_agent planner",
        "invoke_agent verifier",
        "pev.revision",
        "pev.task",
    ]
    task = spans["pev.task"]
    attributes = {a.key: a.value.string_value for a in task.attributes}
    assert attributes["pev.task_id"] == str(result.task_id)
    assert spans["pev.revision"].parent_span_id == task.span_id
    assert spans["execute_tool can"].parent_span_id == spans["pev.revision"].span_id
    assert len({span.trace_id for span in spans.values()}) == 1
