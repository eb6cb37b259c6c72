"""The fault suite's vocabulary: what a run acts on, what it runs, and how it is judged.

What a run acts on (its `World`, with each service's append-only log of the calls it received),
its `Task`, the `Setup` of its components and the `Crash` it may suffer, how it is judged
(`Outcome`, `duplicate_effects`), and the tasks themselves. The baselines are in
`_fault_baselines`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.model import Evidence, canonical_json

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
# The effect tasks' faults (`_fault_effects`): the ways pev once sent an action twice, left a
# wrong one in the world, or gave up on a query, each on multi-step tasks with several actions.
EFFECT_FAULTS = (
    "none",
    "reconciled_timeout",
    "local_redo",
    "compensation",
    "killed_query",
    "big_int",
    "detail_replan",
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


def call_key(tool: str, args: Mapping[str, Any]) -> str:
    """One call's identity: its tool and its canonical args."""
    return f"{tool}:{canonical_json(dict(args))}"


@dataclass(frozen=True)
class Sent:
    """One entry of a service's append-only log: a call it received, or its undoing of one.

    ``key`` is the idempotency key the call carried (``None`` from a caller that has none); a
    call that failed before it changed anything did not take effect. An undo names the entry
    it undid by its index in the same log.
    """

    call: str  # call_key(tool, args)
    key: str | None
    took_effect: bool = True
    result: Any = None
    undoes: int | None = None


def duplicate_effects(
    logs: Mapping[str, Sequence[Sent]], intended: Mapping[str, int] | None = None
) -> int:
    """Sends of an action whose intended effect had already taken effect, from the logs alone.

    A call is intended ``intended[call]`` times (once unless said otherwise: a task that sends
    the same reminder twice intends two). Reading each service's log in order, a send is a
    duplicate when the effects of that same call standing before it (taken, not undone) already
    number what was intended, whether or not the duplicate itself took effect.
    """
    intended = intended or {}
    duplicates = 0
    for log in logs.values():
        standing: Counter[str] = Counter()
        for entry in log:
            if entry.undoes is not None:
                standing[log[entry.undoes].call] -= 1
                continue
            if standing[entry.call] >= intended.get(entry.call, 1):
                duplicates += 1
            if entry.took_effect:
                standing[entry.call] += 1
    return duplicates


@dataclass
class World:
    """What one run did: its side effects, tool calls and planner calls.

    Each action's service keeps an append-only log of the calls it received (`logs`, by tool),
    the ground truth for duplicate effects and for the effect tasks' goals.
    """

    effects: list[Any] = field(default_factory=list)
    logs: dict[str, list[Sent]] = field(default_factory=dict)
    tool_calls: int = 0
    planner_calls: int = 0
    repeated_unknown: int = 0
    ever_unknown: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)
    hung: set[str] = field(default_factory=set)
    calls_of: Counter[str] = field(default_factory=Counter)
    # What each pev call of an action did, by the idempotency key pev handed it: the lookup a
    # payment or publishing API with idempotency keys offers, which the tools' reconcile uses.
    by_key: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def called(self, tool: pev.engine.Tool[..., Any], kwargs: Mapping[str, Any]) -> str:
        """Count a call, and an action sent again after its outcome was unknown; the call's key."""
        self.tool_calls += 1
        self.calls_of[tool.name] += 1
        key = call_key(tool.name, kwargs)
        if tool.effect is pev.Effect.ACTION and key in self.ever_unknown:
            self.repeated_unknown += 1
        return key

    def left_unknown(self, key: str) -> None:
        """The action call of `key` ended without its caller knowing what it did."""
        self.ever_unknown.add(key)
        self.unresolved.add(key)

    def log(self, tool: str, entry: Sent) -> None:
        """Append to `tool`'s service log."""
        self.logs.setdefault(tool, []).append(entry)

    def standing(self, tool: str) -> list[tuple[int, Sent]]:
        """The calls of `tool` whose effect stands: taken and not undone, with their index."""
        log = self.logs.get(tool, [])
        undone = {entry.undoes for entry in log if entry.undoes is not None}
        return [
            (index, entry)
            for index, entry in enumerate(log)
            if entry.took_effect and entry.undoes is None and index not in undone
        ]

    def undo(self, tool: str, *, key: str | None, call: str) -> None:
        """Undo one standing effect of `tool`: the one sent with `key`, else the last of `call`.

        Raises:
            LookupError: No such effect stands (never taken, or undone already).
        """
        standing = self.standing(tool)
        found = [i for i, entry in standing if key is not None and entry.key == key]
        found = found or [i for i, entry in standing if entry.call == call]
        if not found:
            raise LookupError(f"{tool}: no standing effect to undo for {call}")
        self.log(tool, Sent(call, key, undoes=found[-1]))


@dataclass(frozen=True)
class Task:
    domain: str  # weather | claims | sim | travel | messaging | trading | files
    input: str
    fault: str
    index: int


class ProcessKilled(BaseException):
    """The process driving a run was killed (a SIGKILL, in effect) at this point."""


@dataclass
class Crash:
    """A kill of the process driving a run, during the first call of one query tool.

    By default the kill is an exception no loop catches (`ProcessKilled`): a baseline's process
    dies and the next one starts its job again from the top. pev's runner sets `on_death`
    instead, which copies the ledger as the kill leaves it; the call then never returns, and the
    runner abandons that drive and resumes the task from the copy.
    """

    tool: str
    fired: bool = False
    on_death: Callable[[], None] | None = None

    async def die(self) -> None:
        self.fired = True
        if self.on_death is None:
            raise ProcessKilled(self.tool)
        self.on_death()
        await asyncio.Event().wait()  # the process is gone: nothing after this happens


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
    # How many times the task means each call (call_key) to take effect; once if not named.
    intended: Mapping[str, int] = field(default_factory=dict)
    # Whether the services' logs tell what each action did (not so for the simulator's arm).
    logged: bool = True
    # The kill of the driving process that the run suffers, if any (`killed_query`).
    crash: Crash | None = None


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
    duplicate_effects: int | None = None  # None where the services keep no log (the simulator)


def tasks(*, quick: bool = False) -> list[Task]:
    """The software tasks over the examples; a quick run takes one per (example, fault)."""
    cities, claims = ("Lisbon", "Oslo", "Nairobi"), ("CLM-1042", "CLM-2001")
    inputs = [("weather", city) for city in cities[: 1 if quick else None]]
    inputs += [("claims", claim) for claim in claims[: 1 if quick else None]]
    return [
        Task(domain, value, fault, index)
        for domain, value in inputs
        for fault in FAULTS
        for index in range(1 if quick else TASKS_PER_PAIR)
    ]


# The effect tasks: each fault on the domains it is built on, two inputs per domain.
EFFECT_DOMAINS = {
    "none": ("travel", "messaging", "trading", "files"),
    "reconciled_timeout": ("travel", "trading"),
    "local_redo": ("messaging", "files"),
    "compensation": ("trading", "files"),
    "killed_query": ("trading", "messaging"),
    "big_int": ("travel", "trading"),
    "detail_replan": ("travel", "messaging"),
}
EFFECT_INPUTS = {
    "travel": ("rossi", "okafor"),
    "messaging": ("release", "outage"),
    "trading": ("acme", "globex"),
    "files": ("q3", "audit"),
}


def effect_tasks(*, quick: bool = False) -> list[Task]:
    """The effect tasks; a quick run takes the first input of each domain only."""
    return [
        Task(domain, value, fault, 0)
        for fault in EFFECT_FAULTS
        for domain in EFFECT_DOMAINS[fault]
        for value in EFFECT_INPUTS[domain][: 1 if quick else None]
    ]


def sim_tasks() -> list[Task]:
    return [Task("sim", fault, kind, 0) for fault, kind in SIM_FAULTS.items()]


Outcomes = dict[str, list[Outcome]]  # strategy -> its runs
