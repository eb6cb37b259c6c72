"""Integers of any size JSON can write are recorded exactly (docs/ledger-format.md §3.3).

A tool returning a 64-bit id (``9876543210123456``, past the doubles' ±(2**53-1)) or an integer
beyond 64 bits ends ``succeeded`` with that very integer in the task's outputs, read back from a
fresh SQLite store; plan args holding such integers are valid and reach the tool unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import pev
from pev.engine import resume
from pev.ledger import Ledger
from pev.model import Effect, Plan, PlanNode, plan_problems
from pev.stores import SQLiteStore
from pev.testing import ScriptedPlanner

SNOWFLAKE = 9876543210123456
BIG = [
    pytest.param(SNOWFLAKE, id="snowflake"),
    pytest.param(2**70, id="2**70"),
    pytest.param(-(2**63) - 1, id="below-int64"),
    pytest.param(10**39 + 7, id="40-digits"),
]


@pev.tool(effect=Effect.QUERY)
def echo(n: int) -> dict[str, object]:
    """Return ``n`` as a tool would return an id: alone, in a list and negated."""
    return {"id": n, "ids": [n, -n]}


async def _ended(db: Path, task_id: str) -> pev.RunResult:
    """The ended task's result, rebuilt from its ledger by a fresh store (its chain verified)."""
    store = SQLiteStore(db)
    try:
        report = await Ledger(store).verify(task_id)
        assert report.ok, report.problem
        return await resume(task_id, store=store)
    finally:
        await store.close()


@pytest.mark.parametrize("value", BIG)
async def test_a_tool_returning_a_big_integer_succeeds_with_it_exactly(
    tmp_path: Path, value: int
) -> None:
    """The tool's integer is in the outputs, to the last digit, after a fresh store reads it."""
    db = tmp_path / "ledger.db"

    @pev.tool(effect=Effect.QUERY)
    def fetch_id() -> int:
        """Return an id of 64 bits or more."""
        return value

    node = PlanNode("id", "fetch the id", tool="fetch_id")
    store = SQLiteStore(db)
    try:
        result = await pev.run(
            "fetch the id",
            planner=ScriptedPlanner(Plan("g", (node,))),
            tools=[fetch_id],
            store=store,
        )
    finally:
        await store.close()

    assert (result.status, result.outputs["id"]) == ("succeeded", value)
    back = await _ended(db, result.task_id)
    assert back.status == "succeeded"
    assert (back.outputs["id"], type(back.outputs["id"])) == (value, int)


@pytest.mark.parametrize("value", BIG)
def test_plan_args_holding_a_big_integer_are_valid(value: int) -> None:
    """Plan validation accepts an integer beyond ±(2**53-1) in args, nested or not."""
    node = PlanNode("e", "echo", tool="echo", args={"n": value, "more": [{"n": -value}]})
    assert plan_problems(Plan("g", (node,))) == ()


async def test_plan_args_with_a_big_integer_reach_the_tool_and_the_ledger_exactly(
    tmp_path: Path,
) -> None:
    """A 64-bit id in args is passed to the tool and recorded exactly, in args and in output."""
    db = tmp_path / "ledger.db"
    node = PlanNode("e", "echo the id", tool="echo", args={"n": SNOWFLAKE})
    store = SQLiteStore(db)
    try:
        result = await pev.run(
            "echo the id", planner=ScriptedPlanner(Plan("g", (node,))), tools=[echo], store=store
        )
    finally:
        await store.close()

    assert result.status == "succeeded"
    back = await _ended(db, result.task_id)
    assert back.outputs["e"] == {"id": SNOWFLAKE, "ids": (SNOWFLAKE, -SNOWFLAKE)}
