"""Episode classification is a total function, tested row by row and as a property.

See docs/design.md §8.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev.experience import (
    CLASSIFICATION,
    Episode,
    EpisodeClass,
    EpisodeNode,
    EpisodeRevision,
    classify,
    classify_why,
)
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import RevisionKind
from pev.model import Effect, Reliability, TaskId, VerdictStatus, VerificationMode

S, P, F, C = TaskStatus.SUCCEEDED, TaskStatus.PARTIAL, TaskStatus.FAILED, TaskStatus.CANCELLED
R = TerminalReason
SUBMIT = (EpisodeNode(node_id="file", tool="submit", effect=Effect.ACTION),)
PASSED = EpisodeRevision(
    number=1, kind=RevisionKind.INITIAL, verdict=VerdictStatus.SUCCESS, reliability=Reliability.OK
)
BLAMED = EpisodeRevision(
    number=1,
    kind=RevisionKind.INITIAL,
    verdict=VerdictStatus.REPLAN_REQUIRED,
    reliability=Reliability.OK,
    cause=RootCause.PLAN_OR_ANSWER_ERROR,
    blamed=SUBMIT,
    decision="local_replan",
)
PASSED_2 = dataclasses.replace(PASSED, number=2, kind=RevisionKind.LOCAL, decision="finish")
DEVICE = dataclasses.replace(
    BLAMED, cause=RootCause.DEVICE_FAILURE, decision="finish", verdict=VerdictStatus.FAILURE
)


def unreliable(reliability: Reliability) -> EpisodeRevision:
    return dataclasses.replace(
        BLAMED, reliability=reliability, cause=RootCause.PERCEPTION_UNRELIABLE, blamed=()
    )


def episode(
    status: TaskStatus = S,
    reason: TerminalReason = R.PASSED,
    revisions: tuple[EpisodeRevision, ...] = (PASSED,),
    mode: VerificationMode = VerificationMode.RECOVERY,
    **changes: Any,
) -> Episode:
    return Episode(
        task_id=TaskId("t"),
        input_digest="d",
        goal="g",
        mode=mode,
        status=status,
        reason=reason,
        revisions=revisions,
        **changes,
    )


OFF, AUDIT, ENFORCE = VerificationMode.OFF, VerificationMode.AUDIT, VerificationMode.ENFORCE
ROWS = [
    pytest.param(episode(), EpisodeClass.SUCCESS, id="passed-first-revision"),
    pytest.param(episode(mode=ENFORCE), EpisodeClass.SUCCESS, id="enforce-passed"),
    pytest.param(episode(revisions=(BLAMED, PASSED_2)), EpisodeClass.MIXED, id="replanned-passed"),
    pytest.param(
        episode(F, R.REPLAN_BUDGET_EXHAUSTED, (BLAMED, BLAMED, BLAMED)),
        EpisodeClass.FAILURE,
        id="budget-exhausted",
    ),
    pytest.param(
        episode(F, R.VERIFICATION_FAILED, (BLAMED,)), EpisodeClass.FAILURE, id="plan-failed"
    ),
    pytest.param(
        episode(F, R.VERIFICATION_FAILED, (BLAMED,), mode=ENFORCE),
        EpisodeClass.FAILURE,
        id="enforce-plan-error",
    ),
    pytest.param(
        episode(F, R.REPLAN_DEADLINE_EXPIRED, (BLAMED,)), EpisodeClass.FAILURE, id="replan-deadline"
    ),
    pytest.param(
        episode(F, R.TASK_DEADLINE_EXPIRED, (BLAMED,)), EpisodeClass.FAILURE, id="task-deadline"
    ),
    pytest.param(
        episode(P, R.DEVICE_FAILURE, (DEVICE,)), EpisodeClass.FAILURE, id="partial-device"
    ),
    pytest.param(
        episode(F, R.DEVICE_FAILURE, (DEVICE,), mode=ENFORCE),
        EpisodeClass.FAILURE,
        id="enforce-device",
    ),
    pytest.param(
        episode(S, R.EXECUTION_SUCCEEDED, mode=OFF), EpisodeClass.IGNORED, id="off-succeeded"
    ),
    pytest.param(episode(F, R.EXECUTION_FAILED, mode=OFF), EpisodeClass.IGNORED, id="off-failed"),
    pytest.param(
        episode(S, R.EXECUTION_SUCCEEDED, (BLAMED,), mode=AUDIT),
        EpisodeClass.IGNORED,
        id="audit-blamed",
    ),
    pytest.param(episode(C, R.CANCELLED), EpisodeClass.IGNORED, id="cancelled"),
    pytest.param(episode(F, R.CANCELLED, (BLAMED,)), EpisodeClass.IGNORED, id="failed-cancelled"),
    pytest.param(episode(F, R.EVIDENCE_MISSING), EpisodeClass.IGNORED, id="evidence-missing"),
    pytest.param(
        episode(revisions=(dataclasses.replace(BLAMED, evidence_missing=True), PASSED_2)),
        EpisodeClass.IGNORED,
        id="evidence-missing-on-the-way",
    ),
    pytest.param(episode(F, R.INVALID_PLAN, ()), EpisodeClass.IGNORED, id="invalid-plan"),
    pytest.param(episode(revisions=()), EpisodeClass.IGNORED, id="no-revision"),
    pytest.param(
        episode(P, R.VERIFIER_UNRELIABLE, (unreliable(Reliability.THROWN),)),
        EpisodeClass.IGNORED,
        id="verifier-thrown",
    ),
    pytest.param(
        episode(F, R.VERIFIER_UNRELIABLE, (unreliable(Reliability.MALFORMED),), mode=ENFORCE),
        EpisodeClass.IGNORED,
        id="verifier-malformed",
    ),
    pytest.param(
        episode(F, R.REPLAN_BUDGET_EXHAUSTED, (BLAMED, unreliable(Reliability.INCONCLUSIVE))),
        EpisodeClass.IGNORED,
        id="inconclusive-on-the-way",
    ),
    pytest.param(episode(F, R.EXECUTION_FAILED), EpisodeClass.IGNORED, id="anything-else"),
]


@pytest.mark.parametrize(("value", "expected"), ROWS)
def test_classification_table(value: Episode, expected: EpisodeClass) -> None:
    """Each row of the classification gives its class."""
    assert classify(value) is expected


def test_every_rule_of_the_table_is_exercised() -> None:
    """Every row of CLASSIFICATION is the first match of some row above (no dead rule)."""
    used = {classify_why(param.values[0])[1] for param in ROWS}  # type: ignore[index]
    assert {why for why, _, _ in CLASSIFICATION} | {"anything else"} == used


episodes = st.builds(
    Episode,
    task_id=st.text(max_size=8).map(TaskId),
    input_digest=st.text(max_size=8),
    goal=st.text(max_size=20),
    mode=st.sampled_from(VerificationMode),
    status=st.sampled_from(TaskStatus),
    reason=st.sampled_from(TerminalReason),
    revisions=st.lists(
        st.builds(
            EpisodeRevision,
            number=st.integers(1, 5),
            kind=st.sampled_from(RevisionKind),
            verdict=st.none() | st.sampled_from(VerdictStatus),
            reliability=st.none() | st.sampled_from(Reliability),
            evidence_missing=st.booleans(),
            cause=st.none() | st.sampled_from(RootCause),
            blamed=st.lists(
                st.builds(
                    EpisodeNode,
                    node_id=st.text(max_size=5),
                    tool=st.none() | st.text(max_size=5),
                    effect=st.sampled_from(Effect),
                ),
                max_size=2,
            ).map(tuple),
            decision=st.sampled_from(["", "finish", "local_replan", "global_replan"]),
        ),
        max_size=4,
    ).map(tuple),
)


@given(episodes)
def test_classify_is_total(value: Episode) -> None:
    """Every episode, however odd, gets exactly one class, and the class keeps its promise."""
    kind, why = classify_why(value)
    assert kind is classify(value)
    assert kind in EpisodeClass
    assert why
    if kind in (EpisodeClass.SUCCESS, EpisodeClass.MIXED):
        assert (value.status, value.reason) == (S, R.PASSED)
        assert (len(value.revisions) == 1) is (kind is EpisodeClass.SUCCESS)
    if kind is EpisodeClass.FAILURE:
        assert value.status in (F, P)
    if value.mode in (OFF, AUDIT) or value.status is C:
        assert kind is EpisodeClass.IGNORED
