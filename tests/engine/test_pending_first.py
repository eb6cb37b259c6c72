"""The pending record is stored before the tool is called: the promise that lets a crash, or a
takeover, know an action may have been sent.

On a store whose append never yields to the event loop, a driver that started the tool first
and wrote the record after would look the same; so the engine runs here on a store whose append
does yield (as every real store's does), and the tool itself reads the ledger when it is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pev
from pev.ledger import Lease, Ledger, LedgerEntry, TaskSummary
from pev.model import Plan, PlanNode, RecordStatus
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner


class YieldingStore(MemoryStore):
    """A memory store whose appends give the event loop a turn first, as I/O would."""

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Yield, then append."""
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await super().append(entries, summary, fence=fence)


async def test_each_tool_finds_its_own_pending_record_stored_when_it_is_called() -> None:
    """Two actions, one after the other and one beside: each sees its record in the store."""
    store = YieldingStore()
    seen: list[tuple[str, RecordStatus]] = []

    async def ship(item: str) -> str:
        """Ship one item (an action) after checking the ledger holds its dispatch."""
        context = pev.engine.current_node_context()
        state = await Ledger(store).state(context.task_id)
        record = state.records[context.record_id]
        seen.append((context.node_id, record.status))
        return f"shipped {item}"

    plan = Plan(
        "ship two",
        (
            PlanNode("a", "ship the lamp", tool="ship", args={"item": "lamp"}),
            PlanNode("b", "ship the vase", tool="ship", args={"item": "vase"}),
            PlanNode("c", "ship the clock", tool="ship", args={"item": "clock"}, after=("a",)),
        ),
    )
    result = await pev.run(
        "ship them",
        planner=ScriptedPlanner(plan),
        tools=[pev.tool(ship, effect="action")],
        store=store,
    )
    assert result.status == "succeeded"
    assert sorted(seen) == [
        ("a", RecordStatus.PENDING),
        ("b", RecordStatus.PENDING),
        ("c", RecordStatus.PENDING),
    ]
