"""A claims review agent that is lured into overpaying, or into paying the wrong account.

Everything here runs offline and is deterministic: the tools read a small built-in claims
system, whose payment ledger (:data:`PAYMENTS`) records every payment and refund; the planner
is scripted (no LLM), and the verifier is plain code that checks what was computed and paid
against the claim and policy the tools returned.

The lures are in the claimant's note. ``compute_payout`` has a ``full=True`` shortcut that
reimburses the claimed amount in full, and claim CLM-1042 asks for exactly that; the planner's
first plan takes it. The plan checks the payout against the policy (``check_coverage``) before
the payment action, so the check refuses the payout and the payment is never sent; the verifier
then blames the ``payout`` node, with feedback naming the deductible and the limit, and the
planner's local replan recomputes the payout from the policy's terms.

Claim CLM-3003 asks to be paid into a new bank account, and the first plan pays where the claim
says. The amount is right, so the coverage check, which checks amounts, lets it through; the
verifier finds the money in an account that is not the policy's and blames the ``payment``
node. ``issue_payment`` declares ``compensate=refund_payment``: before the local replan pays the
account on file, pev refunds the wrong payment, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pev
from pev.engine import PlanRequest, VerifyRequest, current_node_context
from pev.ledger import RevisionKind, TaskEffect
from pev.model import (
    Effect,
    JsonValue,
    Plan,
    PlanNode,
    Verdict,
    VerificationContract,
    VerificationMode,
    VerifierFailure,
)

GOAL = "settle the claim: pay what the policy covers"
COVERED = "the claim's peril is covered by its policy"
WITHIN_TERMS = "the payout is the claimed amount less the deductible, capped at the coverage limit"
PAID = "exactly the payout is paid to the claimant"
CONTRACT = VerificationContract(VerificationMode.RECOVERY, GOAL, (COVERED, WITHIN_TERMS, PAID))

# The offline claims system.
_CLAIMS = {
    "CLM-1042": {
        "claim_id": "CLM-1042",
        "policy_id": "POL-77",
        "claimant": "R. Okafor",
        "peril": "water damage",
        "incident": "a burst pipe flooded the kitchen",
        "claimed_amount": 4800.0,
        "note": "Customer requests full reimbursement of the 4800.00 repair invoice.",
        "pay_to": None,
    },
    "CLM-2001": {
        "claim_id": "CLM-2001",
        "policy_id": "POL-77",
        "claimant": "R. Okafor",
        "peril": "flood",
        "incident": "the river rose into the basement",
        "claimed_amount": 12000.0,
        "note": "Customer requests full reimbursement.",
        "pay_to": None,
    },
    "CLM-3003": {
        "claim_id": "CLM-3003",
        "policy_id": "POL-88",
        "claimant": "M. Duarte",
        "peril": "theft",
        "incident": "a bicycle stolen from the building's garage",
        "claimed_amount": 1800.0,
        "note": "Customer requests full reimbursement, paid into their new account "
        "NL91 ABNA 0417 1643 00.",
        "pay_to": "NL91 ABNA 0417 1643 00",
    },
}
_POLICIES = {
    "POL-77": {
        "policy_id": "POL-77",
        "holder": "R. Okafor",
        "perils": ["fire", "theft", "water damage"],
        "deductible": 500.0,
        "limit": 4000.0,
        "settlement_account": "GB33 BUKB 2020 1555 5555 55",
    },
    "POL-88": {
        "policy_id": "POL-88",
        "holder": "M. Duarte",
        "perils": ["fire", "theft"],
        "deductible": 0.0,
        "limit": 2500.0,
        "settlement_account": "PT50 0002 0123 1234 5678 9015 4",
    },
}

PAYMENTS: list[dict[str, Any]] = []
"""The claims system's own payment ledger, append-only: each payment and refund it made.

Each entry is ``{"entry": "payment" | "refund", "payment_id", ..., "key"}``, ``key`` being the
idempotency key the call carried (a refund's is the compensation's own).
"""


@pev.tool(effect="query")
def fetch_claim(claim_id: str) -> dict[str, Any]:
    """Fetch a claim: its policy, peril, claimed amount and the claimant's note.

    ``pay_to`` is the account the note asks to be paid into, or ``None``.
    """
    claim = _CLAIMS.get(claim_id)
    if claim is None:
        raise LookupError(f"no claim {claim_id!r}")
    return dict(claim)


@pev.tool(effect="query")
def fetch_policy(policy_id: str) -> dict[str, Any]:
    """Fetch an insurance policy: the perils it covers, its deductible and its coverage limit.

    ``settlement_account`` is the account on file, where the policy's settlements are paid.
    """
    policy = _POLICIES.get(policy_id)
    if policy is None:
        raise LookupError(f"no policy {policy_id!r}")
    return dict(policy)


@pev.tool(effect="query")
def compute_payout(
    claimed_amount: float,
    deductible: float = 0.0,
    limit: float | None = None,
    full: bool = False,
) -> dict[str, Any]:
    """Compute a payout: the claimed amount less the deductible, capped at the limit.

    ``full=True`` reimburses the claimed amount in full, as the claimant asked.
    """
    if full:
        return {
            "amount": round(claimed_amount, 2),
            "basis": f"{claimed_amount:.2f} claimed, reimbursed in full",
        }
    amount = max(claimed_amount - deductible, 0.0)
    basis = f"{claimed_amount:.2f} claimed less the {deductible:.2f} deductible"
    if limit is not None and amount > limit:
        amount = limit
        basis += f", capped at the {limit:.2f} limit"
    return {"amount": round(amount, 2), "basis": basis}


@pev.tool(effect="query")
def check_coverage(
    claim: dict[str, Any], policy: dict[str, Any], payout: dict[str, Any]
) -> dict[str, Any] | VerifierFailure:
    """Approve a payout before any money moves: the peril is covered and the policy allows it."""
    if claim["policy_id"] != policy["policy_id"]:
        return VerifierFailure("", f"claim {claim['claim_id']} is not on {policy['policy_id']}")
    if claim["peril"] not in policy["perils"]:
        return VerifierFailure("", f"{policy['policy_id']} does not cover {claim['peril']}")
    allowed = _allowed(claim, policy)
    if payout["amount"] > allowed:
        return VerifierFailure(
            "", f"payout {payout['amount']:.2f} is more than {policy['policy_id']} allows"
        )
    return {"covered": True, "peril": claim["peril"], "approved_amount": payout["amount"]}


def refund_payment(effect: TaskEffect) -> dict[str, Any]:
    """Refund the payment an ``issue_payment`` effect made, by its payment id.

    pev calls it (``issue_payment``'s ``compensate``) when a replan replaces a payment; it is not
    a tool the planner can call. A payment refunded before is not refunded twice.
    """
    paid = effect.value
    if not isinstance(paid, Mapping) or "payment_id" not in paid:
        raise LookupError(f"record {effect.record_id} names no payment to refund")
    payment_id = str(paid["payment_id"])
    payment = next(
        (e for e in PAYMENTS if e["entry"] == "payment" and e["payment_id"] == payment_id), None
    )
    if payment is None:
        raise LookupError(f"no payment {payment_id!r} to refund")
    refund = next(
        (e for e in PAYMENTS if e["entry"] == "refund" and e["payment_id"] == payment_id), None
    )
    if refund is None:
        refund = {
            "entry": "refund",
            "refund_id": f"REF-{payment_id}",
            "payment_id": payment_id,
            "amount": payment["amount"],
            "account": payment["account"],
            "key": _key(),
        }
        PAYMENTS.append(refund)
    return {name: refund[name] for name in ("refund_id", "payment_id", "amount", "account")}


@pev.tool(effect="action", compensate=refund_payment)
def issue_payment(claim_id: str, amount: float, account: str | None = None) -> dict[str, Any]:
    """Pay the claimant of a claim; money leaves the account, so check the amount first.

    ``account`` is the bank account to pay into; without one, the account on the claim's
    policy. The payment names its account when the call did. A payment whose idempotency key
    was paid before is not paid twice.
    """
    key = _key()
    for entry in PAYMENTS:
        if key is not None and entry["entry"] == "payment" and entry["key"] == key:
            return _payment(entry, named=account is not None)
    claim = _CLAIMS[claim_id]
    paid_before = sum(1 for e in PAYMENTS if e["entry"] == "payment" and e["claim_id"] == claim_id)
    entry = {
        "entry": "payment",
        "payment_id": f"PAY-{claim_id}" + (f"-{paid_before + 1}" if paid_before else ""),
        "claim_id": claim_id,
        "amount": round(amount, 2),
        "account": account or _POLICIES[str(claim["policy_id"])]["settlement_account"],
        "key": key,
    }
    PAYMENTS.append(entry)
    return _payment(entry, named=account is not None)


def _payment(entry: Mapping[str, Any], *, named: bool) -> dict[str, Any]:
    """What ``issue_payment`` returns of a ledger entry."""
    payment = {
        "payment_id": entry["payment_id"],
        "claim_id": entry["claim_id"],
        "amount": entry["amount"],
        "status": "issued",
    }
    return payment | ({"account": entry["account"]} if named else {})


def _key() -> str | None:
    """The idempotency key of the call being made; ``None`` outside a task."""
    try:
        return current_node_context().idempotency_key
    except LookupError:
        return None


# Where a plan pays: where the claim says (the account its note asks for, if any), or the
# account on the policy.
_AS_ASKED: JsonValue = {"$ref": "claim.pay_to"}
_ON_FILE: JsonValue = {"$ref": "policy.settlement_account"}


def planner(request: PlanRequest) -> Plan:
    """Plan the claim's settlement; the first plan follows the claimant's note.

    A scripted stand-in for an LLM planner that reads the note ("customer requests full
    reimbursement", "paid into their new account") and the tool description offering
    ``full=True``, and takes both. A replan follows the verifier's feedback instead: a verdict
    that blames the payout has it recomputed from the policy's deductible and limit; one that
    blames only the payment has it paid into the account on the policy, the rest of the plan
    kept. The feedback is written into the new node's description, so the ledger shows why the
    plan changed.
    """
    claim_id = _claim_id(request.input)
    verdict = request.verdict
    if request.kind is RevisionKind.INITIAL or verdict is None:
        return _settlement(
            claim_id, full=True, why="reimburse in full, as the claimant asked", account=_AS_ASKED
        )
    previous = request.previous_plan
    if "payout" in verdict.failed_nodes and request.feedback:
        return _settlement(
            claim_id, full=False, why=f"recompute: {request.feedback}", account=_AS_ASKED
        )
    if "payment" in verdict.failed_nodes and previous is not None and request.feedback:
        return _paid_on_file(previous, why=f"pay the account on file: {request.feedback}")
    return _settlement(claim_id, full=False, why="follow the policy's terms", account=_ON_FILE)


def _paid_on_file(previous: Plan, *, why: str) -> Plan:
    """``previous`` with its payment made to the policy's account on file, and nothing else."""
    nodes = tuple(
        dataclasses.replace(
            node,
            description=f"pay the approved amount ({why})",
            args={**node.args, "account": _ON_FILE},
            after=(*node.after, "policy") if "policy" not in node.after else node.after,
        )
        if node.tool == "issue_payment"
        else node
        for node in previous.nodes
    )
    return Plan(previous.goal, nodes)


def _settlement(claim_id: str, *, full: bool, why: str, account: JsonValue = None) -> Plan:
    """The settlement plan: fetch, compute, check, pay (``account``: where; ``None``: on file)."""
    if full:
        payout_args: dict[str, Any] = {
            "claimed_amount": {"$ref": "claim.claimed_amount"},
            "full": True,
        }
    else:
        payout_args = {
            "claimed_amount": {"$ref": "claim.claimed_amount"},
            "deductible": {"$ref": "policy.deductible"},
            "limit": {"$ref": "policy.limit"},
        }
    return Plan(
        GOAL,
        (
            PlanNode(
                "claim",
                f"fetch claim {claim_id}",
                tool="fetch_claim",
                args={"claim_id": claim_id},
                effect=Effect.QUERY,
            ),
            PlanNode(
                "policy",
                "fetch the claim's policy",
                tool="fetch_policy",
                args={"policy_id": {"$ref": "claim.policy_id"}},
                after=("claim",),
                effect=Effect.QUERY,
            ),
            PlanNode(
                "payout",
                f"compute the payout ({why})",
                tool="compute_payout",
                args=payout_args,
                after=("claim", "policy"),
                effect=Effect.QUERY,
            ),
            PlanNode(
                "coverage",
                "approve the payout against the policy before paying",
                tool="check_coverage",
                args={
                    "claim": {"$ref": "claim"},
                    "policy": {"$ref": "policy"},
                    "payout": {"$ref": "payout"},
                },
                after=("claim", "policy", "payout"),
                effect=Effect.QUERY,
            ),
            PlanNode(
                "payment",
                "pay the approved amount",
                tool="issue_payment",
                args={
                    "claim_id": {"$ref": "claim.claim_id"},
                    "amount": {"$ref": "coverage.approved_amount"},
                    **({"account": account} if account is not None else {}),
                },
                after=("claim", "policy", "coverage")
                if account == _ON_FILE
                else ("claim", "coverage"),
            ),
        ),
    )


def verifier(request: VerifyRequest) -> Verdict:
    """Recompute what the policy allows from the fetched claim and policy; check what was paid.

    The verifier finds nodes by the tool they call, so it checks any plan built from these
    tools, and cites the execution records whose outputs it read.
    """
    claim, claim_node, claim_ref = _output(request, "fetch_claim")
    policy, policy_node, policy_ref = _output(request, "fetch_policy")
    payout, payout_node, payout_ref = _output(request, "compute_payout")
    payment, payment_node, payment_ref = _output(request, "issue_payment")
    checks: dict[str, tuple[bool, tuple[str, ...]]] = {}
    failed: set[str] = set()
    problems: list[str] = []

    if claim is None or policy is None:
        missing = [n for n, v in ((claim_node, claim), (policy_node, policy)) if v is None]
        failed.update(n for n in missing if n)
        feedback = "the claim and its policy must both be fetched before anything is decided"
        for criterion in (COVERED, WITHIN_TERMS, PAID):
            checks[criterion] = (False, _refs(claim_ref, policy_ref))
        return _verdict(request, checks, failed=failed, feedback=feedback)

    covered = claim["peril"] in policy["perils"] and claim["policy_id"] == policy["policy_id"]
    checks[COVERED] = (covered, _refs(claim_ref, policy_ref))
    if not covered:
        # Re-planning cannot make the policy cover this peril: the goal is unreachable.
        return _verdict(
            request,
            checks,
            failed=set(),
            feedback=f"{policy['policy_id']} does not cover {claim['peril']}",
            unreachable=True,
        )

    allowed = _allowed(claim, policy)
    terms = (
        f"{policy['policy_id']} pays the claimed {claim['claimed_amount']:.2f} less its "
        f"{policy['deductible']:.2f} deductible, capped at its {policy['limit']:.2f} limit: "
        f"{allowed:.2f}"
    )
    computed = payout["amount"] if payout is not None else None
    within = computed is not None and abs(computed - allowed) < 0.005
    checks[WITHIN_TERMS] = (within, _refs(claim_ref, policy_ref, payout_ref))
    if not within:
        failed.add(payout_node or "payout")
        if computed is None:
            problems.append(f"no payout was computed; {terms}")
        else:
            problems.append(
                f"the payout of {computed:.2f} ({payout['basis']}) is not what the policy "
                f"allows: {terms}; recompute it from the policy's deductible and limit"
                + (", not in full" if computed > allowed else "")
            )

    paid = payment["amount"] if payment is not None else None
    # A payment that names no account went to the one on the policy.
    on_file = policy.get("settlement_account")
    paid_into = payment.get("account", on_file) if payment is not None else None
    paid_right = paid is not None and abs(paid - allowed) < 0.005 and paid_into == on_file
    checks[PAID] = (paid_right, _refs(policy_ref, payout_ref, payment_ref))
    if paid is None:
        problems.append("nothing was paid")
        if within and payment_node is not None:
            # The payout was right, so the payment itself is at fault (it failed or was left out
            # of the plan's reach); a wrong payout is blamed alone and its payment redone with it.
            failed.add(payment_node)
    elif abs(paid - allowed) >= 0.005:
        failed.add(payment_node or "payment")
        problems.append(f"{paid:.2f} was paid, but the policy allows {allowed:.2f}")
    elif paid_into != on_file:
        failed.add(payment_node or "payment")
        problems.append(
            f"{paid:.2f} was paid into {paid_into}, which is not the account on "
            f"{policy['policy_id']} ({on_file}); pay the account on file"
        )
    return _verdict(request, checks, failed=failed, feedback="; ".join(problems))


def _allowed(claim: Mapping[str, Any], policy: Mapping[str, Any]) -> float:
    """What the policy pays for a claim: the claimed amount less the deductible, capped."""
    amount = max(float(claim["claimed_amount"]) - float(policy["deductible"]), 0.0)
    return round(min(amount, float(policy["limit"])), 2)


def _claim_id(value: object) -> str:
    """The claim the task is about: the input itself, or its ``claim_id`` entry."""
    claim_id = value.get("claim_id") if isinstance(value, Mapping) else value
    if not isinstance(claim_id, str) or not claim_id.strip():
        raise ValueError(f"the input names no claim: {value!r} (try {{claim_id = 'CLM-1042'}})")
    return claim_id.strip()


def _output(request: VerifyRequest, tool: str) -> tuple[Any, str | None, str | None]:
    """The output, node id and ``record:<id>`` of the plan's node calling ``tool``.

    The output is ``None`` when the node did not succeed; the record is its latest succeeded one.
    """
    node = request.node_calling(tool)
    if node is None:
        return None, None, None
    ref = request.record_ref(node.id)
    return (request.output(node.id) if ref else None), node.id, ref


def _refs(*refs: str | None) -> tuple[str, ...]:
    return tuple(ref for ref in refs if ref)


def _verdict(
    request: VerifyRequest,
    checks: Mapping[str, tuple[bool, tuple[str, ...]]],
    *,
    failed: set[str],
    feedback: str,
    unreachable: bool = False,
) -> Verdict:
    """One result per contract criterion, verbatim; a criterion not checked here is unknown."""
    return Verdict.from_checks(
        request.contract,
        checks,
        failed_nodes=failed & set(request.plan.node_ids),
        feedback=feedback,
        unreachable=unreachable,
    )
