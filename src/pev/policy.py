"""The recovery policy: budgets, deadlines and limits of one task (docs/design.md §6)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pev.codec import ADDED

__all__ = ["RecoveryPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryPolicy:
    """How much recovery a task may spend, and how long anything may take.

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

    Raises:
        ValueError: A negative budget, a non-positive limit or timeout.
    """

    max_replans: int = 2
    local_limit: int = 2
    replan_timeout_s: float = 120.0
    node_timeout_s: float | None = None
    verify_timeout_s: float | None = None
    task_timeout_s: float | None = None
    max_parallel: int = 8
    max_nodes: int = 64
    # Added after ledgers were written without it: encoded only when not the default, so the
    # policies of older tasks keep their bytes and hashes.
    lease_s: float = field(default=30.0, metadata=ADDED)

    def __post_init__(self) -> None:
        for name, least in (
            ("max_replans", 0),
            ("local_limit", 0),
            ("max_parallel", 1),
            ("max_nodes", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(
                    f"RecoveryPolicy.{name} must be a whole number >= {least}, got {value!r}"
                )
        for name in (
            "replan_timeout_s",
            "node_timeout_s",
            "verify_timeout_s",
            "task_timeout_s",
            "lease_s",
        ):
            value = getattr(self, name)
            if value is None and name not in ("replan_timeout_s", "lease_s"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(
                    f"RecoveryPolicy.{name} must be a positive number of seconds, got {value!r}"
                )
            # One canonical form: JSON reads 30 back as 30.0, and the ledger's hash chain must
            # encode the policy the same way before it is stored and after it is read back.
            object.__setattr__(self, name, float(value))
