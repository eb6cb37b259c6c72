"""Verdict constructors refuse criteria that are not the contract's.

See docs/engine.md, "Failures that speak".
"""

from __future__ import annotations

import pytest

from pev.errors import ContractError
from pev.model import CriterionStatus, Verdict, VerificationContract

CONTRACT = VerificationContract(
    "recovery", "book a room", ["the room is booked", "the guest has a confirmation"]
)


def test_from_checks_refuses_a_criterion_with_a_trailing_full_stop() -> None:
    """The issue's case: the error names the criterion and the closest contract criterion."""
    with pytest.raises(ContractError) as raised:
        Verdict.from_checks(CONTRACT, {"the room is booked.": True})
    message = str(raised.value)
    assert "'the room is booked.'" in message
    assert "did you mean 'the room is booked'?" in message
    assert raised.value.field == "success_criteria"


def test_the_closest_criterion_is_named_even_for_a_distant_one() -> None:
    """However far off, the error names the contract criterion most like it."""
    with pytest.raises(ContractError, match="did you mean 'the guest has a confirmation'"):
        Verdict.from_checks(CONTRACT, {"confirmation sent to guest": False})


def test_failed_refuses_an_unmet_criterion_not_in_the_contract() -> None:
    """Verdict.failed(unmet=...) checks its criteria the same way."""
    with pytest.raises(ContractError, match="unmet names 'the room is bookd'"):
        Verdict.failed(CONTRACT, unmet=["the room is bookd"])


def test_a_contract_without_criteria_says_so() -> None:
    """A check against an off contract, which has no criteria, says that instead."""
    with pytest.raises(ContractError, match="has no success criteria"):
        Verdict.from_checks(VerificationContract("off"), {"anything": True})


def test_from_checks_refuses_a_check_that_is_not_a_bool() -> None:
    """A check must be a bool or (bool, refs): a truthy string is not taken for a pass."""
    with pytest.raises(TypeError, match="the check of criterion 'the room is booked'"):
        Verdict.from_checks(CONTRACT, {"the room is booked": "yes"})  # type: ignore[dict-item]


def test_from_checks_still_takes_none_as_not_checked() -> None:
    """A criterion mapped to None is unknown, as one left out is."""
    checks: dict[str, bool | None] = {
        "the room is booked": True,
        "the guest has a confirmation": None,
    }
    verdict = Verdict.from_checks(CONTRACT, checks)  # type: ignore[arg-type]
    assert [r.status for r in verdict.criteria] == [
        CriterionStatus.SATISFIED,
        CriterionStatus.UNKNOWN,
    ]
