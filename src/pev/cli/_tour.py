"""`pev demo`: a tour of every path of the kernel, run by the real engine.

Each scenario is a pick-and-place task run by :func:`pev.run` over the SQLite ledger. The planner
and the verifier are scripted with :mod:`pev.testing` doubles, and the arm is a set of functions
whose faults act on the "device" only: the planner and the verifier never see the fault. A
slipped grasp is a plan error re-planned locally, a knocked-over scene needs a global replan, a
hung controller is a device failure whose outcome is unknown (accepted as partial, never
re-sent), and a crashed camera makes the verdict unreliable (partial).

The physics-simulation demo of SPEC §10 replaces this tour once the simulator lands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pev.engine import RunResult, run
from pev.kernel import TaskStatus
from pev.ledger import Store
from pev.model import (
    DeviceFailure,
    Effect,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    Verdict,
    VerificationContract,
    VerificationMode,
)
from pev.policy import RecoveryPolicy
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

__all__ = ["SCENARIOS", "Scenario", "run_scenario"]

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY,
    "put the red and blue cubes in the tray",
    ("red cube in tray", "blue cube in tray"),
)


def _plan() -> Plan:
    nodes = [PlanNode("observe", "read the object poses", tool="observe", effect=Effect.QUERY)]
    for colour in ("red", "blue"):
        nodes.append(
            PlanNode(
                f"pick_{colour}",
                f"grasp the {colour} cube",
                tool="pick",
                args={"object": f"{colour}_cube"},
                after=("observe",),
            )
        )
        nodes.append(
            PlanNode(
                f"place_{colour}",
                f"put the {colour} cube in the tray",
                tool="place",
                args={"object": f"{colour}_cube", "target": "tray"},
                after=(f"pick_{colour}",),
            )
        )
    return Plan(CONTRACT.goal, tuple(nodes))


@dataclass(frozen=True, slots=True)
class Scenario:
    """One task of the tour: its story, its scripted judge, the arm's fault, and its ending."""

    name: str
    story: str
    plans: tuple[Plan | None, ...]
    verdicts: tuple[object, ...]
    expected: TaskStatus
    hang_on: str | None = None


def _slipped(contract: VerificationContract) -> Verdict:
    return Verdict.failed(
        contract,
        failed_nodes=["pick_red"],
        unmet=["red cube in tray"],
        feedback="the red cube slipped out of the gripper; grasp it lower",
    )


def _knocked(contract: VerificationContract) -> Verdict:
    return Verdict.failed(
        contract,
        failed_nodes=["pick_red", "place_red", "pick_blue", "place_blue"],
        feedback="both cubes were knocked off the table; observe the scene again",
    )


def _red_missing(contract: VerificationContract) -> Verdict:
    return Verdict.failed(contract, failed_nodes=["place_red"], unmet=["red cube in tray"])


def _judge(verdict: Callable[[VerificationContract], Verdict]) -> Callable[[object], Verdict]:
    return lambda request: verdict(getattr(request, "contract", CONTRACT))


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "slip",
        "the gripper opens in transit: a plan error on one node, re-planned locally",
        (_plan(), None),  # the planner declines the local replan: the feedback is appended
        (_judge(_slipped), _judge(Verdict.passed)),
        TaskStatus.SUCCEEDED,
    ),
    Scenario(
        "knock",
        "the cubes are knocked over mid-run: many failed nodes, re-planned globally",
        (_plan(), _plan()),
        (_judge(_knocked), _judge(Verdict.passed)),
        TaskStatus.SUCCEEDED,
    ),
    Scenario(
        "timeout",
        "the arm controller hangs: a device failure with unknown outcome, accepted as partial",
        (_plan(),),
        (_judge(_red_missing),),
        TaskStatus.PARTIAL,
        hang_on="red_cube",
    ),
    Scenario(
        "camera",
        "the camera crashes while verifying: an unreliable verdict, accepted as partial",
        (_plan(),),
        (RuntimeError("camera driver crashed"),),
        TaskStatus.PARTIAL,
    ),
)


def _arm(scenario: Scenario) -> FunctionExecutor:
    """The scenario's devices; a hung controller is the only fault they inject."""

    def observe() -> JsonValue:
        return {"red_cube": "on the table", "blue_cube": "on the table"}

    def pick(object: str) -> JsonValue:  # noqa: A002 - the tool's parameter name
        return {"holding": object}

    def place(object: str, target: str) -> NodeResult | JsonValue:  # noqa: A002
        if object == scenario.hang_on:
            return DeviceFailure(
                "place", "the controller did not answer within 8 s", is_timeout=True,
                outcome_unknown=True,
            )  # fmt: skip
        return {"placed": object, "in": target}

    return FunctionExecutor({"observe": observe, "pick": pick, "place": place})


async def run_scenario(
    scenario: Scenario, *, store: Store, clock: Callable[[], datetime] | None = None
) -> RunResult:
    """Run one scenario through the engine, writing every step to ``store``."""
    return await run(
        {"scenario": scenario.name, "story": scenario.story},
        planner=ScriptedPlanner(*scenario.plans),
        executor=_arm(scenario),
        verifier=ScriptedVerifier(*scenario.verdicts),
        contract=CONTRACT,
        policy=RecoveryPolicy(max_replans=2),
        store=store,
        clock=clock,
    )
