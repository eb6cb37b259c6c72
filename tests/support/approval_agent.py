"""A payment agent whose every revision waits for approval: for workers, resume and processes.

Bound to module-level names, so ledgers record its import path
(``tests.support.approval_agent:payments_agent``) and any process rebuilds it. The payment tool
appends each amount it pays to ``PAYMENTS``, and to the file ``PEV_PAYMENTS_LOG`` names when
set (one line per payment, written by the tool itself: the side-effect log of the process
tests).
"""

from __future__ import annotations

import os

import pev
from pev.model import Plan, PlanNode, VerificationContract, VerificationMode

PAYMENTS: list[int] = []

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "pay the invoice", ("invoice paid",))


@pev.tool(effect="action")
def pay(amount: int) -> str:
    """Pay ``amount``; recorded before it returns."""
    PAYMENTS.append(amount)
    log = os.environ.get("PEV_PAYMENTS_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{pev.engine.current_node_context().idempotency_key} {amount}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return f"paid {amount}"


def planner(request: pev.engine.PlanRequest) -> Plan:
    """Pay 40; after a reviewer's rejection that names an amount, pay that instead."""
    amount = 40
    for rejection in request.rejections:
        words = [word.strip(".,;") for word in rejection.split()]
        amount = next((int(word) for word in reversed(words) if word.isdigit()), amount)
    return Plan("pay", (PlanNode("pay", "pay the invoice", tool="pay", args={"amount": amount}),))


def verifier(request: pev.engine.VerifyRequest) -> pev.Verdict:
    """Passes: the payment went through."""
    return pev.Verdict.passed(request.contract)


payments_agent = pev.Agent(
    planner,
    tools=[pay],
    verifier=verifier,
    contract=CONTRACT,
    policy=pev.RecoveryPolicy(approval="actions"),
)
