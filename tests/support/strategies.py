"""Hypothesis strategies of model values and ledger events, for codec and kernel properties."""

from __future__ import annotations

from datetime import UTC, datetime
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
    AwaitingReplan,
    CancelRequested,
    CaptureFailed,
    Diagnosed,
    Dispatched,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    PlanRejected,
    RecordReconciled,
    ReplanStarted,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskCreated,
    TaskFinished,
    Usage,
    VerdictRecorded,
)
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
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


instants = utc_datetimes(2020, 2030)
texts = st.text(max_size=10)
ids = st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
node_sets = st.frozensets(ids, max_size=3)
results: st.SearchStrategy[NodeResult] = st.one_of(
    st.builds(Success, json_values),
    st.builds(DeviceFailure, ids, texts, st.booleans(), st.booleans()),
    st.builds(VerifierFailure, ids, texts),
)
nodes = st.builds(
    PlanNode,
    ids,
    texts,
    tool=st.none() | ids,
    args=st.dictionaries(ids, json_values, max_size=2),
    after=st.lists(ids, max_size=2).map(tuple),
    effect=st.sampled_from(Effect),
)
plans = st.builds(Plan, texts, st.lists(nodes, max_size=3).map(tuple))
contracts = st.one_of(
    st.just(VerificationContract(VerificationMode.OFF)),
    st.builds(
        VerificationContract,
        st.sampled_from([m for m in VerificationMode if m is not VerificationMode.OFF]),
        st.just("reach the goal"),
        st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=3, unique=True),
        constraints=st.lists(texts, max_size=2).map(tuple),
        required_evidence=st.lists(st.sampled_from(["state", "image"]), max_size=2).map(tuple),
    ),
)
policies = st.builds(
    RecoveryPolicy,
    max_replans=st.integers(min_value=0, max_value=5),
    replan_timeout_s=st.integers(min_value=1, max_value=600) | st.floats(0.5, 600.0),
    task_timeout_s=st.none() | st.integers(min_value=1, max_value=9999),
)
usages = st.none() | st.builds(
    Usage, model=ids, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)
)
verdicts = st.builds(
    Verdict,
    st.sampled_from(VerdictStatus),
    failed_nodes=node_sets,
    feedback=texts,
    unmet_criteria=st.lists(texts, max_size=2).map(tuple),
    guidance=texts,
    evidence_refs=st.lists(ids.map("evidence:{}".format), max_size=2).map(tuple),
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
records = st.builds(
    ExecutionRecord,
    id=ids.map(RecordId),
    task_id=ids.map(TaskId),
    revision=st.integers(1, 9),
    node_id=ids,
    tool=st.none() | ids,
    args_digest=st.just(digest({})),
    effect=st.sampled_from(Effect),
    idempotency_key=ids,
    status=st.sampled_from(RecordStatus),
    created_at=instants,
    updated_at=instants,
    error=st.none() | texts,
)
evidences = st.builds(
    Evidence,
    id=ids.map(EvidenceId),
    phase=st.sampled_from(EvidencePhase),
    kind=st.sampled_from(["state", "image"]),
    source=ids,
    captured_at=instants,
    revision=st.integers(1, 9),
    payload=json_values,
    artifact=st.none() | st.binary(max_size=16),
)
kinds = st.sampled_from(RevisionKind)

EVENT_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    TaskCreated: st.builds(
        TaskCreated,
        task_id=ids.map(TaskId),
        input=json_values.map(freeze_json),
        contract=contracts,
        policy=policies,
        components=st.dictionaries(st.sampled_from(["planner", "executor"]), ids, max_size=2),
        task_deadline=st.none() | instants,
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
        at=instants,
    ),
    NodeFinished: st.builds(
        NodeFinished,
        record_id=ids.map(RecordId),
        status=st.sampled_from(RecordStatus),
        result=st.none() | results,
        at=instants,
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
    AwaitingReplan: st.builds(AwaitingReplan, action=st.none() | replans, deadline=instants),
    CancelRequested: st.builds(CancelRequested, reason=texts),
    TaskFinished: st.builds(
        TaskFinished,
        status=st.sampled_from(TaskStatus),
        reason=st.sampled_from(TerminalReason),
        outputs=st.dictionaries(ids, json_values, max_size=3).map(freeze_json),
        detail=texts,
    ),
}
events = st.one_of(*EVENT_STRATEGIES.values())
