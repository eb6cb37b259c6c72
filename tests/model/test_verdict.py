"""Verdicts (docs/design.md §2.5): the convenience constructors and passes()."""

from __future__ import annotations

import pytest

from pev.model import (
    CriterionResult,
    CriterionStatus,
    Reliability,
    Verdict,
    VerdictStatus,
    VerificationContract,
    VerificationMode,
    passes,
)

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY,
    "put the cube in the tray",
    ("the cube is in the tray", "the gripper is open"),
    constraints=("do not touch the lamp",),
)
REFS = ("evidence:e1", "record:r1")


def _statuses(verdict: Verdict) -> dict[str, CriterionStatus]:
    return {result.criterion: result.status for result in verdict.criteria}


def test_passed_satisfies_every_criterion() -> None:
    """Verdict.passed gives success with one satisfied result per criterion, in order."""
    verdict = Verdict.passed(CONTRACT, evidence_refs=REFS, feedback="looks good")

    assert verdict.status is VerdictStatus.SUCCESS
    assert verdict.criteria == (
        CriterionResult("the cube is in the tray", CriterionStatus.SATISFIED, REFS),
        CriterionResult("the gripper is open", CriterionStatus.SATISFIED, REFS),
    )
    assert verdict.evidence_refs == REFS
    assert verdict.feedback == "looks good"
    assert verdict.failed_nodes == frozenset()


def test_plain_fail_means_replan_required() -> None:
    """Verdict.failed without unreachable asks for a replan: the goal is still reachable."""
    verdict = Verdict.failed(CONTRACT, failed_nodes=["grip"], feedback="cube slipped")

    assert verdict.status is VerdictStatus.REPLAN_REQUIRED
    assert verdict.failed_nodes == frozenset({"grip"})
    assert verdict.feedback == "cube slipped"


def test_unreachable_fail_means_failure() -> None:
    """Verdict.failed(unreachable=True) judges the goal unreachable: status failure."""
    assert Verdict.failed(CONTRACT, unreachable=True).status is VerdictStatus.FAILURE


def test_fail_without_unmet_marks_every_criterion_unsatisfied() -> None:
    """With no unmet list, every criterion is unsatisfied and unmet."""
    verdict = Verdict.failed(CONTRACT)

    assert _statuses(verdict) == {
        "the cube is in the tray": CriterionStatus.UNSATISFIED,
        "the gripper is open": CriterionStatus.UNSATISFIED,
    }
    assert verdict.unmet_criteria == CONTRACT.success_criteria


def test_fail_with_unmet_satisfies_the_rest() -> None:
    """Criteria not named as unmet are satisfied."""
    verdict = Verdict.failed(CONTRACT, unmet=["the gripper is open"])

    assert _statuses(verdict) == {
        "the cube is in the tray": CriterionStatus.SATISFIED,
        "the gripper is open": CriterionStatus.UNSATISFIED,
    }
    assert verdict.unmet_criteria == ("the gripper is open",)


def test_fail_carries_constraints_guidance_and_refs() -> None:
    """The contract's constraints are preserved and guidance and refs are kept."""
    verdict = Verdict.failed(CONTRACT, guidance="approach from above", evidence_refs=REFS)

    assert verdict.preserved_constraints == ("do not touch the lamp",)
    assert verdict.guidance == "approach from above"
    assert verdict.evidence_refs == REFS
    assert all(result.evidence_refs == REFS for result in verdict.criteria)


@pytest.mark.parametrize(
    ("ok", "expected"),
    [
        pytest.param(True, VerdictStatus.SUCCESS, id="pass"),
        pytest.param(False, VerdictStatus.REPLAN_REQUIRED, id="fail"),
    ],
)
def test_judge_from_a_boolean(ok: bool, expected: VerdictStatus) -> None:
    """Verdict.judge is passed() for True and a plain failed() for False."""
    verdict = Verdict.judge(ok, CONTRACT, evidence_refs=REFS)

    assert verdict.status is expected
    assert [result.criterion for result in verdict.criteria] == list(CONTRACT.success_criteria)


def test_judge_false_blames_the_given_nodes() -> None:
    """A failing judgement keeps the blamed nodes and feedback."""
    verdict = Verdict.judge(False, CONTRACT, failed_nodes=("place",), feedback="missed")

    assert verdict == Verdict.failed(CONTRACT, failed_nodes=("place",), feedback="missed")


def test_constructors_on_an_off_contract_have_no_criteria() -> None:
    """A contract without criteria gives verdicts without criterion results."""
    off = VerificationContract(VerificationMode.OFF)

    assert Verdict.passed(off).criteria == ()
    assert Verdict.failed(off).criteria == ()


def test_lenient_construction_normalises_text_and_lists() -> None:
    """Status text becomes an enum, lists become tuples and failed_nodes a frozenset."""
    verdict = Verdict(
        "replan_required",  # type: ignore[arg-type]
        failed_nodes=["a", "a"],  # type: ignore[arg-type]
        criteria=[CriterionResult("c", "unknown", ["evidence:e1"])],  # type: ignore[arg-type]
        evidence_refs=["record:r1"],  # type: ignore[arg-type]
    )

    assert verdict.status is VerdictStatus.REPLAN_REQUIRED
    assert verdict.failed_nodes == frozenset({"a"})
    assert verdict.criteria == (CriterionResult("c", CriterionStatus.UNKNOWN, ("evidence:e1",)),)
    assert verdict.evidence_refs == ("record:r1",)


def test_lenient_construction_keeps_unknown_status_text() -> None:
    """A status that names no member is kept as given, for classify_verdict to reject."""
    assert Verdict("maybe").status == "maybe"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "reliability", "expected"),
    [
        pytest.param(VerdictStatus.SUCCESS, Reliability.OK, True, id="success-ok"),
        pytest.param(VerdictStatus.SUCCESS, Reliability.MALFORMED, False, id="success-malformed"),
        pytest.param(VerdictStatus.SUCCESS, Reliability.THROWN, False, id="success-thrown"),
        pytest.param(
            VerdictStatus.SUCCESS, Reliability.INCONCLUSIVE, False, id="success-inconclusive"
        ),
        pytest.param(VerdictStatus.SUCCESS, None, False, id="success-no-reliability"),
        pytest.param(VerdictStatus.REPLAN_REQUIRED, Reliability.OK, False, id="replan-ok"),
        pytest.param(VerdictStatus.FAILURE, Reliability.OK, False, id="failure-ok"),
        pytest.param(VerdictStatus.INCONCLUSIVE, Reliability.OK, False, id="inconclusive-ok"),
    ],
)
def test_passes(status: VerdictStatus, reliability: Reliability | None, expected: bool) -> None:
    """A verdict passes iff its status is success and its reliability is ok."""
    assert passes(Verdict(status), reliability) is expected


def test_no_verdict_never_passes() -> None:
    """passes(None, ok) is False."""
    assert passes(None, Reliability.OK) is False


def test_from_checks_all_satisfied_is_success_citing_the_evidence() -> None:
    """Every criterion checked true: success, one satisfied result each, refs gathered once."""
    contract = VerificationContract("recovery", "g", ["a", "b"])
    verdict = Verdict.from_checks(contract, {"a": (True, ["record:1:x"]), "b": True})
    assert verdict.status is VerdictStatus.SUCCESS
    assert [r.status for r in verdict.criteria] == [CriterionStatus.SATISFIED] * 2
    assert verdict.evidence_refs == ("record:1:x",)


def test_from_checks_unsatisfied_blames_nodes_and_lists_unmet() -> None:
    """A false check: replan_required blaming the nodes, with the unmet criteria listed."""
    contract = VerificationContract("recovery", "g", ["a", "b"])
    verdict = Verdict.from_checks(contract, {"a": True, "b": False}, failed_nodes=["n2"])
    assert verdict.status is VerdictStatus.REPLAN_REQUIRED
    assert verdict.failed_nodes == {"n2"}
    assert verdict.unmet_criteria == ("b",)


def test_from_checks_unreachable_is_failure() -> None:
    """``unreachable=True`` turns a failed check into status failure."""
    contract = VerificationContract("recovery", "g", ["a"])
    assert Verdict.from_checks(contract, {"a": False}, unreachable=True).status is (
        VerdictStatus.FAILURE
    )


def test_from_checks_unchecked_criteria_are_unknown_and_inconclusive() -> None:
    """A criterion the checks do not mention is unknown; without a failure that is inconclusive."""
    contract = VerificationContract("recovery", "g", ["a", "b"])
    verdict = Verdict.from_checks(contract, {"a": True})
    assert verdict.status is VerdictStatus.INCONCLUSIVE
    assert verdict.criteria[1].status is CriterionStatus.UNKNOWN
