"""Episodes are built from an ended task's ledger state (docs/design.md §8)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pev.errors import StateError
from pev.experience import EpisodeClass, build_episode, classify, task_literals
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import Ledger
from pev.model import Effect, RecordStatus, digest

if TYPE_CHECKING:
    from conftest import Claims


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        pytest.param("success", EpisodeClass.SUCCESS, id="success"),
        pytest.param("mixed", EpisodeClass.MIXED, id="mixed"),
        pytest.param("exhausted", EpisodeClass.FAILURE, id="budget"),
        pytest.param("device_failure", EpisodeClass.FAILURE, id="device"),
        pytest.param("unreliable", EpisodeClass.IGNORED, id="unreliable"),
        pytest.param("audit", EpisodeClass.IGNORED, id="audit"),
    ],
)
async def test_real_tasks_are_classified(
    claims: Claims, ending: str, expected: EpisodeClass
) -> None:
    """Tasks run through the engine and ending each way get the class of their ending."""
    state = await getattr(claims, ending)()
    assert classify(build_episode(state)) is expected


async def test_episode_holds_revisions_actions_and_outcome(claims: Claims) -> None:
    """A mixed task's episode: both revisions, the blamed step's tool and effect, every action."""
    state = await claims.mixed("claim 9")
    episode = build_episode(state)
    assert episode.task_id == state.task_id
    assert episode.input_digest == digest("claim 9")
    assert episode.goal == state.contract.goal
    assert (episode.status, episode.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    first, second = episode.revisions
    assert first.cause is RootCause.PLAN_OR_ANSWER_ERROR
    assert [(n.node_id, n.tool, n.effect) for n in first.blamed] == [
        ("file_claim", "submit", Effect.ACTION)
    ]
    assert (first.decision, second.decision) == ("local_replan", "finish")
    assert second.cause is None
    assert [(a.revision, a.node_id, a.status) for a in episode.actions] == [
        (1, "find_policy", RecordStatus.SUCCEEDED),
        (1, "file_claim", RecordStatus.SUCCEEDED),
        (2, "file_claim", RecordStatus.SUCCEEDED),
    ]
    assert episode.tools == ("lookup", "submit")
    assert episode.ended_at == state.updated_at


async def test_literals_are_the_tasks_specifics(claims: Claims) -> None:
    """Input strings, node ids, descriptions and argument values; never tool names."""
    state = await claims.mixed({"customer": "Dana Whitfield", "ref": "AB"})
    literals = set(task_literals(state))
    assert {"Dana Whitfield", "CLM-7781", "1250.5", "kitchen flood", "file_claim"} <= literals
    assert {"find_policy", "look the policy up", state.contract.goal} <= literals
    assert not {"lookup", "submit", "AB"} & literals  # tools are keys; "AB" is too short
    assert build_episode(state).literals == task_literals(state)


async def test_an_unended_task_has_no_episode(store: object) -> None:
    """Building an episode of a task that has not ended is a StateError."""
    ledger = Ledger(store)  # type: ignore[arg-type]
    state = await ledger.create("x")
    with pytest.raises(StateError, match="has not ended"):
        build_episode(state)


async def test_rejected_plans_are_ignored_but_their_literals_kept(claims: Claims) -> None:
    """A task whose plans were all rejected is ignored; its rejected plans' specifics count."""
    from pev.model import Plan, PlanNode
    from pev.testing import ScriptedPlanner

    bad = Plan("g", (PlanNode("call_ghost", "call it", tool="ghost", args={"who": "Casper"}),))
    state = await claims.success(planner=ScriptedPlanner(bad, repeat_last=True))
    assert state.finished is not None
    assert state.finished.reason is TerminalReason.INVALID_PLAN
    episode = build_episode(state)
    assert (classify(episode), episode.rejections) == (EpisodeClass.IGNORED, 3)
    assert {"call_ghost", "Casper"} <= set(episode.literals)
