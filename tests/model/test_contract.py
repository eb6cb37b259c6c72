"""The verification contract (docs/design.md §2.4): every bad contract names its field."""

from __future__ import annotations

import pytest

from pev.errors import ContractError, PevError
from pev.model import VerificationContract, VerificationMode, check_contract

CRITERIA = ("the cube is in the tray",)


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        pytest.param(
            {"mode": "recovery", "goal": "", "success_criteria": CRITERIA},
            "goal",
            "needs a non-empty goal",
            id="empty-goal",
        ),
        pytest.param(
            {"mode": "enforce", "goal": "  \n", "success_criteria": CRITERIA},
            "goal",
            "needs a non-empty goal",
            id="blank-goal",
        ),
        pytest.param(
            {"mode": "audit", "goal": 42, "success_criteria": CRITERIA},
            "goal",
            "goal must be a string",
            id="goal-not-a-string",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": ()},
            "success_criteria",
            "at least one success criterion",
            id="no-criteria",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up"},
            "success_criteria",
            "at least one success criterion",
            id="criteria-left-out",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": ("ok", " ")},
            "success_criteria",
            "must be non-empty",
            id="blank-criterion",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": ("a", "b", "a")},
            "success_criteria",
            "'a' is listed more than once",
            id="duplicate-criterion",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": "the tray is full"},
            "success_criteria",
            r"not one string; write \['the tray is full'\]",
            id="criteria-a-plain-string",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": 3},
            "success_criteria",
            "must be a list of strings",
            id="criteria-not-a-list",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "tidy up", "success_criteria": ("ok", 7)},
            "success_criteria",
            "must hold strings; found a int",
            id="criterion-not-a-string",
        ),
        pytest.param(
            {"mode": "strict", "goal": "tidy up", "success_criteria": CRITERIA},
            "mode",
            "mode must be one of off, audit, enforce, recovery; got 'strict'",
            id="bad-mode",
        ),
        pytest.param(
            {"mode": "RECOVERY", "goal": "tidy up", "success_criteria": CRITERIA},
            "mode",
            "got 'RECOVERY'",
            id="mode-wrong-case",
        ),
        pytest.param(
            {"mode": "off", "constraints": "keep the arm slow"},
            "constraints",
            "not one string",
            id="constraints-a-plain-string",
        ),
        pytest.param(
            {
                "mode": "recovery",
                "goal": "tidy up",
                "success_criteria": CRITERIA,
                "required_evidence": "image",
            },
            "required_evidence",
            "not one string",
            id="required-evidence-a-plain-string",
        ),
        pytest.param(
            {
                "mode": "recovery",
                "goal": "tidy up",
                "success_criteria": CRITERIA,
                "required_evidence": ("state", ""),
            },
            "required_evidence",
            "blank kind",
            id="blank-evidence-kind",
        ),
    ],
)
def test_bad_contract_names_its_field(kwargs: dict[str, object], field: str, message: str) -> None:
    """Each incomplete or malformed contract raises ContractError naming the field at fault."""
    with pytest.raises(ContractError, match=message) as info:
        VerificationContract(**kwargs)  # type: ignore[arg-type]

    assert info.value.field == field


def test_contract_error_is_a_pev_error() -> None:
    """ContractError sits under the PevError root."""
    assert issubclass(ContractError, PevError)


def test_default_mode_is_recovery() -> None:
    """A contract with only a goal and criteria is in recovery mode."""
    contract = VerificationContract(goal="tidy up", success_criteria=CRITERIA)

    assert contract.mode is VerificationMode.RECOVERY


def test_off_mode_needs_nothing() -> None:
    """Mode off accepts an empty goal and no criteria."""
    contract = VerificationContract(VerificationMode.OFF)

    assert contract.goal == ""
    assert contract.success_criteria == ()


@pytest.mark.parametrize("mode", [pytest.param(m, id=m.value) for m in VerificationMode])
def test_every_mode_accepts_a_complete_contract(mode: VerificationMode) -> None:
    """Any mode takes a contract with a goal and distinct criteria."""
    contract = VerificationContract(mode, "tidy up", ("a", "b"))

    assert contract.mode is mode


def test_mode_given_as_text_becomes_a_mode() -> None:
    """mode='audit' is stored as VerificationMode.AUDIT."""
    contract = VerificationContract("audit", "tidy up", CRITERIA)  # type: ignore[arg-type]

    assert contract.mode is VerificationMode.AUDIT


def test_lists_become_tuples() -> None:
    """Criteria, constraints and evidence kinds given as lists are stored as tuples."""
    contract = VerificationContract(
        VerificationMode.RECOVERY,
        "tidy up",
        ["a", "b"],  # type: ignore[arg-type]
        constraints=["gently"],  # type: ignore[arg-type]
        required_evidence=["image"],  # type: ignore[arg-type]
    )

    assert contract.success_criteria == ("a", "b")
    assert contract.constraints == ("gently",)
    assert contract.required_evidence == ("image",)


def test_required_evidence_without_observer_is_an_error() -> None:
    """check_contract rejects required evidence when the task has no observer."""
    contract = VerificationContract(
        VerificationMode.ENFORCE, "tidy up", CRITERIA, required_evidence=("image", "state")
    )

    with pytest.raises(ContractError, match=r"requires evidence \(image, state\)") as info:
        check_contract(contract, has_observer=False)

    assert info.value.field == "required_evidence"


def test_required_evidence_with_observer_is_fine() -> None:
    """check_contract accepts required evidence when an observer will capture it."""
    contract = VerificationContract(
        VerificationMode.ENFORCE, "tidy up", CRITERIA, required_evidence=("image",)
    )

    check_contract(contract, has_observer=True)


def test_no_required_evidence_needs_no_observer() -> None:
    """A contract that requires no evidence is fine without an observer."""
    check_contract(
        VerificationContract(goal="tidy up", success_criteria=CRITERIA), has_observer=False
    )
