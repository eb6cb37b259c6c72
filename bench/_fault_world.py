"""The fault suite's vocabulary and its baseline loops.

What a run acts on (its `World`, its `Task`, the `Setup` of its components), how it is judged
(`Outcome`), the tasks themselves, and the three baselines that `bench_faults` measures pev
against: blind retry, replan and no recovery, each a hand-written loop of `one_pass`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import tenacity

import pev
from pev.engine import ObserveContext, PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.model import (
    DeviceFailure,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    VerifierFailure,
    canonical_json,
)

SEEDS = (0, 1, 2, 3)
TASKS_PER_PAIR = 6
ROUNDS = 3  # execute + verify rounds for every strategy (pev: max_replans=2)
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


# --------------------------------------------------------------------------------------------
# The world one run writes into, the task it runs and the components it runs with


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


Outcomes = dict[str, list[Outcome]]  # strategy -> its runs


# --------------------------------------------------------------------------------------------
# The baselines: hand-written loops of execute + verify


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


# The baselines by name; pev's runner for software and for simulator tasks goes in front.
BASELINES = {
    "blind retry": run_blind_retry,
    "replan": run_replan,
    "no recovery": run_no_recovery,
}
