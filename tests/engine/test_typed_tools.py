"""Typed tools (§6.2): schemas from signatures, checked plans, typed values, JSON returns."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
import pytest
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

import pev
from pev.engine import Tool, tool
from pev.errors import PlanError
from pev.ledger import Ledger, PlanRejected
from pev.model import Plan, PlanNode, validate_plan
from pev.testing import ScriptedPlanner


class Room(enum.Enum):
    """A room size."""

    SMALL = "small"
    LARGE = "large"


class Booking(pydantic.BaseModel):
    """A booking, as a pydantic model."""

    room: Literal["small", "large"]
    people: int = pydantic.Field(ge=1, le=20)
    when: datetime.datetime


@dataclass
class Slot:
    """A slot, as a dataclass."""

    start: str
    minutes: int = 30


class Contact(TypedDict):
    """A contact, as a TypedDict."""

    name: str
    email: str


SEEN: list[dict[str, Any]] = []


@tool
def book(  # noqa: PLR0917 - a tool's parameters are filled by name, from a plan
    booking: Booking,
    slot: Slot,
    size: Room,
    contacts: list[Contact],
    tags: dict[str, list[int]] | None = None,
    note: str = "none",
) -> Booking:
    """Book a meeting room.

    Args:
        booking: What to book.
        slot: When, and for how long.
        size: The room's size.
        contacts: Who to tell.
        tags: Labels, each with its numbers.
        note: Anything to add.
    """
    SEEN.append(
        {"booking": booking, "slot": slot, "size": size, "contacts": contacts, "note": note}
    )
    return booking


GOOD_ARGS: dict[str, Any] = {
    "booking": {"room": "small", "people": 3, "when": "2026-12-07T10:00:00"},
    "slot": {"start": "10:00"},
    "size": "small",
    "contacts": [{"name": "Ana", "email": "ana@example.org"}],
}


def _plan(**args: Any) -> Plan:
    return Plan("book a room", (PlanNode("n1", "book it", tool="book", args=args),))


# --- the schema -----------------------------------------------------------------------------------


def test_the_schema_is_public_with_descriptions_defaults_and_definitions() -> None:
    """tool.schema: one property per parameter, described by the docstring, with $defs."""
    schema = book.schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["booking", "slot", "size", "contacts"]
    properties = schema["properties"]
    assert list(properties) == ["booking", "slot", "size", "contacts", "tags", "note"]
    assert properties["booking"]["description"] == "What to book."
    assert properties["slot"]["description"] == "When, and for how long."
    assert properties["note"]["default"] == "none"
    assert set(schema["$defs"]) == {"Booking", "Slot", "Room", "Contact"}
    assert schema["$defs"]["Room"]["enum"] == ["small", "large"]
    assert schema["$defs"]["Booking"]["properties"]["people"]["maximum"] == 20
    assert book.spec.schema is not None
    schema["type"] = "changed"  # a copy: the tool's own schema stays as it was
    assert book.schema["type"] == "object"


@pytest.mark.parametrize(
    "style",
    [
        pytest.param("google", id="google"),
        pytest.param("numpy", id="numpy"),
        pytest.param("rest", id="rest"),
    ],
)
def test_descriptions_come_from_google_numpy_and_rest_docstrings(style: str) -> None:
    """Each of the three docstring styles gives each parameter's description."""
    docs = {
        "google": "Move.\n\nArgs:\n    x: Metres to the right.\n    y: Metres ahead.\n",
        "numpy": "Move.\n\nParameters\n----------\nx : float\n    Metres to the right.\n"
        "y : float\n    Metres ahead.\n",
        "rest": "Move.\n\n:param x: Metres to the right.\n:param y: Metres ahead.\n",
    }

    def move(x: float, y: float) -> None:
        del x, y

    move.__doc__ = docs[style]
    properties = tool(move).schema["properties"]
    assert properties["x"]["description"] == "Metres to the right."
    assert properties["y"]["description"] == "Metres ahead."
    assert tool(move).description == "Move."


def test_parameter_names_pydantic_keeps_for_itself_work() -> None:
    """Names such as json, model_config, schema or a leading underscore are plain parameters."""

    @tool
    def odd(json: int, model_config: str, schema: bool, _private: float = 1.0) -> list[Any]:
        return [json, model_config, schema, _private]

    assert list(odd.schema["properties"]) == ["json", "model_config", "schema", "_private"]
    validate_plan(
        Plan(
            "g",
            (PlanNode("n1", tool="odd", args={"json": 1, "model_config": "a", "schema": True}),),
        ),
        tools={"odd": odd.spec},
    )


# --- checking plans -------------------------------------------------------------------------------


def test_a_plan_that_fits_the_schema_is_accepted() -> None:
    """Good args pass plan validation."""
    validate_plan(_plan(**GOOD_ARGS), tools={"book": book.spec})


def test_every_error_of_a_node_is_listed() -> None:
    """Plan validation lists each error by its path in the args, with what was given."""
    bad = {
        "booking": {"room": "medium", "people": 40, "when": "soon"},
        "slot": {"start": 10, "extra": 1},
        "size": "huge",
        "contacts": [{"name": "Ana"}],
    }
    with pytest.raises(PlanError) as info:
        validate_plan(_plan(**bad), tools={"book": book.spec})
    problems = info.value.problems
    prefix = "node 'n1': tool 'book': argument "
    assert all(problem.startswith(prefix) for problem in problems), problems
    paths = [problem.removeprefix(prefix).split(":", 1)[0] for problem in problems]
    assert paths == [
        "'booking.room'",
        "'booking.people'",
        "'booking.when'",
        "'slot.start'",
        "'slot.extra' is not a field it takes",
        "'size'",
        "'contacts.0.email' is missing",
    ]
    assert "Input should be 'small' or 'large' (got 'medium')" in problems[0]
    assert "less than or equal to 20" in problems[1]


def test_an_argument_filled_by_a_ref_is_checked_at_dispatch_not_in_the_plan() -> None:
    """A $ref argument is neither checked nor missing when the plan is validated."""

    @tool(effect="query")
    def count() -> int:
        return 3

    @tool
    def take(n: int) -> int:
        return n

    plan = Plan(
        "g",
        (
            PlanNode("a", tool="count"),
            PlanNode("b", tool="take", args={"n": {"$ref": "a"}}, after=("a",)),
        ),
    )
    validate_plan(plan, tools={"count": count.spec, "take": take.spec})


# --- calling --------------------------------------------------------------------------------------


async def test_the_tool_receives_typed_values_and_its_model_is_stored_as_json() -> None:
    """Models, dataclasses, enums and TypedDicts arrive typed; the returned model is JSON."""
    SEEN.clear()
    result = await pev.run("book a room", planner=ScriptedPlanner(_plan(**GOOD_ARGS)), tools=[book])
    assert result.ok, result.detail
    (seen,) = SEEN
    assert isinstance(seen["booking"], Booking)
    assert seen["booking"].when == datetime.datetime(2026, 12, 7, 10, 0)  # noqa: DTZ001
    assert seen["slot"] == Slot(start="10:00", minutes=30)
    assert seen["size"] is Room.SMALL
    assert seen["contacts"] == [{"name": "Ana", "email": "ana@example.org"}]
    assert seen["note"] == "none"  # left out of the args: the function's own default
    assert result.outputs["n1"] == {"room": "small", "people": 3, "when": "2026-12-07T10:00:00"}


async def test_a_returned_dataclass_enum_and_dates_are_stored_as_json() -> None:
    """What pydantic can serialize is stored as its JSON form, nested values included."""

    @tool(effect="query")
    def slots() -> dict[str, Any]:
        return {
            "slots": [Slot("9:00"), Slot("11:00", 60)],
            "size": Room.LARGE,
            "day": datetime.date(2026, 12, 7),
            "ids": {3},
        }

    plan = Plan("g", (PlanNode("n1", tool="slots"),))
    result = await pev.run("list slots", planner=ScriptedPlanner(plan), tools=[slots])
    assert result.ok, result.detail
    assert result.outputs["n1"] == {
        "slots": [{"start": "9:00", "minutes": 30}, {"start": "11:00", "minutes": 60}],
        "size": "large",
        "day": "2026-12-07",
        "ids": [3],
    }


async def test_a_ref_that_fills_a_wrong_value_fails_the_node_without_calling_the_tool() -> None:
    """At dispatch the resolved args are checked again: the action is not sent, nor unknown."""
    calls: list[int] = []

    @tool(effect="query")
    def word() -> str:
        return "three"

    @tool
    def pay(cents: int) -> int:
        calls.append(cents)
        return cents

    plan = Plan(
        "g",
        (
            PlanNode("a", tool="word"),
            PlanNode("b", tool="pay", args={"cents": {"$ref": "a"}}, after=("a",)),
        ),
    )
    result = await pev.run("pay", planner=ScriptedPlanner(plan), tools=[word, pay])
    assert not result.ok
    assert calls == []
    assert "tool 'pay' was not called" in result.detail
    assert "argument 'cents': Input should be a valid integer" in result.detail
    assert "may or may not" not in result.detail


async def test_a_plan_that_does_not_fit_is_rejected_with_its_errors() -> None:
    """The plan_rejected event and the result's detail list the errors; the tool never runs."""
    SEEN.clear()
    bad = _plan(**{**GOOD_ARGS, "size": "huge", "slot": {"start": 9}})
    store = pev.MemoryStore()
    result = await pev.run("book a room", planner=ScriptedPlanner(bad), tools=[book], store=store)
    assert (result.status, result.reason) == ("failed", "invalid_plan")
    assert SEEN == []
    rejected = [
        entry.event
        for entry in await Ledger(store).entries(result.task_id)
        if isinstance(entry.event, PlanRejected)
    ]
    (event,) = rejected
    assert event.problems == (
        "node 'n1': tool 'book': argument 'slot.start': Input should be a valid string (got 9)",
        (
            "node 'n1': tool 'book': argument 'size': Input should be 'small' or 'large' "
            "(got 'huge')"
        ),
    )
    assert "argument 'size'" in result.detail


# --- tools given a schema -------------------------------------------------------------------------


def _check(args: Any, later: frozenset[str]) -> list[str]:
    del later
    return [
        f"argument {key!r}: must be a string"
        for key, value in args.items()
        if not isinstance(value, str)
    ]


async def test_a_tool_given_its_schema_takes_plain_args_and_its_check() -> None:
    """input_schema: no signature is read; check runs in plan validation and at call time."""
    received: list[dict[str, Any]] = []

    async def call(**kwargs: Any) -> dict[str, Any]:
        received.append(kwargs)
        return {"ok": True}

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    }
    weather = Tool(
        fn=call, name="weather", effect=pev.model.Effect.QUERY, input_schema=schema, check=_check
    )
    assert weather.schema == schema
    assert [(p.name, p.required, p.json_types) for p in weather.spec.parameters] == [
        ("city", True, frozenset({"string"})),
        ("unit", False, frozenset({"string"})),
    ]
    with pytest.raises(PlanError, match="argument 'city': must be a string"):
        validate_plan(
            Plan("g", (PlanNode("n1", tool="weather", args={"city": 3}),)),
            tools={"weather": weather.spec},
        )
    plan = Plan("g", (PlanNode("n1", tool="weather", args={"city": "Oslo"}),))
    result = await pev.run("weather", planner=ScriptedPlanner(plan), tools=[weather])
    assert result.ok, result.detail
    assert received == [{"city": "Oslo"}]


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        pytest.param([], "JSON Schema of an object", id="not-a-mapping"),
        pytest.param({"type": "array"}, "JSON Schema of an object", id="not-an-object"),
        pytest.param({"type": "object", "default": {1, 2}}, "not JSON", id="not-json"),
    ],
)
def test_a_schema_that_is_not_an_object_schema_is_refused(schema: Any, why: str) -> None:
    """input_schema must be a JSON object schema."""

    async def call(**kwargs: Any) -> None:
        del kwargs

    with pytest.raises(TypeError, match=why):
        Tool(fn=call, name="x", input_schema=schema)


def test_check_without_a_schema_is_refused() -> None:
    """A tool read from its signature is checked by its hints: check goes with input_schema."""
    with pytest.raises(TypeError, match="check goes with input_schema"):
        Tool(fn=lambda: None, name="x", check=_check)


def test_a_secret_is_not_in_the_schema() -> None:
    """A Secret parameter is filled at call time: the schema leaves it out."""

    @tool
    def charge(cents: int, token: Annotated[str, pev.Secret("PAY_TOKEN")]) -> None:
        del cents, token

    assert list(charge.schema["properties"]) == ["cents"]


def test_a_ref_nested_inside_a_typed_value_is_left_to_dispatch() -> None:
    """A $ref inside a model's field stands for a value of the field's type: not an error."""

    @tool(effect="query")
    def free() -> list[str]:
        return ["small"]

    args = {**GOOD_ARGS, "booking": {**GOOD_ARGS["booking"], "room": {"$ref": "f.0"}}}
    plan = Plan(
        "g",
        (
            PlanNode("f", tool="free"),
            PlanNode("n1", tool="book", args=args, after=("f",)),
        ),
    )
    validate_plan(plan, tools={"free": free.spec, "book": book.spec})


@pytest.mark.parametrize(
    ("prop", "expected"),
    [
        pytest.param({"type": "string"}, {"string"}, id="type"),
        pytest.param({"type": ["integer", "null"]}, {"integer", "null"}, id="type-list"),
        pytest.param({"const": 3}, {"integer"}, id="const"),
        pytest.param({"enum": ["a", None]}, {"string", "null"}, id="enum"),
        pytest.param({"enum": [{"a": 1}]}, set(), id="enum-of-objects"),
        pytest.param({"oneOf": [{"type": "string"}, {"type": "number"}]}, {"string", "number"}),
        pytest.param({"anyOf": [{"type": "string"}, {}]}, set(), id="any-of-with-any"),
        pytest.param({"$ref": "#/$defs/Room"}, set(), id="ref"),
    ],
)
def test_a_given_schema_s_properties_become_parameters_with_their_json_types(
    prop: dict[str, Any], expected: set[str]
) -> None:
    """The simple view of a given schema: what each property's top level may be."""

    async def call(**kwargs: Any) -> None:
        del kwargs

    given = Tool(
        fn=call,
        name="x",
        input_schema={"type": "object", "properties": {"v": prop}, "required": ["v"]},
    )
    [parameter] = given.spec.parameters
    assert (parameter.name, parameter.required) == ("v", True)
    assert parameter.json_types == frozenset(expected)


def test_a_given_schema_without_properties_has_no_parameters() -> None:
    """{"type": "object"} alone: a tool that takes no named arguments."""

    async def call(**kwargs: Any) -> None:
        del kwargs

    assert Tool(fn=call, name="x", input_schema={"type": "object"}).spec.parameters == ()


async def test_a_ref_that_fills_a_wrong_value_into_a_given_schema_is_not_sent() -> None:
    """A tool given its schema is checked again at call time, as a typed one is."""
    received: list[dict[str, Any]] = []

    async def call(**kwargs: Any) -> str:
        received.append(kwargs)
        return "ok"

    @tool(effect="query")
    def number() -> int:
        return 7

    weather = Tool(
        fn=call,
        name="weather",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        check=_check,
    )
    plan = Plan(
        "g",
        (
            PlanNode("a", tool="number"),
            PlanNode("b", tool="weather", args={"city": {"$ref": "a"}}, after=("a",)),
        ),
    )
    result = await pev.run("weather", planner=ScriptedPlanner(plan), tools=[number, weather])
    assert not result.ok
    assert received == []
    assert "tool 'weather' was not called" in result.detail
    assert "argument 'city': must be a string" in result.detail


def test_a_signature_pydantic_cannot_resolve_is_one_type_error() -> None:
    """Hints left as unresolvable strings (pev.run's own) are a TypeError naming a parameter.

    Found by the task-file fuzzer (`tools = ["pev:run"]`): pydantic's recursion while resolving
    them must not escape as anything else.
    """
    with pytest.raises(TypeError, match=r"tool 'run': parameter '\w+' has type hint"):
        tool(pev.run)
