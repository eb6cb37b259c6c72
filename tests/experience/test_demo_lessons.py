"""After the demo's ``slip`` has been recovered in three tasks, a lesson is active.

The must-show of docs/design.md §8: the next task's planner request contains that lesson.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "pev.sim", reason="the simulator tests need the sim extra", exc_type=ImportError
)

import pev
from pev.engine import PlanRequest
from pev.experience import EpisodeClass, LessonBook, LessonStatus, classify
from pev.kernel import RootCause
from pev.ledger import Ledger, RevisionStarted
from pev.model import Effect, Plan
from pev.sim import (
    CONTRACT,
    GOAL,
    POLICY,
    Camera,
    PerceptionVerifier,
    SceneObserver,
    SimArm,
    SymbolicPlanner,
    World,
    run_demo,
    sim_tools,
)

SLIP_KEYS = {("pick", Effect.ACTION), ("place", Effect.ACTION)}


class RecordingPlanner:
    """The demo's planner, keeping every request it is given."""

    def __init__(self, inner: SymbolicPlanner) -> None:
        self.inner = inner
        self.requests: list[PlanRequest] = []

    async def plan(self, request: PlanRequest) -> Plan:
        self.requests.append(request)
        return await self.inner.plan(request)


async def next_task(seed: int, *, store: Any, book: LessonBook) -> tuple[RecordingPlanner, str]:
    """A fault-free demo task wired by hand, with the planner wrapped to see its requests."""
    with World(seed=seed) as world:
        arm = SimArm(world)
        camera = Camera(world)
        planner = RecordingPlanner(SymbolicPlanner(world.sensor))
        result = await pev.run(
            {"goal": GOAL, "seed": seed},
            planner=planner,
            tools=sim_tools(world, arm),
            verifier=PerceptionVerifier(camera),
            observer=SceneObserver(world, camera),
            contract=CONTRACT,
            policy=POLICY,
            store=store,
            experience=book,
        )
    assert result.ok
    return planner, result.task_id


async def test_three_recovered_slips_teach_the_next_planner(store: Any) -> None:
    """Slip recovered in three tasks (seeds 1-3) → active lessons → in the 4th task's request."""
    book = LessonBook(store)
    for seed in (1, 2, 3):
        assert await book.active() == ()  # not before the third independent task
        result = await run_demo("slip", seed=seed, store=store, experience=book)
        assert (result.status, result.reason) == ("succeeded", "passed")
        episode = await book.store.episode(result.task_id)
        assert episode is not None
        assert classify(episode) is EpisodeClass.MIXED
        assert episode.revisions[0].cause is RootCause.PLAN_OR_ANSWER_ERROR

    lessons = await book.active(tools=("observe", "pick", "place"), goal=GOAL)
    assert {(lesson.key.tool, lesson.key.effect) for lesson in lessons} == SLIP_KEYS
    for lesson in lessons:
        assert lesson.status is LessonStatus.ACTIVE
        assert lesson.independent == 3
        assert "red" not in lesson.text
        assert "cube" not in lesson.text
        assert not any(char.isdigit() for char in lesson.text)

    planner, task_id = await next_task(4, store=store, book=book)
    first = planner.requests[0]
    assert set(first.lessons) == {lesson.text for lesson in lessons}
    started = [
        entry.event
        for entry in await Ledger(store).entries(task_id)
        if isinstance(entry.event, RevisionStarted)
    ]
    assert set(started[0].lessons) == set(first.lessons)  # the ledger says what advice was used
