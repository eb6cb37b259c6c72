"""A task whose action timed out and whose tool's ``reconcile`` settled it (docs/design.md §2.2).

``post`` takes effect, then hangs past its 0.05 s timeout, so its record ends ``unknown``; its
``reconcile`` then says what the channel shows: the post (settled as done, and the task
succeeds) or nothing (settled as not done, and the task fails). The surfaces that show a record
are tested on it: each must show the settled outcome, marked as reconciled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pev
from pev.engine import Tool
from pev.model import DeviceFailure, ExecutionRecord, NodeResult, Plan, PlanNode, Success
from pev.rails import RailLike
from pev.testing import ScriptedPlanner

PLAN = Plan("post the bulletin", (PlanNode("post", "post it", tool="post"),))
POSTED = "rain tomorrow"
NOT_FOUND = "the channel shows no post for this key"


def post_tool(*, done: bool) -> Tool[..., Any]:
    """``post``: times out after taking effect; its reconcile finds the post when ``done``."""

    async def post() -> str:
        await asyncio.sleep(1)  # past the timeout, after taking effect (or not)
        return POSTED

    # Async, so it answers within the tool's 0.05 s on a loaded machine too (a sync one waits
    # for a thread of pev's pool).
    async def look_up(record: ExecutionRecord) -> NodeResult:
        return Success(POSTED) if done else DeviceFailure(record.node_id, NOT_FOUND)

    return pev.tool(post, effect="action", timeout_s=0.05, reconcile=look_up)


async def run_reconciled(
    store: pev.Store, *, done: bool = True, task_id: str = "post-1", rails: Sequence[RailLike] = ()
) -> pev.RunResult:
    """Run the task on ``store``: it succeeds when settled as done, else it fails."""
    result = await pev.run(
        "post the bulletin",
        store=store,
        task_id=task_id,
        planner=ScriptedPlanner(PLAN),
        tools=[post_tool(done=done)],
        rails=list(rails),
    )
    assert result.ok is done, result
    return result


async def reconciled_in(db: Path, *, done: bool = True, task_id: str = "post-1") -> str:
    """Run the task into the SQLite ledger at ``db``; its id."""
    store = pev.SQLiteStore(db)
    try:
        return str((await run_reconciled(store, done=done, task_id=task_id)).task_id)
    finally:
        await store.close()
