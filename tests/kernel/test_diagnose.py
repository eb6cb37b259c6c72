"""The diagnosis table of docs/design.md §3.1, row by row, first match wins."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pev.kernel import Diagnosis, RootCause, diagnose
from pev.model import (
    DeviceFailure,
    NodeResult,
    Reliability,
    Success,
    Verdict,
    VerdictStatus,
    VerifierFailure,
)

UNRELIABLE = RootCause.PERCEPTION_UNRELIABLE
DEVICE = RootCause.DEVICE_FAILURE
PLAN = RootCause.PLAN_OR_ANSWER_ERROR

OK = Success("done")
BROKEN = DeviceFailure("n1", "gripper offline")
LOST = DeviceFailure("n1", "arm timed out", is_timeout=True, outcome_unknown=True)
CHECK_FAILED = VerifierFailure("n1", "output is empty")


def _blaming(*nodes: str, status: VerdictStatus = VerdictStatus.REPLAN_REQUIRED) -> Verdict:
    return Verdict(status, failed_nodes=frozenset(nodes), feedback="try again")


# (verdict, reliability, results) → (cause, nodes). Rows follow the order of docs/design.md §3.1:
# unreliable perception first, then device failures the verifier blames, then plan or answer errors.
DIAGNOSIS_TABLE = [
    pytest.param(None, Reliability.THROWN, {}, UNRELIABLE, frozenset(), id="thrown"),
    pytest.param(
        _blaming("n1"),
        Reliability.THROWN,
        {"n1": BROKEN},
        UNRELIABLE,
        frozenset(),
        id="thrown-wins-over-blamed-device-failure",
    ),
    pytest.param(None, Reliability.MALFORMED, {}, UNRELIABLE, frozenset(), id="malformed-nothing"),
    pytest.param(
        _blaming("n1"),
        Reliability.MALFORMED,
        {"n1": BROKEN},
        UNRELIABLE,
        frozenset(),
        id="malformed-wins-over-blamed-device-failure",
    ),
    pytest.param(
        Verdict(VerdictStatus.INCONCLUSIVE),
        Reliability.INCONCLUSIVE,
        {},
        UNRELIABLE,
        frozenset(),
        id="inconclusive",
    ),
    pytest.param(
        _blaming("n1", status=VerdictStatus.INCONCLUSIVE),
        Reliability.INCONCLUSIVE,
        {"n1": BROKEN},
        UNRELIABLE,
        frozenset(),
        id="inconclusive-wins-over-blamed-device-failure",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS),
        Reliability.MALFORMED,
        {"n1": OK},
        UNRELIABLE,
        frozenset(),
        id="malformed-success-is-unreliable",
    ),
    pytest.param(None, Reliability.OK, {}, UNRELIABLE, frozenset(), id="no-verdict-is-unreliable"),
    pytest.param(
        _blaming("n1"), Reliability.OK, {"n1": BROKEN}, DEVICE, {"n1"}, id="blamed-device-failure"
    ),
    pytest.param(
        _blaming("n1"),
        Reliability.OK,
        {"n1": LOST},
        DEVICE,
        {"n1"},
        id="blamed-timeout-with-unknown-outcome",
    ),
    pytest.param(
        _blaming("n1", "n2"),
        Reliability.OK,
        {"n1": BROKEN, "n2": OK},
        DEVICE,
        {"n1"},
        id="device-failure-names-only-the-hit",
    ),
    pytest.param(
        _blaming("n1", "n2", "n3"),
        Reliability.OK,
        {"n1": BROKEN, "n2": DeviceFailure("n2", "camera lost"), "n3": OK},
        DEVICE,
        {"n1", "n2"},
        id="several-blamed-device-failures",
    ),
    pytest.param(
        _blaming("n1", status=VerdictStatus.FAILURE),
        Reliability.OK,
        {"n1": BROKEN},
        DEVICE,
        {"n1"},
        id="failure-verdict-on-device-failure",
    ),
    pytest.param(
        _blaming("n2"),
        Reliability.OK,
        {"n1": BROKEN, "n2": OK},
        PLAN,
        {"n2"},
        id="unblamed-device-failure-is-not-a-device-failure",
    ),
    pytest.param(
        _blaming(),
        Reliability.OK,
        {"n1": BROKEN},
        PLAN,
        frozenset(),
        id="unblamed-device-failure-and-no-blame",
    ),
    pytest.param(
        _blaming("n1"),
        Reliability.OK,
        {"n1": CHECK_FAILED},
        PLAN,
        {"n1"},
        id="verifier-failure-is-never-a-device-fault",
    ),
    pytest.param(
        _blaming("n1", "n2"),
        Reliability.OK,
        {"n1": OK, "n2": OK},
        PLAN,
        {"n1", "n2"},
        id="plan-error-on-blamed-nodes",
    ),
    pytest.param(_blaming("n1"), Reliability.OK, {}, PLAN, {"n1"}, id="blamed-node-without-result"),
    pytest.param(
        _blaming("n1", status=VerdictStatus.FAILURE),
        Reliability.OK,
        {"n1": OK},
        PLAN,
        {"n1"},
        id="failure-verdict-plan-error",
    ),
    pytest.param(_blaming(), Reliability.OK, {}, PLAN, frozenset(), id="plan-error-blaming-none"),
]


@pytest.mark.parametrize(("verdict", "reliability", "results", "cause", "nodes"), DIAGNOSIS_TABLE)
def test_diagnosis_table(
    verdict: Verdict | None,
    reliability: Reliability,
    results: Mapping[str, NodeResult],
    cause: RootCause,
    nodes: frozenset[str] | set[str],
) -> None:
    """Each row of docs/design.md §3.1 yields its root cause and the nodes it concerns."""
    diagnosis = diagnose(verdict, reliability, results)

    assert (diagnosis.cause, diagnosis.nodes) == (cause, frozenset(nodes))


@pytest.mark.parametrize(
    ("reliability", "detail"),
    [
        pytest.param(Reliability.THROWN, "thrown", id="thrown"),
        pytest.param(Reliability.MALFORMED, "malformed", id="malformed"),
        pytest.param(Reliability.INCONCLUSIVE, "inconclusive", id="inconclusive"),
    ],
)
def test_unreliable_detail_names_the_reliability(reliability: Reliability, detail: str) -> None:
    """An unreliable verdict's diagnosis detail says which kind of unreliability it was."""
    diagnosis = diagnose(_blaming("n1"), reliability, {"n1": BROKEN})

    assert diagnosis == Diagnosis(UNRELIABLE, frozenset(), detail)


def test_device_failure_keeps_its_nodes_as_a_frozenset() -> None:
    """The nodes of a device-failure diagnosis are a frozenset (the verdict's blame set met)."""
    verdict = Verdict(VerdictStatus.REPLAN_REQUIRED, failed_nodes=frozenset({"n1"}))

    diagnosis = diagnose(verdict, Reliability.OK, {"n1": BROKEN})

    assert isinstance(diagnosis.nodes, frozenset)


def test_root_cause_has_exactly_three_members() -> None:
    """RootCause is the closed vocabulary of docs/design.md §3.1: exactly three causes."""
    assert {cause.value for cause in RootCause} == {
        "perception_unreliable",
        "device_failure",
        "plan_or_answer_error",
    }
