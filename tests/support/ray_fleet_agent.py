"""The agent of the drivers-on-Ray fault and signal tests (tests/cluster/test_driver_faults.py).

Its one tool, ``deliver``, runs in the driver actor that drives the task, on that actor's Ray
node: it delivers an order to "the other end", then holds the call open a while (a slow answer),
so a test can freeze or stop the driver with its calls in flight. The other end is an
append-only file (``PEV_RAY_FLEET_END``, set before the nodes start, so that their processes
inherit it) that only the tool writes: one line per delivery with the idempotency key, the Ray
node and the process it was sent from. The tests count side effects there, never in pev's
ledger. The tool's ``reconcile`` answers from that file, asked past the call's deadline.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import ray
from tests.support.ray_agent import append_line

import pev
from pev.engine import PlanRequest, VerifyRequest, current_node_context
from pev.model import (
    DeviceFailure,
    ExecutionRecord,
    Plan,
    PlanNode,
    Success,
    Verdict,
    VerificationContract,
)

OTHER_END = "PEV_RAY_FLEET_END"
# The call's deadline: a driver that takes a frozen one's task over asks the reconcile once
# this has passed since the call was recorded. Above every hold the tests ask for.
TIMEOUT_S = 6.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """One line of the other end: who sent what, from where."""

    key: str
    node_id: str
    pid: int
    order: str


def deliveries(path: Path) -> list[Delivery]:
    """The other end's lines, in the order they were written."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        Delivery(key, node, int(pid), order)
        for key, node, pid, order in (line.split(" ", 3) for line in lines)
    ]


def _deliver(order: str) -> None:
    """Deliver once: the call's key, its node, its process and the order, on one line."""
    key = current_node_context().idempotency_key
    node = ray.get_runtime_context().get_node_id()
    append_line(os.environ[OTHER_END], f"{key} {node} {os.getpid()} {order}")


def delivered(record: ExecutionRecord) -> Success | DeviceFailure:
    """What the other end holds for the record's key (asked past the record's deadline)."""
    keys = {line.key for line in deliveries(Path(os.environ[OTHER_END]))}
    if record.idempotency_key in keys:
        return Success(f"{record.tool} (reconciled: the other end has it)")
    return DeviceFailure(record.node_id, "the other end never received it")


@pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
async def deliver(order: str, hold_s: float) -> str:
    """Deliver an order, then take ``hold_s`` seconds to answer."""
    _deliver(order)
    await asyncio.sleep(hold_s)
    return f"delivered {order}"


CONTRACT = VerificationContract(goal="deliver the order", success_criteria=("delivered",))


def plan(request: PlanRequest) -> Plan:
    """One node delivering the order the input names: ``"ORDER HOLD_S"``."""
    order, hold_s = str(request.input).split()
    node = PlanNode(
        "deliver", "deliver it", tool="deliver", args={"order": order, "hold_s": float(hold_s)}
    )
    return Plan("deliver", (node,))


def check(request: VerifyRequest) -> Verdict:
    """Passed once the order has an output (the call's, or its reconcile's)."""
    if request.output("deliver") is None:
        return Verdict.failed(request.contract, failed_nodes=["deliver"], feedback="not sent")
    return Verdict.passed(request.contract)


delivering = pev.Agent(
    plan,
    verifier=check,
    tools=[deliver],
    contract=CONTRACT,
    policy=pev.RecoveryPolicy(max_replans=0),
)
