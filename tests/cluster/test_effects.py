"""Effects happen once with RayExecutor too (docs/engine.md, "Effects happen once"; docs/ray.md).

The tools run as Ray tasks on the session's cluster and write what they did to a side-effect
log (tests/support/ray_tools.py); that log, not pev's ledger, shows what reached the world.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support import ray_cluster
from tests.support.effects import CONTRACT, PASS, blame
from tests.support.ray_tools import deliver, lines

import pev
from pev.ledger import Ledger
from pev.model import Plan, PlanNode
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner, ScriptedVerifier

ray_cluster.require_module()

from pev.ray import RayExecutor  # noqa: E402 - after the check that Ray is here

pytestmark = [pytest.mark.timeout(120)]


async def test_a_local_replan_reuses_an_effect_a_ray_task_made(
    cluster: Any, tmp_path: Path
) -> None:
    """The blamed delivery is replaced by the same call: reused, delivered once."""
    log = tmp_path / "effects.log"
    delivery = Plan("deliver", (PlanNode("a", "deliver", tool="deliver", args={"log": str(log)}),))
    store = MemoryStore()

    result = await pev.run(
        "deliver",
        planner=ScriptedPlanner(delivery, delivery),
        executor=RayExecutor({"deliver": deliver}),
        verifier=ScriptedVerifier(blame("a"), PASS),
        contract=CONTRACT,
        store=store,
    )

    assert (result.ok, result.revisions) == (True, 2)
    state = await Ledger(store).state(result.task_id)
    assert [(r.revision, r.node_id, r.record_id) for r in state.reused] == [(2, "a", "1:a")]
    assert [words[:2] for words in lines(log)] == [["delivered", state.effects["1:a"].key]]
