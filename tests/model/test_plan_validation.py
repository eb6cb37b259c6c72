"""Plan validation (docs/design.md §2.1): every bad plan is a PlanError listing every problem."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev.errors import PlanError
from pev.model import (
    DEFAULT_MAX_NODES,
    Effect,
    Plan,
    PlanNode,
    ToolParameter,
    ToolSpec,
    plan_problems,
    validate_plan,
)

TOOLS: Mapping[str, ToolSpec] = {
    "move": ToolSpec(
        name="move",
        effect=Effect.ACTION,
        parameters=(
            ToolParameter(name="x", json_types=frozenset({"number"})),
            ToolParameter(name="label", json_types=frozenset({"string"}), required=False),
            ToolParameter(name="extra", required=False),
        ),
    ),
    "look": ToolSpec(name="look", effect=Effect.QUERY),
}


def _problems(plan: object, **kwargs: object) -> tuple[str, ...]:
    with pytest.raises(PlanError) as info:
        validate_plan(plan, **kwargs)  # type: ignore[arg-type]
    return info.value.problems


def _chain(length: int) -> Plan:
    nodes = [PlanNode(f"n{i}", after=(f"n{i - 1}",) if i else ()) for i in range(length)]
    return Plan("walk the chain", tuple(nodes))


# One invalid plan per row, with the exact problem list it must produce.
INVALID = [
    pytest.param(
        Plan("g", ()),
        {},
        ("the plan has no nodes; a plan needs at least one",),
        id="empty-plan",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b"), PlanNode("a"), PlanNode("a"))),
        {},
        ("node id 'a' is used by 3 nodes; ids must be unique",),
        id="duplicate-ids",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", after=("zz", "yy")),)),
        {},
        (
            "node 'a': depends on 'zz', which is not a node of this plan",
            "node 'a': depends on 'yy', which is not a node of this plan",
        ),
        id="unknown-after-ids",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", after=("a",)),)),
        {},
        ("dependency cycle: 'a' runs after 'a'",),
        id="self-dependency",
    ),
    pytest.param(
        Plan(
            "g",
            (
                PlanNode("a", after=("b",)),
                PlanNode("b", after=("c",)),
                PlanNode("c", after=("a",)),
            ),
        ),
        {},
        ("dependency cycle: 'a' runs after 'b' runs after 'c' runs after 'a'",),
        id="three-node-cycle",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="fly"),)),
        {"tools": TOOLS},
        ("node 'a': tool 'fly' is not registered (registered: look, move)",),
        id="unregistered-tool",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="fly"),)),
        {"tools": {}},
        ("node 'a': tool 'fly' is not registered (registered: none)",),
        id="empty-registry",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="mvoe"),)),
        {"tools": TOOLS},
        ("node 'a': tool 'mvoe' is not registered (registered: look, move); did you mean 'move'?",),
        id="unregistered-tool-close-to-one",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", args=[1, 2]),)),  # type: ignore[arg-type]
        {},
        ("node 'a': args must be a JSON object, got a list",),
        id="args-not-an-object",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", args={1: "x"}),)),  # type: ignore[dict-item]
        {},
        ("node 'a': args keys must be strings, found 1",),
        id="args-non-string-key",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", args={"x": {1, 2}}),)),  # type: ignore[dict-item]
        {},
        ("node 'a': args.x: a set is not a JSON value",),
        id="args-set-value",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", args={"x": [0.5, math.nan]}),)),
        {},
        ("node 'a': args.x[1]: nan is not a JSON number",),
        id="args-nan-value",
    ),
    pytest.param(
        Plan("g", tuple(PlanNode(f"n{i}") for i in range(3))),
        {"max_nodes": 2},
        (
            (
                "the plan has 3 nodes, more than max_nodes=2; "
                "split the work or raise RecoveryPolicy.max_nodes"
            ),
        ),
        id="more-than-max-nodes",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", args={"x": {"$ref": "a.pose"}}))),
        {},
        (
            (
                "node 'b': $ref 'a.pose' points at 'a', which is not among its after ids; "
                "add 'a' to after"
            ),
        ),
        id="ref-to-non-dependency",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", after=("a",), args={"x": [{"$ref": 5}]}))),
        {},
        ("node 'b': a $ref must be a node id string, got 5",),
        id="ref-not-a-string",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", after=("a",), args={"x": {"$ref": ""}}))),
        {},
        ("node 'b': a $ref must be a node id string, got ''",),
        id="ref-empty",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", after=("a",), args={"x": {"$ref": ".pose"}}))),
        {},
        ("node 'b': a $ref must be a node id string, got '.pose'",),
        id="ref-without-node-id",
    ),
    pytest.param(
        Plan(
            "g",
            (PlanNode("a"), PlanNode("b", after=("a",), args={"x": {"$ref": "a", "k": 1}})),
        ),
        {},
        ("node 'b': a $ref object must hold only the '$ref' key, found keys ['$ref', 'k']",),
        id="ref-with-extra-keys",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 1}, effect=Effect.QUERY),)),
        {"tools": TOOLS},
        (
            (
                "node 'a': tool 'move' is an action; a node cannot label it 'query' "
                "(a node may only make a tool's effect stricter)"
            ),
        ),
        id="query-label-on-action-tool",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"label": "home"}),)),
        {"tools": TOOLS},
        ("node 'a': tool 'move' needs argument 'x', which is missing",),
        id="missing-required-arg",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 1, "speed": 2}),)),
        {"tools": TOOLS},
        ("node 'a': tool 'move' has no parameter 'speed' (parameters: extra, label, x)",),
        id="unknown-arg",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="look", args={"zoom": 2}),)),
        {"tools": TOOLS},
        ("node 'a': tool 'look' has no parameter 'zoom' (parameters: none)",),
        id="arg-for-tool-without-parameters",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": "far"}),)),
        {"tools": TOOLS},
        ("node 'a': argument 'x' of tool 'move' must be number, got string",),
        id="string-for-number",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": True}),)),
        {"tools": TOOLS},
        ("node 'a': argument 'x' of tool 'move' must be number, got boolean",),
        id="boolean-for-number",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 1, "label": ["a"]}),)),
        {"tools": TOOLS},
        ("node 'a': argument 'label' of tool 'move' must be string, got array",),
        id="array-for-string",
    ),
    pytest.param(
        Plan("g", (PlanNode("a.b"),)),
        {},
        ("node 'a.b': an id must not contain '.', which separates a $ref from its output path",),
        id="dot-in-id",
    ),
    pytest.param(
        Plan("g", (PlanNode(" "),)),
        {},
        ("node id ' ' must be a non-empty string",),
        id="blank-id",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", effect="maybe"),)),  # type: ignore[arg-type]
        {},
        ("node 'a': effect must be 'query', 'action' or null (the tool's), got 'maybe'",),
        id="bad-effect",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", after="a"))),  # type: ignore[arg-type]
        {},
        ("node 'b': after must be a list of node ids, got 'a'",),
        id="after-a-string",
    ),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b", after=("a", "a")))),
        {},
        ("node 'b': after lists the same id more than once",),
        id="after-repeats-an-id",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", description=3, tool=5),)),  # type: ignore[arg-type]
        {},
        (
            "node 'a': description must be a string",
            "node 'a': tool must be a tool name (a string) or None",
        ),
        id="description-and-tool-not-strings",
    ),
    pytest.param(
        Plan(5, (PlanNode("a"),)),  # type: ignore[arg-type]
        {},
        ("the plan's goal must be a string, got a int",),
        id="goal-not-a-string",
    ),
    pytest.param(
        Plan("g", ("a",)),  # type: ignore[arg-type]
        {},
        ("the plan's nodes must be a sequence of PlanNode",),
        id="nodes-not-plan-nodes",
    ),
    pytest.param(
        {"goal": "g", "nodes": []},
        {},
        ("expected a Plan, got a dict",),
        id="not-a-plan",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", repeat="yes"),)),  # type: ignore[arg-type]
        {},
        ("node 'a': repeat must be true or false, got 'yes'",),
        id="repeat-not-a-bool",
    ),
]


@pytest.mark.parametrize(("plan", "kwargs", "expected"), INVALID)
def test_invalid_plan_lists_its_problems(
    plan: object, kwargs: dict[str, object], expected: tuple[str, ...]
) -> None:
    """Each invalid plan raises PlanError with exactly the problems it has."""
    assert _problems(plan, **kwargs) == expected


@pytest.mark.parametrize(("plan", "kwargs", "expected"), INVALID)
def test_plan_problems_matches_validate_plan(
    plan: object, kwargs: dict[str, object], expected: tuple[str, ...]
) -> None:
    """plan_problems returns the same list that validate_plan raises."""
    assert plan_problems(plan, **kwargs) == expected  # type: ignore[arg-type]


def test_plan_error_message_lists_every_problem() -> None:
    """The exception text counts the problems and shows each one."""
    plan = Plan("g", (PlanNode("a", after=("x",)), PlanNode("a", after=("y",))))

    with pytest.raises(PlanError) as info:
        validate_plan(plan)

    text = str(info.value)
    assert text.startswith("invalid plan (3 problems):")
    for problem in info.value.problems:
        assert f"  - {problem}" in text


def test_plan_with_several_problems_lists_them_all() -> None:
    """Problems of every kind, in several nodes, are all reported, not only the first."""
    plan = Plan(
        "g",
        (
            PlanNode("a", tool="move", args={"speed": 1}, effect=Effect.QUERY),
            PlanNode("b", tool="fly", after=("ghost",)),
            PlanNode("c", args={"x": {"$ref": "a"}}, after=("d",)),
            PlanNode("d", after=("c",)),
            PlanNode("a", tool="look"),
        ),
    )

    assert _problems(plan, tools=TOOLS, max_nodes=4) == (
        (
            "the plan has 5 nodes, more than max_nodes=4; "
            "split the work or raise RecoveryPolicy.max_nodes"
        ),
        "node id 'a' is used by 2 nodes; ids must be unique",
        (
            "node 'a': tool 'move' is an action; a node cannot label it 'query' "
            "(a node may only make a tool's effect stricter)"
        ),
        "node 'a': tool 'move' needs argument 'x', which is missing",
        "node 'a': tool 'move' has no parameter 'speed' (parameters: extra, label, x)",
        "node 'b': depends on 'ghost', which is not a node of this plan",
        "node 'b': tool 'fly' is not registered (registered: look, move)",
        "node 'c': $ref 'a' points at 'a', which is not among its after ids; add 'a' to after",
        "dependency cycle: 'c' runs after 'd' runs after 'c'",
    )


def test_two_separate_cycles_are_both_reported() -> None:
    """Each distinct cycle gets its own problem."""
    plan = Plan(
        "g",
        (
            PlanNode("a", after=("b",)),
            PlanNode("b", after=("a",)),
            PlanNode("c", after=("c",)),
        ),
    )

    assert _problems(plan) == (
        "dependency cycle: 'a' runs after 'b' runs after 'a'",
        "dependency cycle: 'c' runs after 'c'",
    )


def test_long_chain_is_valid_without_recursion() -> None:
    """A chain of 10,000 dependent nodes validates without hitting the recursion limit."""
    validate_plan(_chain(10_000), max_nodes=10_000)


def test_long_cycle_is_found_without_recursion() -> None:
    """Closing a 10,000-node chain into a ring is reported as one cycle."""
    chain = _chain(10_000)
    first = PlanNode("n0", after=("n9999",))
    ring = Plan(chain.goal, (first, *chain.nodes[1:]))

    (problem,) = _problems(ring, max_nodes=10_000)

    assert problem.startswith("dependency cycle: 'n0' runs after 'n9999' runs after 'n9998'")
    assert problem.endswith("'n1' runs after 'n0'")


def test_default_max_nodes_is_64() -> None:
    """Without max_nodes, 64 nodes pass and 65 do not."""
    assert DEFAULT_MAX_NODES == 64
    validate_plan(Plan("g", tuple(PlanNode(f"n{i}") for i in range(64))))
    assert _problems(Plan("g", tuple(PlanNode(f"n{i}") for i in range(65)))) == (
        (
            "the plan has 65 nodes, more than max_nodes=64; "
            "split the work or raise RecoveryPolicy.max_nodes"
        ),
    )


VALID = [
    pytest.param(Plan("g", (PlanNode("a"),)), {}, id="one-node"),
    pytest.param(
        Plan("g", (PlanNode("a"), PlanNode("b"), PlanNode("c"))), {}, id="independent-nodes"
    ),
    pytest.param(
        Plan(
            "g",
            (
                PlanNode("a"),
                PlanNode("b", after=("a",)),
                PlanNode("c", after=("a",)),
                PlanNode("d", after=("b", "c")),
            ),
        ),
        {},
        id="diamond",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="unregistered"),)), {}, id="no-registry-no-tool-check"
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="look", effect=Effect.ACTION),)),
        {"tools": TOOLS},
        id="action-label-on-query-tool",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="look", effect=Effect.QUERY),)),
        {"tools": TOOLS},
        id="query-label-on-query-tool",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 3}),)),
        {"tools": TOOLS},
        id="integer-for-number",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 0.25, "label": "home"}),)),
        {"tools": TOOLS},
        id="optional-arg-given",
    ),
    pytest.param(
        Plan("g", (PlanNode("a", tool="move", args={"x": 1, "extra": [1, {"k": None}]}),)),
        {"tools": TOOLS},
        id="untyped-parameter-takes-anything",
    ),
    pytest.param(
        Plan(
            "g",
            (
                PlanNode("n", tool="look"),
                PlanNode(
                    "a",
                    tool="move",
                    after=("n",),
                    args={"x": {"$ref": "n.pose.x"}, "label": {"$ref": "n"}},
                ),
            ),
        ),
        {"tools": TOOLS},
        id="ref-accepted-for-any-type",
    ),
    pytest.param(
        Plan(
            "g",
            (PlanNode("a"), PlanNode("b", after=("a",), args={"deep": [{"v": {"$ref": "a"}}]})),
        ),
        {},
        id="nested-ref-to-dependency",
    ),
    pytest.param(Plan("g", (PlanNode("a", tool=None),)), {"tools": TOOLS}, id="no-tool"),
    pytest.param(Plan("g", (PlanNode("a", repeat=True),)), {}, id="repeat"),
]


@pytest.mark.parametrize(("plan", "kwargs"), VALID)
def test_valid_plan_passes(plan: Plan, kwargs: dict[str, object]) -> None:
    """A valid plan raises nothing and has no problems."""
    validate_plan(plan, **kwargs)  # type: ignore[arg-type]
    assert plan_problems(plan, **kwargs) == ()  # type: ignore[arg-type]


def test_node_effect_given_as_text_becomes_an_effect() -> None:
    """A node built with effect='query' holds Effect.QUERY."""
    assert PlanNode("a", effect="query").effect is Effect.QUERY  # type: ignore[arg-type]


def test_node_after_list_becomes_a_tuple() -> None:
    """A list of dependencies is stored as a tuple."""
    assert PlanNode("b", after=["a"]).after == ("a",)  # type: ignore[arg-type]


def test_plan_nodes_list_becomes_a_tuple() -> None:
    """A list of nodes is stored as a tuple."""
    assert Plan("g", [PlanNode("a")]).nodes == (PlanNode("a"),)  # type: ignore[arg-type]


def test_plan_node_lookup() -> None:
    """plan.node(id) finds the node and node_ids lists ids in order."""
    plan = Plan("g", (PlanNode("a"), PlanNode("b", "second")))

    assert plan.node("b").description == "second"
    assert plan.node_ids == ("a", "b")


def test_plan_node_lookup_of_unknown_id_is_key_error() -> None:
    """Asking for an id the plan lacks raises KeyError."""
    with pytest.raises(KeyError):
        Plan("g", (PlanNode("a"),)).node("zz")


# Random junk for every field of PlanNode and Plan: well-formed values mixed with wrong types,
# unhashable values, cycles and unknown references.
IDS = st.sampled_from(["a", "b", "c", "a.b", "", " "])
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.floats(),
    st.text(max_size=3),
    st.binary(max_size=2),
    st.lists(IDS, max_size=2),
    st.sets(st.integers(0, 2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.dictionaries(st.integers(0, 2), st.text(max_size=1), max_size=2),
)
ARG_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=3),
        st.builds(lambda target: {"$ref": target}, st.one_of(IDS, JUNK)),
        st.builds(lambda target: {"$ref": target, "k": 1}, IDS),
        st.sets(st.integers(0, 2), max_size=1),
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
ARGS = st.one_of(st.dictionaries(st.sampled_from(["x", "label", "zoom"]), ARG_VALUES), JUNK)
NODES = st.builds(
    PlanNode,
    id=st.one_of(IDS, JUNK),
    description=st.one_of(st.text(max_size=3), JUNK),
    tool=st.one_of(st.sampled_from([None, "move", "look", "fly"]), JUNK),
    args=ARGS,
    after=st.one_of(st.lists(st.one_of(IDS, JUNK), max_size=3).map(tuple), JUNK),
    effect=st.one_of(st.sampled_from([*Effect, "query", "action"]), JUNK),
)
PLANS = st.builds(
    Plan,
    goal=st.one_of(st.text(max_size=3), JUNK),
    nodes=st.one_of(st.lists(NODES, max_size=5).map(tuple), st.lists(NODES, max_size=3), JUNK),
)


@given(
    PLANS,
    st.one_of(st.none(), st.just(TOOLS)),
    st.integers(min_value=1, max_value=6),
)
def test_validation_never_raises_anything_but_plan_error(
    plan: Plan, tools: Mapping[str, ToolSpec] | None, max_nodes: int
) -> None:
    """Whatever junk a plan holds, validate_plan either passes or raises PlanError."""
    problems = plan_problems(plan, tools=tools, max_nodes=max_nodes)
    assert all(isinstance(problem, str) and problem for problem in problems)
    if not problems:
        validate_plan(plan, tools=tools, max_nodes=max_nodes)
        return
    with pytest.raises(PlanError) as info:
        validate_plan(plan, tools=tools, max_nodes=max_nodes)
    assert info.value.problems == problems
