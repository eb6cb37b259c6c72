"""Root-cause diagnosis of a verdict that did not pass (docs/design.md §3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pev.model import DeviceFailure, NodeResult, Reliability, Verdict

__all__ = ["Diagnosis", "RootCause", "diagnose"]


class RootCause(StrEnum):
    """Where the fault lies; exactly three causes."""

    PERCEPTION_UNRELIABLE = "perception_unreliable"
    """The verdict cannot be trusted: the verifier raised, returned garbage or could not tell."""
    DEVICE_FAILURE = "device_failure"
    """A tool or device failed on a node the verifier blames."""
    PLAN_OR_ANSWER_ERROR = "plan_or_answer_error"
    """Everything ran, but the plan or its answer was wrong: re-planning can fix it."""


# Keeps the documented positional signature `Diagnosis(cause, nodes, detail)`.
@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A root cause, the nodes it concerns, and a short detail."""

    cause: RootCause
    nodes: frozenset[str] = frozenset()
    detail: str = ""


def diagnose(
    verdict: Verdict | None,
    reliability: Reliability,
    results: Mapping[str, NodeResult],
) -> Diagnosis:
    """Find the root cause of a verdict that did not pass.

    The rules, first match wins:

    1. reliability ``thrown``, ``malformed`` or ``inconclusive`` → ``PERCEPTION_UNRELIABLE``
       (detail: which);
    2. no verdict at all → ``PERCEPTION_UNRELIABLE`` (detail ``malformed``);
    3. nodes with a ``DeviceFailure`` result that the verifier blames → ``DEVICE_FAILURE``;
    4. otherwise → ``PLAN_OR_ANSWER_ERROR`` on the blamed nodes.

    Args:
        verdict: The verdict, or ``None`` when nothing usable came back.
        reliability: The engine's reading of the verifier's return.
        results: Node id → result, since the task's last initial or global revision.
    """
    if reliability in (Reliability.THROWN, Reliability.MALFORMED, Reliability.INCONCLUSIVE):
        return Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), str(reliability))
    if verdict is None:
        return Diagnosis(RootCause.PERCEPTION_UNRELIABLE, frozenset(), str(Reliability.MALFORMED))
    blamed = frozenset(verdict.failed_nodes)
    hit = frozenset(
        node_id for node_id in blamed if isinstance(results.get(node_id), DeviceFailure)
    )
    if hit:
        return Diagnosis(RootCause.DEVICE_FAILURE, hit, "device failure on " + _names(hit))
    return Diagnosis(
        RootCause.PLAN_OR_ANSWER_ERROR,
        blamed,
        "verifier blamed " + (_names(blamed) if blamed else "no node"),
    )


def _names(nodes: frozenset[str]) -> str:
    return ", ".join(sorted(nodes))
