"""Plan the weather and claims examples with a real model: ``python examples/llm_smoke/run.py``.

Needs an OpenAI-compatible endpoint in ``PEV_LLM_BASE_URL`` and ``PEV_LLM_MODEL`` (``make
llm-smoke`` serves SmolLM2-135M-Instruct with llama-cpp-python and sets them). The planner is an
``LLMPlanner`` over ``OpenAIChat.from_env()``; the verifiers are the examples' own code, so a task
succeeds only when the work was really done, however the model judges.

Prints each task's outcome and each planner call as the ledger recorded it. A small model plans
badly; that is reported, not judged. The exit code is 0 when what must hold, holds: every reply
was parsed or cleanly rejected, every answered call's usage is in the ledger, no task outran its
time bound, and no task ended in a false success.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pev
from pev.ledger import Ledger, PlanRejected, RevisionStarted
from pev.llm import LLMPlanner, OpenAIChat
from pev.policy import RecoveryPolicy

EXAMPLES = Path(__file__).resolve().parents[1]
TASK_TIMEOUT_S = 600.0
INSTRUCTIONS = {
    "weather": (
        "Geocode the city, fetch tomorrow's forecast at its latitude and longitude, then publish "
        "the bulletin for the city with the forecast's tomorrow."
    ),
    "claims": (
        "You settle insurance claims. Fetch the claim and its policy first, compute the payout "
        "from the policy's terms, check the coverage before any money moves, and pay only the "
        "approved amount."
    ),
}


def load(name: str) -> ModuleType:
    """examples/<name>/agent.py, imported by path under a name of its own."""
    module_name = f"pev_example_{name}_agent"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / name / "agent.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no examples/{name}/agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


weather = load("weather")
claims = load("claims")


def outputs_of(result: pev.RunResult) -> list[Mapping[str, Any]]:
    """The task's node outputs that are JSON objects."""
    return [value for value in result.outputs.values() if isinstance(value, Mapping)]


def weather_done(city: str) -> Callable[[pev.RunResult], bool]:
    """The truth for a weather task: a bulletin naming the city with its real high."""
    place = weather._PLACES[city.lower()]
    high = round(weather._TOMORROW[(place["lat"], place["lon"])]["high_c"])

    def done(result: pev.RunResult) -> bool:
        return any(
            place["city"] in str(out.get("text")) and f"high {high} °C" in str(out.get("text"))
            for out in outputs_of(result)
        )

    return done


def claim_paid(result: pev.RunResult) -> bool:
    """The truth for CLM-1042: exactly one payment, of 4000.00 (4800 less 500, capped)."""
    payments = [out for out in outputs_of(result) if "payment_id" in out]
    return len(payments) == 1 and payments[0]["amount"] == 4000.0


@dataclass(frozen=True, slots=True)
class Task:
    """One task of the smoke run and how to tell it was really done."""

    example: str
    input: dict[str, str]
    done: Callable[[pev.RunResult], bool]

    @property
    def label(self) -> str:
        """The example and its input, for the report."""
        return f"{self.example} {next(iter(self.input.values()))}"


TASKS = (
    Task("weather", {"city": "Lisbon"}, weather_done("Lisbon")),
    Task("weather", {"city": "Oslo"}, weather_done("Oslo")),
    Task("claims", {"claim_id": "CLM-1042"}, claim_paid),
)


@dataclass
class Outcome:
    """What one task did, and what went wrong with what must hold."""

    task: Task
    result: pev.RunResult
    seconds: float
    calls: list[str] = field(default_factory=list)
    parsed: int = 0
    rejected: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    broken: list[str] = field(default_factory=list)


async def run_task(chat: OpenAIChat, task: Task) -> Outcome:
    """Run one task with the LLM planner and the example's own verifier; read its ledger."""
    example = weather if task.example == "weather" else claims
    tools = (
        [example.geocode, example.forecast, example.publish]
        if task.example == "weather"
        else [
            example.fetch_claim,
            example.fetch_policy,
            example.compute_payout,
            example.check_coverage,
            example.issue_payment,
        ]
    )
    store = pev.MemoryStore()
    started = time.monotonic()
    result = await pev.run(
        task.input,
        planner=LLMPlanner(chat, instructions=INSTRUCTIONS[task.example]),
        tools=tools,
        verifier=example.verifier,
        contract=example.CONTRACT,
        policy=RecoveryPolicy(max_replans=2, task_timeout_s=TASK_TIMEOUT_S),
        store=store,
    )
    outcome = Outcome(task, result, time.monotonic() - started)
    for entry in await Ledger(store).entries(result.task_id):
        event = entry.event
        if isinstance(event, RevisionStarted):
            outcome.parsed += 1
            steps = ", ".join(f"{node.id}={node.tool}" for node in event.plan.nodes)
            note(outcome, event.usage, f"plan of {len(event.plan.nodes)} nodes: {steps}")
        elif isinstance(event, PlanRejected):
            outcome.rejected += 1
            problem = " ".join(" | ".join(event.problems).split())
            note(outcome, event.usage, f"rejected: {problem[:220]}")
    if result.ok and not task.done(result):
        outcome.broken.append("a false success: the task says succeeded, the work is not done")
    if str(result.reason) == "planner_unavailable":
        outcome.broken.append(f"the model could not be reached: {result.detail}")
    if outcome.seconds > TASK_TIMEOUT_S + 60:
        outcome.broken.append(f"ran {outcome.seconds:.0f} s, past its bound")
    return outcome


def note(outcome: Outcome, usage: Any, what: str) -> None:
    """One planner call; an answered call without usage breaks what must hold."""
    answered = "the planner raised LLMError" not in what
    if usage is not None:
        outcome.tokens_in += usage.input_tokens
        outcome.tokens_out += usage.output_tokens
        tokens = f"{usage.input_tokens}+{usage.output_tokens} tokens"
    else:
        tokens = "no usage"
        if answered:
            outcome.broken.append(f"call {len(outcome.calls) + 1}: the model's usage is missing")
    outcome.calls.append(f"{tokens}: {what}")


async def main() -> int:
    """Run every task against the configured endpoint, print what happened, return the code."""
    logging.basicConfig(format="  log: %(message)s", level=logging.ERROR)  # no tracebacks
    logging.getLogger("pev.llm.openai").setLevel(logging.INFO)
    outcomes = []
    async with OpenAIChat.from_env() as chat:
        print(
            f"endpoint {chat.base_url}, model {chat.model!r}, max_tokens={chat.max_tokens}, "
            f"call_timeout_s={chat.call_timeout_s:g}"
        )
        for task in TASKS:
            outcome = await run_task(chat, task)
            outcomes.append(outcome)
            result = outcome.result
            print(
                f"{task.label}: {result.status}/{result.reason} in {outcome.seconds:.1f} s; "
                f"{len(outcome.calls)} planner calls ({outcome.parsed} plans accepted, "
                f"{outcome.rejected} rejected); tokens {outcome.tokens_in} in, "
                f"{outcome.tokens_out} out"
            )
            for number, call in enumerate(outcome.calls, start=1):
                print(f"  call {number}: {call}")
            for problem in outcome.broken:
                print(f"  BROKEN: {problem}")
        print(f"structured output: {chat.active_structured_output}")
    broken = sum(len(outcome.broken) for outcome in outcomes)
    succeeded = sum(outcome.result.ok for outcome in outcomes)
    calls = sum(len(outcome.calls) for outcome in outcomes)
    print(
        f"smoke: {len(outcomes)} tasks, {succeeded} succeeded, {calls} planner calls, "
        f"{sum(o.parsed for o in outcomes)} plans accepted, "
        f"{sum(o.rejected for o in outcomes)} rejected; "
        f"{'every invariant held' if not broken else f'{broken} broken invariants'}"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
