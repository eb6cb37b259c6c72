"""Classify what a verifier returned: ok, malformed or inconclusive (docs/design.md §2.5).

A verifier does not get to say how far it can be trusted: the engine reads its raw return with
:func:`classify_verdict`, against the task's contract, the plan that ran and the evidence
references that exist. ``thrown`` is decided by the engine's wrapper around the call, since a
raised exception never reaches this function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pev._json import freeze_json, thaw_json
from pev.codec import decode, dumps
from pev.errors import CodecError
from pev.model._contract import VerificationContract
from pev.model._plan import Plan
from pev.model._verdict import (
    CriterionResult,
    CriterionStatus,
    Reliability,
    Verdict,
    VerdictStatus,
)

__all__ = ["VerdictCheck", "classify_verdict", "raw_digest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class VerdictCheck:
    """The engine's reading of a verifier's return.

    Attributes:
        reliability: ``ok``, ``malformed`` or ``inconclusive``.
        verdict: The verdict when one could be read (also for a malformed one that parsed, so
            the ledger shows what the verifier said); ``None`` when nothing usable came back.
        problems: Why it is malformed, one sentence each; empty otherwise.
        raw_digest: sha256 of what came back, for the ledger.
    """

    reliability: Reliability
    verdict: Verdict | None
    problems: tuple[str, ...] = ()
    raw_digest: str


def raw_digest(raw: object) -> str:
    """A stable sha256 of a verifier's raw return, whatever its type."""
    if isinstance(raw, str | bytes):
        # surrogatepass: a lone surrogate (say from a JSON "\ud800" escape) still has a digest.
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    else:
        try:
            data = dumps(raw).encode("utf-8", "surrogatepass")
        except (CodecError, TypeError, ValueError, RecursionError):
            data = repr(raw).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def classify_verdict(
    raw: object,
    *,
    contract: VerificationContract,
    plan: Plan,
    known_refs: Collection[str],
) -> VerdictCheck:
    """Decide whether a verifier's return is a verdict that can be trusted.

    Args:
        raw: What the verifier returned: a :class:`Verdict`, its JSON text, a mapping, or
            anything else.
        contract: The task's contract: the criteria list must match it exactly.
        plan: The plan that ran: blamed nodes must be among its ids.
        known_refs: Every ``evidence:<id>`` and ``record:<id>`` reference that exists in the task.

    Returns:
        ``malformed`` with every problem listed, else ``inconclusive`` for status
        ``inconclusive``, else ``ok``.
    """
    digest = raw_digest(raw)
    verdict, problems = _read(raw)
    if verdict is None:
        return VerdictCheck(
            reliability=Reliability.MALFORMED, verdict=None, problems=problems, raw_digest=digest
        )
    problems = _verdict_problems(verdict, contract, plan, known_refs)
    if problems:
        reliability = Reliability.MALFORMED
    elif verdict.status is VerdictStatus.INCONCLUSIVE:
        reliability = Reliability.INCONCLUSIVE
    else:
        reliability = Reliability.OK
    return VerdictCheck(
        reliability=reliability, verdict=verdict, problems=problems, raw_digest=digest
    )


def _read(raw: object) -> tuple[Verdict | None, tuple[str, ...]]:
    if raw is None:
        return None, ("the verifier returned nothing",)
    if isinstance(raw, Verdict):
        return raw, ()
    if isinstance(raw, str | bytes | Mapping):
        try:
            data = _plain_mapping(raw) if isinstance(raw, Mapping) else _parse_json(raw)
            return decode(data, Verdict), ()
        except CodecError as exc:
            return None, (f"the verifier's output is not a verdict: {exc}",)
    return None, (f"the verifier returned a {type(raw).__name__}, not a Verdict",)


def _plain_mapping(raw: Mapping[object, object]) -> object:
    """Plain dicts and lists for any mapping (a JsonObject, say), as the codec decodes them."""
    try:
        return thaw_json(freeze_json(raw))
    except (TypeError, ValueError, RecursionError) as exc:
        raise CodecError(f"not a JSON object ({exc})") from exc


def _parse_json(text: str | bytes) -> object:
    try:
        return json.loads(text)
    # A verifier's text is untrusted: nesting deep enough to exhaust the stack is malformed too.
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CodecError(f"unparsable output ({exc})") from exc


def _verdict_problems(
    verdict: Verdict,
    contract: VerificationContract,
    plan: Plan,
    known_refs: Collection[str],
) -> tuple[str, ...]:
    problems: list[str] = []
    if not isinstance(verdict.status, VerdictStatus):
        allowed = ", ".join(VerdictStatus.__members__.values())
        problems.append(f"status {verdict.status!r} is not one of {allowed}")
    criteria = verdict.criteria if isinstance(verdict.criteria, tuple) else ()
    if not isinstance(verdict.criteria, tuple) or not all(
        isinstance(result, CriterionResult) for result in criteria
    ):
        problems.append("criteria must be a list of CriterionResult")
        criteria = ()
    problems.extend(_criteria_problems(criteria, contract))

    failed_nodes = verdict.failed_nodes if isinstance(verdict.failed_nodes, frozenset) else None
    if failed_nodes is None:
        problems.append("failed_nodes must be a set of node ids")
        failed_nodes = frozenset()
    plan_ids = set(plan.node_ids)
    unknown_nodes = sorted(str(node) for node in failed_nodes if node not in plan_ids)
    if unknown_nodes:
        problems.append(f"failed_nodes names ids that are not in the plan: {unknown_nodes}")

    if verdict.status is VerdictStatus.SUCCESS:
        not_met = [r.criterion for r in criteria if r.status is not CriterionStatus.SATISFIED]
        if not_met:
            problems.append(f"status success with criteria not satisfied: {not_met}")
        if failed_nodes:
            problems.append(f"status success while blaming nodes: {sorted(failed_nodes)}")

    refs: list[object] = []
    for owner, cited in [
        ("the verdict", verdict.evidence_refs),
        *((f"criterion {r.criterion!r}", r.evidence_refs) for r in criteria),
    ]:
        if isinstance(cited, tuple):
            refs.extend(cited)
        else:
            problems.append(f"{owner}: evidence_refs must be a list of references")
    # A junk reference may be unhashable: only strings are looked up.
    unknown_refs = sorted(
        {str(ref) for ref in refs if not isinstance(ref, str) or ref not in known_refs}
    )
    if unknown_refs:
        problems.append(f"cites evidence references that do not exist in this task: {unknown_refs}")
    return tuple(problems)


def _criteria_problems(
    criteria: tuple[CriterionResult, ...], contract: VerificationContract
) -> list[str]:
    problems: list[str] = []
    expected = contract.success_criteria
    answered = [result.criterion for result in criteria]
    missing = [criterion for criterion in expected if criterion not in answered]
    extra = [criterion for criterion in answered if criterion not in expected]
    repeated = sorted({c for c in answered if c in expected and answered.count(c) > 1})
    if missing:
        problems.append(f"no result for contract criteria {missing} (quote each verbatim)")
    if extra:
        problems.append(f"results for criteria that are not in the contract: {extra}")
    if repeated:
        problems.append(f"more than one result for criteria {repeated}")
    problems.extend(
        f"criterion {result.criterion!r} has status {result.status!r}; "
        "use satisfied, unsatisfied or unknown"
        for result in criteria
        if not isinstance(result.status, CriterionStatus)
    )
    return problems
