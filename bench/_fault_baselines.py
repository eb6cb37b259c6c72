"""The baselines the fault suite measures pev against: hand-written loops of execute + verify.

Blind retry, replan and no recovery, each a loop of `one_pass` (the plan's tools in dependency
order, then the verifier), and each started again from the top when its process is killed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import tenacity

import pev
from _fault_world import ROUNDS, ProcessKilled, Setup
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
)


class RoundFailedError(Exception):
    """One pass of a baseline loop did not end in a passing verdict."""


def resolve(value: Any, outputs: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping) and set(value) == {"$ref"}:
        node, *path = str(value["$ref"]).split(".")
        found = outputs[node]
        for part in path:
            found = found[part]
        return found
    if isinstance(value, Mapping):
        return {k: resolve(v, outputs) for k, v in value.items()}
    return value


def in_order(plan: pev.Plan) -> list[pev.PlanNode]:
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
    for node in in_order(plan):
        tool = tools[str(node.tool)]
        args = resolve(dict(node.args), outputs)
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


def restarted(loop: Callable[[Setup], Any]) -> Callable[[Setup], Any]:
    """A baseline whose process, once killed, is started again: the job runs from the top.

    A hand-written loop keeps nothing durable, so the next process knows nothing of what the
    killed one did, and does it all again.
    """

    async def run(setup: Setup) -> bool:
        while True:
            try:
                return bool(await loop(setup))
            except ProcessKilled:
                continue  # the kill fires once: the next process runs to its end

    return run


# The baselines by name; pev's runner for software and for simulator tasks goes in front.
BASELINES = {
    "blind retry": restarted(run_blind_retry),
    "replan": restarted(run_replan),
    "no recovery": restarted(run_no_recovery),
}
