"""A meeting-room agent: look up a team, find a free room big enough, book it over MCP.

The rooms service is an MCP server (``server.py``): its tools, ``find_rooms`` (a query, by its
``readOnlyHint``) and ``book_room`` (an action), come from the server with their schemas
through ``pev.mcp``. The team directory is a local typed tool whose connection drops now and
then: it retries, a query on ``ConnectionError``. The planner is scripted and the verifier is
plain code, so the example runs offline and deterministically.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Mapping
from typing import Any, Literal

import pydantic

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.model import Plan, PlanNode, Verdict, VerificationContract, VerificationMode

GOAL = "book a room for the team's meeting"
BIG_ENOUGH = "the room seats the whole team"
AS_ASKED = "the booking is for the day, time and length asked"
EVERYONE_INVITED = "every member of the team is invited"
CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, GOAL, (BIG_ENOUGH, AS_ASKED, EVERYONE_INVITED)
)


class Member(pydantic.BaseModel):
    """Someone in a team."""

    name: str
    email: str


class Team(pydantic.BaseModel):
    """A team, as the directory knows it."""

    name: str
    size: int
    members: list[Member]
    emails: list[str]


class Meeting(pydantic.BaseModel):
    """What the task asks for: the task's input."""

    team: Literal["platform", "design"]
    day: datetime.date
    start: datetime.time
    minutes: int = pydantic.Field(gt=0, le=480)
    title: str


_TEAMS = {
    "platform": ["Ana", "Bo", "Chen", "Dara", "Eli"],
    "design": ["Fay", "Gus"],
}
# The directory's connection drops on every third call, starting with the first: the lookup's
# retry policy is what makes it work.
_CONNECTION = itertools.cycle([False, True, True])


@pev.tool(
    effect="query",
    retry=pev.Retry(attempts=3, on=(ConnectionError,), wait_initial=0.05, wait_max=0.5),
)
def team_members(team: Literal["platform", "design"]) -> Team:
    """Look a team up in the company directory.

    Args:
        team: The team's name.
    """
    if not next(_CONNECTION):
        raise ConnectionError("the directory closed the connection")
    names = _TEAMS[team]
    members = [Member(name=name, email=f"{name.lower()}@example.org") for name in names]
    return Team(
        name=team,
        size=len(members),
        members=members,
        emails=[member.email for member in members],
    )


def planner(request: PlanRequest) -> Plan:
    """Plan team → rooms → book for the meeting in the input, wiring data with ``$ref``."""
    meeting = Meeting.model_validate(request.input)
    return Plan(
        GOAL,
        (
            PlanNode("team", "look the team up", tool="team_members", args={"team": meeting.team}),
            PlanNode(
                "rooms",
                "find the rooms free that day with a seat for everyone",
                tool="find_rooms",
                args={"day": meeting.day.isoformat(), "seats": {"$ref": "team.size"}},
                after=("team",),
            ),
            PlanNode(
                "book",
                "book the smallest of them and invite the team",
                tool="book_room",
                args={
                    "room": {"$ref": "rooms.result.0.name"},
                    "day": meeting.day.isoformat(),
                    "start": meeting.start.isoformat(timespec="minutes"),
                    "minutes": meeting.minutes,
                    "title": meeting.title,
                    "attendees": {"$ref": "team.emails"},
                },
                after=("team", "rooms"),
            ),
        ),
    )


def _by_tool(request: VerifyRequest, tool: str) -> tuple[Any, tuple[str, ...]]:
    """The output of the plan's node calling ``tool``, and the ``record:<id>`` it comes from.

    The output is ``None`` (and no record is cited) when the node did not succeed.
    """
    node = request.node_calling(tool)
    ref = request.record_ref(node.id) if node is not None else None
    if node is None or ref is None:
        return None, ()
    return request.output(node.id), (ref,)


def verifier(request: VerifyRequest) -> Verdict:
    """Check the booking against the team the directory gave and the meeting asked for.

    Each criterion cites the execution records whose outputs it read.
    """
    meeting = Meeting.model_validate(request.input)
    team, team_ref = _by_tool(request, "team_members")
    rooms, rooms_ref = _by_tool(request, "find_rooms")
    booking, booking_ref = _by_tool(request, "book_room")
    if not isinstance(booking, Mapping) or not isinstance(team, Mapping):
        return Verdict.from_checks(
            request.contract,
            dict.fromkeys(request.contract.success_criteria, False),
            feedback="no booking was made",
        )
    # The server's structured content: a list return comes wrapped as {"result": [...]}.
    free = rooms.get("result", ()) if isinstance(rooms, Mapping) else ()
    seats = {room["name"]: room["seats"] for room in free if isinstance(room, Mapping)}
    asked = (
        booking["day"] == meeting.day.isoformat()
        and booking["start"].startswith(meeting.start.isoformat(timespec="minutes"))
        and booking["minutes"] == meeting.minutes
    )
    return Verdict.from_checks(
        request.contract,
        {
            BIG_ENOUGH: (seats.get(booking["room"], 0) >= team["size"], rooms_ref + booking_ref),
            AS_ASKED: (asked, booking_ref),
            EVERYONE_INVITED: (
                sorted(booking["attendees"]) == sorted(team["emails"]),
                team_ref + booking_ref,
            ),
        },
    )
