"""The fault suite's simulator tasks: `pev.sim.run_demo`'s components, driven by every strategy."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pev
from _fault_baselines import BASELINES
from _fault_world import Setup, Task, World
from pev.engine import PlanRequest
from pev.model import DeviceFailure, VerifierFailure

if TYPE_CHECKING:
    from pev.sim import World as PhysicsWorld


@dataclass
class SimSetup(Setup):
    """A simulator run's components; pev's run also notes whether it took its fault's path."""

    demo_fault: str = "none"
    documented_path: bool | None = None


def _count_sim(tool: pev.engine.Tool[..., Any], world: World) -> pev.engine.Tool[..., Any]:
    """A simulator tool again, counting calls and the actions whose outcome was left unknown.

    The arm measures a hang in simulation steps and returns it as a `DeviceFailure` whose
    outcome is unknown; a later call of the same action with the same args that succeeds
    settles it (as `_fault_tools.world_tool` does for the software tools).
    """
    original = tool.fn
    action = tool.effect is pev.Effect.ACTION

    @functools.wraps(original)
    async def call(**kwargs: Any) -> Any:
        key = world.called(tool, kwargs)
        value = await original(**kwargs)
        if isinstance(value, DeviceFailure) and value.outcome_unknown and action:
            world.left_unknown(key)
        elif not isinstance(value, DeviceFailure | VerifierFailure):
            world.unresolved.discard(key)
        return value

    return pev.tool(
        call,
        name=tool.name,
        effect=tool.effect.value,
        resource=tool.resource,
        timeout_s=tool.timeout_s,
        description=tool.description,
    )


@contextlib.contextmanager
def build_sim(task: Task, seed: int) -> Iterator[SimSetup]:
    """One simulator run, wired as `pev.sim.run_demo` wires it, with its demo fault armed.

    Its goal is judged from the physics engine's own poses while the world is still open.
    """
    from pev import sim

    with sim.World(seed=seed) as physics:
        arm = sim.SimArm(physics)
        camera = sim.Camera(physics)
        sim.inject(sim.Fault(task.input), world=physics, arm=arm, camera=camera, seed=seed)
        world = World()
        symbolic = sim.SymbolicPlanner(physics.sensor)

        async def planner(request: PlanRequest) -> pev.Plan:
            world.planner_calls += 1
            return await symbolic.plan(request)

        yield SimSetup(
            world=world,
            tools=[_count_sim(t, world) for t in sim.sim_tools(physics, arm).values()],
            planner=planner,
            verifier=sim.PerceptionVerifier(camera).verify,
            contract=sim.CONTRACT,
            input={"goal": sim.GOAL, "seed": seed},
            goal_holds=lambda _: _cubes_in_tray(physics),
            trusted_verifier=task.input != sim.Fault.CAMERA,
            logged=False,
            observer=sim.SceneObserver(physics, camera),
            demo_fault=task.input,
        )


def _cubes_in_tray(physics: PhysicsWorld) -> bool:
    """Whether every cube lies in the tray, by the physics engine's own poses once at rest."""
    physics.settle()
    scene = physics.scene()
    return all(scene.in_tray(cube) for cube in scene.objects)


async def run_pev_sim(setup: Setup) -> bool:
    """`pev.run` as `run_demo` runs it: with the observer, and `POLICY` (one node at a time)."""
    from pev import sim

    assert isinstance(setup, SimSetup)
    store = pev.MemoryStore()
    result = await pev.run(
        setup.input,
        planner=setup.planner,
        tools=setup.tools,
        verifier=setup.verifier,
        observer=setup.observer,
        contract=setup.contract,
        policy=sim.POLICY,
        store=store,
    )
    state = await pev.Ledger(store).state(result.task_id)
    setup.documented_path = sim.path_taken(state) == sim.FAULT_PATHS[sim.Fault(setup.demo_fault)]
    return result.ok


SIM_RUNNERS = {"pev": run_pev_sim, **BASELINES}
