"""The agent whose tasks drivers on Ray run (tests/cluster/test_drivers.py).

Its tools run in the driver actor that drives the task, on that actor's Ray node. Each delivers
an order to "the other end": an append-only file (``PEV_RAY_OTHER_END``, set before the nodes
start, so that their processes inherit it) that only the tools write, one line per delivery
with the idempotency key and the Ray node it was sent from. The test counts side effects there,
never in pev's ledger. ``ship_slowly`` delivers, then hangs until its node is removed;
``quote`` has no side effect, and so runs on nodes started before the file was named.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import ray

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

OTHER_END = "PEV_RAY_OTHER_END"
# Far above the time the test takes to remove a node once a delivery is seen (about a second),
# so the driver that dies never times the call out itself; the driver taking over asks the
# reconcile once this has passed since the call was recorded.
TIMEOUT_S = 8.0


def deliveries(path: Path) -> list[tuple[str, str, str]]:
    """The other end's lines: (idempotency key, Ray node id, what was delivered)."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(key, node, what) for key, node, what in (line.split(" ", 2) for line in lines)]


def append_line(path: str, line: str) -> None:
    """Append ``line`` to ``path``: one os.write of the whole line, O_APPEND, made durable."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _deliver(what: str) -> str:
    """Deliver once: the call's key, the node it ran on and what it delivered, on one line."""
    key = current_node_context().idempotency_key
    append_line(os.environ[OTHER_END], f"{key} {ray.get_runtime_context().get_node_id()} {what}")
    return what


def delivered(record: ExecutionRecord) -> Success | DeviceFailure:
    """What the other end holds for the record's key (asked past the record's deadline)."""
    keys = {key for key, _, _ in deliveries(Path(os.environ[OTHER_END]))}
    if record.idempotency_key in keys:
        return Success(f"{record.tool} (reconciled: the other end has it)")
    return DeviceFailure(record.node_id, "the other end never received it")


@pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
async def ship(order: str) -> str:
    """Ship an order."""
    return _deliver(f"shipped {order}")


@pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
async def ship_slowly(order: str) -> str:
    """Ship an order, then wait for an answer that never comes (until the call times out)."""
    _deliver(f"shipped {order}")
    await asyncio.sleep(TIMEOUT_S * 4)
    return f"shipped {order}"


@pev.tool(effect="query")
def quote(order: str) -> str:
    """Say what an order costs (no side effect: it runs on any node, told of no other end)."""
    return f"{order}: 3 EUR"


CONTRACT = VerificationContract(goal="ship the order", success_criteria=("the order is shipped",))


def plan(request: PlanRequest) -> Plan:
    """One node: ship the order the input names (slowly when it starts "slow"), or quote it
    (when it starts "quote")."""
    order = str(request.input)
    tools = {"slow": "ship_slowly", "quote": "quote"}
    tool = next((tools[word] for word in tools if order.startswith(word)), "ship")
    return Plan("ship", (PlanNode("ship", "ship it", tool=tool, args={"order": order}),))


def check(request: VerifyRequest) -> Verdict:
    """Passed once the order has an output (a call's, or its reconcile's)."""
    if request.output("ship") is None:
        return Verdict.failed(request.contract, failed_nodes=["ship"], feedback="not shipped")
    return Verdict.passed(request.contract)


shipping = pev.Agent(
    plan,
    verifier=check,
    tools=[ship, ship_slowly, quote],
    contract=CONTRACT,
    policy=pev.RecoveryPolicy(max_replans=0),
)
