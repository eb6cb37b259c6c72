"""The public API is pinned: a name added or removed here is a deliberate change."""

from __future__ import annotations

import importlib
import inspect

import pytest

PUBLIC = {
    "pev": [
        "AcceptPartial",
        "Budget",
        "CodecError",
        "ConflictError",
        "ContractError",
        "CriterionResult",
        "CriterionStatus",
        "DeviceFailure",
        "Diagnosis",
        "Effect",
        "Evidence",
        "ExecutionRecord",
        "Finish",
        "GlobalReplan",
        "Ledger",
        "LedgerCorruptError",
        "LocalReplan",
        "MemoryStore",
        "PevError",
        "Plan",
        "PlanError",
        "PlanNode",
        "RecordStatus",
        "RecoveryPolicy",
        "Reliability",
        "RootCause",
        "SQLiteStore",
        "SchemaVersionError",
        "StateError",
        "Store",
        "StoreError",
        "Success",
        "TaskPhase",
        "TaskState",
        "TaskStatus",
        "TerminalReason",
        "UnknownTaskError",
        "Verdict",
        "VerdictStatus",
        "VerificationContract",
        "VerificationMode",
        "VerifierFailure",
        "__version__",
        "decide",
        "diagnose",
        "replay",
        "to_replan_action",
        "validate_plan",
    ],
    "pev.errors": [
        "CodecError",
        "ConflictError",
        "ContractError",
        "LedgerCorruptError",
        "PevError",
        "PlanError",
        "SchemaVersionError",
        "StateError",
        "StoreError",
        "UnknownTaskError",
    ],
    "pev.codec": ["decode", "dumps", "encode", "loads"],
    "pev.policy": ["RecoveryPolicy"],
    "pev.kernel": [
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
        "decide",
        "diagnose",
        "outcome_allowed",
        "to_replan_action",
    ],
    "pev.stores": ["MemoryStore", "SQLiteStore", "Store"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned(module: str) -> None:
    """Each public module's __all__ is exactly the pinned list."""
    assert sorted(importlib.import_module(module).__all__) == sorted(PUBLIC[module])


@pytest.mark.parametrize(
    "module",
    [
        "pev",
        "pev.errors",
        "pev.codec",
        "pev.kernel",
        "pev.ledger",
        "pev.model",
        "pev.stores",
        "pev.policy",
    ],
)
def test_public_names_exist_and_are_documented(module: str) -> None:
    """Every name in __all__ exists, and every public class and function has a docstring."""
    mod = importlib.import_module(module)
    undocumented = []
    for name in mod.__all__:
        value = getattr(mod, name)
        if (inspect.isclass(value) or inspect.isfunction(value)) and not inspect.getdoc(value):
            undocumented.append(name)
    assert undocumented == []


def test_model_and_ledger_all_are_sorted_and_unique() -> None:
    """The big __all__ lists have no duplicates (a cheap guard against re-export slips)."""
    for module in ("pev.model", "pev.ledger"):
        names = importlib.import_module(module).__all__
        assert len(names) == len(set(names))
