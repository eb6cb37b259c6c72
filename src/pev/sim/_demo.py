"""The demo run: a world, its devices, planner, observer and perception, wired into ``pev.run``.

A fault is armed on the devices before the run starts; nothing else knows about it. Every
component is a coroutine that never awaits: the simulation runs on the event loop's thread, so
all pybullet calls come from one thread in one order, and a seed replays exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from pev.engine import RunResult, run
from pev.experience import LessonBook
from pev.kernel import Finish, GlobalReplan, LocalReplan, TaskStatus
from pev.ledger import Store, TaskState
from pev.model import VerificationContract, VerificationMode
from pev.policy import Approval, RecoveryPolicy
from pev.rails import RailLike
from pev.sim._arm import SimArm, sim_tools
from pev.sim._camera import Camera
from pev.sim._faults import Fault, FaultPath, Recovery, inject
from pev.sim._observer import SceneObserver
from pev.sim._perception import PerceptionVerifier
from pev.sim._planner import SymbolicPlanner
from pev.sim._scene import COLOURS, criterion_for
from pev.sim._world import World

__all__ = ["CONTRACT", "GOAL", "POLICY", "path_taken", "run_demo"]

GOAL = "put the red, green and blue cubes in the tray"
"""What every demo task is asked to do."""

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY,
    GOAL,
    tuple(criterion_for(colour) for colour in COLOURS),
    required_evidence=("state",),
)
"""Recovery mode, one criterion per cube, and fresh poses required after every round."""

POLICY = RecoveryPolicy(max_replans=2, max_parallel=1)
"""One arm: one node at a time, in plan order, so each pick is followed by its place."""


async def run_demo(
    fault: Fault | str = Fault.NONE,
    *,
    seed: int = 0,
    store: Store | None = None,
    clock: Callable[[], datetime] | None = None,
    rails: Iterable[RailLike] = (),
    experience: LessonBook | None = None,
    approve: bool = False,
) -> RunResult:
    """Run one demo task in a fresh simulated world, with ``fault`` armed on its devices.

    Args:
        fault: What goes wrong (a :class:`Fault` or its name).
        seed: Where the cubes start (and where a knock throws them); the same seed gives the
            same ledger apart from times, the task id and the hashes that depend on them.
        store: Where the ledger is kept; in memory by default.
        clock: The engine's clock, for tests.
        rails: Observers of the loop.
        experience: Lessons to plan with, and to record the task in (see ``pev.run``).
        approve: Each revision that moves the arm waits for a person's approval
            (``pev approve TASK`` from another terminal, docs/control.md).

    Raises:
        ValueError: An unknown fault name or a negative seed.
    """
    fault = Fault(fault)
    with World(seed=seed) as world:
        arm = SimArm(world)
        camera = Camera(world)
        inject(fault, world=world, arm=arm, camera=camera, seed=seed)
        return await run(
            {"goal": GOAL, "seed": seed},
            planner=SymbolicPlanner(world.sensor),
            tools=sim_tools(world, arm),
            verifier=PerceptionVerifier(camera),
            observer=SceneObserver(world, camera),
            contract=CONTRACT,
            policy=replace(POLICY, approval=Approval.ACTIONS) if approve else POLICY,
            store=store,
            clock=clock,
            rails=rails,
            experience=experience,
        )


def path_taken(state: TaskState) -> FaultPath:
    """The path an ended demo task took, to compare with :data:`~pev.sim.FAULT_PATHS`.

    Raises:
        ValueError: The task has not ended.
    """
    if state.finished is None:
        raise ValueError(f"task {state.task_id} has not ended (phase {state.phase})")
    recovery = Recovery.NONE
    for dispatched in state.decisions:
        match dispatched.decision:
            case LocalReplan():
                recovery = Recovery.LOCAL_REPLAN
            case GlobalReplan():
                recovery = Recovery.GLOBAL_REPLAN
            case Finish(status=TaskStatus.PARTIAL):
                recovery = Recovery.ACCEPT_PARTIAL
            case Finish():
                continue
        break
    return FaultPath(
        cause=state.diagnoses[-1].diagnosis.cause if state.diagnoses else None,
        recovery=recovery,
        status=state.finished.status,
        reason=state.finished.reason,
    )
