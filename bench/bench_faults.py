"""Fault suite: pev's recovery mode against three baselines, on generated tasks with faults.

Run with `make bench` (or `python bench/bench_faults.py [--write docs/benchmarks.md]`).

Tasks. 210 software tasks over the two examples (`examples/weather`: three cities;
`examples/claims`: claim CLM-1042, and CLM-2001 whose peril the policy does not cover, so its
goal is unreachable), seven fault kinds each, six tasks per (input, fault) pair, plus 6 simulator
tasks (`pev.sim`'s demo, one per demo fault; see below). Every task runs on 4 seeds under each
of the four strategies; a seed places the fault (which tool crashes, which misspelling, ...). The
examples' tools, contract and verifier are reused as they are, loaded by path; faults are
injected by wrapping them:

* `none`: nothing goes wrong;
* `tool_crash`: one tool of the plan (the seed picks it) raises on every call: the tool is broken;
* `timeout_unknown`: the action tool (`publish`, `issue_payment`) takes effect, then hangs past
  its 0.05 s timeout on its first call: its outcome is unknown to the caller;
* `verifier_raises`: the verifier raises on every call;
* `malformed_verdict`: the verifier returns `{"status": "success"}`, a dict without criteria;
* `wrong_step`: the planner's first plan calls a decoy tool (`forecast_today`,
  `estimate_payout`) in place of the right one; its later plans are right;
* `wrong_arg`: the planner's first plan passes a wrong value (a misspelt city to `publish`;
  `full=True` to `compute_payout`, the claims example's lure); its later plans are right.

Ground truth comes from a small world each run writes into: the bulletins published and the
payments issued. The weather goal holds when the last bulletin published is the right one; the
claims goal when exactly one payment of what the policy allows was issued. The *honest* status of
a run is success iff its goal holds, the verifier is one that can establish it (not
`verifier_raises` or `malformed_verdict`), and no action's outcome was left unknown. A run is
truthful when it reports success iff its honest status is success; a false success is a run
that reports success when its honest status is not.

Strategies, each with at most 3 rounds of execute + verify:

* `pev`: `pev.run` in recovery mode, `RecoveryPolicy(max_replans=2)`; the action tools carry a
  `reconcile` that looks up what a call did by the idempotency key pev handed it (what a payment
  or publishing API with idempotency keys offers), which pev asks about a call whose outcome is
  unknown; the baselines call the functions directly and have no records to reconcile;
* `blind retry`: a hand-written loop runs the plan's tools in order, then the verifier; any
  exception, failed node or failed verdict retries the whole plan, with `tenacity`
  (`stop_after_attempt(3)`); the plan is asked for once;
* `replan`: the same loop, but any failure asks the planner for a new plan, telling it the error
  (the plan-and-execute pattern), up to 3 plans;
* `no recovery`: the loop once.

Simulator tasks. `pev.sim`'s demo (a Panda arm puts three cubes in a tray, in headless pybullet)
with each of its faults: `none`; `dead-joint` (a tool_crash: the shoulder seizes before the
second pick); `timeout` (a timeout_unknown: the arm controller does not answer within its step
budget as it sets off with the red cube, and the `place` comes back as a `DeviceFailure` whose
outcome is unknown: the arm's own timeout, counted in simulation steps); `camera` (a
verifier_raises: the camera crashes, so perception raises); `slip` and `knock` (the wrong_step
kind: a cube falls on the way, or all three are thrown out of the tray, and the plan has to
change). Each run builds the demo's components the way `pev.sim.run_demo` does, in a fresh world,
with the same fault injected on the same seed (a seed places the cubes and where a knock throws
them): `SymbolicPlanner`, `sim_tools`, `SceneObserver` and `PerceptionVerifier`, counting tool
and planner calls. pev runs them through `pev.run` as `run_demo` does (its contract and its
policy: `max_replans=2`, one node at a time); the baselines through the same loops as the
software tasks, which run the nodes in dependency order and capture the observer's evidence
before and after each round, as the engine does, for the verifier. Ground truth comes from the
physics world: the goal holds iff pybullet puts every cube in the tray once the world has come to
rest; the honest status is then as above (the `camera` fault's verifier cannot establish it).

The helper modules: `_fault_world` (the tasks, what a run acts on, the baseline loops),
`_fault_sim` (the simulator tasks) and `_fault_report` (the report).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pev
from _fault_report import TARGETS, report
from _fault_sim import SIM_RUNNERS, build_sim
from _fault_world import (
    BASELINES,
    FAULTS,
    ROUNDS,
    SEEDS,
    STRATEGIES,
    Outcome,
    Outcomes,
    Setup,
    Task,
    World,
    sim_tasks,
    tasks,
)
from _report import write_section
from pev.engine import PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.model import DeviceFailure, ExecutionRecord, NodeResult, Success, TaskId

# What the script offers its tests (tests/test_bench.py), some of it from the helper modules.
__all__ = [
    "FAULTS",
    "STRATEGIES",
    "TARGETS",
    "Outcome",
    "Task",
    "main",
    "report",
    "run_sim",
    "run_software",
    "sim_tasks",
]

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 0.05
HANG_S = 0.5


def _load(name: str) -> ModuleType:
    path = ROOT / "examples" / name / "agent.py"
    spec = importlib.util.spec_from_file_location(f"bench_example_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WEATHER = _load("weather")
CLAIMS = _load("claims")


# --------------------------------------------------------------------------------------------
# The faulty components that write into the world one run writes into


def _wrap(tool: pev.engine.Tool, world: World, *, crash: bool, hang: bool) -> pev.engine.Tool:
    """The tool again, counting calls, recording actions' effects, with its fault armed.

    An action records what each call did under the idempotency key pev hands it (the baselines
    call the function directly and have none), and its ``reconcile`` looks that up: pev asks it
    about a call whose outcome is unknown, and an answer makes the outcome known.
    """
    original = tool.fn
    action = tool.effect is pev.Effect.ACTION

    @functools.wraps(original)
    async def call(**kwargs: Any) -> Any:
        key = world.called(tool, kwargs)
        try:
            idempotency_key: str | None = pev.engine.current_node_context().idempotency_key
        except LookupError:
            idempotency_key = None
        if action and idempotency_key is not None:
            world.by_key[idempotency_key] = (key, None)
        if crash:
            if action:
                world.left_unknown(key)
            raise RuntimeError(f"{tool.name}: device error")
        value = original(**kwargs)
        if action:
            world.effects.append(value)
            if idempotency_key is not None:
                world.by_key[idempotency_key] = (key, Success(value))
        if hang and tool.name not in world.hung:
            world.hung.add(tool.name)
            world.left_unknown(key)
            await asyncio.sleep(HANG_S)
        world.unresolved.discard(key)
        return value

    def reconcile(record: ExecutionRecord) -> NodeResult | None:
        found = world.by_key.get(record.idempotency_key)
        if found is None:
            return None  # pev never called it with this key: nothing to look up
        key, result = found
        world.unresolved.discard(key)  # the outcome is known now
        if result is None:
            return DeviceFailure(record.node_id, f"{tool.name}: no effect recorded for this call")
        return result

    return pev.tool(
        call,
        name=tool.name,
        effect=tool.effect.value,
        timeout_s=TIMEOUT_S,
        description=tool.description,
        reconcile=reconcile if action else None,
    )


@pev.tool(effect="query")
def forecast_today(lat: float, lon: float) -> dict[str, Any]:
    """Today's weather at a point (a decoy: the report needs tomorrow's)."""
    tomorrow = WEATHER._TOMORROW[(round(lat, 2), round(lon, 2))]
    return {"lat": lat, "lon": lon, "tomorrow": {**tomorrow, "high_c": tomorrow["high_c"] + 4.0}}


@pev.tool(effect="query")
def estimate_payout(claimed_amount: float) -> dict[str, Any]:
    """A quick estimate of a payout (a decoy: it ignores the policy)."""
    return {"amount": round(claimed_amount, 2), "basis": "quick estimate"}


def _weather_plan(city: str, *, step: str = "", arg: str = "") -> pev.Plan:
    plan = WEATHER.planner(_request(city))
    nodes = list(plan.nodes)
    if step:
        nodes[1] = pev.PlanNode(
            "forecast",
            "fetch the forecast",
            tool="forecast_today",
            args=dict(nodes[1].args),
            after=("place",),
            effect=pev.Effect.QUERY,
        )
    if arg:
        report = nodes[2]
        nodes[2] = pev.PlanNode(
            report.id,
            report.description,
            tool=report.tool,
            args={**report.args, "city": arg},
            after=report.after,
        )
    return pev.Plan(plan.goal, tuple(nodes))


def _claims_plan(claim_id: str, *, step: str = "", arg: str = "") -> pev.Plan:
    plan = CLAIMS._settlement(claim_id, full=bool(arg), why=arg or "follow the policy's terms")
    if not step:
        return plan
    nodes = list(plan.nodes)
    nodes[2] = pev.PlanNode(
        "payout",
        "estimate the payout",
        tool="estimate_payout",
        args={"claimed_amount": {"$ref": "claim.claimed_amount"}},
        after=("claim", "policy"),
        effect=pev.Effect.QUERY,
    )
    return pev.Plan(plan.goal, tuple(nodes))


def _request(value: str) -> PlanRequest:
    return PlanRequest(
        kind=RevisionKind.INITIAL,
        attempt=1,
        task_id=TaskId("plan"),
        input={"city": value},
        contract=WEATHER.CONTRACT,
    )


def build(task: Task, seed: int) -> Setup:
    where = f"{task.domain}/{task.input}/{task.fault}/{task.index}/{seed}"
    rng = random.Random(where)  # noqa: S311 - it places faults; it guards no secret
    world = World()
    agent = WEATHER if task.domain == "weather" else CLAIMS
    if task.domain == "weather":
        base = [agent.geocode, agent.forecast, agent.publish, forecast_today]
        plan_tools = ["geocode", "forecast", "publish"]
        place = agent._PLACES[task.input.lower()]
        expected = agent.publish.fn(place["city"], agent._TOMORROW[(place["lat"], place["lon"])])

        def goal_holds(world: World) -> bool:
            return bool(world.effects) and world.effects[-1] == expected

        def plan_for(attempt: int) -> pev.Plan:
            if attempt == 1 and task.fault == "wrong_step":
                return _weather_plan(task.input, step="decoy")
            if attempt == 1 and task.fault == "wrong_arg":
                wrong = rng.choice([task.input.upper(), task.input.lower(), task.input[:-1]])
                return _weather_plan(task.input, arg=wrong)
            return _weather_plan(task.input)

        key = "city"
    else:
        base = [
            agent.fetch_claim,
            agent.fetch_policy,
            agent.compute_payout,
            agent.check_coverage,
            agent.issue_payment,
            estimate_payout,
        ]
        plan_tools = [t.name for t in base[:5]]
        claim = agent._CLAIMS[task.input]
        policy = agent._POLICIES[claim["policy_id"]]
        covered = claim["peril"] in policy["perils"]
        allowed = agent._allowed(claim, policy)

        def goal_holds(world: World) -> bool:
            amounts = [effect["amount"] for effect in world.effects]
            return covered and len(amounts) == 1 and abs(amounts[0] - allowed) < 0.005

        def plan_for(attempt: int) -> pev.Plan:
            if attempt == 1 and task.fault == "wrong_step":
                return _claims_plan(task.input, step="decoy")
            if attempt == 1 and task.fault == "wrong_arg":
                return _claims_plan(task.input, arg="reimburse in full, as the claimant asked")
            return _claims_plan(task.input)

        key = "claim_id"
    crashed = rng.choice(plan_tools) if task.fault == "tool_crash" else None
    tools = [
        _wrap(
            t,
            world,
            crash=t.name == crashed,
            hang=task.fault == "timeout_unknown" and t.effect is pev.Effect.ACTION,
        )
        for t in base
    ]

    async def planner(request: PlanRequest) -> pev.Plan:
        world.planner_calls += 1
        return plan_for(world.planner_calls)

    async def verifier(request: VerifyRequest) -> Any:
        if task.fault == "verifier_raises":
            raise ConnectionError("the verification service is down")
        if task.fault == "malformed_verdict":
            return {"status": "success"}
        return agent.verifier(request)

    return Setup(
        world=world,
        tools=tools,
        planner=planner,
        verifier=verifier,
        contract=agent.CONTRACT,
        input={key: task.input},
        goal_holds=goal_holds,
        trusted_verifier=task.fault not in {"verifier_raises", "malformed_verdict"},
    )


# --------------------------------------------------------------------------------------------
# The strategies


async def run_pev(setup: Setup) -> bool:
    result = await pev.run(
        setup.input,
        planner=setup.planner,
        tools=setup.tools,
        verifier=setup.verifier,
        contract=setup.contract,
        policy=pev.RecoveryPolicy(max_replans=ROUNDS - 1),
        store=pev.MemoryStore(),
    )
    return result.ok


RUNNERS = {"pev": run_pev, **BASELINES}


# --------------------------------------------------------------------------------------------
# The suite


def _judge(task: Task, seed: int, strategy: str, setup: Setup, reported: bool) -> Outcome:
    world = setup.world
    goal = setup.goal_holds(world)
    honest = goal and setup.trusted_verifier and not world.unresolved
    return Outcome(
        task,
        seed,
        strategy,
        reported,
        honest,
        goal,
        world.tool_calls,
        world.repeated_unknown,
        world.planner_calls,
    )


async def run_software(task: Task, seed: int, strategy: str) -> Outcome:
    setup = build(task, seed)
    return _judge(task, seed, strategy, setup, await RUNNERS[strategy](setup))


async def run_sim(task: Task, seed: int, strategy: str) -> Outcome:
    with build_sim(task, seed) as setup:
        reported = await SIM_RUNNERS[strategy](setup)
        outcome = _judge(task, seed, strategy, setup, reported)  # while the world is open
    return replace(outcome, documented_path=setup.documented_path)


async def suite(with_sim: bool) -> tuple[Outcomes, Outcomes, float, float]:
    """Every task on every seed under every strategy: software and simulator runs, timings."""
    started = time.perf_counter()
    outcomes: Outcomes = {s: [] for s in STRATEGIES}
    for task in tasks():
        for seed in SEEDS:
            for strategy in STRATEGIES:
                outcomes[strategy].append(await run_software(task, seed, strategy))
    sim_started = time.perf_counter()
    sim: Outcomes = {s: [] for s in STRATEGIES}
    if with_sim:
        for task in sim_tasks():
            for seed in SEEDS:
                for strategy in STRATEGIES:
                    sim[strategy].append(await run_sim(task, seed, strategy))
    ended = time.perf_counter()
    return outcomes, sim, ended - started, ended - sim_started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the figures into this markdown file")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator tasks")
    args = parser.parse_args(argv)
    outcomes, sim, elapsed, sim_elapsed = asyncio.run(suite(not args.no_sim))
    body = report(outcomes, sim, elapsed, sim_elapsed)
    print(body)
    if args.write:
        write_section(args.write, "faults", body, heading="## Fault suite: recovery under faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
