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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import tenacity

import pev
from _report import machine_line, met, write_section
from pev.engine import ObserveContext, PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.model import (
    DeviceFailure,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerifierFailure,
    canonical_json,
)

if TYPE_CHECKING:
    from pev.sim import World as PhysicsWorld

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2, 3)
TASKS_PER_PAIR = 6
ROUNDS = 3  # execute + verify rounds for every strategy (pev: max_replans=2)
TIMEOUT_S = 0.05
HANG_S = 0.5
FAULTS = (
    "none",
    "tool_crash",
    "timeout_unknown",
    "verifier_raises",
    "malformed_verdict",
    "wrong_step",
    "wrong_arg",
)
STRATEGIES = ("pev", "blind retry", "replan", "no recovery")
# The simulator's demo faults, by the kind of fault above they stand for.
SIM_FAULTS = {
    "none": "none",
    "dead-joint": "tool_crash",
    "timeout": "timeout_unknown",
    "camera": "verifier_raises",
    "slip": "wrong_step",
    "knock": "wrong_step",
}


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
# The world one run writes into, and the faulty components that write into it


@dataclass
class World:
    """What one run did: its side effects, tool calls and planner calls."""

    effects: list[Any] = field(default_factory=list)
    tool_calls: int = 0
    planner_calls: int = 0
    repeated_unknown: int = 0
    ever_unknown: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)
    hung: set[str] = field(default_factory=set)
    # What each pev call of an action did, by the idempotency key pev handed it: the lookup a
    # payment or publishing API with idempotency keys offers, which the tools' reconcile uses.
    by_key: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def called(self, tool: pev.engine.Tool[..., Any], kwargs: Mapping[str, Any]) -> str:
        """Count a call, and an action sent again after its outcome was unknown; the call's key."""
        self.tool_calls += 1
        key = f"{tool.name}:{canonical_json(dict(kwargs))}"
        if tool.effect is pev.Effect.ACTION and key in self.ever_unknown:
            self.repeated_unknown += 1
        return key

    def left_unknown(self, key: str) -> None:
        """The action call of `key` ended without its caller knowing what it did."""
        self.ever_unknown.add(key)
        self.unresolved.add(key)


@dataclass(frozen=True)
class Task:
    domain: str  # weather | claims | sim
    input: str
    fault: str
    index: int


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


@dataclass
class Setup:
    """One run's components, faults armed, and how to judge its world afterwards."""

    world: World
    tools: list[pev.engine.Tool]
    planner: Callable[[PlanRequest], Any]
    verifier: Callable[[VerifyRequest], Any]
    contract: pev.VerificationContract
    input: dict[str, Any]
    goal_holds: Callable[[World], bool]
    trusted_verifier: bool
    # The simulator's runs capture evidence before and after each round, as the engine does.
    observer: Any = None
    evidence: list[Evidence] = field(default_factory=list)


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


class RoundFailedError(Exception):
    """One pass of a baseline loop did not end in a passing verdict."""


def _resolve(value: Any, outputs: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping) and set(value) == {"$ref"}:
        node, *path = str(value["$ref"]).split(".")
        found = outputs[node]
        for part in path:
            found = found[part]
        return found
    if isinstance(value, Mapping):
        return {k: _resolve(v, outputs) for k, v in value.items()}
    return value


def _in_order(plan: pev.Plan) -> list[pev.PlanNode]:
    """The plan's nodes in dependency order, in the plan's own order among those ready."""
    done: set[str] = set()
    pending = list(plan.nodes)
    ordered: list[pev.PlanNode] = []
    while pending:
        node = next((n for n in pending if set(n.after) <= done), None)
        if node is None:
            raise ValueError(f"the plan's dependencies form a cycle: {[n.id for n in pending]}")
        pending.remove(node)
        done.add(node.id)
        ordered.append(node)
    return ordered


async def _observe(
    setup: Setup, phase: EvidencePhase, plan: pev.Plan, attempt: int, results: Mapping[str, Any]
) -> None:
    """Capture evidence as the engine does, before a round and after it (if the run observes)."""
    if setup.observer is None:
        return
    context = ObserveContext(
        task_id=TaskId("baseline"), revision=attempt, plan=plan, results=dict(results)
    )
    now = datetime.now(UTC)
    for item in await setup.observer.observe(phase, context):
        setup.evidence.append(
            Evidence(
                id=EvidenceId(f"{attempt}-{phase}-{len(setup.evidence) + 1}"),
                phase=phase,
                kind=item.kind,
                source=item.source,
                captured_at=now,
                revision=attempt,
                payload=item.payload,
                artifact=item.artifact,
                media_type=item.media_type,
            )
        )


async def one_pass(setup: Setup, plan: pev.Plan, attempt: int) -> None:
    """Run the plan's tools in order, then the verifier; `RoundFailedError` unless it passes.

    The order is the plan's dependency order; a run with an observer captures evidence before
    and after the tools, as the engine does, and hands it to the verifier.
    """
    tools = {t.name: t for t in setup.tools}
    outputs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    records: list[ExecutionRecord] = []
    now = datetime.now(UTC)
    await _observe(setup, EvidencePhase.BEFORE, plan, attempt, results)
    for node in _in_order(plan):
        tool = tools[str(node.tool)]
        args = _resolve(dict(node.args), outputs)
        try:
            value = await asyncio.wait_for(tool.fn(**args), tool.timeout_s)
        except TimeoutError as exc:
            raise RoundFailedError(f"{node.id}: timed out") from exc
        except Exception as exc:
            raise RoundFailedError(f"{node.id}: {exc}") from exc
        # The simulator's tools return their failures: a controller that does not answer within
        # its step budget is a DeviceFailure whose outcome is unknown (the arm's own timeout).
        if isinstance(value, DeviceFailure):
            raise RoundFailedError(f"{node.id}: {value.error}")
        if isinstance(value, VerifierFailure):
            raise RoundFailedError(f"{node.id}: {value.reason}")
        if isinstance(value, Success):
            value = value.value
        outputs[node.id] = value
        results[node.id] = Success(value)
        records.append(
            ExecutionRecord(
                id=RecordId(f"{attempt}-{node.id}"),
                task_id=TaskId("baseline"),
                revision=attempt,
                node_id=node.id,
                tool=tool.name,
                args_digest="",
                effect=tool.effect,
                idempotency_key=f"{attempt}-{node.id}",
                status=RecordStatus.SUCCEEDED,
                created_at=now,
                updated_at=now,
            )
        )
    await _observe(setup, EvidencePhase.AFTER, plan, attempt, results)
    request = VerifyRequest(
        task_id=TaskId("baseline"),
        input=setup.input,
        contract=setup.contract,
        plan=plan,
        revision=attempt,
        results=results,
        records=tuple(records),
        evidence=tuple(setup.evidence),
    )
    try:
        verdict = await setup.verifier(request)
    except Exception as exc:
        raise RoundFailedError(f"verifier: {exc}") from exc
    status = verdict.get("status") if isinstance(verdict, dict) else str(verdict.status)
    if status != "success":
        raise RoundFailedError(getattr(verdict, "feedback", "") or f"verdict: {status}")


def _initial(setup: Setup) -> PlanRequest:
    return PlanRequest(
        kind=RevisionKind.INITIAL,
        attempt=1,
        task_id=TaskId("baseline"),
        input=setup.input,
        contract=setup.contract,
    )


async def run_blind_retry(setup: Setup) -> bool:
    plan = await setup.planner(_initial(setup))
    attempts = iter(range(1, ROUNDS + 1))
    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(ROUNDS),
        retry=tenacity.retry_if_exception_type(RoundFailedError),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                await one_pass(setup, plan, next(attempts))
    except RoundFailedError:
        return False
    return True


async def run_replan(setup: Setup) -> bool:
    request = _initial(setup)
    for attempt in range(1, ROUNDS + 1):
        plan = await setup.planner(request)
        try:
            await one_pass(setup, plan, attempt)
        except RoundFailedError as exc:
            request = PlanRequest(
                kind=RevisionKind.GLOBAL,
                attempt=attempt + 1,
                task_id=TaskId("baseline"),
                input=setup.input,
                contract=setup.contract,
                previous_plan=plan,
                feedback=str(exc),
            )
        else:
            return True
    return False


async def run_no_recovery(setup: Setup) -> bool:
    try:
        await one_pass(setup, await setup.planner(_initial(setup)), 1)
    except RoundFailedError:
        return False
    return True


RUNNERS = {
    "pev": run_pev,
    "blind retry": run_blind_retry,
    "replan": run_replan,
    "no recovery": run_no_recovery,
}


# --------------------------------------------------------------------------------------------
# The simulator tasks: `run_demo`'s components, driven by every strategy


@dataclass
class SimSetup(Setup):
    """A simulator run's components; pev's run also notes whether it took its fault's path."""

    demo_fault: str = "none"
    documented_path: bool | None = None


def _count_sim(tool: pev.engine.Tool[..., Any], world: World) -> pev.engine.Tool[..., Any]:
    """A simulator tool again, counting calls and the actions whose outcome was left unknown.

    The arm measures a hang in simulation steps and returns it as a `DeviceFailure` whose
    outcome is unknown; a later call of the same action with the same args that succeeds
    settles it (as `_wrap` does for the software tools).
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


SIM_RUNNERS = {**RUNNERS, "pev": run_pev_sim}


# --------------------------------------------------------------------------------------------
# The suite


@dataclass(frozen=True)
class Outcome:
    task: Task
    seed: int
    strategy: str
    reported: bool
    honest: bool
    goal: bool
    tool_calls: int
    repeated_unknown: int
    planner_calls: int
    documented_path: bool | None = None  # pev's simulator runs: took its fault's documented path


def tasks() -> list[Task]:
    inputs = [("weather", city) for city in ("Lisbon", "Oslo", "Nairobi")]
    inputs += [("claims", claim) for claim in ("CLM-1042", "CLM-2001")]
    return [
        Task(domain, value, fault, index)
        for domain, value in inputs
        for fault in FAULTS
        for index in range(TASKS_PER_PAIR)
    ]


def sim_tasks() -> list[Task]:
    return [Task("sim", fault, kind, 0) for fault, kind in SIM_FAULTS.items()]


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


def summarize(outcomes: list[Outcome]) -> dict[str, float]:
    runs = len(outcomes)
    by_task: dict[Task, list[Outcome]] = {}
    for outcome in outcomes:
        by_task.setdefault(outcome.task, []).append(outcome)
    return {
        "runs": runs,
        "truthful": sum(o.reported == o.honest for o in outcomes) / runs,
        "false": sum(o.reported and not o.honest for o in outcomes),
        "world_wrong": sum(o.reported and not o.goal for o in outcomes),
        "success": sum(o.reported and o.honest for o in outcomes) / runs,
        "tool_calls": sum(o.tool_calls for o in outcomes),
        "repeated": sum(o.repeated_unknown for o in outcomes),
        "planner_calls": sum(o.planner_calls for o in outcomes),
        "pass_k": statistics.fmean(
            all(o.reported and o.honest for o in group) for group in by_task.values()
        ),
    }


Outcomes = dict[str, list[Outcome]]  # strategy -> its runs


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


def _strategy_table(stats: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = [
        (
            "| strategy | truthful status | false successes | successes with the world goal unmet "
            "| goal success | pass^4 | tool calls | repeated unknown actions | planner calls |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for strategy, s in stats.items():
        lines.append(
            f"| {strategy} | {s['truthful']:.1%} | {s['false']:.0f} | {s['world_wrong']:.0f} "
            f"| {s['success']:.1%} | {s['pass_k']:.1%} | {s['tool_calls']:.0f} "
            f"| {s['repeated']:.0f} | {s['planner_calls']:.0f} |"
        )
    return lines


def _by_fault(
    outcomes: Outcomes, faults: Iterable[str], key: Callable[[Task], str]
) -> dict[str, dict[str, list[Outcome]]]:
    """Fault -> strategy -> its runs on the tasks with that fault."""
    return {
        fault: {s: [o for o in outcomes[s] if key(o.task) == fault] for s in STRATEGIES}
        for fault in faults
    }


def _fault_table(
    groups: Mapping[str, Mapping[str, list[Outcome]]], label: Callable[[str], str]
) -> list[str]:
    lines = ["| fault | " + " | ".join(STRATEGIES) + " |", "|---|" + "---|" * len(STRATEGIES)]
    for fault, runs in groups.items():
        cells = []
        for strategy in STRATEGIES:
            group = runs[strategy]
            ok = sum(o.reported and o.honest for o in group) / len(group)
            false = sum(o.reported and not o.honest for o in group)
            cells.append(f"{ok:.0%}" + (f" ({false} false)" if false else ""))
        lines.append(f"| {label(fault)} | " + " | ".join(cells) + " |")
    return lines


def _behind(groups: Mapping[str, Mapping[str, list[Outcome]]]) -> dict[str, str]:
    """The faults on which a baseline reaches the goal more often than pev, with the rates."""
    behind = {}
    for fault, runs in groups.items():
        rate = {s: statistics.fmean(o.reported and o.honest for o in runs[s]) for s in STRATEGIES}
        leader = max(STRATEGIES[1:], key=rate.__getitem__)
        if rate[leader] > rate["pev"]:
            behind[fault] = f"`{fault}` ({leader} {rate[leader]:.0%}, pev {rate['pev']:.0%})"
    return behind


def _targets(stats: Mapping[str, Mapping[str, float]]) -> list[tuple[bool, str]]:
    """pev's targets on one table, in `TARGETS`' order: met?, and the figures behind it."""
    best = max(stats[s]["success"] for s in STRATEGIES if s != "pev")
    p, blind = stats["pev"], stats["blind retry"]
    saving = 1 - p["tool_calls"] / blind["tool_calls"]
    return [
        (p["false"] == 0, f"{p['false']:.0f}"),
        (p["repeated"] == 0, f"{p['repeated']:.0f}"),
        (p["success"] >= best, f"pev {p['success']:.1%}, best baseline {best:.1%}"),
        (saving >= 0.40, f"{saving:.0%} fewer"),
    ]


TARGETS = (
    "zero false successes",
    "zero repeated unknown actions",
    "goal success ≥ best baseline",
    "≥ 40% fewer tool calls than blind retry",
)


# Why pev trails a baseline on a demo fault, and why a baseline reports failure with the goal
# met: what the simulator runs show, for the report's prose.
_SIM_TRAILS = {
    "timeout": (
        "On `timeout` the baselines re-send the `place` whose outcome was unknown (their "
        "repeated unknown actions above): the hung controller never moved, so the red cube hangs "
        "in the gripper where it was lifted; the next round's `pick` opens the hand first (the "
        "cube falls, and the pick finds nothing where `observe` saw it), the round after grasps "
        "it from the table and re-sends the `place`, which this time puts it in the tray. pev "
        "never re-sends an action whose outcome is unknown and accepts the run as partial, as "
        "SPEC §10 and `FAULT_PATHS` have it: a hung controller is a device failure, which "
        "re-planning cannot fix (even a `reconcile` that found the cube still in the gripper "
        "would settle the move as not done: a device failure all the same). The baselines' "
        "re-send happens to be harmless here because the stalled arm never moved; on a real arm "
        "a hang does not prove that motion stopped."
    ),
}
_SIM_MISSED = {
    ("blind retry", "slip"): (
        "On `slip` blind retry runs its one plan again whole: it picks the red cube up where it "
        "fell and puts it in the tray, then goes to pick the green cube out of the tray, and the "
        "arm does not reach its target within its step budget; the round fails with every cube "
        "in the tray, and so does the next."
    ),
}


def report(outcomes: Outcomes, sim: Outcomes, elapsed: float, sim_elapsed: float) -> str:
    stats = {s: summarize(o) for s, o in outcomes.items()}
    with_sim = any(sim.values())
    n_sim = len(sim_tasks()) if with_sim else 0
    lines = [
        (
            f"{machine_line()}; {len(tasks()) + n_sim} tasks ({len(tasks())} software, "
            f"{n_sim} simulator) x {len(SEEDS)} seeds under each of the {len(STRATEGIES)} "
            f"strategies, {elapsed:.0f} s in all"
            + (f" ({sim_elapsed:.0f} s of it the simulator's)" if with_sim else "")
            + ". Command: `make bench` (`python bench/bench_faults.py --write docs/benchmarks.md`)."
        ),
        "",
        (
            f"Software tasks ({len(tasks())} x {len(SEEDS)} seeds = "
            f"{stats['pev']['runs']:.0f} runs per strategy):"
        ),
        "",
        *_strategy_table(stats),
        "",
        "Goal success by fault kind (software tasks):",
        "",
    ]
    software_groups = _by_fault(outcomes, FAULTS, lambda task: task.fault)
    lines += _fault_table(software_groups, str)
    sim_stats: dict[str, dict[str, float]] = {}
    sim_groups: dict[str, dict[str, list[Outcome]]] = {}
    if with_sim:
        sim_stats = {s: summarize(o) for s, o in sim.items()}
        sim_groups = _by_fault(sim, SIM_FAULTS, lambda task: task.input)
        documented = [o.documented_path for o in sim["pev"]]
        lines += [
            "",
            (
                f"Simulator tasks ({n_sim} x {len(SEEDS)} seeds = "
                f"{sim_stats['pev']['runs']:.0f} runs per strategy; `pev.sim`'s demo faults, "
                "each standing for a fault kind above). Every strategy drives the demo's own "
                "components, built as `run_demo` builds them in a fresh pybullet world with the "
                "same fault injected on the same seed: pev through `pev.run` as `run_demo` runs "
                "it, the baselines through the loops above, which capture the scene observer's "
                "evidence before and after each round for the perception verifier. Ground truth "
                "is the physics engine's: a run's goal holds iff, once the world is at rest, "
                "pybullet puts all three cubes in the tray. Its honest status is success iff the "
                "goal holds, the verifier could establish it (not on `camera`, whose verifier "
                "raises) and no move was left with its outcome unknown (an arm controller that "
                "did not answer within its step budget, its move never settled by a later call "
                "with the same args that succeeded). pev took its fault's documented path "
                f"(`FAULT_PATHS`) in {sum(d is True for d in documented)} of {len(documented)} "
                "runs."
            ),
            "",
            *_strategy_table(sim_stats),
            "",
            "Goal success by demo fault (simulator tasks):",
            "",
            *_fault_table(sim_groups, lambda fault: f"`{fault}` (as {SIM_FAULTS[fault]})"),
        ]
    tables = [("software", stats)]
    if with_sim:
        every = {s: summarize(outcomes[s] + sim[s]) for s in STRATEGIES}
        tables = [("all tasks", every), *tables, ("simulator", sim_stats)]
        lines += [
            "",
            (
                f"All {len(tasks()) + n_sim} tasks together ({every['pev']['runs']:.0f} runs per "
                "strategy):"
            ),
            "",
            *_strategy_table(every),
        ]
    checked = [(name, _targets(s)) for name, s in tables]
    lines += [
        "",
        (
            "Targets for pev, on all the tasks together (the suite), and on the software and "
            "the simulator tasks each on their own:"
            if with_sim
            else "Targets for pev (software tasks):"
        ),
        "",
    ]
    for index, target in enumerate(TARGETS):
        verdicts = [
            f"{name} {met(ok)} ({figures})"
            for name, results in checked
            for ok, figures in [results[index]]
        ]
        lines.append(f"* {target}: " + "; ".join(verdicts))
    behind = _behind(software_groups)
    if behind:
        lines += [
            "",
            "Where pev's goal success trails a baseline on the software tasks: "
            + ", ".join(behind.values())
            + ".",
        ]
    lines += [
        "",
        (
            "On `timeout_unknown` the blind retry and replan loops re-send the action whose "
            "outcome was unknown: publishing a bulletin again is harmless, so those weather runs "
            "end with the goal met, while paying a claim again pays it twice (their false "
            "successes). pev never re-sends it: it asks the tool's `reconcile`, which finds the "
            "call's effect by its idempotency key, settles the record (`record_reconciled`) and "
            "goes on from what is known."
        ),
    ]
    sim_behind = _behind(sim_groups)
    if sim_behind:
        lines += [
            "",
            "Where pev's goal success trails a baseline on the simulator tasks: "
            + ", ".join(sim_behind.values())
            + ". "
            + " ".join(_SIM_TRAILS[f] for f in sim_behind if f in _SIM_TRAILS),
        ]
    missed = Counter(
        (o.strategy, o.task.input)
        for s in STRATEGIES
        for o in sim[s]
        if o.honest and not o.reported
    )
    if missed:
        lines += [
            "",
            "Simulator runs that report failure although the goal holds and the verifier could "
            "establish it (untruthful, but not false successes): "
            + ", ".join(f"{strategy} on `{fault}` ({n})" for (strategy, fault), n in missed.items())
            + ". "
            + " ".join(_SIM_MISSED[pair] for pair in missed if pair in _SIM_MISSED),
        ]
    return "\n".join(lines)


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
