"""A tool's placement: what a call needs of the machine it runs on (docs/tools.md, docs/ray.md)."""

from __future__ import annotations

import math

import pytest

import pev
from pev.model import Plan, PlanNode
from pev.model._exceptions import REMOTE_PLACE, describe_exception
from pev.testing import ScriptedPlanner


def weigh(item: str) -> float:
    """Weigh an item."""
    return 0.3


def test_a_placement_is_kept_read_only_and_shown() -> None:
    """The amounts are kept as given, cannot be changed, and show in the tool's repr."""
    placed = pev.tool(weigh, placement={"num_cpus": 0.5, "arm0": 1})
    assert dict(placed.placement) == {"num_cpus": 0.5, "arm0": 1}
    with pytest.raises(TypeError):
        placed.placement["arm0"] = 2  # type: ignore[index]
    assert "placement={'num_cpus': 0.5, 'arm0': 1}" in repr(placed)
    assert dict(pev.tool(weigh).placement) == {}


@pytest.mark.parametrize(
    ("placement", "named"),
    [
        ({"arm0": -1}, "placement 'arm0' must be a finite amount not below zero, got -1"),
        ({"num_gpus": math.nan}, "placement 'num_gpus' must be a finite amount"),
        ({"num_gpus": math.inf}, "placement 'num_gpus' must be a finite amount"),
        ({"arm0": True}, "placement 'arm0' must be a finite amount"),
        ({"arm0": "1"}, "placement 'arm0' must be a finite amount"),
        ({"": 1}, "a placement resource needs a name"),
        ([("arm0", 1)], "placement must be a mapping of resource names to amounts"),
    ],
)
def test_a_bad_placement_is_refused_naming_the_tool_and_the_problem(
    placement: object, named: str
) -> None:
    """Each bad placement is a ValueError that names the tool and what is wrong."""
    with pytest.raises(ValueError, match="tool 'weigh': ") as raised:
        pev.tool(weigh, placement=placement)  # type: ignore[arg-type]
    assert named in str(raised.value)


def test_the_local_executor_ignores_placement() -> None:
    """A tool placed on a GPU host still runs here, in one process (tests, a laptop)."""
    placed = pev.tool(weigh, effect="query", placement={"num_gpus": 1, "arm0": 1})
    plan = Plan("weigh", (PlanNode("a", "weigh", tool="weigh", args={"item": "mug"}),))
    result = pev.run_sync("weigh it", planner=ScriptedPlanner(plan), tools=[placed])
    assert (result.status, result.outputs) == ("succeeded", {"a": 0.3})


def test_an_exception_from_another_process_is_placed_where_it_was_raised() -> None:
    """A place found on the worker (the traceback stays there) is the one recorded."""
    error = KeyError("room")
    setattr(error, REMOTE_PLACE, "tools.py:12 in book")
    assert describe_exception(error) == "KeyError: 'room' at tools.py:12 in book"
