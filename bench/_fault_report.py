"""The fault suite's report: its tables by strategy and by fault, and pev's targets."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from _fault_world import (
    EFFECT_FAULTS,
    FAULTS,
    SEEDS,
    SIM_FAULTS,
    STRATEGIES,
    Outcome,
    Outcomes,
    Task,
)
from _report import machine_line, met


def _by_strategy() -> Outcomes:
    return {strategy: [] for strategy in STRATEGIES}


@dataclass
class Suite:
    """One run of the suite: the outcomes of each kind of task by strategy, and their seconds."""

    quick: bool = False
    command: str = "`make bench` (`python bench/bench_faults.py --write docs/benchmarks.md`)"
    software: Outcomes = field(default_factory=_by_strategy)
    effects: Outcomes = field(default_factory=_by_strategy)
    sim: Outcomes = field(default_factory=_by_strategy)
    seconds: dict[str, float] = field(default_factory=dict)


def _passed(outcome: Outcome) -> bool:
    return outcome.reported and outcome.honest


def summarize(outcomes: list[Outcome]) -> dict[str, float]:
    """A strategy's figures over some runs; duplicate effects are NaN where none were counted."""
    runs = len(outcomes)
    by_task: dict[Task, list[Outcome]] = {}
    for outcome in outcomes:
        by_task.setdefault(outcome.task, []).append(outcome)
    counted = [o.duplicate_effects for o in outcomes if o.duplicate_effects is not None]
    return {
        "runs": runs,
        "truthful": sum(o.reported == o.honest for o in outcomes) / runs,
        "false": sum(o.reported and not o.honest for o in outcomes),
        "world_wrong": sum(o.reported and not o.goal for o in outcomes),
        "goal": sum(o.goal for o in outcomes) / runs,
        "success": sum(map(_passed, outcomes)) / runs,
        "tool_calls": sum(o.tool_calls for o in outcomes),
        "repeated": sum(o.repeated_unknown for o in outcomes),
        "duplicates": sum(counted) if counted else math.nan,
        "planner_calls": sum(o.planner_calls for o in outcomes),
        "pass_k": statistics.fmean(all(map(_passed, group)) for group in by_task.values()),
    }


def _count(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _strategy_table(stats: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = [
        (
            "| strategy | runs | truthful status | goal holds | goal success (pass^1) | pass^4 "
            "| false successes | successes with the world goal unmet | duplicate effects "
            "| repeated unknown actions | tool calls | planner calls |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for strategy, s in stats.items():
        lines.append(
            f"| {strategy} | {s['runs']:.0f} | {s['truthful']:.1%} | {s['goal']:.1%} "
            f"| {s['success']:.1%} | {s['pass_k']:.1%} | {s['false']:.0f} "
            f"| {s['world_wrong']:.0f} | {_count(s['duplicates'])} | {s['repeated']:.0f} "
            f"| {s['tool_calls']:.0f} | {s['planner_calls']:.0f} |"
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
            ok = sum(map(_passed, group)) / len(group)
            false = sum(o.reported and not o.honest for o in group)
            cells.append(f"{ok:.0%}" + (f" ({false} false)" if false else ""))
        lines.append(f"| {label(fault)} | " + " | ".join(cells) + " |")
    return lines


def _fault_strategy_table(groups: Mapping[str, Mapping[str, list[Outcome]]]) -> list[str]:
    """Every figure per fault and strategy: one row for each pair."""
    lines = [
        (
            "| fault | strategy | runs | goal holds | goal success (pass^1) | pass^4 "
            "| false successes | duplicate effects | repeated unknown actions | tool calls |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fault, runs in groups.items():
        for strategy in STRATEGIES:
            s = summarize(runs[strategy])
            lines.append(
                f"| `{fault}` | {strategy} | {s['runs']:.0f} | {s['goal']:.0%} "
                f"| {s['success']:.0%} | {s['pass_k']:.0%} | {s['false']:.0f} "
                f"| {_count(s['duplicates'])} | {s['repeated']:.0f} | {s['tool_calls']:.0f} |"
            )
    return lines


def _behind(groups: Mapping[str, Mapping[str, list[Outcome]]]) -> dict[str, str]:
    """The faults on which a baseline reaches the goal more often than pev, with the rates."""
    behind = {}
    for fault, runs in groups.items():
        rate = {s: statistics.fmean(map(_passed, runs[s])) for s in STRATEGIES}
        leader = max(STRATEGIES[1:], key=rate.__getitem__)
        if rate[leader] > rate["pev"]:
            behind[fault] = f"`{fault}` ({leader} {rate[leader]:.0%}, pev {rate['pev']:.0%})"
    return behind


def _trailing(behind: Mapping[str, str], kind: str, *why: str) -> list[str]:
    """The paragraph naming where pev's goal success trails a baseline, if it does anywhere."""
    if not behind:
        return []
    where = f"Where pev's goal success trails a baseline on the {kind} tasks: "
    return ["", " ".join([where + ", ".join(behind.values()) + ".", *why])]


def _targets(stats: Mapping[str, Mapping[str, float]]) -> list[tuple[bool | None, str]]:
    """pev's targets on one table, in `TARGETS`' order: met? (None: not counted), and figures."""
    best = max(stats[s]["success"] for s in STRATEGIES if s != "pev")
    p, blind = stats["pev"], stats["blind retry"]
    saving = 1 - p["tool_calls"] / blind["tool_calls"]
    gap = p["success"] - p["pass_k"]
    duplicates = None if math.isnan(p["duplicates"]) else p["duplicates"] == 0
    return [
        (p["false"] == 0, f"{p['false']:.0f}"),
        (duplicates, _count(p["duplicates"])),
        (p["repeated"] == 0, f"{p['repeated']:.0f}"),
        (p["success"] >= best, f"pev {p['success']:.1%}, best baseline {best:.1%}"),
        (saving > 0, f"{p['tool_calls']:.0f} against {blind['tool_calls']:.0f}"),
        (saving >= 0.40, f"{saving:.0%} fewer"),
        (gap <= 0.03, f"pass^1 {p['success']:.1%}, pass^4 {p['pass_k']:.1%}"),
    ]


TARGETS = (
    "zero false successes",
    "zero duplicate effects",
    "zero repeated unknown actions",
    "goal success (pass^1) ≥ every baseline's",
    "fewer tool calls than blind retry",
    "≥ 40% fewer tool calls than blind retry",
    "pass^4 within 3 points of pass^1",
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
        "docs/design.md §10 and `FAULT_PATHS` have it: a hung controller is a device failure, "
        "which re-planning cannot fix (even a `reconcile` that found the cube still in the gripper "
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


def _tasks(outcomes: Outcomes) -> int:
    return len({o.task for o in outcomes["pev"]})


def _verdict(ok: bool | None) -> str:
    return "not counted" if ok is None else met(ok)


def _effects_part(runs: Suite) -> list[str]:
    stats = {s: summarize(o) for s, o in runs.effects.items()}
    groups = _by_fault(runs.effects, EFFECT_FAULTS, lambda task: task.fault)
    lines = [
        (
            f"Effect tasks ({_tasks(runs.effects)} x {len(SEEDS)} seeds = "
            f"{stats['pev']['runs']:.0f} runs per strategy): multi-step tasks with several "
            "downstream actions (travel, messaging, trading, files), judged from the services' "
            "own append-only logs. The undoable actions' `compensate` is given to pev."
        ),
        "",
        *_strategy_table(stats),
        "",
        "By fault and strategy (effect tasks):",
        "",
        *_fault_strategy_table(groups),
    ]
    return lines + _trailing(_behind(groups), "effect")


def _sim_part(runs: Suite) -> tuple[list[str], dict[str, dict[str, list[Outcome]]]]:
    sim_stats = {s: summarize(o) for s, o in runs.sim.items()}
    sim_groups = _by_fault(runs.sim, SIM_FAULTS, lambda task: task.input)
    documented = [o.documented_path for o in runs.sim["pev"]]
    n_sim = _tasks(runs.sim)
    lines = [
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
            "with the same args that succeeded). The arm keeps no log of intended moves (a "
            "move made again after a cube fell is meant), so no duplicate effects are counted "
            "here. pev took its fault's documented path "
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
    return lines, sim_groups


def report(runs: Suite) -> str:
    stats = {s: summarize(o) for s, o in runs.software.items()}
    with_sim = any(runs.sim.values())
    n_software, n_effects = _tasks(runs.software), _tasks(runs.effects)
    n_sim = _tasks(runs.sim) if with_sim else 0
    seconds = ", ".join(f"{kind} {s:.0f} s" for kind, s in runs.seconds.items())
    lines = [
        (
            f"{machine_line()}; {n_software + n_effects + n_sim} tasks ({n_software} software, "
            f"{n_effects} effect, {n_sim} simulator) x {len(SEEDS)} seeds under each of the "
            f"{len(STRATEGIES)} strategies, {sum(runs.seconds.values()):.0f} s in all "
            f"({seconds}). Command: {runs.command}."
        ),
        "",
        (
            f"Software tasks ({n_software} x {len(SEEDS)} seeds = "
            f"{stats['pev']['runs']:.0f} runs per strategy):"
        ),
        "",
        *_strategy_table(stats),
        "",
        "Goal success (pass^1) by fault kind (software tasks):",
        "",
    ]
    software_groups = _by_fault(runs.software, FAULTS, lambda task: task.fault)
    lines += _fault_table(software_groups, str)
    lines += ["", *_effects_part(runs)]
    parts = {"software": runs.software, "effects": runs.effects}
    sim_groups: dict[str, dict[str, list[Outcome]]] = {}
    if with_sim:
        sim_lines, sim_groups = _sim_part(runs)
        lines += sim_lines
        parts["simulator"] = runs.sim
    every = {s: summarize([o for part in parts.values() for o in part[s]]) for s in STRATEGIES}
    lines += [
        "",
        (
            f"All {n_software + n_effects + n_sim} tasks together ({every['pev']['runs']:.0f} "
            "runs per strategy):"
        ),
        "",
        *_strategy_table(every),
    ]
    tables = {"all tasks": every} | {
        name: {s: summarize(o) for s, o in part.items()} for name, part in parts.items()
    }
    checked = [(name, _targets(s)) for name, s in tables.items()]
    lines += [
        "",
        (
            "Targets for pev, on all the tasks together (the suite), and on each kind of task "
            "on its own:"
        ),
        "",
    ]
    for index, target in enumerate(TARGETS):
        verdicts = [
            f"{name} {_verdict(ok)} ({figures})"
            for name, results in checked
            for ok, figures in [results[index]]
        ]
        lines.append(f"* {target}: " + "; ".join(verdicts))
    lines += _trailing(_behind(software_groups), "software")
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
    why = [_SIM_TRAILS[fault] for fault in sim_behind if fault in _SIM_TRAILS]
    lines += _trailing(sim_behind, "simulator", *why)
    missed = Counter(
        (o.strategy, o.task.input)
        for s in STRATEGIES
        for o in runs.sim[s]
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
