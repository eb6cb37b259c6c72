"""The data model: plans, node results, records, evidence, contracts and verdicts.

See docs/design.md §2.

Every type here is an immutable value with no I/O; :mod:`pev.codec` turns them into JSON.
"""

from pev._json import (
    JsonObject,
    JsonValue,
    ValueLimits,
    canonical_json,
    digest,
    freeze_json,
    thaw_json,
)
from pev.model._assess import VerdictCheck, classify_verdict, raw_digest
from pev.model._attempts import Attempt
from pev.model._contract import VerificationContract, VerificationMode, check_contract
from pev.model._evidence import (
    Evidence,
    EvidencePhase,
    RefKind,
    evidence_ref,
    parse_ref,
    record_ref,
)
from pev.model._ids import EvidenceId, RecordId, TaskId
from pev.model._plan import (
    DEFAULT_MAX_NODES,
    ArgsCheck,
    Effect,
    Plan,
    PlanNode,
    ToolParameter,
    ToolSpec,
    downstream,
    iter_refs,
    plan_problems,
    validate_plan,
)
from pev.model._records import (
    TERMINAL_RECORD_STATUSES,
    ExecutionRecord,
    RecordStatus,
    record_status_for,
)
from pev.model._results import DeviceFailure, NodeResult, Success, VerifierFailure
from pev.model._verdict import (
    CriterionResult,
    CriterionStatus,
    Reliability,
    Verdict,
    VerdictStatus,
    passes,
)

__all__ = [
    "DEFAULT_MAX_NODES",
    "TERMINAL_RECORD_STATUSES",
    "ArgsCheck",
    "Attempt",
    "CriterionResult",
    "CriterionStatus",
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
    "TaskId",
    "ToolParameter",
    "ToolSpec",
    "ValueLimits",
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
