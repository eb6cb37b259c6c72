"""OpenTelemetry traces of the loop (extra ``otel``); see docs/observability.md.

* :class:`OTelRail`: a rail (``pev.run(..., rails=[OTelRail()])``) that makes one span per
  task, revision, planner call, node and verifier call, with the GenAI semantic conventions'
  names where they apply (``invoke_agent``, ``execute_tool``, the model and its token usage)
  and pev's ids as attributes, so that traces land in any OpenTelemetry backend.

It needs only the OpenTelemetry API; the extra brings the SDK too, to export the spans.
"""

from __future__ import annotations

try:
    import opentelemetry.trace as _trace  # noqa: F401 - only to say what is missing
except ImportError as exc:  # exercised with the API hidden, in the tests
    raise ImportError(
        f"pev.otel needs the OpenTelemetry API ({exc}): pip install 'pev-agent[otel]'",
        name=exc.name,
    ) from exc

from pev.otel._rail import OTelRail

__all__ = ["OTelRail"]
