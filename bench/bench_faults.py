"""Fault suite: pev's recovery mode against three baselines, on generated tasks with faults.

Run with `make bench` (or `python bench/bench_faults.py [--write docs/benchmarks.md]`).

Tasks. 210 software tasks over the two examples (`examples/weather`: three cities;
`examples/claims`: claim CLM-1042, and CLM-2001 whose peril the policy does not cover, so its
goal is unreachable), seven fault kinds each, six tasks per (input, fault) pair, plus 6 simulator
tasks (`pev.sim.run_demo`, one per demo fault). Every task runs on 4 seeds; a seed places the
fault (which tool crashes, which misspelling, ...). The examples' tools, contract and verifier
are reused as they are, loaded by path; faults are injected by wrapping them:

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

* `pev`: `pev.run` in recovery mode, `RecoveryPolicy(max_replans=2)`;
* `blind retry`: a hand-written loop runs the plan's tools in order, then the verifier; any
  exception, failed node or failed verdict retries the whole plan, with `tenacity`
  (`stop_after_attempt(3)`); the plan is asked for once;
* `replan`: the same loop, but any failure asks the planner for a new plan, telling it the error
  (the plan-and-execute pattern), up to 3 plans;
* `no recovery`: the loop once.

The simulator tasks run under `pev` only (the baselines would need their own arm driver).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import tenacity

import pev
from _report import machine_line, write_section
from pev.engine import PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.model import (
    ExecutionRecord,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerifierFailure,
    canonical_json,
)

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


@dataclass(frozen=True)
class Task:
    domain: str  # weather | claims | sim
    input: str
    fault: str
    index: int


def _key(name: str, kwargs: Mapping[str, Any]) -> str:
    return f"{name}:{canonical_json(dict(kwargs))}"


def _wrap(tool: pev.engine.Tool, world: World, *, crash: bool, hang: bool) -> pev.engine.Tool:
    """The tool again, counting calls, recording actions' effects, with its fault armed."""
    original = tool.fn
    action = tool.effect is pev.Effect.ACTION

    @functools.wraps(original)
    async def call(**kwargs: Any) -> Any:
        world.tool_calls += 1
        key = _key(tool.name, kwargs)
        if action and key in world.ever_unknown:
            world.repeated_unknown += 1
        if crash:
            if action:
                world.ever_unknown.add(key)
                world.unresolved.add(key)
            raise RuntimeError(f"{tool.name}: device error")
        value = original(**kwargs)
        if action:
            world.effects.append(value)
        if hang and tool.name not in world.hung:
            world.hung.add(tool.name)
            world.ever_unknown.add(key)
            world.unresolved.add(key)
            await asyncio.sleep(HANG_S)
        world.unresolved.discard(key)
        return value

    return pev.tool(
        call,
        name=tool.name,
        effect=tool.effect.value,
        timeout_s=TIMEOUT_S,
        description=tool.description,
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
    input: dict[str, str]
    goal_holds: Callable[[World], bool]
    trusted_verifier: bool


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


async def one_pass(setup: Setup, plan: pev.Plan, attempt: int) -> None:
    """Run the plan's tools in order, then the verifier; `RoundFailedError` unless it passes."""
    tools = {t.name: t for t in setup.tools}
    outputs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    records: list[ExecutionRecord] = []
    now = datetime.now(UTC)
    for node in plan.nodes:
        tool = tools[str(node.tool)]
        args = _resolve(dict(node.args), outputs)
        try:
            value = await asyncio.wait_for(tool.fn(**args), TIMEOUT_S)
        except TimeoutError as exc:
            raise RoundFailedError(f"{node.id}: timed out") from exc
        except Exception as exc:
            raise RoundFailedError(f"{node.id}: {exc}") from exc
        if isinstance(value, VerifierFailure):
            raise RoundFailedError(f"{node.id}: {value.reason}")
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
    request = VerifyRequest(
        task_id=TaskId("baseline"),
        input=setup.input,
        contract=setup.contract,
        plan=plan,
        revision=attempt,
        results=results,
        records=tuple(records),
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


def tasks() -> list[Task]:
    inputs = [("weather", city) for city in ("Lisbon", "Oslo", "Nairobi")]
    inputs += [("claims", claim) for claim in ("CLM-1042", "CLM-2001")]
    return [
        Task(domain, value, fault, index)
        for domain, value in inputs
        for fault in FAULTS
        for index in range(TASKS_PER_PAIR)
    ]


async def run_software(task: Task, seed: int, strategy: str) -> Outcome:
    setup = build(task, seed)
    reported = await RUNNERS[strategy](setup)
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


async def run_sim(task: Task, seed: int) -> Outcome:
    from pev.sim import FAULT_PATHS, Fault, run_demo

    store = pev.MemoryStore()
    result = await run_demo(task.input, seed=seed, store=store)
    state = await pev.Ledger(store).state(result.task_id)
    records = list(state.records.values())
    unknown = {(r.tool, r.args_digest) for r in records if r.status == "unknown"}
    actions = [(r.tool, r.args_digest) for r in records if r.effect == "action"]
    repeated = sum(actions.count(key) - 1 for key in unknown)
    honest = FAULT_PATHS[Fault(task.input)].status == "succeeded"
    return Outcome(
        task,
        seed,
        "pev",
        result.ok,
        honest,
        honest,
        len(records),
        repeated,
        len(state.revisions),
    )


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


async def suite(with_sim: bool) -> tuple[dict[str, list[Outcome]], list[Outcome], float]:
    started = time.perf_counter()
    outcomes: dict[str, list[Outcome]] = {s: [] for s in STRATEGIES}
    for task in tasks():
        for seed in SEEDS:
            for strategy in STRATEGIES:
                outcomes[strategy].append(await run_software(task, seed, strategy))
    sim: list[Outcome] = []
    if with_sim:
        for fault, kind in SIM_FAULTS.items():
            task = Task("sim", fault, kind, 0)
            sim.extend([await run_sim(task, seed) for seed in SEEDS])
    return outcomes, sim, time.perf_counter() - started


def report(outcomes: dict[str, list[Outcome]], sim: list[Outcome], elapsed: float) -> str:
    stats = {s: summarize(o) for s, o in outcomes.items()}
    n_tasks = len(tasks()) + len({o.task for o in sim})
    lines = [
        (
            f"{machine_line()}; {n_tasks} tasks ({len(tasks())} software, "
            f"{len({o.task for o in sim})} simulator) x {len(SEEDS)} seeds, "
            f"{elapsed:.0f} s in all. "
            "Command: `make bench` (`python bench/bench_faults.py --write docs/benchmarks.md`)."
        ),
        "",
        (
            f"Software tasks ({len(tasks())} x {len(SEEDS)} seeds = "
            f"{stats['pev']['runs']:.0f} runs per strategy):"
        ),
        "",
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
    lines += ["", "Goal success by fault kind (software tasks):", ""]
    lines.append("| fault | " + " | ".join(STRATEGIES) + " |")
    lines.append("|---|" + "---|" * len(STRATEGIES))
    for fault in FAULTS:
        cells = []
        for strategy in STRATEGIES:
            group = [o for o in outcomes[strategy] if o.task.fault == fault]
            ok = sum(o.reported and o.honest for o in group) / len(group)
            false = sum(o.reported and not o.honest for o in group)
            cells.append(f"{ok:.0%}" + (f" ({false} false)" if false else ""))
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    if sim:
        s = summarize(sim)
        lines += [
            "",
            f"Simulator tasks under pev ({len(sim)} runs, `run_demo` faults "
            + ", ".join(f"`{k}` as {v}" for k, v in SIM_FAULTS.items())
            + f"): truthful status {s['truthful']:.0%}, false successes {s['false']:.0f}, "
            f"goal success {s['success']:.0%}, pass^4 {s['pass_k']:.0%}, tool calls "
            f"{s['tool_calls']:.0f}, repeated unknown actions {s['repeated']:.0f}, "
            f"revisions {s['planner_calls']:.0f}. A demo run's honest status is success iff its "
            "fault's documented path (`FAULT_PATHS`) ends `succeeded`.",
        ]
    best = max(stats[s]["success"] for s in STRATEGIES if s != "pev")
    p, blind = stats["pev"], stats["blind retry"]
    saving = 1 - p["tool_calls"] / blind["tool_calls"]
    checks = [
        ("zero false successes", p["false"] == 0 and (not sim or summarize(sim)["false"] == 0)),
        ("zero repeated unknown actions", p["repeated"] == 0),
        (f"goal success ≥ best baseline ({best:.1%})", p["success"] >= best),
        (f"≥ 40% fewer tool calls than blind retry ({saving:.0%} fewer)", saving >= 0.40),
    ]
    lines += ["", "Targets for pev:", ""]
    lines += [f"* {name}: {'met' if ok else '**not met**'}" for name, ok in checks]
    behind = []
    for fault in FAULTS:
        rate = {
            strategy: statistics.fmean(
                o.reported and o.honest for o in outcomes[strategy] if o.task.fault == fault
            )
            for strategy in STRATEGIES
        }
        leader = max(STRATEGIES[1:], key=rate.__getitem__)
        if rate[leader] > rate["pev"]:
            behind.append(f"`{fault}` ({leader} {rate[leader]:.0%}, pev {rate['pev']:.0%})")
    if behind:
        lines += [
            "",
            "Where pev's goal success trails a baseline: " + ", ".join(behind) + ". On "
            "`timeout_unknown` the baselines re-send the action whose outcome was unknown: "
            "publishing a bulletin again is harmless, so those weather runs end with the goal "
            "met, while paying a claim again pays it twice (the false successes above). pev "
            "never re-sends an action whose outcome is unknown and accepts the run as partial; "
            "it would need the executor's `reconcile` (or an observation) to settle the record "
            "and finish.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the figures into this markdown file")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator tasks")
    args = parser.parse_args(argv)
    outcomes, sim, elapsed = asyncio.run(suite(not args.no_sim))
    body = report(outcomes, sim, elapsed)
    print(body)
    if args.write:
        write_section(args.write, "faults", body, heading="## Fault suite: recovery under faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
