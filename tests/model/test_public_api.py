"""The public names of pev.model, pev.codec and pev.errors are pinned."""

from __future__ import annotations

import pev.codec
import pev.errors
import pev.model


def test_model_public_names() -> None:
    """pev.model exports exactly these names, and each of them exists."""
    assert sorted(pev.model.__all__) == [
        "CriterionResult",
        "CriterionStatus",
        "DEFAULT_MAX_NODES",
        "DeviceFailure",
        "Effect",
        "Evidence",
        "EvidenceId",
        "EvidencePhase",
        "ExecutionRecord",
        "JsonObject",
        "JsonValue",
        "NodeResult",
        "Plan",
        "PlanNode",
        "RecordId",
        "RecordStatus",
        "RefKind",
        "Reliability",
        "Success",
        "TERMINAL_RECORD_STATUSES",
        "TaskId",
        "ToolParameter",
        "ToolSpec",
        "Verdict",
        "VerdictCheck",
        "VerdictStatus",
        "VerificationContract",
        "VerificationMode",
        "VerifierFailure",
        "canonical_json",
        "check_contract",
        "classify_verdict",
        "digest",
        "downstream",
        "evidence_ref",
        "freeze_json",
        "iter_refs",
        "parse_ref",
        "passes",
        "plan_problems",
        "raw_digest",
        "record_ref",
        "record_status_for",
        "thaw_json",
        "validate_plan",
    ]
    assert all(hasattr(pev.model, name) for name in pev.model.__all__)


def test_codec_public_names() -> None:
    """pev.codec exports encode, decode, dumps and loads."""
    assert sorted(pev.codec.__all__) == ["decode", "dumps", "encode", "loads"]


def test_errors_share_one_root() -> None:
    """Every exception in pev.errors derives from PevError."""
    for name in pev.errors.__all__:
        assert issubclass(getattr(pev.errors, name), pev.errors.PevError), name
