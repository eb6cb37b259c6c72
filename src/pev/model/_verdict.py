"""Verdicts, criterion results, and how far a verdict can be trusted (docs/design.md §2.5)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from pev.errors import ContractError
from pev.model._contract import VerificationContract

__all__ = [
    "CriterionResult",
    "CriterionStatus",
    "Reliability",
    "Verdict",
    "VerdictStatus",
    "passes",
]


class VerdictStatus(StrEnum):
    """What the verifier concluded."""

    SUCCESS = "success"
    """Every criterion holds."""
    FAILURE = "failure"
    """The goal is judged unreachable: re-planning will not help."""
    REPLAN_REQUIRED = "replan_required"
    """Not there yet, but the goal is still reachable."""
    INCONCLUSIVE = "inconclusive"
    """The verifier could not tell."""


class CriterionStatus(StrEnum):
    """Whether one success criterion holds."""

    SATISFIED = "satisfied"
    UNSATISFIED = "unsatisfied"
    UNKNOWN = "unknown"


class Reliability(StrEnum):
    """How far a verdict can be trusted; decided by the engine, never claimed by the verifier."""

    OK = "ok"
    THROWN = "thrown"
    """The verifier raised an ordinary exception or ran past ``verify_timeout_s``."""
    MALFORMED = "malformed"
    """It returned nothing, or something that is not a valid verdict for this task."""
    INCONCLUSIVE = "inconclusive"
    """It returned a valid verdict with status ``inconclusive``."""


def _as_tuple(value: object) -> object:
    if isinstance(value, list):
        return tuple(value)
    return value


# CriterionResult and Verdict keep the documented positional signatures, which are public API.
@dataclass(frozen=True, slots=True)
class CriterionResult:
    """The verifier's answer for one contract criterion, quoted verbatim, with its evidence."""

    criterion: str
    status: CriterionStatus
    evidence_refs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.status, str) and self.status in CriterionStatus.__members__.values():
            object.__setattr__(self, "status", CriterionStatus(self.status))
        object.__setattr__(self, "evidence_refs", _as_tuple(self.evidence_refs))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a verifier says about one execute round.

    Construction is lenient (lists become tuples, strings become enum members where they name
    one) so that a verifier's mistakes reach the engine's check, which classifies them as
    ``malformed`` instead of raising inside the verifier.

    Attributes:
        status: ``success``, ``failure``, ``replan_required`` or ``inconclusive``.
        failed_nodes: Node ids the verifier blames.
        feedback: Text for the re-planner.
        criteria: One result per contract criterion.
        unmet_criteria: Criteria still to be met, for the re-planner.
        preserved_constraints: Constraints a replan must keep.
        guidance: Advice for the re-planner.
        evidence_refs: ``evidence:<id>`` / ``record:<id>`` references the verdict rests on.
    """

    status: VerdictStatus
    failed_nodes: frozenset[str] = frozenset()
    feedback: str = ""
    criteria: tuple[CriterionResult, ...] = ()
    unmet_criteria: tuple[str, ...] = ()
    preserved_constraints: tuple[str, ...] = ()
    guidance: str = ""
    evidence_refs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.status, str) and self.status in VerdictStatus.__members__.values():
            object.__setattr__(self, "status", VerdictStatus(self.status))
        if isinstance(self.failed_nodes, list | tuple | set):
            object.__setattr__(self, "failed_nodes", frozenset(self.failed_nodes))
        for name in ("criteria", "unmet_criteria", "preserved_constraints", "evidence_refs"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name)))

    @classmethod
    def passed(
        cls,
        contract: VerificationContract,
        *,
        evidence_refs: Iterable[str] = (),
        feedback: str = "",
    ) -> Verdict:
        """A success verdict from a plain "pass": every criterion satisfied, with its evidence."""
        refs = tuple(evidence_refs)
        return cls(
            VerdictStatus.SUCCESS,
            feedback=feedback,
            criteria=tuple(
                CriterionResult(criterion, CriterionStatus.SATISFIED, refs)
                for criterion in contract.success_criteria
            ),
            evidence_refs=refs,
        )

    @classmethod
    def failed(
        cls,
        contract: VerificationContract,
        *,
        failed_nodes: Iterable[str] = (),
        feedback: str = "",
        unmet: Iterable[str] | None = None,
        unreachable: bool = False,
        guidance: str = "",
        evidence_refs: Iterable[str] = (),
    ) -> Verdict:
        """A verdict from a plain "fail".

        Args:
            contract: The task's contract; one result is filled in per criterion.
            failed_nodes: Node ids to blame.
            feedback: Text for the re-planner.
            unmet: The criteria that do not hold (the others are satisfied); ``None`` marks every
                criterion unsatisfied.
            unreachable: The goal cannot be reached: status ``failure`` instead of
                ``replan_required``.
            guidance: Advice for the re-planner.
            evidence_refs: References the verdict rests on.

        Raises:
            ContractError: ``unmet`` names a criterion that is not in the contract (the error
                names the closest one that is).
        """
        refs = tuple(evidence_refs)
        unmet_set = set(contract.success_criteria) if unmet is None else set(unmet)
        _check_named(contract, unmet_set, "unmet")
        results = tuple(
            CriterionResult(
                criterion,
                CriterionStatus.UNSATISFIED
                if criterion in unmet_set
                else CriterionStatus.SATISFIED,
                refs,
            )
            for criterion in contract.success_criteria
        )
        return cls(
            VerdictStatus.FAILURE if unreachable else VerdictStatus.REPLAN_REQUIRED,
            failed_nodes=frozenset(failed_nodes),
            feedback=feedback,
            criteria=results,
            unmet_criteria=tuple(c for c in contract.success_criteria if c in unmet_set),
            preserved_constraints=contract.constraints,
            guidance=guidance,
            evidence_refs=refs,
        )

    @classmethod
    def from_checks(
        cls,
        contract: VerificationContract,
        checks: Mapping[str, bool | tuple[bool, Iterable[str]]],
        *,
        failed_nodes: Iterable[str] = (),
        feedback: str = "",
        unreachable: bool = False,
        guidance: str = "",
    ) -> Verdict:
        """A verdict from a check per criterion, each a bool or ``(bool, evidence refs)``.

        Every contract criterion gets one result, quoted verbatim: ``satisfied`` or
        ``unsatisfied`` as checked, ``unknown`` when ``checks`` does not mention it (or maps it
        to ``None``). All satisfied is ``success``; any unsatisfied is ``replan_required``
        (``failure`` when ``unreachable``) blaming ``failed_nodes``; only unknowns left is
        ``inconclusive``.

        Raises:
            ContractError: ``checks`` names a criterion that is not in the contract (a typo, a
                trailing full stop): the error names it and the closest contract criterion.
            TypeError: A check is neither a bool nor a ``(bool, refs)`` pair.
        """
        _check_named(contract, checks, "checks")
        results: list[CriterionResult] = []
        for criterion in contract.success_criteria:
            check = checks.get(criterion)
            if check is None:
                results.append(CriterionResult(criterion, CriterionStatus.UNKNOWN))
                continue
            ok, refs = _check_of(criterion, check)
            status = CriterionStatus.SATISFIED if ok else CriterionStatus.UNSATISFIED
            results.append(CriterionResult(criterion, status, tuple(refs)))
        cited = tuple(dict.fromkeys(ref for result in results for ref in result.evidence_refs))
        statuses = {result.status for result in results}
        if statuses <= {CriterionStatus.SATISFIED}:
            return cls(
                VerdictStatus.SUCCESS,
                feedback=feedback,
                criteria=tuple(results),
                evidence_refs=cited,
            )
        if CriterionStatus.UNSATISFIED not in statuses:
            return cls(
                VerdictStatus.INCONCLUSIVE,
                feedback=feedback or "some criteria could not be checked",
                criteria=tuple(results),
                evidence_refs=cited,
            )
        return cls(
            VerdictStatus.FAILURE if unreachable else VerdictStatus.REPLAN_REQUIRED,
            failed_nodes=frozenset(failed_nodes),
            feedback=feedback,
            criteria=tuple(results),
            unmet_criteria=tuple(
                r.criterion for r in results if r.status is not CriterionStatus.SATISFIED
            ),
            preserved_constraints=contract.constraints,
            guidance=guidance,
            evidence_refs=cited,
        )

    @classmethod
    def judge(
        cls,
        ok: bool,
        contract: VerificationContract,
        *,
        failed_nodes: Iterable[str] = (),
        feedback: str = "",
        evidence_refs: Iterable[str] = (),
    ) -> Verdict:
        """A verdict from a boolean judgement: :meth:`passed` if ``ok``, else :meth:`failed`."""
        if ok:
            return cls.passed(contract, evidence_refs=evidence_refs, feedback=feedback)
        return cls.failed(
            contract, failed_nodes=failed_nodes, feedback=feedback, evidence_refs=evidence_refs
        )


def _check_named(contract: VerificationContract, named: Iterable[object], argument: str) -> None:
    """Refuse criteria that are not the contract's, naming the closest contract criterion."""
    criteria = contract.success_criteria
    for name in named:
        if name in criteria:
            continue
        if not criteria:
            hint = "this contract has no success criteria (its mode is off)"
        else:
            text = name if isinstance(name, str) else repr(name)
            closest = max(criteria, key=lambda c: difflib.SequenceMatcher(None, text, c).ratio())
            hint = f"did you mean {closest!r}? Quote each criterion verbatim"
        raise ContractError(
            f"{argument} names {name!r}, which is not a success criterion of the contract; "
            f"{hint} (the contract's criteria: {list(criteria)})",
            field="success_criteria",
        )


def _check_of(criterion: str, check: object) -> tuple[bool, tuple[str, ...]]:
    """A check as ``(ok, refs)``; a bool is ``(ok, ())``."""
    if isinstance(check, bool):
        return check, ()
    if isinstance(check, tuple | list) and len(check) == 2 and isinstance(check[0], bool):
        refs = check[1]
        if not isinstance(refs, str) and isinstance(refs, Iterable):
            return check[0], tuple(refs)
    raise TypeError(
        f"the check of criterion {criterion!r} must be a bool or an (ok, evidence refs) pair, "
        f"got a {type(check).__name__}"
    )


def passes(verdict: Verdict | None, reliability: Reliability | None) -> bool:
    """True iff the verdict's status is ``success`` and its reliability is ``ok``."""
    return (
        verdict is not None
        and reliability == Reliability.OK
        and verdict.status == VerdictStatus.SUCCESS
    )
