"""A weather report agent: geocode a city, fetch tomorrow's forecast, publish a bulletin.

Everything here runs offline and is deterministic: the tools read small built-in tables, the
planner is scripted (no LLM), and the verifier is plain code that checks the published text
against the forecast the tools returned, citing the execution records it read.

``weather`` is the whole agent, typed (docs/engine.md, "Typed agents"): its input is a
:class:`Place` and its output the :class:`Bulletin` it published. The parts work untyped too
(the task file names them one by one, with ``input = { city = "Lisbon" }``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.model import (
    DeviceFailure,
    Effect,
    JsonValue,
    Plan,
    PlanNode,
    Verdict,
    VerificationContract,
    VerificationMode,
    VerifierFailure,
)

GOAL = "publish tomorrow's weather report for the city"
NAMES_THE_CITY = "the report names the city"
GIVES_THE_HIGH = "the report gives tomorrow's high in °C"
IS_PUBLISHED = "the report is published"
CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, GOAL, (NAMES_THE_CITY, GIVES_THE_HIGH, IS_PUBLISHED)
)


class Place(BaseModel):
    """What the task asks about: a city."""

    city: str


class Bulletin(BaseModel):
    """What the task publishes: the text, on its channel."""

    channel: str
    text: str


# The offline world: a tiny gazetteer and tomorrow's forecast at each of its places.
_PLACES = {
    "lisbon": {"city": "Lisbon", "country": "Portugal", "lat": 38.72, "lon": -9.14},
    "oslo": {"city": "Oslo", "country": "Norway", "lat": 59.91, "lon": 10.75},
    "nairobi": {"city": "Nairobi", "country": "Kenya", "lat": -1.29, "lon": 36.82},
}
_TOMORROW = {
    (38.72, -9.14): {"sky": "light rain", "high_c": 17.4, "low_c": 11.2},
    (59.91, 10.75): {"sky": "snow showers", "high_c": -2.6, "low_c": -7.9},
    (-1.29, 36.82): {"sky": "sunny", "high_c": 26.0, "low_c": 14.5},
}


@pev.tool(effect="query")
def geocode(city: str) -> dict[str, Any]:
    """Find a city's coordinates: its name as spelled locally, country, latitude and longitude."""
    place = _PLACES.get(city.strip().lower())
    if place is None:
        raise LookupError(f"no place called {city!r} in the gazetteer")
    return dict(place)


@pev.tool(effect="query")
def forecast(lat: float, lon: float) -> dict[str, Any]:
    """Tomorrow's forecast at a point: sky, high and low in degrees Celsius."""
    tomorrow = _TOMORROW.get((round(lat, 2), round(lon, 2)))
    if tomorrow is None:
        raise LookupError(f"no forecast for ({lat}, {lon})")
    return {"lat": lat, "lon": lon, "units": "metric", "tomorrow": dict(tomorrow)}


@pev.tool(effect="action")
def publish(city: str, tomorrow: dict[str, Any]) -> dict[str, Any]:
    """Write tomorrow's bulletin for a city from its forecast and publish it; returns the text."""
    text = (
        f"Tomorrow in {city}: {tomorrow['sky']}, "
        f"high {round(tomorrow['high_c'])} °C, low {round(tomorrow['low_c'])} °C."
    )
    return {"channel": f"weather/{city.lower()}", "text": text}


def planner(request: PlanRequest[Place | JsonValue]) -> Plan:
    """Plan geocode → forecast → publish for the city in the input, wiring data with ``$ref``.

    The plan does not depend on the kind of request: this agent has nothing to learn from a
    replan, so a replan gets the same plan again.
    """
    city = _city(request.input)
    return Plan(
        GOAL,
        (
            PlanNode(
                "place", f"find {city}", tool="geocode", args={"city": city}, effect=Effect.QUERY
            ),
            PlanNode(
                "forecast",
                "fetch tomorrow's forecast there",
                tool="forecast",
                args={"lat": {"$ref": "place.lat"}, "lon": {"$ref": "place.lon"}},
                after=("place",),
                effect=Effect.QUERY,
            ),
            PlanNode(
                "report",
                "publish the bulletin",
                tool="publish",
                args={"city": {"$ref": "place.city"}, "tomorrow": {"$ref": "forecast.tomorrow"}},
                after=("place", "forecast"),
            ),
        ),
    )


def verifier(request: VerifyRequest[Place | JsonValue]) -> Verdict:
    """Check the published bulletin against the place and the forecast the tools returned.

    The verifier finds nodes by the tool they call, so it checks any plan built from these
    tools, and cites the execution records whose outputs it read.
    """
    place, place_node, place_ref = _output(request, "geocode")
    weather, weather_node, weather_ref = _output(request, "forecast")
    report, report_node, report_ref = _output(request, "publish")
    text = str(report["text"]) if report is not None else ""
    checks: dict[str, tuple[bool, tuple[str, ...]]] = {}
    failed: set[str] = set()
    problems: list[str] = []
    for node_id, value in ((place_node, place), (weather_node, weather), (report_node, report)):
        if node_id is not None and value is None:
            failed.add(node_id)
            problems.append(_what_happened(request, node_id))

    city = str(place["city"]) if place is not None else _city(request.input)
    names_city = report is not None and city in text
    checks[NAMES_THE_CITY] = (names_city, _refs(place_ref, report_ref))
    high = round(weather["tomorrow"]["high_c"]) if weather is not None else None
    stated = re.search(r"high (-?\d+) °C", text)
    gives_high = high is not None and stated is not None and int(stated[1]) == high
    checks[GIVES_THE_HIGH] = (gives_high, _refs(weather_ref, report_ref))
    checks[IS_PUBLISHED] = (report is not None, _refs(report_ref))
    if report is not None and not names_city:
        failed.add(report_node or "report")
        problems.append(f"the report does not name {city}")
    if report is not None and high is not None and not gives_high:
        failed.add(report_node or "report")
        problems.append(f"the report does not give tomorrow's high ({high} °C)")
    return _verdict(request, checks, failed=failed, feedback="; ".join(problems))


def _what_happened(request: VerifyRequest[object], node_id: str) -> str:
    """Why a node has no output: its failure, or that it never ran."""
    result = request.results.get(node_id)
    if isinstance(result, DeviceFailure):
        return f"{node_id} failed: {result.error}"
    if isinstance(result, VerifierFailure):
        return f"{node_id} failed its check: {result.reason}"
    return f"{node_id} did not run"


def bulletin(outputs: Mapping[str, JsonValue]) -> Bulletin:
    """The task's output: the bulletin the ``report`` node published."""
    return Bulletin.model_validate(outputs["report"])


def _city(value: object) -> str:
    """The city the task asks about: a :class:`Place`, the input itself, or its ``city`` entry."""
    if isinstance(value, Place):
        return value.city
    city = value.get("city") if isinstance(value, Mapping) else value
    if not isinstance(city, str) or not city.strip():
        raise ValueError(f"the input names no city: {value!r} (try {{city = 'Lisbon'}})")
    return city.strip()


def _output(request: VerifyRequest[object], tool: str) -> tuple[Any, str | None, str | None]:
    """The output, node id and ``record:<id>`` of the plan's node calling ``tool``.

    The output is ``None`` when the node did not succeed; the record is its latest succeeded one.
    """
    node = request.node_calling(tool)
    if node is None:
        return None, None, None
    ref = request.record_ref(node.id)
    return (request.output(node.id) if ref else None), node.id, ref


def _refs(*refs: str | None) -> tuple[str, ...]:
    return tuple(ref for ref in refs if ref)


def _verdict(
    request: VerifyRequest[object],
    checks: Mapping[str, tuple[bool, tuple[str, ...]]],
    *,
    failed: set[str],
    feedback: str,
) -> Verdict:
    """One result per contract criterion, verbatim; a criterion not checked here is unknown."""
    return Verdict.from_checks(
        request.contract,
        checks,
        failed_nodes=failed & set(request.plan.node_ids),
        feedback=feedback,
    )


weather = pev.Agent(
    planner,
    tools=[geocode, forecast, publish],
    verifier=verifier,
    contract=CONTRACT,
    policy=pev.RecoveryPolicy(max_replans=2),
    input_type=Place,
    output=bulletin,
)
"""The whole agent, typed: ``pev.run_sync(Place(city="Oslo"), agent=weather).output`` is the
:class:`Bulletin` it published."""
