"""A rail that checks a task's final output against keyword criteria, apart from the verifier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pev.ledger import TaskFinished
from pev.model import JsonValue, canonical_json, freeze_json
from pev.rails._event import RailEvent, RailPhase

__all__ = ["CriteriaReport", "CriteriaVerificationRail"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CriteriaReport:
    """Which keyword criteria a task's final output meets.

    Attributes:
        task_id: The task.
        verified: The criteria met, in the order they were given.
        unmet: The criteria not met, in the order they were given.
    """

    task_id: str
    verified: tuple[str, ...]
    unmet: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every criterion is met."""
        return not self.unmet


class CriteriaVerificationRail:
    """Checks each task's final output against keyword criteria; it never changes the outcome.

    A criterion is met when every one of its keywords appears, ignoring case, in the canonical
    JSON text of the task's outputs (``TaskFinished.outputs``: node id → value, keys included).
    The check is deterministic and independent of the task's verifier, so a disagreement between
    the two is worth a look. Since the text is JSON, a keyword holding a quote or a backslash
    must be written as JSON escapes it.

    Args:
        criteria: Criterion name → one keyword, or a sequence of keywords that must all appear.

    Raises:
        ValueError: A criterion has no keywords, or an empty one.
        TypeError: A keyword is not text.
    """

    def __init__(self, criteria: Mapping[str, str | Sequence[str]]) -> None:
        self._criteria = MappingProxyType(
            {name: _keywords(name, keywords) for name, keywords in criteria.items()}
        )
        self._folded = tuple(
            (name, tuple(keyword.casefold() for keyword in keywords))
            for name, keywords in self._criteria.items()
        )
        self.reports: dict[str, CriteriaReport] = {}
        """The report of every task seen to finish, by task id."""
        self.last: CriteriaReport | None = None
        """The report of the task that finished last."""

    @property
    def criteria(self) -> Mapping[str, tuple[str, ...]]:
        """Criterion name → its keywords, as given."""
        return self._criteria

    def check(self, outputs: Mapping[str, JsonValue], *, task_id: str = "") -> CriteriaReport:
        """Check ``outputs`` (node id → value) against the criteria."""
        text = canonical_json(freeze_json(outputs, path="outputs")).casefold()
        met = {name for name, keywords in self._folded if all(k in text for k in keywords)}
        return CriteriaReport(
            task_id=task_id,
            verified=tuple(name for name, _ in self._folded if name in met),
            unmet=tuple(name for name, _ in self._folded if name not in met),
        )

    def on_event(self, event: RailEvent) -> None:
        """Record a report when a task finishes; other phases are ignored."""
        finished = event.event
        if event.phase is not RailPhase.TASK_FINISHED or not isinstance(finished, TaskFinished):
            return
        report = self.check(finished.outputs, task_id=event.task_id)
        self.reports[event.task_id] = report
        self.last = report


def _keywords(name: str, keywords: str | Sequence[str]) -> tuple[str, ...]:
    found = (keywords,) if isinstance(keywords, str) else tuple(keywords)
    for keyword in found:
        if not isinstance(keyword, str):
            raise TypeError(
                f"criterion {name!r}: keyword {keyword!r} is a {type(keyword).__name__}, not text"
            )
    if not found or not all(found):
        raise ValueError(
            f"criterion {name!r} needs at least one keyword, and no empty ones (got {keywords!r})"
        )
    return found
