"""RayExecutor on a real Ray cluster of several nodes (docs/ray.md).

Each test drives a task with :func:`pev.run`, its tools run as Ray tasks on the session's
cluster (tests/support/ray_cluster.py), and proves what happened from the side-effect log the
tools write (tests/support/ray_tools.py): where each call ran, and that none was sent twice.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support import ray_cluster
from tests.support.ray_cluster import node_args
from tests.support.ray_tools import (
    book,
    deliver,
    deliver_and_crash,
    deliver_async,
    deliver_slowly,
    deliver_stuck,
    delivered_in,
    lines,
    look_slowly,
    where,
)

import pev
from pev.ledger import Ledger, TaskState
from pev.model import Effect, ExecutionRecord, Plan, PlanNode, RecordStatus
from pev.stores import MemoryStore
from pev.testing import ScriptedPlanner

ray_cluster.require_module()

import ray  # noqa: E402 - after the check that Ray is here

from pev.ray import RayExecutor  # noqa: E402

pytestmark = [pytest.mark.timeout(120)]


def _plan(*nodes: PlanNode) -> ScriptedPlanner:
    return ScriptedPlanner(Plan("do it", nodes))


async def _run(
    executor: RayExecutor, *nodes: PlanNode, store: MemoryStore | None = None
) -> tuple[pev.RunResult, MemoryStore]:
    store = store or MemoryStore()
    result = await pev.run("do it", planner=_plan(*nodes), executor=executor, store=store)
    return result, store


async def test_plain_and_decorated_sync_and_async_tools_run_as_ray_tasks(
    cluster: Any, tmp_path: Path
) -> None:
    """Each call runs on a Ray worker, with its node's idempotency key there."""
    log = tmp_path / "effects.log"
    executor = RayExecutor(
        {"deliver": deliver, "deliver_async": pev.tool(deliver_async, effect="action")}
    )
    result, store = await _run(
        executor,
        PlanNode("a", "deliver", tool="deliver", args={"log": str(log)}),
        PlanNode("b", "deliver async", tool="deliver_async", args={"log": str(log)}),
    )
    assert (result.status, result.outputs) == (
        "succeeded",
        {"a": "delivered", "b": "delivered"},
    )
    state = await Ledger(store).state(result.task_id)
    keys = sorted(record.idempotency_key for record in state.records.values())
    assert sorted(words[1] for words in lines(log)) == keys
    assert {words[2] for words in lines(log)} <= {node["NodeID"] for node in ray.nodes()}


async def test_a_tool_needing_a_custom_resource_runs_only_on_the_node_that_has_it(
    cluster: Any, tmp_path: Path
) -> None:
    """``placement={"arm0": 1}``: every call lands on the one node with the arm."""
    arm_node = cluster.add_node(**node_args(num_cpus=1, resources={"arm0": 1}))
    cluster.wait_for_nodes()
    log = tmp_path / "effects.log"
    executor = RayExecutor([pev.tool(where, effect="query", placement={"arm0": 1})])
    nodes = [
        PlanNode(f"n{i}", "where", tool="where", args={"log": str(log)}, effect=Effect.QUERY)
        for i in range(4)
    ]
    result, _ = await _run(executor, *nodes)
    assert result.status == "succeeded"
    assert set(result.outputs.values()) == {arm_node.node_id}
    assert {words[2] for words in lines(log)} == {arm_node.node_id}


async def test_a_placement_no_node_has_is_refused_before_it_is_sent(
    cluster: Any, tmp_path: Path
) -> None:
    """No node has ``arm9``: the call is a failure naming it, not sent, not unknown."""
    log = tmp_path / "effects.log"
    executor = RayExecutor({"deliver": deliver}, placement={"deliver": {"arm9": 1}})
    result, store = await _run(
        executor, PlanNode("a", "deliver", tool="deliver", args={"log": str(log)})
    )
    assert result.status == "failed"
    assert "was not sent: no live node of the Ray cluster has arm9=1" in result.detail
    state = await Ledger(store).state(result.task_id)
    assert [record.status for record in state.records.values()] == [RecordStatus.FAILED]
    assert lines(log) == []


async def test_a_tools_exception_keeps_its_own_type_message_and_line(cluster: Any) -> None:
    """A KeyError raised on the worker is recorded as the tool's, at its file and line."""
    executor = RayExecutor([pev.tool(book, effect="query")])
    result, _ = await _run(
        executor, PlanNode("a", "book", tool="book", args={"room": "red"}, effect=Effect.QUERY)
    )
    assert result.status == "failed"
    line = 1 + next(
        number
        for number, text in enumerate(Path(book.__code__.co_filename).read_text().splitlines())
        if "return rooms[room]" in text
    )
    assert f"a (book): KeyError: 'red' at ray_tools.py:{line} in book" in result.detail


async def test_a_timeout_cancels_the_running_ray_task(cluster: Any, tmp_path: Path) -> None:
    """The tool's timeout reaches the worker as ray.cancel; the action's outcome is unknown."""
    log = tmp_path / "effects.log"
    executor = RayExecutor([pev.tool(deliver_slowly, timeout_s=3)])
    result, store = await _run(
        executor,
        PlanNode("a", "deliver", tool="deliver_slowly", args={"log": str(log), "seconds": 60}),
    )
    assert (result.status, result.reason) == ("failed", "execution_failed")
    state = await Ledger(store).state(result.task_id)
    (record,) = state.records.values()
    assert record.status is RecordStatus.UNKNOWN
    assert "its Ray task was cancelled (ray.cancel)" in result.detail
    deadline = time.monotonic() + 20
    while [words[0] for words in lines(log)] != ["delivered", "interrupted"]:
        assert time.monotonic() < deadline, lines(log)
        await asyncio.sleep(0.2)


async def test_cancelling_the_task_reaches_the_running_ray_task(
    cluster: Any, tmp_path: Path
) -> None:
    """``pev.cancel`` from outside: the tool on the worker is interrupted, its outcome unknown."""
    log = tmp_path / "effects.log"
    store = MemoryStore()
    running = asyncio.create_task(
        _run(
            RayExecutor([deliver_slowly]),
            PlanNode("a", "deliver", tool="deliver_slowly", args={"log": str(log), "seconds": 60}),
            store=store,
        )
    )
    await _when_logged(log, 1)
    (task_id,) = [summary.task_id for summary in await store.list_tasks()]
    await pev.cancel(task_id, store=store, reason="the customer called")
    result, _ = await asyncio.wait_for(running, 30)
    assert (result.status, result.reason) == ("failed", "cancelled")
    assert "was cancelled while it ran on Ray" in result.detail
    assert [words[0] for words in lines(log)] == ["delivered", "interrupted"]


async def test_a_call_stuck_in_c_code_is_killed_after_the_grace_period(
    cluster: Any, tmp_path: Path
) -> None:
    """``ray.cancel`` cannot interrupt a C call: after ``cancel_grace_s`` its worker is killed."""
    log = tmp_path / "effects.log"
    executor = RayExecutor([pev.tool(deliver_stuck, timeout_s=2)], cancel_grace_s=1)
    result, _ = await _run(
        executor,
        PlanNode("a", "deliver", tool="deliver_stuck", args={"log": str(log), "seconds": 60}),
    )
    assert "its Ray task was cancelled (ray.cancel)" in result.detail
    (started,) = lines(log)
    pid = int(started[0].removeprefix("delivered-by-"))
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, "the stuck worker was not killed"
        await asyncio.sleep(0.2)
    assert [words[0] for words in lines(log)] == [started[0]]  # never confirmed


async def _when_logged(log: Path, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(lines(log)) < count:
        assert time.monotonic() < deadline, f"no call started: {lines(log)}"
        await asyncio.sleep(0.1)


async def _lost_under(
    cluster: Any,
    resource: str,
    executor: RayExecutor,
    node: PlanNode,
    log: Path,
    *,
    replace: bool = False,
) -> tuple[pev.RunResult, ExecutionRecord, TaskState, str]:
    """Run ``node`` on a node of its own (``resource``), remove that node once the call has
    started, and (``replace``) start a node with the same resource, as a rebooted host.

    Returns:
        The result, the task's one record, the task's state, and the removed node's Ray id.
    """
    host = cluster.add_node(**node_args(num_cpus=1, resources={resource: 1}))
    cluster.wait_for_nodes()
    running = asyncio.create_task(_run(executor, node))
    await _when_logged(log, 1)
    cluster.remove_node(host)
    if replace:
        cluster.add_node(**node_args(num_cpus=1, resources={resource: 1}))
    result, store = await asyncio.wait_for(running, 90)
    state = await Ledger(store).state(result.task_id)
    (record,) = state.records.values()
    return result, record, state, host.node_id


async def test_a_node_removed_under_a_running_action_leaves_it_unknown_never_resent(
    cluster: Any, tmp_path: Path
) -> None:
    """The node with the arm dies mid-action: the record is unknown, and it is not re-sent."""
    log = tmp_path / "effects.log"
    result, record, _, host = await _lost_under(
        cluster,
        "arm1",
        RayExecutor([pev.tool(deliver_slowly, placement={"arm1": 1})]),
        PlanNode("a", "deliver", tool="deliver_slowly", args={"log": str(log), "seconds": 60}),
        log,
    )
    assert (result.status, result.reason) == ("failed", "execution_failed")
    assert "was lost (NodeDiedError" in result.detail
    assert "the action may or may not have taken effect" in result.detail
    assert record.status is RecordStatus.UNKNOWN
    assert [words[:1] + words[2:] for words in lines(log)] == [["delivered", host]]


async def test_a_lost_action_is_settled_by_its_reconcile_on_the_host_that_comes_back(
    cluster: Any, tmp_path: Path
) -> None:
    """The arm's host is replaced: reconcile runs there, finds the delivery, the task succeeds."""
    log = tmp_path / "effects.log"
    tool = pev.tool(
        deliver_slowly,
        placement={"arm2": 1},
        reconcile=functools.partial(delivered_in, str(log)),
    )
    result, record, state, _ = await _lost_under(
        cluster,
        "arm2",
        RayExecutor([tool]),
        PlanNode("a", "deliver", tool="deliver_slowly", args={"log": str(log), "seconds": 60}),
        log,
        replace=True,
    )
    assert (result.status, result.outputs) == ("succeeded", {"a": "delivered"})
    assert record.status is RecordStatus.UNKNOWN  # as it ended; the reconcile settled it
    assert record.id in state.reconciled
    assert [words[0] for words in lines(log)] == ["delivered"]  # sent once


async def test_a_worker_that_crashes_under_an_action_leaves_it_unknown(
    cluster: Any, tmp_path: Path
) -> None:
    """The worker process dies after delivering: unknown, not re-run by Ray, not re-sent."""
    log = tmp_path / "effects.log"
    result, store = await _run(
        RayExecutor([deliver_and_crash]),
        PlanNode("a", "deliver", tool="deliver_and_crash", args={"log": str(log)}),
    )
    assert (result.status, result.reason) == ("failed", "execution_failed")
    assert "was lost (WorkerCrashedError" in result.detail
    state = await Ledger(store).state(result.task_id)
    (record,) = state.records.values()
    assert record.status is RecordStatus.UNKNOWN
    assert [words[0] for words in lines(log)] == ["delivered"]


async def test_a_query_on_a_removed_node_is_a_failure_not_an_unknown(
    cluster: Any, tmp_path: Path
) -> None:
    """A query lost with its node is a plain failure: safe to ask again, nothing unknown."""
    log = tmp_path / "effects.log"
    result, record, _, _ = await _lost_under(
        cluster,
        "eye0",
        RayExecutor([pev.tool(look_slowly, effect="query", placement={"eye0": 1})]),
        PlanNode(
            "a",
            "look",
            tool="look_slowly",
            args={"log": str(log), "seconds": 60},
            effect=Effect.QUERY,
        ),
        log,
    )
    assert result.status == "failed"
    assert record.status is RecordStatus.FAILED
    assert "was lost (NodeDiedError" in result.detail
    assert "may or may not" not in result.detail


def test_placement_naming_an_unknown_tool_is_refused() -> None:
    """``placement=`` for a tool that is not registered names it and the registered ones."""
    with pytest.raises(ValueError, match=r"'delivr'.*registered: deliver"):
        RayExecutor({"deliver": deliver}, placement={"delivr": {"arm0": 1}})


def test_an_unreachable_cluster_fails_the_call_fast_without_sending_it(tmp_path: Path) -> None:
    """In a fresh process, a cluster address where nothing listens: one clear failure."""
    script = textwrap.dedent(
        f"""
        import pev
        from pev.model import Plan, PlanNode
        from pev.ray import RayExecutor
        from pev.testing import ScriptedPlanner
        from tests.support.ray_tools import deliver
        plan = Plan("do it", (PlanNode("a", "deliver", tool="deliver",
                                      args={{"log": {str(tmp_path / "x.log")!r}}}),))
        result = pev.run_sync("do it", planner=ScriptedPlanner(plan),
                              executor=RayExecutor([deliver], address="127.0.0.1:9"))
        print(result.status, "|", result.detail)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ray_cluster.ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed | "), done.stdout
    assert "cannot join the Ray cluster at '127.0.0.1:9'" in done.stdout
    assert "ray start --head" in done.stdout
    assert not (tmp_path / "x.log").exists()
