"""The fault suite's report: its tables by strategy and by fault, and pev's targets."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from _fault_world import (
    FAULTS,
    SEEDS,
    SIM_FAULTS,
    STRATEGIES,
    Outcome,
    Outcomes,
    Task,
    sim_tasks,
    tasks,
)
from _report import machine_line, met


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
