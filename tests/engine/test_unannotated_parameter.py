"""A tool with one parameter left without a type hint (docs/tools.md, "Writing a tool").

The unannotated parameter takes any JSON value, handed to the function as it is; every annotated
parameter beside it is still checked and converted, in the plan and again at dispatch, when a
``$ref`` fills it.
"""

from __future__ import annotations

import datetime
from typing import Any

import pev
from pev.engine import tool
from pev.model import Plan, PlanNode
from pev.testing import ScriptedPlanner

CALLS: list[dict[str, Any]] = []


@tool(effect="query")
def word() -> str:
    """A value of the wrong type for ``cents``."""
    return "three"


@tool(effect="query")
def today() -> str:
    """A date, as JSON carries it."""
    return "2026-12-07"


@tool
def pay(cents: int, on: datetime.date, memo) -> int:  # type: ignore[no-untyped-def]
    """Pay, with a memo of any shape."""
    CALLS.append({"cents": cents, "on": on, "memo": memo})
    return cents


def _run(cents: Any, *, memo: Any = "rent") -> pev.RunResult:
    plan = Plan(
        "pay",
        (
            PlanNode("a", tool="word"),
            PlanNode("d", tool="today"),
            PlanNode(
                "b",
                tool="pay",
                args={"cents": cents, "on": {"$ref": "d"}, "memo": memo},
                after=("a", "d"),
            ),
        ),
    )
    return pev.run_sync("pay", planner=ScriptedPlanner(plan), tools=[word, today, pay])


def test_the_annotated_parameters_are_converted_beside_an_unannotated_one() -> None:
    """The date filled by a $ref arrives as a date; the memo arrives as the JSON it was."""
    CALLS.clear()
    result = _run(250, memo={"for": ["rent", 12]})
    assert result.ok, result.detail
    [seen] = CALLS
    assert seen == {"cents": 250, "on": datetime.date(2026, 12, 7), "memo": {"for": ["rent", 12]}}
    assert type(seen["on"]) is datetime.date


def test_a_wrong_value_for_an_annotated_parameter_is_refused_at_dispatch() -> None:
    """A $ref that fills the int with a word fails the node: the tool is not called."""
    CALLS.clear()
    result = _run({"$ref": "a"})
    assert not result.ok
    assert CALLS == []
    assert "tool 'pay' was not called" in result.detail
    assert "argument 'cents': Input should be a valid integer" in result.detail


def test_the_schema_leaves_the_unannotated_parameter_any_json() -> None:
    """Its spec parameter takes every JSON type; the others keep theirs."""
    types = {p.name: sorted(p.json_types) for p in pay.spec.parameters}
    assert types == {"cents": ["integer"], "on": ["string"], "memo": []}
