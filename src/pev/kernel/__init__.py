"""The kernel (docs/design.md §3): pure decision functions over frozen values.

No I/O, no clock, no randomness, no logging: time is an input. Each rule set is a table in one
module, and each table is tested row by row.

* :func:`diagnose` finds the root cause of a verdict that did not pass;
* :func:`to_replan_action` maps a diagnosis to accept-partial, local or global replan;
* :func:`decide` is the whole dispatch, with verification mode, budget and task deadline.
"""

from pev.kernel._actions import (
    AcceptPartial,
    Action,
    GlobalReplan,
    LocalReplan,
    to_replan_action,
)
from pev.kernel._decide import Budget, Decision, Finish, deadline_passed, decide
from pev.kernel._diagnose import Diagnosis, RootCause, diagnose
from pev.kernel._outcome import STATUS_REASONS, TaskStatus, TerminalReason, outcome_allowed

__all__ = [
    "STATUS_REASONS",
    "AcceptPartial",
    "Action",
    "Budget",
    "Decision",
    "Diagnosis",
    "Finish",
    "GlobalReplan",
    "LocalReplan",
    "RootCause",
    "TaskStatus",
    "TerminalReason",
    "deadline_passed",
    "decide",
    "diagnose",
    "outcome_allowed",
    "to_replan_action",
]
