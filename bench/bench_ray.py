"""Ray benchmarks: what `RayExecutor` costs per node, and two-node tasks over one and two nodes.

Run with `make bench` (or `python bench/bench_ray.py [--write docs/benchmarks.md] [--rounds N]
[--tasks N] [--chain N] [--num-cpus X]`); `--quick` runs a few tasks in one round (what
tests/test_bench.py runs), and `--profile TOP` prints where the driver's time goes in the Ray
chain instead, and what pickling a tool's function costs.

The bench starts its own local Ray cluster with `ray.cluster_utils.Cluster` (a head node of 2
CPUs, no dashboard, an 80 MiB object store), joins it, and shuts it down at the end. Ray's
workers import the tools (`bench/_ray_tools.py`) by module name, from the `PYTHONPATH` the
cluster is started with. Every pev run uses a `MemoryStore` and verification `off`, so the
figures are pev's loop and ledger plus the way the tool is called.

Per-node overhead: a chain of CHAIN query nodes (each `after` the one before, so one call at a
time) of a sync tool that returns `"pong"` at once, three ways in the same round:

* `pev.run` with the local `ToolExecutor` (`tools=[...]`: the sync tool runs in the run's
  thread pool);
* `pev.run` with `RayExecutor`: each node's call is one Ray task;
* bare Ray: the same function as `ray.remote(max_retries=0)`, one task per node, each awaited
  before the next is sent: what a chain of Ray tasks costs without pev.

Figures: milliseconds per node (wall time of the runs over the nodes they ran), and the ratios
RayExecutor ÷ local and RayExecutor ÷ bare Ray. The order of the three turns from round to round.

Throughput: TASKS tasks at once (`asyncio.gather` of `pev.run`), each a two-node chain of a sync
query tool that returns the id of the Ray node it ran on, with `RayExecutor` placing every call
with `num_cpus=0.25` (`--num-cpus`; up to 8 at once per 2-CPU node, each in a worker process
of its own, so a backlog spreads over both nodes), over the head node alone and over the head
and a second node of 2 CPUs. The second node is added for its case and removed after it, and
which case goes first alternates from round to round; right before each timed run, an untimed
warm-up batch of tasks starts the workers the run will use. Figures: tasks per second, the
share of calls that ran on the second node, and the ratio 2 nodes ÷ 1 node. On a 2-core
machine the nodes share the same two cores with the driver, so a second node adds workers, not
CPU.

Every figure is a median over the rounds (after a warm-up round whose samples are dropped); the
per-node rounds all come first, then the throughput rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import logging
import os
import pstats
import statistics
import sys
import time
import timeit
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import ray.cloudpickle
from ray.cluster_utils import Cluster

import pev
from _ray_tools import PING, WHERE, ping
from _report import command_text, machine_line, progress, write_section
from pev.ray import RayExecutor
from pev.testing import ScriptedPlanner

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

ROUNDS = 5
CHAIN = 30  # nodes in the per-node chain
CHAIN_RUNS = 3  # runs of the chain per case and round
TASKS = 1000  # two-node tasks per throughput run
WARM_TASKS = 100  # the untimed batch before each throughput run
NUM_CPUS = 0.25  # each throughput call's placement
NODE_CPUS = 2
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's smallest: nothing large travels here
PROFILE_RUNS = 10

LOCAL, RAY_EXECUTOR, BARE = "local", "ray-executor", "bare-ray"
ONE, TWO = 1, 2  # Ray nodes
LABELS = {
    LOCAL: "`pev.run`, local `ToolExecutor`",
    BARE: "bare Ray: one `ray.remote(max_retries=0)` task per node, awaited in turn",
    RAY_EXECUTOR: "`pev.run`, `RayExecutor`",
}
QUERY = pev.Effect.QUERY
PAIR = pev.Plan(
    "pair",
    (
        pev.PlanNode("a", tool="where", effect=QUERY),
        pev.PlanNode("b", tool="where", effect=QUERY, after=("a",)),
    ),
)

_bare_ping = ray.remote(max_retries=0)(ping)


async def pair_planner(request: pev.engine.PlanRequest) -> pev.Plan:
    """The throughput tasks' planner: every task gets the same two-node plan."""
    return PAIR


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How much the bench runs.

    Attributes:
        rounds: Rounds measured (medians over them), after one warm-up round.
        chain: Nodes in the per-node chain.
        chain_runs: Runs of the chain per case and round.
        tasks: Two-node tasks per throughput run.
        warm_tasks: Tasks of the untimed batch before each throughput run.
        warm_round: Whether a warm-up round (samples dropped) comes first.
        num_cpus: The placement of each throughput call (``num_cpus``).
        spread: Whether two nodes must both run calls: so in a real run, whose backlog is more
            than one node holds at once; a few tasks (``--quick``) may all fit on the head.
    """

    rounds: int = ROUNDS
    chain: int = CHAIN
    chain_runs: int = CHAIN_RUNS
    tasks: int = TASKS
    warm_tasks: int = WARM_TASKS
    warm_round: bool = True
    num_cpus: float = NUM_CPUS
    spread: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput:
    """One throughput run: how long the tasks took, how they ended, where their calls ran.

    Attributes:
        seconds: Wall time of the `asyncio.gather` of every task's `pev.run`.
        tasks: Tasks run.
        succeeded: Tasks whose run ended ok, with both nodes' outputs.
        calls: Ray node id → calls that ran there.
    """

    seconds: float
    tasks: int
    succeeded: int
    calls: Counter[str]


@dataclass(slots=True)
class Samples:
    """Every round's measurements.

    Attributes:
        per_node: Case → seconds per node, one per round.
        throughput: Ray nodes (1 or 2) → one run per round.
        head: The head node's Ray id (to tell the second node's calls apart).
    """

    per_node: dict[str, list[float]] = field(
        default_factory=lambda: {LOCAL: [], RAY_EXECUTOR: [], BARE: []}
    )
    throughput: dict[int, list[Throughput]] = field(default_factory=lambda: {ONE: [], TWO: []})
    head: str = ""


# `--quick`: what tests/test_bench.py runs; its figures are not for the record.
QUICK = Settings(
    rounds=1, chain=5, chain_runs=1, tasks=20, warm_tasks=10, warm_round=False, spread=False
)


# -- the cluster ----------------------------------------------------------------------------


def _node_args() -> dict[str, Any]:
    return {"num_cpus": NODE_CPUS, "object_store_memory": OBJECT_STORE_BYTES}


@contextmanager
def local_cluster() -> Iterator[Cluster]:
    """A one-node local Ray cluster that this process has joined; shut down after.

    Ray's workers find the bench's modules through ``PYTHONPATH`` (this folder and the
    repository's root), which the cluster's processes inherit from this one.

    Raises:
        RuntimeError: This process has already joined a Ray cluster.
    """
    if ray.is_initialized():
        raise RuntimeError("bench_ray starts its own Ray cluster: this process already has one")
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "RAY_ADDRESS")}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(BENCH), str(ROOT), saved["PYTHONPATH"]])
    )
    os.environ["RAY_ADDRESS"] = ""  # never a cluster of the user's
    cluster = Cluster(
        initialize_head=True, head_node_args={**_node_args(), "include_dashboard": False}
    )
    try:
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _alive_nodes() -> int:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return sum(1 for node in nodes if node.get("Alive"))


def _wait_alive(count: int, timeout_s: float = 60.0) -> None:
    """Wait until the cluster has exactly ``count`` live nodes."""
    deadline = time.monotonic() + timeout_s
    while _alive_nodes() != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray cluster did not reach {count} live node(s)")
        time.sleep(0.05)


@contextmanager
def second_node(cluster: Cluster) -> Iterator[None]:
    """The cluster with a second node of the head's size, removed after."""
    node = cluster.add_node(**_node_args())
    cluster.wait_for_nodes()
    _wait_alive(2)
    try:
        yield
    finally:
        cluster.remove_node(node)
        _wait_alive(1)


# -- per-node overhead ----------------------------------------------------------------------


def _chain(nodes: int) -> tuple[pev.Plan, pev.RecoveryPolicy]:
    plan = pev.Plan(
        "chain",
        tuple(
            pev.PlanNode(f"n{i}", tool="ping", effect=QUERY, after=(f"n{i - 1}",) if i else ())
            for i in range(nodes)
        ),
    )
    return plan, pev.RecoveryPolicy(max_nodes=nodes)


async def pev_chain(nodes: int, runs: int, executor: pev.engine.Executor | None) -> float:
    """Seconds per node of ``runs`` runs of the chain: on ``executor``, else the local one.

    Raises:
        AssertionError: A run did not succeed with every node's output.
    """
    plan, policy = _chain(nodes)
    tools = None if executor is not None else [PING]
    gc.collect()
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        result = await pev.run(
            "chain",
            planner=ScriptedPlanner(plan),
            tools=tools,
            executor=executor,
            policy=policy,
            store=pev.MemoryStore(),
        )
        total += time.perf_counter() - start
        assert result.ok, result
        assert list(result.outputs.values()) == ["pong"] * nodes, result
    return total / (runs * nodes)


async def bare_chain(nodes: int, runs: int) -> float:
    """Seconds per node of the same calls as bare Ray tasks, each awaited before the next.

    Raises:
        AssertionError: A call did not return what the tool returns.
    """
    gc.collect()
    start = time.perf_counter()
    for _ in range(runs * nodes):
        assert await _bare_ping.remote() == "pong"
    return (time.perf_counter() - start) / (runs * nodes)


async def overhead_round(round_: int, settings: Settings, samples: Samples) -> None:
    """The three ways of running the chain, in an order that turns with ``round_``."""
    cases = (LOCAL, RAY_EXECUTOR, BARE)
    turn = round_ % len(cases)
    executor = RayExecutor([PING])
    for case in cases[turn:] + cases[:turn]:
        if case == BARE:
            seconds = await bare_chain(settings.chain, settings.chain_runs)
        else:
            chosen = executor if case == RAY_EXECUTOR else None
            seconds = await pev_chain(settings.chain, settings.chain_runs, chosen)
        samples.per_node[case].append(seconds)


# -- throughput -----------------------------------------------------------------------------


async def tasks_at_once(tasks: int, num_cpus: float = NUM_CPUS) -> Throughput:
    """``tasks`` two-node tasks at once through `RayExecutor`, each call on ``num_cpus``."""
    executor = RayExecutor([WHERE], placement={"where": {"num_cpus": num_cpus}})
    store = pev.MemoryStore()
    gc.collect()
    start = time.perf_counter()
    results = await asyncio.gather(
        *(
            pev.run(f"task {i}", planner=pair_planner, executor=executor, store=store)
            for i in range(tasks)
        )
    )
    seconds = time.perf_counter() - start
    succeeded = [r for r in results if r.ok and len(r.outputs) == len(PAIR.nodes)]
    calls = Counter(str(node) for r in succeeded for node in r.outputs.values())
    return Throughput(seconds=seconds, tasks=tasks, succeeded=len(succeeded), calls=calls)


def _timed_tasks(settings: Settings) -> Throughput:
    # The untimed batch starts the workers the run will use.
    asyncio.run(tasks_at_once(settings.warm_tasks, settings.num_cpus))
    return asyncio.run(tasks_at_once(settings.tasks, settings.num_cpus))


def throughput_round(
    cluster: Cluster, round_: int, settings: Settings, samples: Samples, *, keep: bool = True
) -> None:
    """The tasks over the head node alone and over two nodes; which goes first alternates."""
    for nodes in (ONE, TWO) if round_ % 2 == 0 else (TWO, ONE):
        if nodes == ONE:
            run = _timed_tasks(settings)
        else:
            with second_node(cluster):
                run = _timed_tasks(settings)
        if keep:
            samples.throughput[nodes].append(run)
        progress(
            f"  {nodes} node(s): {run.seconds:.2f} s, {run.succeeded}/{run.tasks} succeeded, "
            f"{_second_share(run, samples.head):.0%} of calls on the second node"
        )


def _second_share(run: Throughput, head: str) -> float:
    total = sum(run.calls.values())
    return (total - run.calls.get(head, 0)) / total if total else 0.0


# -- rounds ---------------------------------------------------------------------------------


def bench(cluster: Cluster, settings: Settings) -> Samples:
    """Every case's samples, one per round: first the per-node rounds, then the throughput ones.

    Each part starts with a warm-up round whose samples are dropped (without it, ``--quick``'s
    one round includes what a warm-up would have absorbed: the first calls' imports). The
    per-node rounds come first, on the head node alone, so that no worker started or stopped
    by a throughput run (Ray stops the extra ones a second after they fall idle) is in them.
    """
    samples = Samples(head=ray.get_runtime_context().get_node_id())
    if settings.warm_round:
        progress("per-node overhead: warm-up round")
        asyncio.run(overhead_round(0, settings, Samples()))
    for round_ in range(settings.rounds):
        progress(f"per-node overhead: round {round_ + 1} of {settings.rounds}")
        asyncio.run(overhead_round(round_, settings, samples))
    if settings.warm_round:
        progress("throughput: warm-up round")
        throughput_round(cluster, 0, settings, samples, keep=False)
    for round_ in range(settings.rounds):
        progress(f"throughput: round {round_ + 1} of {settings.rounds}")
        throughput_round(cluster, round_, settings, samples)
    return samples


# -- report ---------------------------------------------------------------------------------


def problems(samples: Samples, settings: Settings) -> list[str]:
    """What did not go as the report says: a task that failed, two nodes not both used."""
    found = []
    for nodes, runs in samples.throughput.items():
        for run in runs:
            if run.succeeded != run.tasks:
                found.append(f"{nodes} node(s): {run.succeeded}/{run.tasks} tasks succeeded")
            used = len(run.calls)
            if used > nodes or (settings.spread and used != nodes):
                found.append(f"{nodes} node(s): the calls ran on {used} node(s)")
    if any(len(values) != settings.rounds for values in samples.per_node.values()):
        found.append("a per-node case is missing rounds")
    return found


def per_node_table(samples: Samples, settings: Settings) -> str:
    """Milliseconds per node of each way, and RayExecutor's ratio to each of the others."""
    ms = {case: statistics.median(values) * 1e3 for case, values in samples.per_node.items()}
    ray_ms = ms[RAY_EXECUTOR]
    lines = [
        (
            f"| chain of {settings.chain} query nodes, one call at a time | ms per node | "
            "`RayExecutor` ÷ this | per-round ratios |"
        ),
        "|---|---|---|---|",
    ]
    for case in (LOCAL, BARE, RAY_EXECUTOR):
        if case == RAY_EXECUTOR:
            ratio = spread = "—"
        else:
            ratio = f"{ray_ms / ms[case]:.1f}x"
            rounds = [
                r / c
                for r, c in zip(samples.per_node[RAY_EXECUTOR], samples.per_node[case], strict=True)
            ]
            spread = f"{min(rounds):.1f} to {max(rounds):.1f}x"
        lines.append(f"| {LABELS[case]} | {ms[case]:.2f} | {ratio} | {spread} |")
    return "\n".join(lines)


def throughput_table(samples: Samples) -> str:
    """Tasks per second over one and two nodes, where the calls ran, and the ratio."""
    lines = [
        (
            "| Ray cluster | tasks at once | succeeded | wall time, s | tasks/s | "
            "calls on the second node |"
        ),
        "|---|---|---|---|---|---|",
    ]
    rate: dict[int, float] = {}
    for nodes, runs in samples.throughput.items():
        seconds = statistics.median(run.seconds for run in runs)
        rate[nodes] = runs[0].tasks / seconds
        share = statistics.median(_second_share(run, samples.head) for run in runs)
        where = "—" if nodes == ONE else f"{share:.0%}"
        label = "1 node (head, 2 CPUs)" if nodes == ONE else "2 nodes (2 + 2 CPUs)"
        lines.append(
            f"| {label} | {runs[0].tasks} | {min(run.succeeded for run in runs)} | "
            f"{seconds:.2f} | {rate[nodes]:.0f} | {where} |"
        )
    rounds = [
        a.seconds / b.seconds
        for a, b in zip(samples.throughput[ONE], samples.throughput[TWO], strict=True)
    ]
    lines += [
        "",
        (
            f"2 nodes ÷ 1 node, tasks/s: {rate[TWO] / rate[ONE]:.2f}x "
            f"(per round: {min(rounds):.2f} to {max(rounds):.2f}x)."
        ),
    ]
    return "\n".join(lines)


def report(samples: Samples, settings: Settings) -> str:
    """Both tables, and whether every run did what the tables assume."""
    trouble = problems(samples, settings)
    spread = (
        "over two nodes the calls ran on both"
        if settings.spread
        else "over two nodes a quick run's few calls may all fit on the head"
    )
    check = (
        f"Every throughput task succeeded; over one node every call ran on the head, {spread}."
        if not trouble
        else "**Not as described:** " + "; ".join(trouble) + "."
    )
    return (
        f"Per-node overhead (`MemoryStore`):\n\n{per_node_table(samples, settings)}\n\n"
        f"Throughput ({settings.tasks} two-node tasks at once, `MemoryStore`, each call placed "
        f"with `num_cpus={settings.num_cpus:g}`):\n\n{throughput_table(samples)}\n\n{check}"
    )


# -- profile --------------------------------------------------------------------------------


def profile(top: int, settings: Settings) -> str:
    """The driver's side of the `RayExecutor` chain under cProfile, and the cost of pickling.

    cProfile sees this process only: what pev and Ray's client do per call here, not the
    worker's side. Then, without the profiler, the time to pickle a tool's function as
    `RayExecutor` sends it with every call: a plain module-level function (by reference) and
    a function `@pev.tool` decorated in place (its module name is the `Tool`, so cloudpickle
    sends the function by value).
    """
    executor = RayExecutor([PING])
    asyncio.run(pev_chain(settings.chain, 2, executor))  # warm-up, not profiled
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(pev_chain(settings.chain, PROFILE_RUNS, executor))
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(f"{PROFILE_RUNS} runs of the {settings.chain}-node chain on RayExecutor\n")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    decorated = __import__("_common").noop.fn  # `@pev.tool` on `async def noop`
    out.write("\npickling a tool's function (ray.cloudpickle.dumps), µs per call:\n")
    for label, fn in (("plain function, by reference", ping), ("@pev.tool in place", decorated)):
        best = min(timeit.repeat(functools.partial(_pickled, fn), number=200, repeat=5))
        size = len(_pickled(fn))
        out.write(f"  {label:<32} {best / 200 * 1e6:7.1f} µs, {size} bytes\n")
    return out.getvalue()


def _pickled(fn: object) -> bytes:
    """``fn`` as Ray sends a task's argument (cloudpickle)."""
    data: bytes = ray.cloudpickle.dumps(fn)  # type: ignore[no-untyped-call]
    return data


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its tables; ``--write`` records them in docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds (medians over them)")
    parser.add_argument("--tasks", type=int, default=TASKS, help="tasks per throughput run")
    parser.add_argument("--chain", type=int, default=CHAIN, help="nodes of the per-node chain")
    parser.add_argument(
        "--num-cpus", type=float, default=NUM_CPUS, help="placement of each throughput call"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a few tasks in one round (not for the record)"
    )
    parser.add_argument(
        "--profile", type=int, metavar="TOP", help="profile the Ray chain; show TOP rows"
    )
    args = parser.parse_args(argv)
    if args.quick and args.write:
        parser.error("--quick figures are not for the record: drop --write")
    settings = (
        QUICK
        if args.quick
        else Settings(
            rounds=args.rounds, chain=args.chain, tasks=args.tasks, num_cpus=args.num_cpus
        )
    )
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    with local_cluster() as cluster:
        if args.profile:
            print(profile(args.profile, settings))
            return 0
        progress(
            f"benchmarking Ray: a {settings.chain}-node chain three ways and {settings.tasks} "
            f"tasks over 1 and 2 nodes, x {settings.rounds} rounds ..."
        )
        samples = bench(cluster, settings)
    text = report(samples, settings)
    print(text)
    wall_s = time.perf_counter() - began
    progress(f"{wall_s:.0f} s in all")
    if args.write:
        body = (
            f"{machine_line()}, {os.cpu_count()} CPU cores, Ray {ray.__version__} (1-minute "
            f"load average {load_before:.1f} when the run began); "
            f"medians of {settings.rounds} rounds ({settings.chain_runs} runs of the chain per "
            f"case and round), {wall_s:.0f} s in all. Command: "
            f"{command_text('bench_ray.py', sys.argv[1:] if argv is None else argv)}.\n\n{text}"
        )
        write_section(args.write, "ray", body, heading="## Ray: `RayExecutor`")
        progress(f"wrote {args.write}")
    return 0 if not problems(samples, settings) else 1


if __name__ == "__main__":
    raise SystemExit(main())
