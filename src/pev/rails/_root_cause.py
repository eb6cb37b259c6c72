"""A rail that counts device failures by node and by tool, across every task it sees."""

from __future__ import annotations

from collections import Counter
from typing import TypedDict

from pev.kernel import RootCause
from pev.ledger import Diagnosed, NodeFinished
from pev.model import DeviceFailure
from pev.rails._event import RailEvent, RailPhase

__all__ = ["RootCauseRail", "RootCauseSummary"]


class RootCauseSummary(TypedDict):
    """What :meth:`RootCauseRail.summary` returns; each mapping is ordered most common first."""

    device_failures: int
    unknown_outcomes: int
    by_node: dict[str, int]
    by_tool: dict[str, int]
    unknown_by_node: dict[str, int]
    diagnosed_by_node: dict[str, int]


class RootCauseRail:
    """Counts device failures by node id and by tool, across runs.

    A node that finished with a :class:`~pev.model.DeviceFailure` counts once for its node and
    once for its tool (a node without a tool counts by node only); one whose outcome is unknown
    also counts in ``unknown_outcomes``. A diagnosis of ``device_failure`` counts once for each
    node it blames, in ``diagnosed_by_node``. Node ids are those of the plans, so the same id in
    two tasks counts together.
    """

    def __init__(self) -> None:
        self.by_node: Counter[str] = Counter()
        """Device failures by node id."""
        self.by_tool: Counter[str] = Counter()
        """Device failures by tool name."""
        self.unknown_outcomes: Counter[str] = Counter()
        """Device failures that left an action's outcome unknown, by node id."""
        self.diagnosed_by_node: Counter[str] = Counter()
        """Nodes blamed by a ``device_failure`` diagnosis."""

    @property
    def device_failures(self) -> int:
        """Device failures seen, all nodes together."""
        return self.by_node.total()

    def on_event(self, event: RailEvent) -> None:
        """Count a device failure or a device-failure diagnosis; other events are ignored."""
        match event.phase, event.event:
            case RailPhase.NODE_FINISHED, NodeFinished(result=DeviceFailure() as failure):
                record = event.record
                node_id = record.node_id if record is not None else failure.node_id
                tool = record.tool if record is not None else event.tools.get(node_id)
                self.by_node[node_id] += 1
                if tool is not None:
                    self.by_tool[tool] += 1
                if failure.outcome_unknown:
                    self.unknown_outcomes[node_id] += 1
            case RailPhase.DIAGNOSED, Diagnosed(diagnosis=diagnosis) if (
                diagnosis.cause == RootCause.DEVICE_FAILURE
            ):
                self.diagnosed_by_node.update(diagnosis.nodes)
            case _:
                pass

    def summary(self) -> RootCauseSummary:
        """The counts as plain data, most common first."""
        return RootCauseSummary(
            device_failures=self.device_failures,
            unknown_outcomes=self.unknown_outcomes.total(),
            by_node=dict(self.by_node.most_common()),
            by_tool=dict(self.by_tool.most_common()),
            unknown_by_node=dict(self.unknown_outcomes.most_common()),
            diagnosed_by_node=dict(self.diagnosed_by_node.most_common()),
        )
