"""``pev.Agent``: one frozen, typed definition of an agent, taken by run, run_sync and resume."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

import pev
from pev.engine import Agent, PlanRequest, Resources, VerifyRequest
from pev.errors import ComponentError, ContractError
from pev.model import Plan, PlanNode, Verdict, VerificationContract, VerificationMode
from pev.rails import RailEvent
from pev.stores import MemoryStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

GOAL = "say hello"
ONE = Plan(GOAL, (PlanNode("hi", "say hello", tool="hello"),))
CONTRACT = VerificationContract("recovery", GOAL, ("said hello",))


@pev.tool(effect="query")
def hello() -> str:
    """Say hello."""
    return "hello"


def planner(request: PlanRequest) -> Plan:
    return ONE


def verifier(request: VerifyRequest) -> Verdict:
    return Verdict.judge(request.output("hi") == "hello", request.contract)


def test_an_agent_is_frozen_and_holds_its_parts() -> None:
    """Its parts are read back as given (tools as a registry) and cannot be reassigned."""
    agent = Agent(planner, tools=[hello], verifier=verifier, contract=CONTRACT)
    assert agent.planner is planner
    assert agent.verifier is verifier
    assert dict(agent.tools) == {"hello": hello}
    assert agent.executor is None
    assert agent.contract == CONTRACT
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.planner = planner  # type: ignore[misc]


def test_run_sync_takes_an_agent_and_uses_its_contract() -> None:
    """run_sync(agent=...) runs the agent with the contract it carries."""
    agent = Agent(planner, tools=[hello], verifier=verifier, contract=CONTRACT)
    result = pev.run_sync(GOAL, agent=agent)
    assert result.ok
    assert (result.reason, result.outputs["hi"]) == ("passed", "hello")


async def test_a_run_contract_and_policy_take_the_place_of_the_agents() -> None:
    """contract= and policy= given to run win over the agent's own."""
    agent = Agent(planner, tools=[hello], verifier=verifier, contract=CONTRACT)
    off = VerificationContract(VerificationMode.OFF)
    store = MemoryStore()
    result = await pev.run(
        GOAL, agent=agent, contract=off, policy=pev.RecoveryPolicy(), store=store
    )
    assert result.reason == "execution_succeeded"
    state = await pev.Ledger(store).state(result.task_id)
    assert state.contract == off


async def test_the_agents_rails_and_the_runs_rails_both_see_the_run() -> None:
    """Rails of the agent are joined by those given to run."""
    seen: dict[str, list[str]] = {"agent": [], "run": []}
    agent = Agent(planner, tools=[hello], rails=[lambda event: seen["agent"].append(event.phase)])

    def on_run(event: RailEvent) -> None:
        seen["run"].append(event.phase)

    assert (await pev.run(GOAL, agent=agent, rails=[on_run])).ok
    assert seen["agent"] == seen["run"]
    assert seen["run"][-1] == "task_finished"


@pytest.mark.parametrize(
    ("parts", "role"),
    [
        pytest.param({"planner": planner}, "planner", id="planner"),
        pytest.param({"tools": [hello]}, "tools", id="tools"),
        pytest.param({"verifier": verifier}, "verifier", id="verifier"),
    ],
)
async def test_an_agent_and_parts_of_one_are_refused(parts: dict[str, Any], role: str) -> None:
    """run(agent=..., planner=...) is a ComponentError naming the part given twice."""
    agent = Agent(planner, tools=[hello])
    with pytest.raises(ComponentError, match="not both") as raised:
        await pev.run(GOAL, agent=agent, **parts)
    assert raised.value.role == role


@pytest.mark.parametrize(
    ("kwargs", "role"),
    [
        pytest.param({}, "executor", id="neither-tools-nor-executor"),
        pytest.param(
            {"tools": [hello], "executor": FunctionExecutor()}, "tools", id="tools-and-executor"
        ),
        pytest.param({"tools": [hello], "verifier": 42}, "verifier", id="verifier-not-callable"),
        pytest.param({"tools": [hello], "observer": "eyes"}, "observer", id="observer-a-string"),
        pytest.param({"tools": [42]}, "tools", id="tool-not-callable"),
    ],
)
def test_a_malformed_agent_is_refused_when_built(kwargs: dict[str, Any], role: str) -> None:
    """Building an agent with missing, conflicting or shapeless parts is a ComponentError."""
    with pytest.raises(ComponentError) as raised:
        Agent(planner, **kwargs)
    assert raised.value.role == role


def test_an_agent_without_a_planner_is_refused() -> None:
    """Agent(None) names the planner."""
    with pytest.raises(ComponentError, match="planner"):
        Agent(None, tools=[hello])  # type: ignore[arg-type]


def test_an_agent_whose_contract_needs_a_verifier_is_refused() -> None:
    """A recovery contract without a verifier is a ContractError when the agent is built."""
    with pytest.raises(ContractError, match="verifier"):
        Agent(planner, tools=[hello], contract=CONTRACT)


async def test_the_keyword_form_still_runs() -> None:
    """run(planner=..., tools=...) is the shortcut for an agent of those parts."""
    result = await pev.run(GOAL, planner=ScriptedPlanner(ONE), tools=[hello])
    assert result.ok


def test_replace_builds_another_agent() -> None:
    """dataclasses.replace gives an agent with one part changed, checked like any other."""
    agent = Agent(planner, tools=[hello])
    judged = dataclasses.replace(agent, verifier=ScriptedVerifier.passing(), contract=CONTRACT)
    assert judged.tools == agent.tools
    assert judged.contract == CONTRACT
    with pytest.raises(ComponentError):
        dataclasses.replace(agent, executor=FunctionExecutor())


class _Peak:
    """Counts how many calls of the arm run at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    async def hold(self) -> str:
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.02)
        self.now -= 1
        return "moved"


def _arm_agent(peak: _Peak, resources: Resources | None = None) -> Agent:
    @pev.tool(resource="arm")
    async def move() -> str:
        """Move the arm."""
        return await peak.hold()

    plan = Plan("move", (PlanNode("m", "move", tool="move"),))
    return Agent(lambda request: plan, tools=[move], resources=resources)


async def test_concurrent_runs_of_one_agent_share_its_resources() -> None:
    """Two runs of one agent at once never move its arm at the same time."""
    peak = _Peak()
    agent = _arm_agent(peak)
    results = await asyncio.gather(*(pev.run("move", agent=agent) for _ in range(3)))
    assert all(result.ok for result in results)
    assert peak.peak == 1


async def test_agents_share_a_device_through_one_resources() -> None:
    """Agents given one Resources keep the device exclusive; with their own, they overlap."""
    shared, apart = _Peak(), _Peak()
    table = Resources()
    together = [_arm_agent(shared, table), _arm_agent(shared, table)]
    alone = [_arm_agent(apart), _arm_agent(apart)]
    await asyncio.gather(*(pev.run("move", agent=agent) for agent in [*together, *alone]))
    assert (shared.peak, apart.peak) == (1, 2)


AGENT = Agent(planner, tools=[hello], verifier=verifier, contract=CONTRACT)


async def test_an_agents_import_paths_are_found_once_and_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run records the agent's paths; they are looked up on its first run only (the
    module-level names of its parts), and its folders again only when sys.path changes."""
    from pev.engine import _components

    looked: list[str] = []
    part_paths, roots_off = _components._part_paths, _components._roots_off_the_path
    monkeypatch.setattr(
        _components, "_part_paths", lambda agent: looked.append("parts") or part_paths(agent)
    )
    monkeypatch.setattr(
        _components, "_roots_off_the_path", lambda paths: looked.append("roots") or roots_off(paths)
    )
    agent = dataclasses.replace(AGENT)  # a fresh agent, bound to no name: its parts' paths
    store = MemoryStore()
    for _ in range(3):
        assert (await pev.run(GOAL, agent=agent, store=store)).ok
    assert looked == ["parts", "roots"]
    monkeypatch.syspath_prepend("/no/such/folder")
    assert (await pev.run(GOAL, agent=agent, store=store)).ok
    assert looked == ["parts", "roots", "roots"]
    recorded = [
        (await pev.Ledger(store).state(row.task_id)).created.components
        for row in await store.list_tasks()
    ]
    assert all(paths == recorded[0] for paths in recorded)
    assert recorded[0]["planner"] == f"{__name__}:planner"
    assert recorded[0]["tools"] == f"{__name__}:hello"
