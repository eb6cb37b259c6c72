"""Walking a plan's graph: downstream() and iter_refs()."""

from __future__ import annotations

import pytest

from pev.model import Plan, PlanNode, downstream, freeze_json, iter_refs

# a -> b -> d, a -> c, e alone
PLAN = Plan(
    "g",
    (
        PlanNode("a"),
        PlanNode("b", after=("a",)),
        PlanNode("c", after=("a",)),
        PlanNode("d", after=("b",)),
        PlanNode("e"),
    ),
)


@pytest.mark.parametrize(
    ("roots", "expected"),
    [
        pytest.param(["a"], {"a", "b", "c", "d"}, id="root-reaches-everything-below"),
        pytest.param(["b"], {"b", "d"}, id="middle-node"),
        pytest.param(["d"], {"d"}, id="leaf"),
        pytest.param(["e"], {"e"}, id="independent-node"),
        pytest.param(["c", "e"], {"c", "e"}, id="several-roots"),
        pytest.param([], set(), id="no-roots"),
        pytest.param(["zz"], set(), id="unknown-root-ignored"),
    ],
)
def test_downstream(roots: list[str], expected: set[str]) -> None:
    """downstream() is the roots plus everything that depends on them, directly or not."""
    assert downstream(PLAN, roots) == frozenset(expected)


def test_downstream_of_a_long_chain_does_not_recurse() -> None:
    """A 10,000-node chain is walked without hitting the recursion limit."""
    nodes = tuple(PlanNode(f"n{i}", after=(f"n{i - 1}",) if i else ()) for i in range(10_000))

    assert len(downstream(Plan("g", nodes), ["n0"])) == 10_000


def test_downstream_returns_a_frozenset() -> None:
    """The result is immutable."""
    assert isinstance(downstream(PLAN, ["a"]), frozenset)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param({"x": 1}, [], id="no-refs"),
        pytest.param({"x": {"$ref": "n1"}}, ["n1"], id="top-level"),
        pytest.param({"x": {"$ref": "n1.pose.x"}}, ["n1.pose.x"], id="with-path"),
        pytest.param({"x": [{"$ref": "n1"}, {"inner": {"$ref": "n2"}}]}, ["n1", "n2"], id="nested"),
        pytest.param({"x": {"$ref": 5}}, [], id="non-string-ref-skipped"),
        pytest.param({"x": {"$ref": "n1", "k": 2}}, [], id="ref-with-extra-keys-is-no-ref"),
        pytest.param({"$ref": "n1"}, ["n1"], id="whole-value-is-a-ref"),
    ],
)
def test_iter_refs(args: object, expected: list[str]) -> None:
    """iter_refs yields every well-formed $ref target, in order."""
    assert list(iter_refs(args)) == expected


def test_iter_refs_reads_frozen_args() -> None:
    """Refs inside frozen args (JsonObject and tuples) are found too."""
    args = freeze_json({"xs": [{"$ref": "a"}, {"$ref": "b.k"}]})

    assert list(iter_refs(args)) == ["a", "b.k"]


def test_plan_node_args_are_frozen() -> None:
    """A node's args are stored read-only, so the node is hashable."""
    node = PlanNode("a", args={"xs": [1, 2]})

    assert node.args == {"xs": [1, 2]}
    assert isinstance(node.args["xs"], tuple)
    assert hash(node) == hash(PlanNode("a", args={"xs": [1, 2]}))
