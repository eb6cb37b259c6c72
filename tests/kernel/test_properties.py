"""Properties of the kernel over generated inputs: totality, the §3.2 contract, purity."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.strategies import utc_datetimes

from pev.kernel import (
    AcceptPartial,
    Budget,
    Decision,
    Diagnosis,
    Finish,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TaskStatus,
    TerminalReason,
    decide,
    diagnose,
    outcome_allowed,
    to_replan_action,
)
from pev.model import (
    DeviceFailure,
    NodeResult,
    Reliability,
    Success,
    Verdict,
    VerdictStatus,
    VerificationMode,
    VerifierFailure,
)

NODE_IDS = ("n1", "n2", "n3", "n4", "n5")
ACCEPTED_CAUSES = {RootCause.DEVICE_FAILURE, RootCause.PERCEPTION_UNRELIABLE}

node_sets = st.frozensets(st.sampled_from(NODE_IDS), max_size=len(NODE_IDS))
short_text = st.text(max_size=12)
verdicts = st.builds(
    Verdict,
    st.sampled_from(VerdictStatus),
    failed_nodes=node_sets,
    feedback=short_text,
)
diagnoses = st.builds(Diagnosis, st.sampled_from(RootCause), node_sets, short_text)
instants = utc_datetimes(2024, 2026)
budgets = st.builds(
    Budget,
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=4),
    st.none() | instants,
)
local_limits = st.integers(min_value=-1, max_value=6)


@st.composite
def results_maps(draw: st.DrawFn) -> dict[str, NodeResult]:
    """Node id → a success, device failure or node-level check failure for that node."""
    results: dict[str, NodeResult] = {}
    for node_id in draw(node_sets):
        choices: list[NodeResult] = [
            Success("ok"),
            DeviceFailure(node_id, "offline"),
            DeviceFailure(node_id, "timed out", is_timeout=True, outcome_unknown=True),
            VerifierFailure(node_id, "bad output"),
        ]
        results[node_id] = draw(st.sampled_from(choices))
    return results


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """One generated call of ``decide``."""

    mode: VerificationMode
    executed_ok: bool
    verdict: Verdict | None
    reliability: Reliability | None
    diagnosis: Diagnosis | None
    budget: Budget
    now: datetime
    evidence_missing: bool
    local_limit: int

    def decide(self, mode: VerificationMode | None = None) -> Decision:
        return decide(
            mode or self.mode,
            executed_ok=self.executed_ok,
            verdict=self.verdict,
            reliability=self.reliability,
            diagnosis=self.diagnosis,
            budget=self.budget,
            now=self.now,
            evidence_missing=self.evidence_missing,
            local_limit=self.local_limit,
        )


def inputs(
    *,
    mode: st.SearchStrategy[VerificationMode] | None = None,
    diagnosis: st.SearchStrategy[Diagnosis | None] | None = None,
) -> st.SearchStrategy[Inputs]:
    return st.builds(
        Inputs,
        mode=st.sampled_from(VerificationMode) if mode is None else mode,
        executed_ok=st.booleans(),
        verdict=st.none() | verdicts,
        reliability=st.none() | st.sampled_from(Reliability),
        diagnosis=(st.none() | diagnoses) if diagnosis is None else diagnosis,
        budget=budgets,
        now=instants,
        evidence_missing=st.booleans(),
        local_limit=local_limits,
    )


def _finishes(decision: Decision | None) -> list[Finish]:
    """A decision's Finish and, in audit, its shadow's, as far down as they go."""
    found: list[Finish] = []
    while isinstance(decision, Finish):
        found.append(decision)
        decision = decision.shadow
    return found


@given(inputs())
def test_decide_is_total(call: Inputs) -> None:
    """decide returns a Finish or a replan for every input, and never raises."""
    decision = call.decide()

    assert isinstance(decision, Finish | LocalReplan | GlobalReplan)


@given(inputs())
def test_every_finish_is_an_allowed_outcome(call: Inputs) -> None:
    """Every Finish, shadows included, carries a (status, reason) pair STATUS_REASONS allows."""
    for finish in _finishes(call.decide()):
        assert outcome_allowed(finish.status, finish.reason), (finish.status, finish.reason)


NOT_RECOVERY = [VerificationMode.OFF, VerificationMode.AUDIT, VerificationMode.ENFORCE]


@given(inputs(), st.sampled_from(NOT_RECOVERY))
def test_only_recovery_replans(call: Inputs, mode: VerificationMode) -> None:
    """Off, audit and enforce modes always finish; they never re-plan."""
    assert isinstance(call.decide(mode), Finish)


@given(inputs(), st.sampled_from(NOT_RECOVERY))
def test_only_recovery_ends_partial(call: Inputs, mode: VerificationMode) -> None:
    """Outside recovery mode a task never ends partial."""
    decision = call.decide(mode)

    assert isinstance(decision, Finish)
    assert decision.status is not TaskStatus.PARTIAL


@given(inputs(mode=st.just(VerificationMode.AUDIT)))
def test_audit_outcome_is_off_outcome(call: Inputs) -> None:
    """Audit ends exactly as off would for the same executed_ok, whatever the verdict."""
    audit = call.decide()
    off = call.decide(VerificationMode.OFF)

    assert isinstance(audit, Finish)
    assert isinstance(off, Finish)
    assert (audit.status, audit.reason) == (off.status, off.reason)


@given(inputs(mode=st.just(VerificationMode.AUDIT)))
def test_audit_shadow_is_recovery_decision(call: Inputs) -> None:
    """Audit's shadow is exactly what recovery mode decides for the same inputs."""
    audit = call.decide()

    assert isinstance(audit, Finish)
    assert audit.shadow == call.decide(VerificationMode.RECOVERY)


@given(inputs(mode=st.just(VerificationMode.OFF)))
def test_off_depends_only_on_execution(call: Inputs) -> None:
    """Off mode's outcome is a function of executed_ok alone."""
    bare = replace(
        call,
        verdict=None,
        reliability=None,
        diagnosis=None,
        budget=Budget(),
        evidence_missing=False,
        local_limit=2,
    )

    assert call.decide() == bare.decide()


@given(diagnoses, node_sets, short_text, local_limits)
def test_accept_partial_iff_unfixable_cause(
    diagnosis: Diagnosis, failed: frozenset[str], feedback: str, local_limit: int
) -> None:
    """to_replan_action accepts partial iff the cause is a device failure or unreliable verdict."""
    action = to_replan_action(diagnosis, failed, feedback, local_limit=local_limit)

    assert isinstance(action, AcceptPartial) == (diagnosis.cause in ACCEPTED_CAUSES)


@given(diagnoses, node_sets, short_text, local_limits)
def test_local_replan_stays_within_limit(
    diagnosis: Diagnosis, failed: frozenset[str], feedback: str, local_limit: int
) -> None:
    """A local replan names exactly the failed nodes, between one and local_limit of them."""
    action = to_replan_action(diagnosis, failed, feedback, local_limit=local_limit)

    if isinstance(action, LocalReplan):
        assert action.nodes == failed
        assert 1 <= len(action.nodes) <= local_limit


@given(
    inputs(
        mode=st.just(VerificationMode.RECOVERY),
        diagnosis=st.builds(Diagnosis, st.sampled_from(sorted(ACCEPTED_CAUSES)), node_sets),
    )
)
def test_recovery_never_retries_unfixable_causes(call: Inputs) -> None:
    """In recovery, a device failure or unreliable verdict is never re-planned."""
    assert isinstance(call.decide(), Finish)


@given(
    inputs(
        mode=st.just(VerificationMode.RECOVERY),
        diagnosis=st.builds(Diagnosis, st.just(RootCause.PLAN_OR_ANSWER_ERROR), node_sets),
    )
)
def test_recovery_never_accepts_a_plan_error(call: Inputs) -> None:
    """In recovery, a plan or answer error never ends as a partial result."""
    decision = call.decide()

    assert not (isinstance(decision, Finish) and decision.status is TaskStatus.PARTIAL)


@given(inputs(mode=st.just(VerificationMode.RECOVERY)))
def test_recovery_replans_only_within_budget_and_deadline(call: Inputs) -> None:
    """A replan is decided only with budget left, before the task deadline, with evidence."""
    decision = call.decide()

    if isinstance(decision, LocalReplan | GlobalReplan):
        assert call.budget.replans_used < call.budget.max_replans
        assert call.budget.task_deadline is None or call.now < call.budget.task_deadline
        assert not call.evidence_missing


@given(inputs(mode=st.sampled_from([VerificationMode.ENFORCE, VerificationMode.RECOVERY])))
def test_missing_evidence_always_fails(call: Inputs) -> None:
    """In enforce and recovery, missing evidence ends failed/evidence_missing, pass or not."""
    decision = call.decide()

    if call.evidence_missing:
        assert isinstance(decision, Finish)
        assert (decision.status, decision.reason) == (
            TaskStatus.FAILED,
            TerminalReason.EVIDENCE_MISSING,
        )


@given(st.none() | verdicts, st.sampled_from(Reliability), results_maps())
def test_diagnosis_blames_only_blamed_nodes(
    verdict: Verdict | None, reliability: Reliability, results: dict[str, NodeResult]
) -> None:
    """A diagnosis never concerns a node that the verifier did not blame."""
    diagnosis = diagnose(verdict, reliability, results)

    blamed = verdict.failed_nodes if verdict is not None else frozenset()
    assert diagnosis.nodes <= blamed


@given(verdicts, results_maps())
def test_device_failure_iff_blamed_node_failed_on_device(
    verdict: Verdict, results: dict[str, NodeResult]
) -> None:
    """With a trusted verdict, the cause is a device failure iff a blamed node's device failed."""
    hit = {n for n in verdict.failed_nodes if isinstance(results.get(n), DeviceFailure)}

    diagnosis = diagnose(verdict, Reliability.OK, results)

    assert (diagnosis.cause is RootCause.DEVICE_FAILURE) == bool(hit)
    if hit:
        assert diagnosis.nodes == hit


@given(inputs())
def test_decide_is_pure(call: Inputs) -> None:
    """decide gives equal decisions for equal inputs and leaves its inputs as they were."""
    before = copy.deepcopy(call)

    first = call.decide()
    second = call.decide()

    assert first == second
    assert call == before


@given(st.none() | verdicts, st.sampled_from(Reliability), results_maps())
def test_diagnose_is_pure(
    verdict: Verdict | None, reliability: Reliability, results: dict[str, NodeResult]
) -> None:
    """diagnose gives equal diagnoses for equal inputs and leaves the results map untouched."""
    snapshot = (copy.deepcopy(verdict), dict(results))

    first = diagnose(verdict, reliability, results)
    second = diagnose(verdict, reliability, results)

    assert first == second
    assert (verdict, results) == snapshot


@settings(max_examples=50)
@given(diagnoses, node_sets, short_text, local_limits)
def test_to_replan_action_is_pure(
    diagnosis: Diagnosis, failed: frozenset[str], feedback: str, local_limit: int
) -> None:
    """to_replan_action gives equal actions for equal inputs."""
    first = to_replan_action(diagnosis, failed, feedback, local_limit=local_limit)

    assert first == to_replan_action(diagnosis, failed, feedback, local_limit=local_limit)
