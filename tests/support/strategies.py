"""Hypothesis strategies of model values and ledger events, for codec and kernel properties.

The model values are as wide as the codec must carry (any text, zoned times, unbounded
integers); the codec's own tests and the ledger's event round trips draw from the same ones.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from pev.kernel import (
    Diagnosis,
    Finish,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
)
from pev.ledger import (
    ApprovalRequested,
    Approved,
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    DriverStarted,
    EffectCompensated,
    EffectSuperseded,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeReused,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    Rejected,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    StartFailed,
    TaskCreated,
    TaskFinished,
    UnwindStarted,
    Usage,
    VerdictRecorded,
)
from pev.model import (
    CriterionResult,
    CriterionStatus,
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    JsonObject,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    TaskId,
    Verdict,
    VerdictStatus,
    VerificationContract,
    VerificationMode,
    VerifierFailure,
    digest,
    freeze_json,
)
from pev.policy import RecoveryPolicy


def utc_datetimes(first_year: int, last_year: int) -> st.SearchStrategy[datetime]:
    """Instants in UTC from the start of ``first_year`` to the start of ``last_year``."""
    return st.datetimes(
        min_value=datetime(first_year, 1, 1),  # noqa: DTZ001 - Hypothesis bounds are naive; timezones= adds UTC
        max_value=datetime(last_year, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    )


# --- model values: any value the codec must carry ---------------------------------------------

texts = st.text(max_size=12)
text_tuples = st.lists(texts, max_size=3).map(tuple)
ids = st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=15,
).map(freeze_json)
json_objects = st.dictionaries(texts, json_values, max_size=4).map(JsonObject)
# Times in UTC and in two other zones: the codec keeps each one's offset.
times = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - Hypothesis bounds are naive; timezones= adds them
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
    ),
)
nodes = st.builds(
    PlanNode,
    id=texts,
    description=texts,
    tool=st.none() | texts,
    args=json_objects,
    after=text_tuples,
    effect=st.sampled_from(Effect),
    repeat=st.booleans(),
)
plans = st.builds(
    Plan,
    goal=texts,
    nodes=st.lists(nodes, max_size=4).map(tuple),
    compensate=st.lists(ids, max_size=2, unique=True).map(tuple),
)
criteria = st.builds(
    CriterionResult,
    criterion=texts,
    status=st.sampled_from(CriterionStatus),
    evidence_refs=text_tuples,
)
verdicts = st.builds(
    Verdict,
    status=st.sampled_from(VerdictStatus),
    failed_nodes=st.frozensets(texts, max_size=3),
    feedback=texts,
    criteria=st.lists(criteria, max_size=3).map(tuple),
    unmet_criteria=text_tuples,
    preserved_constraints=text_tuples,
    guidance=texts,
    evidence_refs=text_tuples,
)
records = st.builds(
    ExecutionRecord,
    id=texts.map(RecordId),
    task_id=texts.map(TaskId),
    revision=st.integers(min_value=1, max_value=1000),
    node_id=texts,
    tool=st.none() | texts,
    args_digest=st.text("0123456789abcdef", min_size=64, max_size=64),
    effect=st.sampled_from(Effect),
    idempotency_key=texts,
    status=st.sampled_from(RecordStatus),
    created_at=times,
    updated_at=times,
    error=st.none() | texts,
    occurrence=st.none() | st.integers(min_value=1, max_value=1000),
    args=st.none() | json_objects,
)
evidences = st.builds(
    Evidence,
    id=texts.map(EvidenceId),
    phase=st.sampled_from(EvidencePhase),
    kind=st.sampled_from(["state", "image", "depth"]),
    source=texts,
    captured_at=times,
    revision=st.integers(min_value=1, max_value=1000),
    payload=json_values,
    artifact=st.none() | st.binary(max_size=64),
    media_type=st.none() | st.just("image/png"),
)
results: st.SearchStrategy[NodeResult] = st.one_of(
    st.builds(Success, value=json_values),
    st.builds(
        DeviceFailure,
        node_id=texts,
        error=texts,
        is_timeout=st.booleans(),
        outcome_unknown=st.booleans(),
    ),
    st.builds(VerifierFailure, node_id=texts, reason=texts),
)
contracts = st.one_of(
    st.builds(VerificationContract, mode=st.just(VerificationMode.OFF)),
    st.builds(
        VerificationContract,
        mode=st.sampled_from([m for m in VerificationMode if m is not VerificationMode.OFF]),
        goal=st.text(min_size=1, max_size=10).filter(str.strip),
        success_criteria=st.lists(
            st.text(min_size=1, max_size=10).filter(str.strip), min_size=1, max_size=3, unique=True
        ).map(tuple),
        constraints=text_tuples,
        required_evidence=st.lists(st.sampled_from(["state", "image"]), max_size=2).map(tuple),
    ),
)

# --- ledger events ----------------------------------------------------------------------------

node_sets = st.frozensets(ids, max_size=3)
policies = st.builds(
    RecoveryPolicy,
    max_replans=st.integers(min_value=0, max_value=5),
    replan_timeout_s=st.integers(min_value=1, max_value=600) | st.floats(0.5, 600.0),
    task_timeout_s=st.none() | st.integers(min_value=1, max_value=9999),
)
usages = st.none() | st.builds(
    Usage, model=ids, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)
)
diagnoses = st.builds(Diagnosis, st.sampled_from(RootCause), node_sets, texts)
replans = st.one_of(st.builds(LocalReplan, node_sets, texts), st.builds(GlobalReplan, texts))
finishes = st.builds(
    Finish,
    st.sampled_from(TaskStatus),
    st.sampled_from(TerminalReason),
    shadow=st.none() | replans,
    detail=texts,
)
kinds = st.sampled_from(RevisionKind)

EVENT_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    TaskCreated: st.builds(
        TaskCreated,
        task_id=ids.map(TaskId),
        input=json_values,
        contract=contracts,
        policy=policies,
        components=st.dictionaries(st.sampled_from(["planner", "executor"]), ids, max_size=2),
        task_deadline=st.none() | times,
    ),
    ReplanStarted: st.builds(ReplanStarted, planning=kinds, attempt=st.integers(1, 9)),
    RevisionStarted: st.builds(
        RevisionStarted,
        number=st.integers(1, 9),
        revision_kind=kinds,
        reason=texts,
        plan=plans,
        feedback=texts,
        lessons=st.lists(texts, max_size=2).map(tuple),
        redo=node_sets,
        usage=usages,
    ),
    PlanRejected: st.builds(
        PlanRejected,
        planning=kinds,
        attempt=st.integers(1, 9),
        problems=st.lists(texts, max_size=3).map(tuple),
        plan=st.none() | plans,
        usage=usages,
    ),
    NodeDispatched: st.builds(NodeDispatched, record=records),
    NodeProgressed: st.builds(
        NodeProgressed,
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        at=times,
    ),
    NodeFinished: st.builds(
        NodeFinished,
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        result=st.none() | results,
        at=times,
        settled_on_resume=st.booleans(),
    ),
    NodeSkipped: st.builds(
        NodeSkipped,
        revision=st.integers(1, 9),
        node_id=ids,
        blocked_by=st.lists(ids, max_size=2).map(tuple),
    ),
    RecordReconciled: st.builds(
        RecordReconciled,
        record_id=ids.map(RecordId),
        result=results,
        evidence_refs=st.lists(ids, max_size=2).map(tuple),
        note=texts,
    ),
    NodeReused: st.builds(
        NodeReused, revision=st.integers(1, 9), node_id=ids, record_id=ids.map(RecordId)
    ),
    EffectSuperseded: st.builds(
        EffectSuperseded, record_id=ids.map(RecordId), revision=st.integers(1, 9), reason=texts
    ),
    CompensationDispatched: st.builds(
        CompensationDispatched, effect=ids.map(RecordId), record=records
    ),
    EffectCompensated: st.builds(
        EffectCompensated,
        effect=ids.map(RecordId),
        record_id=ids.map(RecordId),
        result=results,
        at=times,
    ),
    CompensationFailed: st.builds(
        CompensationFailed,
        effect=ids.map(RecordId),
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        result=st.none() | results,
        at=times,
        settled_on_resume=st.booleans(),
    ),
    UnwindStarted: st.builds(
        UnwindStarted,
        status=st.sampled_from(TaskStatus),
        reason=st.sampled_from(TerminalReason),
        detail=texts,
    ),
    EvidenceCaptured: st.builds(EvidenceCaptured, evidence=evidences),
    CaptureFailed: st.builds(
        CaptureFailed,
        revision=st.integers(1, 9),
        phase=st.sampled_from(EvidencePhase),
        error=texts,
    ),
    RoundExecuted: st.builds(RoundExecuted, revision=st.integers(1, 9), executed_ok=st.booleans()),
    VerdictRecorded: st.builds(
        VerdictRecorded,
        revision=st.integers(1, 9),
        verdict=st.none() | verdicts,
        reliability=st.none() | st.sampled_from(Reliability),
        raw_digest=st.just(digest("raw")),
        problems=st.lists(texts, max_size=2).map(tuple),
        evidence_missing=st.booleans(),
        usage=usages,
    ),
    Diagnosed: st.builds(Diagnosed, revision=st.integers(1, 9), diagnosis=diagnoses),
    Dispatched: st.builds(
        Dispatched, revision=st.integers(1, 9), decision=st.one_of(finishes, replans)
    ),
    AwaitingReplan: st.builds(AwaitingReplan, action=st.none() | replans, deadline=times),
    CancelRequested: st.builds(CancelRequested, reason=texts),
    ApprovalRequested: st.builds(
        ApprovalRequested,
        revision=st.integers(1, 9),
        deadline=st.none() | times,
        actions=st.lists(ids, max_size=3).map(tuple),
    ),
    Approved: st.builds(Approved, revision=st.integers(1, 9), by=texts, note=texts),
    Rejected: st.builds(Rejected, revision=st.integers(1, 9), by=texts, reason=texts),
    DriverStarted: st.builds(
        DriverStarted,
        owner=texts,
        epoch=st.integers(1, 10**6),
        host=texts,
        process=st.integers(0, 2**22),
    ),
    StartFailed: st.builds(
        StartFailed,
        owner=texts,
        epoch=st.integers(1, 10**6),
        host=texts,
        process=st.integers(0, 2**22),
        cause=texts,
    ),
    TaskFinished: st.builds(
        TaskFinished,
        status=st.sampled_from(TaskStatus),
        reason=st.sampled_from(TerminalReason),
        outputs=st.dictionaries(ids, json_values, max_size=3).map(freeze_json),
        detail=texts,
    ),
}
events = st.one_of(*EVENT_STRATEGIES.values())
