"""The plan and verdict schemas: one node shape per tool, args held to the tool's schema, lists
capped so that a grammar-constrained model cannot loop inside them."""

from __future__ import annotations

import json
from typing import Any

import pytest

import pev
from pev._json import thaw_json
from pev.engine import PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.llm import LLMPlanner
from pev.llm._planner import plan_prompt
from pev.llm._schema import DEFAULT_MAX_PLAN_NODES, plan_schema
from pev.llm._verifier import verdict_schema
from pev.model import (
    Effect,
    Plan,
    PlanNode,
    Success,
    TaskId,
    ToolParameter,
    ToolSpec,
    VerificationContract,
)
from pev.testing import ScriptedChat

jsonschema = pytest.importorskip("jsonschema")

POINT = {
    "type": "object",
    "title": "Point",
    "properties": {"x": {"type": "number", "title": "X"}, "y": {"type": "number", "title": "Y"}},
    "required": ["x", "y"],
}


def pydantic_like(properties: dict[str, Any], required: list[str], **defs: Any) -> dict[str, Any]:
    """An args schema as pydantic writes one: titles, descriptions, local $defs."""
    schema: dict[str, Any] = {
        "type": "object",
        "title": "Args",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


MOVE = ToolSpec(
    name="move",
    effect=Effect.ACTION,
    parameters=(
        ToolParameter(name="to"),
        ToolParameter(name="speed", json_types=frozenset({"number", "null"}), required=False),
    ),
    description="Move the arm.",
    schema=pydantic_like(
        {
            "to": {"$ref": "#/$defs/Point", "description": "where to go"},
            "speed": {
                "anyOf": [{"type": "number"}, {"type": "null"}],
                "default": None,
                "title": "Speed",
                "description": "how fast, in m/s",
            },
        },
        ["to"],
        Point=POINT,
    ),
)
# Another tool that defines its own "Point" (in centimetres): the two must not collide.
PLACE = ToolSpec(
    name="place",
    effect=Effect.ACTION,
    parameters=(ToolParameter(name="at"), ToolParameter(name="title")),
    schema=pydantic_like(
        {"at": {"$ref": "#/$defs/Point"}, "title": {"type": "string", "title": "Title"}},
        ["at", "title"],
        Point={**POINT, "description": "centimetres"},
    ),
)
# Built by hand: no schema, only the parameters' JSON types.
CAMERA = ToolSpec(
    name="camera",
    effect=Effect.QUERY,
    parameters=(
        ToolParameter(name="zoom", json_types=frozenset({"integer"}), required=False),
        ToolParameter(name="anything"),
    ),
)
TOOLS = (MOVE, PLACE, CAMERA)


def branch(schema: dict[str, Any], tool: str) -> dict[str, Any]:
    [found] = [
        node
        for node in schema["properties"]["nodes"]["items"]["anyOf"]
        if node["properties"]["tool"]["const"] == tool
    ]
    return found


def plan_of(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "g", "nodes": list(nodes)}


def node(node_id: str, tool: str, args: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "description": "d",
        "tool": tool,
        "args": args,
        "after": fields.get("after", []),
        "effect": fields.get("effect", "action"),
    }


def valid(schema: dict[str, Any], instance: object) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


def test_each_tool_is_one_branch_with_its_own_args_schema() -> None:
    """The tool is a const, args follow the tool's schema, effects the tool's allowed ones."""
    schema = plan_schema(TOOLS)
    jsonschema.Draft202012Validator.check_schema(schema)
    move = branch(schema, "move")
    assert move["properties"]["effect"]["enum"] == ["action"]
    assert branch(schema, "camera")["properties"]["effect"]["enum"] == ["query", "action"]
    args = move["properties"]["args"]
    assert args["required"] == ["to"]  # optional args stay optional: the schema is not strict
    assert args["additionalProperties"] is False
    speed = args["properties"]["speed"]["anyOf"][0]
    assert speed["description"] == "how fast, in m/s"
    assert "title" not in speed  # pydantic's titles tell a model nothing


def test_an_argument_may_always_be_a_reference() -> None:
    """Each parameter's schema is anyOf [its schema, a {"$ref": ...} object]."""
    schema = plan_schema(TOOLS)
    ok = plan_of(
        node("l", "camera", {"anything": [1, 2]}, effect="query"),
        node("m", "move", {"to": {"$ref": "l.point"}, "speed": 0.5}, after=["l"]),
        node("p", "place", {"at": {"x": 1, "y": 2}, "title": {"$ref": "l"}}, after=["l"]),
    )
    assert valid(schema, ok)
    bad_type = plan_of(node("m", "move", {"to": {"x": "left", "y": 2}}))
    unknown_arg = plan_of(node("m", "move", {"to": {"x": 1, "y": 2}, "force": 3}))
    missing = plan_of(node("m", "move", {"speed": 1}))
    wrong_tool_args = plan_of(node("p", "place", {"to": {"x": 1, "y": 2}}))
    assert not any(valid(schema, p) for p in (bad_type, unknown_arg, missing, wrong_tool_args))


def test_each_tools_definitions_are_hoisted_without_collisions() -> None:
    """Two tools' "Point" become move__Point and place__Point, and their $refs follow."""
    schema = plan_schema(TOOLS)
    assert {"move__Point", "place__Point"} <= set(schema["$defs"])
    assert schema["$defs"]["place__Point"]["description"] == "centimetres"
    to = branch(schema, "move")["properties"]["args"]["properties"]["to"]["anyOf"][0]
    at = branch(schema, "place")["properties"]["args"]["properties"]["at"]["anyOf"][0]
    assert (to["$ref"], at["$ref"]) == ("#/$defs/move__Point", "#/$defs/place__Point")
    # A parameter named "title" is a parameter, not pydantic's noise.
    assert "title" in branch(schema, "place")["properties"]["args"]["properties"]


def test_no_object_of_the_schema_has_a_ref_key_that_is_not_a_reference() -> None:
    """llama.cpp's grammar builders read every "$ref" key as a reference: none may be a name."""

    def refs(value: object) -> list[object]:
        if isinstance(value, dict):
            found = [value["$ref"]] if "$ref" in value else []
            return found + [ref for item in value.values() for ref in refs(item)]
        if isinstance(value, list):
            return [ref for item in value for ref in refs(item)]
        return []

    found = refs(plan_schema(TOOLS))
    assert found
    assert all(isinstance(ref, str) and ref.startswith("#/$defs/") for ref in found)


def test_a_spec_built_by_hand_gets_a_schema_from_its_json_types() -> None:
    """No ToolSpec.schema: the parameters' json_types and required flags make one."""
    args = branch(plan_schema(TOOLS), "camera")["properties"]["args"]
    assert args["required"] == ["anything"]
    assert args["properties"]["zoom"]["anyOf"][0] == {"type": "integer"}
    assert args["properties"]["anything"] == {}  # any value


def test_secret_parameters_are_left_out() -> None:
    """A plan never passes a secret: it is neither a property nor required, nor shown."""
    pay = ToolSpec(
        name="pay",
        parameters=(ToolParameter(name="amount", json_types=frozenset({"number"})),),
        secrets=(("token", "PAYMENTS_TOKEN"),),
        schema=pydantic_like(
            {"amount": {"type": "number"}, "token": {"type": "string"}}, ["amount", "token"]
        ),
    )
    args = plan_schema((pay,))["properties"]["nodes"]["items"]["properties"]["args"]
    assert list(args["properties"]) == ["amount"]
    assert args["required"] == ["amount"]
    request = plan_request((pay,))
    assert "token" not in plan_prompt(request).split("## Tools", 1)[1].split("##", 1)[0]


def test_a_self_reference_points_at_a_copy_of_the_tool_schema() -> None:
    """A reference to the schema's root ("#") is rewritten to a hoisted copy of it."""
    tree = ToolSpec(
        name="tree",
        schema=pydantic_like({"child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, []),
    )
    schema = plan_schema((tree,))
    child = schema["properties"]["nodes"]["items"]["properties"]["args"]["properties"]["child"]
    assert child["anyOf"][0]["anyOf"][0] == {"$ref": "#/$defs/tree__args"}
    assert "tree__args" in schema["$defs"]
    jsonschema.Draft202012Validator.check_schema(schema)


def test_a_real_tool_schema_is_used() -> None:
    """A @pev.tool's schema (pydantic's) reaches the plan schema, its definitions hoisted."""

    @pev.tool(effect="query")
    def measure(city: str, days: int = 1) -> dict[str, Any]:
        """Measure the weather.

        Args:
            city: The city, as spelled locally.
            days: How many days ahead.
        """
        return {}

    if measure.spec.schema is None:  # pragma: no cover - before tools carried schemas
        pytest.skip("tools do not carry JSON schemas yet")
    schema = plan_schema((measure.spec,))
    args = schema["properties"]["nodes"]["items"]["properties"]["args"]
    assert args["required"] == ["city"]
    assert args["properties"]["city"]["anyOf"][0]["description"] == "The city, as spelled locally."
    assert valid(schema, plan_of(node("m", "measure", {"city": "Oslo"}, effect="query")))
    assert not valid(schema, plan_of(node("m", "measure", {"city": 3}, effect="query")))


def test_the_plan_schema_caps_its_lists() -> None:
    """nodes has maxItems (20 by default, LLMPlanner(max_nodes=...)); after one fewer."""
    schema = plan_schema(TOOLS)
    nodes = schema["properties"]["nodes"]
    assert nodes["maxItems"] == DEFAULT_MAX_PLAN_NODES
    assert branch(schema, "move")["properties"]["after"]["maxItems"] == DEFAULT_MAX_PLAN_NODES - 1
    planner = LLMPlanner(ScriptedChat(), max_nodes=5)
    sent = planner.chat_request(plan_request(TOOLS)).schema
    assert sent is not None
    assert thaw_json(sent)["properties"]["nodes"]["maxItems"] == 5
    too_many = plan_of(*(node(f"n{i}", "camera", {"anything": 1}) for i in range(6)))
    assert not valid(thaw_json(sent), too_many)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_nodes_must_be_a_positive_whole_number(bad: object) -> None:
    """LLMPlanner(max_nodes=...) out of range is a UsageError."""
    with pytest.raises(pev.UsageError):
        LLMPlanner(ScriptedChat(), max_nodes=bad)  # type: ignore[arg-type]


def test_without_a_catalogue_any_tool_and_args_are_allowed() -> None:
    """No tools: one node shape, tool any string (or null), args any object."""
    schema = plan_schema(())
    item = schema["properties"]["nodes"]["items"]
    assert item["properties"]["tool"] == {"type": ["string", "null"]}
    assert "$defs" not in schema
    assert valid(schema, plan_of(node("a", "whatever", {"k": 1})))


def test_the_prompt_shows_each_tools_full_schema() -> None:
    """The tool catalogue keeps the signature line and adds the args schema on one line."""
    text = plan_prompt(plan_request(TOOLS)).split("## Tools", 1)[1].split("\n## ", 1)[0]
    lines = text.strip().splitlines()
    move_at = lines.index("- move(to: any, speed?: null | number) [action]: Move the arm.")
    shown = lines[move_at + 1]
    assert shown.startswith("  args schema: ")
    schema = json.loads(shown.removeprefix("  args schema: "))
    assert schema["properties"]["speed"]["description"] == "how fast, in m/s"
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]
    assert "title" not in schema["$defs"]["Point"]
    camera_at = lines.index("- camera(zoom?: integer, anything: any) [query]")
    assert camera_at == len(lines) - 1 or not lines[camera_at + 1].startswith("  args schema")


CRITERIA = ("the cup is in the sink", "the tap is off")
CONTRACT = VerificationContract("recovery", "tidy up", CRITERIA, constraints=["never drop it"])
PLAN = Plan("tidy", (PlanNode("a", tool="move"), PlanNode("b", tool="camera", after=("a",))))


def plan_request(tools: tuple[ToolSpec, ...]) -> PlanRequest:
    return PlanRequest(
        kind=RevisionKind.INITIAL,
        attempt=1,
        task_id=TaskId("t1"),
        input="tidy up",
        contract=CONTRACT,
        tools=tools,
    )


def verify_request() -> VerifyRequest:
    return VerifyRequest(
        task_id=TaskId("t1"),
        input="tidy up",
        contract=CONTRACT,
        plan=PLAN,
        revision=1,
        results={"a": Success(1), "b": Success(2)},
    )


def test_the_verdict_schema_caps_every_list() -> None:
    """Criteria, unmet criteria, blamed nodes and references at most once each; free lists
    capped too."""
    schema = verdict_schema(verify_request())
    properties = schema["properties"]
    assert properties["criteria"]["maxItems"] == 2
    assert properties["unmet_criteria"]["maxItems"] == 2
    assert properties["failed_nodes"]["maxItems"] == 2
    assert properties["evidence_refs"]["maxItems"] == 0  # no records: nothing to cite
    assert properties["preserved_constraints"]["maxItems"] >= 1
    for name, prop in properties.items():
        if prop.get("type") == "array":
            assert "maxItems" in prop, name
    jsonschema.Draft202012Validator.check_schema(schema)
    looping = {
        "status": "success",
        "criteria": [
            {"criterion": CRITERIA[0], "status": "satisfied", "evidence_refs": []} for _ in range(3)
        ],
        "failed_nodes": [],
        "feedback": "",
        "unmet_criteria": [],
        "preserved_constraints": [],
        "guidance": "",
        "evidence_refs": [],
    }
    assert not valid(schema, looping)
    looping["criteria"] = looping["criteria"][:2]
    assert valid(schema, looping)
