"""Fault suite: pev's recovery mode against three baselines, on generated tasks with faults.

Run with `make bench` (or `python bench/bench_faults.py [--quick] [--no-sim] [--write
docs/benchmarks.md]`; `--quick` runs a few tasks of each kind, to check that the bench works).

Three kinds of task, each run on 4 seeds under each of the four strategies; a seed places the
fault (which tool crashes, which misspelling, which action hangs, where the kill falls, ...).

Software tasks. 210 tasks over the two examples (`examples/weather`: three cities;
`examples/claims`: claim CLM-1042, and CLM-2001 whose peril the policy does not cover, so its
goal is unreachable), seven fault kinds each, six tasks per (input, fault) pair. The examples'
tools, contract and verifier are reused as they are, loaded by path; faults are injected by
wrapping them:

* `none`: nothing goes wrong;
* `tool_crash`: one tool of the plan (the seed picks it) raises on every call: the tool is broken;
* `timeout_unknown`: the action tool (`publish`, `issue_payment`) takes effect, then hangs past
  its 0.25 s timeout on its first call: its outcome is unknown to the caller (the other tools'
  timeout is 1 s, `_fault_tools`);
* `verifier_raises`: the verifier raises on every call;
* `malformed_verdict`: the verifier returns `{"status": "success"}`, a dict without criteria;
* `wrong_step`: the planner's first plan calls a decoy tool (`forecast_today`,
  `estimate_payout`) in place of the right one; its later plans are right;
* `wrong_arg`: the planner's first plan passes a wrong value (a misspelt city to `publish`;
  `full=True` to `compute_payout`, the claims example's lure); its later plans are right.

Ground truth comes from a small world each run writes into: the bulletins published and the
payments issued. The weather goal holds when the last bulletin published is the right one; the
claims goal when exactly one payment of what the policy allows was issued.

Effect tasks (`_fault_effects`). 32 multi-step tasks with several downstream actions, in four
domains (travel, messaging, trading, files), on the failures that once made pev send an action
twice, leave a wrong one in the world, or give up on a query: an action that times out after
taking effect and that `reconcile` settles as done; a local replan that redoes a blamed query
and the actions downstream of it; an action sent with a wrong argument, which takes effect and
must be undone (compensated); the driving process killed during a query (pev resumes from its
SQLite ledger; a baseline starts again from the top); a 64-bit integer from a tool; a global
replan after a verdict that blames no node; and no fault. Ground truth is the services'
append-only logs: the goal holds when the undoable effects standing are exactly the right
plan's and its messages were delivered.

The *honest* status of a run is success iff its goal holds, the verifier is one that can
establish it (not `verifier_raises` or `malformed_verdict`), and no action's outcome was left
unknown. A false success is a run that reports success when its honest status is not. A
*duplicate effect* is a call an action's service received after the same intended call (same
tool and args; a task that means to send a call twice intends two) had already taken effect,
counted from the services' own logs, never from pev's ledger (`duplicate_effects`).

Strategies, each with at most 3 rounds of execute + verify:

* `pev`: `pev.run` in recovery mode, `RecoveryPolicy(max_replans=2)`; the action tools carry a
  `reconcile` that looks up what a call did by the idempotency key pev handed it (what a payment
  or booking API with idempotency keys offers), and, where pev takes it, a `compensate` that
  undoes one effect; the baselines call the functions directly and have neither;
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
The arm keeps no log of intended moves (a move made again after a cube fell is meant), so the
simulator counts no duplicate effects.

The helper modules: `_fault_world` (the tasks, what a run acts on, the baseline loops),
`_fault_tools` (tools acting on a run's world), `_fault_effects` (the effect tasks),
`_fault_sim` (the simulator tasks) and `_fault_report` (the report).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pev
from _fault_baselines import BASELINES
from _fault_effects import build_effects
from _fault_report import TARGETS, Suite, report
from _fault_sim import SIM_RUNNERS, build_sim
from _fault_tools import Arms, Service, world_tool
from _fault_world import (
    EFFECT_FAULTS,
    FAULTS,
    ROUNDS,
    SEEDS,
    STRATEGIES,
    Outcome,
    Sent,
    Setup,
    Task,
    World,
    duplicate_effects,
    effect_tasks,
    sim_tasks,
    tasks,
)
from _report import bench_parser, parse_bench_args, write_section
from pev.engine import PlanRequest, VerifyRequest
from pev.ledger import RevisionKind, utc_now
from pev.model import TaskId

# What the script offers its tests (tests/test_bench.py), some of it from the helper modules.
__all__ = [
    "EFFECT_FAULTS",
    "FAULTS",
    "RUNNERS",
    "SEEDS",
    "STRATEGIES",
    "TARGETS",
    "Outcome",
    "Sent",
    "Suite",
    "Task",
    "build_effects",
    "duplicate_effects",
    "effect_tasks",
    "judge",
    "main",
    "report",
    "run_effects",
    "run_sim",
    "run_software",
    "sim_tasks",
]

ROOT = Path(__file__).resolve().parents[1]


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
# The example tasks' components, faults armed, writing into the world one run writes into


def _wrap(tool: pev.engine.Tool, world: World, *, crash: bool, hang: bool) -> pev.engine.Tool:
    """An example's tool acting on the run's world (`_fault_tools.world_tool`), fault armed."""
    service = Service(tool.fn, effect=tool.effect.value)
    arms = Arms(crash=crash, hang=hang)
    return world_tool(tool.name, service, world, arms, description=tool.description)


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

POLICY = pev.RecoveryPolicy(max_replans=ROUNDS - 1)
KILLED_TASK = "killed-task"
# The resuming process's clock runs this far ahead, as when an operator resumes a minute after
# the kill: past the dead driver's lease (30 s) and every tool's deadline.
LATER = timedelta(seconds=60)


async def run_pev(setup: Setup) -> bool:
    if setup.crash is not None:
        with tempfile.TemporaryDirectory(prefix="pev-bench-") as folder:
            return await _killed_and_resumed(setup, Path(folder))
    result = await pev.run(
        setup.input,
        planner=setup.planner,
        tools=setup.tools,
        verifier=setup.verifier,
        contract=setup.contract,
        policy=POLICY,
        store=pev.MemoryStore(),
    )
    return result.ok


def _later() -> datetime:
    return utc_now() + LATER


async def _killed_and_resumed(setup: Setup, folder: Path) -> bool:
    """`pev.run` on a SQLite ledger whose process is killed during a query, then `pev.resume`.

    The kill is played in this process: at its moment the ledger file is copied (what a killed
    process leaves on disk) and the drive is abandoned, its later writes going to the old file;
    the next process resumes the task from the copy, a minute later.
    """
    assert setup.crash is not None
    live, left = folder / "ledger.db", folder / "left.db"
    died = asyncio.Event()

    def on_death() -> None:
        with (
            contextlib.closing(sqlite3.connect(live)) as source,
            contextlib.closing(sqlite3.connect(left)) as copy,
        ):
            source.backup(copy)
        died.set()

    setup.crash.on_death = on_death
    parts: dict[str, Any] = {
        "planner": setup.planner,
        "tools": setup.tools,
        "verifier": setup.verifier,
    }
    store = pev.SQLiteStore(live)
    try:
        run = pev.run(
            setup.input,
            **parts,
            contract=setup.contract,
            policy=POLICY,
            store=store,
            task_id=KILLED_TASK,
        )
        ended = await _until_killed(run, died)
    finally:
        await store.close()
    if ended is not None:  # the kill never came: the run ended first
        return ended.ok
    resumed = pev.SQLiteStore(left)
    try:
        result = await pev.resume(KILLED_TASK, store=resumed, **parts, clock=_later)
    finally:
        await resumed.close()
    return result.ok


async def _until_killed(
    run: Coroutine[Any, Any, pev.RunResult], died: asyncio.Event
) -> pev.RunResult | None:
    """The run's result, or None once its process is killed (the drive is then abandoned)."""
    drive = asyncio.create_task(run)
    death = asyncio.create_task(died.wait())
    await asyncio.wait({drive, death}, return_when=asyncio.FIRST_COMPLETED)
    death.cancel()
    if not died.is_set():
        return drive.result()
    drive.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await drive
    return None


RUNNERS = {"pev": run_pev, **BASELINES}


# --------------------------------------------------------------------------------------------
# The suite


def judge(task: Task, seed: int, strategy: str, setup: Setup, reported: bool) -> Outcome:
    world = setup.world
    goal = setup.goal_holds(world)
    honest = goal and setup.trusted_verifier and not world.unresolved
    duplicates = duplicate_effects(world.logs, setup.intended) if setup.logged else None
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
        duplicate_effects=duplicates,
    )


async def run_software(task: Task, seed: int, strategy: str) -> Outcome:
    setup = build(task, seed)
    return judge(task, seed, strategy, setup, await RUNNERS[strategy](setup))


async def run_effects(task: Task, seed: int, strategy: str) -> Outcome:
    setup = build_effects(task, seed)
    return judge(task, seed, strategy, setup, await RUNNERS[strategy](setup))


async def run_sim(task: Task, seed: int, strategy: str) -> Outcome:
    with build_sim(task, seed) as setup:
        reported = await SIM_RUNNERS[strategy](setup)
        outcome = judge(task, seed, strategy, setup, reported)  # while the world is open
    return replace(outcome, documented_path=setup.documented_path)


@dataclass
class _Clock:
    started: float = field(default_factory=time.perf_counter)

    def lap(self) -> float:
        now = time.perf_counter()
        lap, self.started = now - self.started, now
        return lap


async def suite(*, quick: bool, with_sim: bool) -> Suite:
    """Every task on every seed under every strategy: software, effect and simulator runs."""
    runs = Suite(quick=quick)
    clock = _Clock()
    for task in tasks(quick=quick):
        for seed in SEEDS:
            for strategy in STRATEGIES:
                runs.software[strategy].append(await run_software(task, seed, strategy))
    runs.seconds["software"] = clock.lap()
    for task in effect_tasks(quick=quick):
        for seed in SEEDS:
            for strategy in STRATEGIES:
                runs.effects[strategy].append(await run_effects(task, seed, strategy))
    runs.seconds["effects"] = clock.lap()
    if with_sim:
        for task in sim_tasks():
            for seed in SEEDS:
                for strategy in STRATEGIES:
                    runs.sim[strategy].append(await run_sim(task, seed, strategy))
        runs.seconds["simulator"] = clock.lap()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator tasks")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless pev, on every run, reported no false success, sent no duplicate "
        "effect and repeated no unknown action (what `make soak` checks)",
    )
    args = parse_bench_args(parser, argv)
    runs = asyncio.run(suite(quick=args.quick, with_sim=not (args.no_sim or args.quick)))
    body = report(runs)
    print(body)
    if args.write:
        write_section(args.write, "faults", body, heading="## Fault suite: recovery under faults")
    if args.check:
        broken = safety_problems(runs)
        for problem in broken:
            print(f"bench_faults: {problem}", file=sys.stderr)
        return 1 if broken else 0
    return 0


def safety_problems(runs: Suite) -> list[str]:
    """What pev got wrong that it must never: false successes, duplicates, unknowns re-sent."""
    problems = []
    for kind, outcomes in (
        ("software", runs.software),
        ("effect", runs.effects),
        ("simulator", runs.sim),
    ):
        for outcome in outcomes.get("pev", []):
            task = outcome.task
            what = f"pev, {kind} task {task.domain}/{task.input}/{task.fault}, seed {outcome.seed}"
            if outcome.reported and not outcome.honest:
                problems.append(f"{what}: a false success")
            if outcome.duplicate_effects:
                problems.append(f"{what}: {outcome.duplicate_effects} duplicate effects")
            if outcome.repeated_unknown:
                problems.append(f"{what}: {outcome.repeated_unknown} unknown actions re-sent")
    return problems


if __name__ == "__main__":
    sys.exit(main())
