"""Rail events read back from a ledger: what a follower of a task sees (docs/control.md).

A watcher of a task in another process has no rail bus to hear from: it reads the task's
entries from the store (:func:`pev.ledger.follow`) and makes of them the very events a rail
would have received, by folding them one by one, so each event carries the plan in force once
its entry was written and, for a node, its record as it stood then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import MappingProxyType

from pev.ledger import LedgerEntry, TaskState, apply
from pev.model import Plan
from pev.rails._event import PHASES_OF_EVENT, RailEvent, record_of

__all__ = ["RailEvents"]


class RailEvents:
    """Turns a task's entries, read in order from its first, into rail events.

    Feed it every entry of one task in sequence order (in batches, as they are read); it folds
    them into the task's state as it goes (:attr:`state`).
    """

    __slots__ = ("_plan", "_tools", "state")

    def __init__(self) -> None:
        self.state: TaskState | None = None
        """The task's state after the last entry fed (``None`` before the first)."""
        self._plan: Plan | None = None
        self._tools = MappingProxyType[str, str]({})

    def feed(self, entries: Iterable[LedgerEntry]) -> Iterator[RailEvent]:
        """The rail events of ``entries``, in order (an entry marks none, one or two phases).

        Raises:
            StateError: The entries are not the task's next ones (a gap, another task's).
        """
        for entry in entries:
            event = entry.event
            self.state = state = apply(self.state, event, at=entry.at)
            phases = PHASES_OF_EVENT.get(event.kind)
            if not phases:
                continue
            plan = state.plan
            if plan is not self._plan:
                self._plan = plan
                self._tools = MappingProxyType(
                    {} if plan is None else {n.id: n.tool for n in plan.nodes if n.tool is not None}
                )
            record = record_of(event, state)
            for phase in phases:
                yield RailEvent(
                    phase=phase,
                    task_id=entry.task_id,
                    seq=entry.seq,
                    at=entry.at,
                    event=event,
                    contract=state.contract,
                    plan=plan,
                    tools=self._tools,
                    record=record,
                )
