"""The action table of docs/design.md §3.2: what recovery does about each diagnosis."""

from __future__ import annotations

import pytest

from pev.kernel import (
    AcceptPartial,
    Action,
    Diagnosis,
    GlobalReplan,
    LocalReplan,
    RootCause,
    TerminalReason,
    to_replan_action,
)

FEEDBACK = "the box is still on the table"


def _plan_error(*nodes: str) -> Diagnosis:
    return Diagnosis(RootCause.PLAN_OR_ANSWER_ERROR, frozenset(nodes))


def _nodes(count: int) -> frozenset[str]:
    return frozenset(f"n{index}" for index in range(1, count + 1))


# (diagnosis, failed nodes, local_limit) → action. Accept-partial rows ignore the failed nodes and
# the limit; plan-error rows go local for 1..local_limit nodes and global otherwise.
ACTION_TABLE = [
    pytest.param(
        Diagnosis(RootCause.DEVICE_FAILURE, frozenset({"n1"})),
        {"n1"},
        2,
        AcceptPartial(TerminalReason.DEVICE_FAILURE),
        id="device-failure-accepts-partial",
    ),
    pytest.param(
        Diagnosis(RootCause.DEVICE_FAILURE, _nodes(5)),
        _nodes(5),
        0,
        AcceptPartial(TerminalReason.DEVICE_FAILURE),
        id="device-failure-accepts-partial-whatever-the-count",
    ),
    pytest.param(
        Diagnosis(RootCause.PERCEPTION_UNRELIABLE),
        frozenset(),
        2,
        AcceptPartial(TerminalReason.VERIFIER_UNRELIABLE),
        id="unreliable-accepts-partial",
    ),
    pytest.param(
        Diagnosis(RootCause.PERCEPTION_UNRELIABLE),
        {"n1"},
        2,
        AcceptPartial(TerminalReason.VERIFIER_UNRELIABLE),
        id="unreliable-with-blamed-node-accepts-partial",
    ),
    pytest.param(_plan_error(), frozenset(), 2, GlobalReplan(FEEDBACK), id="plan-error-no-nodes"),
    pytest.param(
        _plan_error("n1"), {"n1"}, 2, LocalReplan(_nodes(1), FEEDBACK), id="plan-error-one-node"
    ),
    pytest.param(
        _plan_error(*_nodes(2)),
        _nodes(2),
        2,
        LocalReplan(_nodes(2), FEEDBACK),
        id="plan-error-at-default-limit",
    ),
    pytest.param(
        _plan_error(*_nodes(3)),
        _nodes(3),
        2,
        GlobalReplan(FEEDBACK),
        id="plan-error-over-default-limit",
    ),
    pytest.param(_plan_error("n1"), {"n1"}, 0, GlobalReplan(FEEDBACK), id="limit-0-one-node"),
    pytest.param(_plan_error(), frozenset(), 0, GlobalReplan(FEEDBACK), id="limit-0-no-nodes"),
    pytest.param(
        _plan_error("n1"), {"n1"}, 1, LocalReplan(_nodes(1), FEEDBACK), id="limit-1-one-node"
    ),
    pytest.param(_plan_error(*_nodes(2)), _nodes(2), 1, GlobalReplan(FEEDBACK), id="limit-1-two"),
    pytest.param(
        _plan_error(*_nodes(2)), _nodes(2), 2, LocalReplan(_nodes(2), FEEDBACK), id="limit-2-two"
    ),
    pytest.param(_plan_error(*_nodes(3)), _nodes(3), 2, GlobalReplan(FEEDBACK), id="limit-2-three"),
    pytest.param(
        _plan_error(*_nodes(3)),
        _nodes(3),
        3,
        LocalReplan(_nodes(3), FEEDBACK),
        id="limit-3-three",
    ),
    pytest.param(_plan_error(*_nodes(4)), _nodes(4), 3, GlobalReplan(FEEDBACK), id="limit-3-four"),
]


@pytest.mark.parametrize(("diagnosis", "failed_nodes", "local_limit", "expected"), ACTION_TABLE)
def test_action_table(
    diagnosis: Diagnosis,
    failed_nodes: set[str] | frozenset[str],
    local_limit: int,
    expected: Action,
) -> None:
    """Each row of docs/design.md §3.2 maps its diagnosis to its action."""
    action = to_replan_action(diagnosis, failed_nodes, FEEDBACK, local_limit=local_limit)

    assert action == expected


def test_default_local_limit_is_two() -> None:
    """Without a local_limit, two failed nodes go local and three go global."""
    two = to_replan_action(_plan_error(*_nodes(2)), _nodes(2), FEEDBACK)
    three = to_replan_action(_plan_error(*_nodes(3)), _nodes(3), FEEDBACK)

    assert (type(two), type(three)) == (LocalReplan, GlobalReplan)


def test_local_replan_counts_distinct_nodes() -> None:
    """A node named twice in the failed nodes counts once against the local limit."""
    action = to_replan_action(_plan_error("n1", "n2"), ["n1", "n2", "n1"], FEEDBACK, local_limit=2)

    assert action == LocalReplan(frozenset({"n1", "n2"}), FEEDBACK)
