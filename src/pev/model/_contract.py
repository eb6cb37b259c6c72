"""The verification contract: what must hold for a task to succeed (docs/design.md §2.4)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, TypeAlias

from pev.errors import ContractError

__all__ = ["VerificationContract", "VerificationMode", "check_contract"]


class VerificationMode(StrEnum):
    """How the verifier's verdict is used."""

    OFF = "off"
    """The verifier is never called; the run succeeds iff execution succeeded."""
    AUDIT = "audit"
    """The verdict is recorded (with the action recovery would take) but changes nothing."""
    ENFORCE = "enforce"
    """A verdict that does not pass fails the task; never a replan."""
    RECOVERY = "recovery"
    """A verdict that does not pass is diagnosed and may lead to a replan (the default)."""


def _text_tuple(value: object, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ContractError(
            f"{field} must be a list of strings, not one string; write [{value!r}]", field=field
        )
    if not isinstance(value, Iterable):
        raise ContractError(f"{field} must be a list of strings", field=field)
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise ContractError(
                f"{field} must hold strings; found a {type(item).__name__}: {item!r}", field=field
            )
    return items


ModeName: TypeAlias = VerificationMode | Literal["off", "audit", "enforce", "recovery"]
"""A verification mode, or its name."""


# Positional, in the documented order: `VerificationContract(mode, goal, success_criteria, ...)`.
# The constructor takes a mode's name and any iterable of strings (the fields hold the mode and
# tuples), so `VerificationContract("recovery", "goal", ["criterion"])` is well typed.
@dataclass(frozen=True, slots=True, init=False)
class VerificationContract:
    """What the verifier checks, and how its verdict is used.

    Every mode but ``off`` needs a goal and at least one success criterion; the verifier returns
    one result per criterion, quoting it verbatim.

    Attributes:
        mode: ``off``, ``audit``, ``enforce`` or ``recovery`` (default).
        goal: What the task must achieve, in words.
        success_criteria: Distinct, non-empty checks that together mean success.
        constraints: Things any replan must preserve.
        required_evidence: Evidence kinds that need a fresh ``after`` observation in the round
            being verified (needs an observer).

    Raises:
        ContractError: On construction, naming the field at fault and the fix.
    """

    mode: VerificationMode = VerificationMode.RECOVERY
    goal: str = ""
    success_criteria: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    required_evidence: tuple[str, ...] = ()

    def __init__(
        self,
        mode: ModeName = VerificationMode.RECOVERY,
        goal: str = "",
        success_criteria: Iterable[str] = (),
        constraints: Iterable[str] = (),
        required_evidence: Iterable[str] = (),
    ) -> None:
        if mode not in VerificationMode.__members__.values():
            modes = ", ".join(VerificationMode.__members__.values())
            raise ContractError(f"mode must be one of {modes}; got {mode!r}", field="mode")
        if not isinstance(goal, str):
            raise ContractError("goal must be a string", field="goal")
        object.__setattr__(self, "mode", VerificationMode(mode))
        object.__setattr__(self, "goal", goal)
        for name, value in (
            ("success_criteria", success_criteria),
            ("constraints", constraints),
            ("required_evidence", required_evidence),
        ):
            object.__setattr__(self, name, _text_tuple(value, name))
        self._check()

    def _check(self) -> None:
        """The rules a contract of its mode keeps, once the fields hold a mode and tuples."""
        if self.mode is VerificationMode.OFF:
            return
        if not self.goal.strip():
            raise ContractError(
                f"mode {self.mode} needs a non-empty goal; state what the task must achieve, "
                "or use mode 'off'",
                field="goal",
            )
        if not self.success_criteria:
            raise ContractError(
                f"mode {self.mode} needs at least one success criterion, such as "
                "'the red cube is in the tray'; or use mode 'off'",
                field="success_criteria",
            )
        for criterion in self.success_criteria:
            if not criterion.strip():
                raise ContractError(
                    "success criteria must be non-empty; remove the blank one",
                    field="success_criteria",
                )
        duplicates = sorted(
            {c for c in self.success_criteria if self.success_criteria.count(c) > 1}
        )
        if duplicates:
            raise ContractError(
                f"success criterion {duplicates[0]!r} is listed more than once; the verifier "
                "answers each criterion once, so list each once",
                field="success_criteria",
            )
        for kind in self.required_evidence:
            if not kind.strip():
                raise ContractError(
                    "required_evidence holds a blank kind; name kinds such as 'state' or 'image'",
                    field="required_evidence",
                )


def check_contract(contract: VerificationContract, *, has_observer: bool) -> None:
    """Check what a contract needs from the task it is given to.

    Raises:
        ContractError: ``required_evidence`` is set but no observer will capture evidence.
    """
    if contract.required_evidence and not has_observer:
        kinds = ", ".join(contract.required_evidence)
        raise ContractError(
            f"the contract requires evidence ({kinds}) but the task has no observer; "
            "pass observer=... or drop required_evidence",
            field="required_evidence",
        )
