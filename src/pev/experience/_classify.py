"""Episode classification (docs/design.md §8): a total function, written as one table."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from pev.experience._episode import Episode
from pev.kernel import TaskStatus, TerminalReason
from pev.model import Reliability, VerificationMode

__all__ = ["CLASSIFICATION", "EpisodeClass", "classify", "classify_why"]


class EpisodeClass(StrEnum):
    """What an episode teaches; every episode gets exactly one."""

    SUCCESS = "success"
    """Passed on the first revision."""
    MIXED = "mixed"
    """Failed, was re-planned, then passed."""
    FAILURE = "failure"
    """Ended failed through plan errors or the budget, or partial through a device failure."""
    IGNORED = "ignored"
    """Teaches nothing trustworthy: an unreliable verifier, a cancel, off or audit mode, ..."""


def _unverified(episode: Episode) -> bool:
    return episode.mode in (VerificationMode.OFF, VerificationMode.AUDIT)


def _cancelled(episode: Episode) -> bool:
    return episode.status is TaskStatus.CANCELLED or episode.reason is TerminalReason.CANCELLED


def _evidence_missing(episode: Episode) -> bool:
    return episode.reason is TerminalReason.EVIDENCE_MISSING or any(
        revision.evidence_missing for revision in episode.revisions
    )


def _invalid_plan(episode: Episode) -> bool:
    return episode.reason is TerminalReason.INVALID_PLAN or not episode.revisions


def _verifier_unreliable(episode: Episode) -> bool:
    return episode.reason is TerminalReason.VERIFIER_UNRELIABLE or any(
        revision.reliability not in (None, Reliability.OK) for revision in episode.revisions
    )


def _passed(episode: Episode) -> bool:
    return episode.status is TaskStatus.SUCCEEDED and episode.reason is TerminalReason.PASSED


def _passed_first(episode: Episode) -> bool:
    return _passed(episode) and len(episode.revisions) == 1


def _passed_after_replan(episode: Episode) -> bool:
    return _passed(episode) and len(episode.revisions) > 1


# A plan the verifier kept failing, or a budget (replans, or time) spent on re-planning it.
_PLAN_OR_BUDGET = frozenset(
    {
        TerminalReason.VERIFICATION_FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
        TerminalReason.REPLAN_DEADLINE_EXPIRED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
    }
)


def _plan_or_budget(episode: Episode) -> bool:
    return episode.status is TaskStatus.FAILED and episode.reason in _PLAN_OR_BUDGET


def _device_failure(episode: Episode) -> bool:
    # Recovery ends a device failure partial; enforce ends the same facts failed: one class.
    return (
        episode.status in (TaskStatus.PARTIAL, TaskStatus.FAILED)
        and episode.reason is TerminalReason.DEVICE_FAILURE
    )


# The classification, first match wins; an episode no row matches is ignored. The "ignored" rows
# come first: a verdict that cannot be trusted, or no verdict at all, teaches nothing.
CLASSIFICATION: tuple[tuple[str, Callable[[Episode], bool], EpisodeClass], ...] = (
    ("verification off or audit", _unverified, EpisodeClass.IGNORED),
    ("cancelled", _cancelled, EpisodeClass.IGNORED),
    ("evidence missing", _evidence_missing, EpisodeClass.IGNORED),
    ("invalid plan, or no plan ran", _invalid_plan, EpisodeClass.IGNORED),
    ("verifier unreliable or inconclusive", _verifier_unreliable, EpisodeClass.IGNORED),
    ("passed on the first revision", _passed_first, EpisodeClass.SUCCESS),
    ("failed, re-planned, then passed", _passed_after_replan, EpisodeClass.MIXED),
    ("ended failed through plan errors or the budget", _plan_or_budget, EpisodeClass.FAILURE),
    ("ended through a device failure", _device_failure, EpisodeClass.FAILURE),
)
"""(why, rule, class) rows of :func:`classify`, in order."""

_OTHERWISE = "anything else"


def classify_why(episode: Episode) -> tuple[EpisodeClass, str]:
    """The episode's class and the row of :data:`CLASSIFICATION` that gave it."""
    for why, rule, verdict in CLASSIFICATION:
        if rule(episode):
            return verdict, why
    return EpisodeClass.IGNORED, _OTHERWISE


def classify(episode: Episode) -> EpisodeClass:
    """The episode's class; total: every episode gets exactly one.

    | first matching row                                  | class   |
    |-----------------------------------------------------|---------|
    | verification mode ``off`` or ``audit``              | ignored |
    | cancelled (status or reason)                        | ignored |
    | required evidence missing                           | ignored |
    | invalid plan, or no revision ever ran               | ignored |
    | any verdict unreliable or inconclusive              | ignored |
    | succeeded/passed on revision 1                      | success |
    | succeeded/passed after a replan                     | mixed   |
    | failed: verification failed, a budget or deadline   | failure |
    | partial (or failed) through a device failure        | failure |
    | anything else                                       | ignored |
    """
    return classify_why(episode)[0]
