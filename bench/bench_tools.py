"""Schema validation's cost per node: pydantic schemas against the JSON-type check they replaced.

Run with `make bench` (or `python bench/bench_tools.py [--write docs/benchmarks.md]`).

One booking tool, with three scalar parameters and a nested pydantic model, as typed tools are
written now. Each round times, interleaved, in the same process:

* **plan validation**: `validate_plan` of a 60-node plan against the tool's spec as pev builds it
  now (its pydantic `check`: every value validated against the schema, nested fields included),
  and against the spec as pev built it before (the same parameters, each checked only for its
  top-level JSON type);
* **the call**: the executor's path into and out of the tool (`Tool.call_with`: the resolved
  args validated and turned into typed values, the returned model turned into JSON), against the
  same function with untyped parameters, which passes its args through as before;
* **a whole run**: `pev.run` of a 50-node plan on the memory store, typed tool against untyped
  (the median of 5 runs each round).

The figures are medians over the rounds of each round's time per node, and their ratio.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any, Literal

import pydantic

import pev
from _report import bench_parser, machine_line, parse_bench_args, progress, write_section
from pev.engine import tool
from pev.model import Plan, PlanNode, ToolSpec, validate_plan
from pev.testing import ScriptedPlanner

ROUNDS = 7
NODES = 60
RUN_NODES = 50
RUNS = 5  # whole runs per round and side, of which the median counts


class Attendee(pydantic.BaseModel):
    """Who comes."""

    name: str
    email: str


class Booking(pydantic.BaseModel):
    """What is booked."""

    room: Literal["small", "large"]
    people: int = pydantic.Field(ge=1, le=50)
    attendees: list[Attendee]


@tool
def book(booking: Booking, minutes: int, title: str, remind: bool = False) -> Booking:
    """Book a room.

    Args:
        booking: The room and who comes.
        minutes: For how long.
        title: Shown on the door.
        remind: Send a reminder.
    """
    del minutes, title, remind
    return booking


def book_untyped(booking, minutes, title, remind=False):  # type: ignore[no-untyped-def]
    """The same tool written without types: its args pass through as plain JSON."""
    del minutes, title, remind
    return booking


UNTYPED = tool(book_untyped, name="book")
ARGS: dict[str, Any] = {
    "booking": {
        "room": "small",
        "people": 3,
        "attendees": [{"name": f"p{i}", "email": f"p{i}@example.org"} for i in range(3)],
    },
    "minutes": 30,
    "title": "planning",
}
# The spec as pev built it before: the parameters and their top-level JSON types, no schema.
BEFORE = ToolSpec(name="book", effect=book.spec.effect, parameters=book.spec.parameters)


def _plan(nodes: int) -> Plan:
    return Plan(
        "book rooms",
        tuple(PlanNode(f"n{i}", "book", tool="book", args=ARGS) for i in range(nodes)),
    )


def _per_node(action: Callable[[], object], nodes: int, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        action()
    return (time.perf_counter() - start) / (repeat * nodes)


async def _call_per_node(chosen: pev.Tool[..., Any], calls: int) -> float:
    async def run() -> object:
        return chosen.fn(**kwargs)

    start = time.perf_counter()
    for _ in range(calls):
        kwargs: dict[str, object] = dict(ARGS)
        await chosen.call_with(kwargs, run)
    return (time.perf_counter() - start) / calls


async def _run_per_node(chosen: pev.Tool[..., Any], nodes: int) -> float:
    plan = _plan(nodes)
    start = time.perf_counter()
    result = await pev.run(
        "book rooms", planner=ScriptedPlanner(plan), tools=[chosen], store=pev.MemoryStore()
    )
    elapsed = time.perf_counter() - start
    assert result.ok, result.detail  # a bench that measured a failure says so
    return elapsed / nodes


def measure(rounds: int, nodes: int, run_nodes: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Median seconds per node, (now, before), for each of the three measures."""
    plan = _plan(nodes)
    now_specs, before_specs = {"book": book.spec}, {"book": BEFORE}
    figures: dict[str, tuple[list[float], list[float]]] = {
        "plan validation": ([], []),
        "the call": ([], []),
        "a whole run": ([], []),
    }
    for number in range(rounds):
        # Interleaved, and the order swapped each round, so that neither side gets the warmer
        # caches or the quieter moment.
        sides = [("now", 0), ("before", 1)]
        if number % 2:
            sides.reverse()
        for _, side in sides:
            specs = now_specs if side == 0 else before_specs
            chosen = book if side == 0 else UNTYPED
            figures["plan validation"][side].append(
                _per_node(lambda specs=specs: validate_plan(plan, tools=specs), nodes, repeat)
            )
            figures["the call"][side].append(asyncio.run(_call_per_node(chosen, nodes * repeat)))
            figures["a whole run"][side].append(
                statistics.median(
                    asyncio.run(_run_per_node(chosen, run_nodes)) for _ in range(RUNS)
                )
            )
        progress(f"  round {number + 1}/{rounds} done")
    return {
        name: (statistics.median(now), statistics.median(before))
        for name, (now, before) in figures.items()
    }


def report(figures: dict[str, tuple[float, float]]) -> str:
    """The Markdown table: µs per node now and before, and the ratio."""
    lines = [
        "| per node | pydantic schema (now) | JSON types only (before) | ratio |",
        "|---|---|---|---|",
    ]
    for name, (now, before) in figures.items():
        lines.append(
            f"| {name} | {now * 1e6:.1f} µs | {before * 1e6:.1f} µs | {now / before:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick=True)
    args = parse_bench_args(parser, argv)
    rounds, nodes, run_nodes, repeat = (
        (2, 20, 10, 2) if args.quick else (ROUNDS, NODES, RUN_NODES, 20)
    )
    figures = measure(rounds, nodes, run_nodes, repeat)
    table = report(figures)
    print(table)
    if args.write:
        command = "python bench/bench_tools.py --write docs/benchmarks.md"
        body = (
            f"{machine_line()}; `make bench` (`{command}`). {rounds} rounds, interleaved; plan "
            f"validation of a {nodes}-node plan and {nodes * repeat} calls per round, and a "
            f"{run_nodes}-node `pev.run` on the memory store; medians of the time per node.\n\n"
            f"{table}"
        )
        write_section(
            args.write, "bench-tools", body, heading="## Tool schemas: validation's cost per node"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
