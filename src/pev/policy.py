"""The recovery policy: budgets, deadlines and limits of one task (docs/design.md §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from pev._json import (
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_MAX_VALUE_DEPTH,
    MAX_NESTING,
    ValueLimits,
)
from pev.codec import ADDED
from pev.errors import PolicyError

__all__ = ["MAX_TIMEOUT_S", "Approval", "RecoveryPolicy"]

MAX_TIMEOUT_S = 365 * 24 * 3600.0
"""The longest timeout or lease a policy may set: a year, in seconds."""

# Each whole-number field and the range it must lie in. The upper bounds are far past any real
# task; they keep a typo (or 10**20) from reaching arithmetic and storage that cannot hold it.
_WHOLE_NUMBERS: dict[str, tuple[int, int]] = {
    "max_replans": (0, 10_000),
    "local_limit": (0, 100_000),
    "max_parallel": (1, 10_000),
    "max_nodes": (1, 100_000),
    "max_value_depth": (1, MAX_NESTING),
    "max_value_bytes": (1, 1 << 30),
    "start_attempts": (1, 1_000),
}
# The fields in seconds, and whether they may be None (no limit).
_SECONDS: dict[str, bool] = {
    "replan_timeout_s": False,
    "node_timeout_s": True,
    "verify_timeout_s": True,
    "task_timeout_s": True,
    "lease_s": False,
    "approval_timeout_s": True,
}


class Approval(StrEnum):
    """Which revisions wait for a person's approval before anything of them is dispatched.

    Attributes:
        NEVER: None: revisions are dispatched as soon as they start.
        ACTIONS: A revision that would dispatch an ``action`` (a query-only one runs at once).
        ALWAYS: Every revision.
    """

    NEVER = "never"
    ACTIONS = "actions"
    ALWAYS = "always"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryPolicy:
    """How much recovery a task may spend, and how long anything may take.

    Every field is checked when the policy is built: a timeout is a finite number of seconds
    above zero and at most a year (:data:`MAX_TIMEOUT_S`); a count is a whole number in range.

    Attributes:
        max_replans: Replans allowed; 2 means at most 3 execute/verify rounds.
        local_limit: The most failed nodes a local replan handles; more means a global replan.
        replan_timeout_s: How long a task may wait in ``awaiting_replan`` (and plan) once a
            replan is decided.
        node_timeout_s: Default per-node timeout, for tools without their own.
        verify_timeout_s: How long a verifier call may take before it counts as ``thrown``.
        task_timeout_s: The whole task's deadline.
        max_parallel: The most nodes running at once.
        max_nodes: The most nodes a plan may have.
        lease_s: How long a driver's lease on the task lasts unless renewed; drivers renew it
            every third of this (see docs/workers.md). A driver that is paused or cut off for
            longer may be taken over.
        max_value_depth: How deeply a value from a component (a node's args, a tool's output,
            an observation's payload) may nest: arrays and objects within one another, at
            most 256.
        max_value_bytes: How large such a value may be, in bytes of its JSON text.
        approval: Which revisions wait for a person's approval (:class:`Approval`, or its
            value: ``"never"``, ``"actions"``, ``"always"``); see docs/control.md.
        approval_timeout_s: How long a revision may wait for approval before the task ends
            ``failed``/``approval_expired``; ``None`` waits for ever.
        compensate_on_failure: A task ending ``failed``, ``partial`` or ``cancelled`` first
            undoes its effects, newest first, through their tools' ``compensate`` (a saga; see
            docs/engine.md, "Compensation").
        start_attempts: How many drives of the task may fail to start (its agent not
            importable, an MCP server that will not start) before a worker ends it
            ``failed``/``agent_unavailable``; each failure is a ``start_failed`` event (see
            docs/workers.md).

    Raises:
        PolicyError: A field out of range (a ``UsageError`` and a ``ValueError``), naming it.
    """

    max_replans: int = 2
    local_limit: int = 2
    replan_timeout_s: float = 120.0
    node_timeout_s: float | None = None
    verify_timeout_s: float | None = None
    task_timeout_s: float | None = None
    max_parallel: int = 8
    max_nodes: int = 64
    # Added after ledgers were written without them: encoded only when not the default, so the
    # policies of older tasks keep their bytes and hashes.
    lease_s: float = field(default=30.0, metadata=ADDED)
    max_value_depth: int = field(default=DEFAULT_MAX_VALUE_DEPTH, metadata=ADDED)
    max_value_bytes: int = field(default=DEFAULT_MAX_VALUE_BYTES, metadata=ADDED)
    approval: Approval = field(default=Approval.NEVER, metadata=ADDED)
    approval_timeout_s: float | None = field(default=None, metadata=ADDED)
    compensate_on_failure: bool = field(default=False, metadata=ADDED)
    start_attempts: int = field(default=3, metadata=ADDED)

    def __post_init__(self) -> None:
        if not isinstance(self.compensate_on_failure, bool):
            raise PolicyError(
                "RecoveryPolicy.compensate_on_failure must be True or False, got "
                f"{_shown(self.compensate_on_failure)}",
                field="compensate_on_failure",
                value=self.compensate_on_failure,
            )
        try:
            object.__setattr__(self, "approval", Approval(self.approval))
        except (ValueError, TypeError):
            choices = ", ".join(repr(str(choice)) for choice in Approval)
            raise PolicyError(
                f"RecoveryPolicy.approval must be one of {choices}, got {_shown(self.approval)}",
                field="approval",
                value=self.approval,
            ) from None
        for name, (least, most) in _WHOLE_NUMBERS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise PolicyError(
                    f"RecoveryPolicy.{name} must be a whole number from {least} to {most}, "
                    f"got {_shown(value)}",
                    field=name,
                    value=value,
                )
        for name, optional in _SECONDS.items():
            value = getattr(self, name)
            if value is None and optional:
                continue
            if not _is_seconds(value):
                no_limit = " (or None for no limit)" if optional else ""
                raise PolicyError(
                    f"RecoveryPolicy.{name} must be a number of seconds above 0 and at most a "
                    f"year ({MAX_TIMEOUT_S:.0f}){no_limit}, got {_shown(value)}",
                    field=name,
                    value=value,
                )
            # One canonical form: JSON reads 30 back as 30.0, and the ledger's hash chain must
            # encode the policy the same way before it is stored and after it is read back.
            object.__setattr__(self, name, float(value))

    @property
    def value_limits(self) -> ValueLimits:
        """The depth and size limits on values from components."""
        return ValueLimits(self.max_value_depth, self.max_value_bytes)


def _is_seconds(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        seconds = float(value)  # an int past a float's range overflows here
    except OverflowError:
        return False
    return math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S


def _shown(value: object) -> str:
    """``repr(value)``, cut short: a huge int has no text form, and long text floods a line."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
