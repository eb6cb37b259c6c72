"""What a diagnosis calls for: a partial result, or a local or global replan.

See docs/design.md §3.2.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, assert_never

from pev.kernel._diagnose import Diagnosis, RootCause
from pev.kernel._outcome import TerminalReason

__all__ = ["AcceptPartial", "Action", "GlobalReplan", "LocalReplan", "to_replan_action"]


@dataclass(frozen=True, slots=True)
class AcceptPartial:
    """Stop with an honest partial result: re-planning cannot fix this cause."""

    kind: ClassVar[Literal["accept_partial"]] = "accept_partial"
    reason: TerminalReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LocalReplan:
    """Re-plan only these nodes (and, at run time, everything downstream of them)."""

    kind: ClassVar[Literal["local_replan"]] = "local_replan"
    nodes: frozenset[str]
    feedback: str = ""


@dataclass(frozen=True, slots=True)
class GlobalReplan:
    """Re-plan the whole task from the original input, in a fresh lineage."""

    kind: ClassVar[Literal["global_replan"]] = "global_replan"
    feedback: str = ""


Action: TypeAlias = AcceptPartial | LocalReplan | GlobalReplan
"""What recovery does about a diagnosis."""


def to_replan_action(
    diagnosis: Diagnosis,
    failed_nodes: Iterable[str],
    feedback: str,
    *,
    local_limit: int = 2,
) -> Action:
    """Map a diagnosis to its action; the table is an "if and only if".

    | cause                  | failed nodes        | action                              |
    |------------------------|---------------------|-------------------------------------|
    | DEVICE_FAILURE         | any                 | AcceptPartial(device_failure)       |
    | PERCEPTION_UNRELIABLE  | any                 | AcceptPartial(verifier_unreliable)  |
    | PLAN_OR_ANSWER_ERROR   | none                | GlobalReplan                        |
    | PLAN_OR_ANSWER_ERROR   | 1 .. local_limit    | LocalReplan(nodes)                  |
    | PLAN_OR_ANSWER_ERROR   | more than the limit | GlobalReplan                        |

    A device failure or an unreliable verdict is never retried; a plan error is never accepted.
    """
    match diagnosis.cause:
        case RootCause.DEVICE_FAILURE:
            return AcceptPartial(TerminalReason.DEVICE_FAILURE, diagnosis.detail)
        case RootCause.PERCEPTION_UNRELIABLE:
            return AcceptPartial(TerminalReason.VERIFIER_UNRELIABLE, diagnosis.detail)
        case RootCause.PLAN_OR_ANSWER_ERROR:
            nodes = frozenset(failed_nodes)
            if nodes and len(nodes) <= local_limit:
                return LocalReplan(nodes, feedback)
            return GlobalReplan(feedback)
        case _:
            assert_never(diagnosis.cause)
