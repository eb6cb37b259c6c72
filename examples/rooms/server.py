"""The rooms service: an MCP server, written with the official SDK, that books meeting rooms.

Run by the example over stdio (``python server.py``). Three tools:

* ``find_rooms`` (read-only: ``readOnlyHint``, so pev treats it as a query) lists the rooms free
  on a day with enough seats;
* ``book_room`` (an action) books one, and appends a line to the file ``ROOMS_LOG`` names: the
  service's own record of what it did, which the example's tests count;
* ``cancel_booking`` (an action) cancels a booking, given what ``book_room`` was given: the
  example's task names it as ``book_room``'s compensation, which pev calls if a replan replaces
  a booking. It appends ``{"cancelled": <booking id>}`` to the same file.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pydantic
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("rooms", log_level="CRITICAL")


class Room(pydantic.BaseModel):
    """A meeting room."""

    name: str
    floor: int
    seats: int


class Booking(pydantic.BaseModel):
    """A booking the service made."""

    id: str
    room: str
    day: datetime.date
    start: datetime.time
    minutes: int
    title: str
    attendees: list[str]


ROOMS = (
    Room(name="Ada", floor=1, seats=4),
    Room(name="Babbage", floor=1, seats=8),
    Room(name="Curie", floor=2, seats=12),
)
BUSY = {("Babbage", datetime.date(2026, 12, 8))}  # booked all day


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_rooms(day: datetime.date, seats: int) -> list[Room]:
    """The rooms free on a day with at least this many seats, smallest first.

    Args:
        day: The day of the meeting.
        seats: How many people come.
    """
    free = [room for room in ROOMS if room.seats >= seats and (room.name, day) not in BUSY]
    return sorted(free, key=lambda room: room.seats)


@server.tool()
def book_room(  # noqa: PLR0917 - an MCP tool's arguments come by name
    room: str,
    day: datetime.date,
    start: datetime.time,
    minutes: int,
    title: str,
    attendees: list[str],
) -> Booking:
    """Book a room for a meeting.

    Args:
        room: The room's name, as find_rooms gives it.
        day: The day of the meeting.
        start: When it starts (local time).
        minutes: How long it lasts.
        title: Shown on the room's door.
        attendees: The email addresses to invite.
    """
    if room not in {known.name for known in ROOMS}:
        raise ToolError(f"there is no room called {room!r}")
    if (room, day) in BUSY:
        raise ToolError(f"{room} is not free on {day}")
    booking = Booking(
        id=f"{room}-{day:%Y%m%d}-{start:%H%M}",
        room=room,
        day=day,
        start=start,
        minutes=minutes,
        title=title,
        attendees=attendees,
    )
    _record(booking.model_dump(mode="json"))
    return booking


@server.tool()
def cancel_booking(  # noqa: PLR0917 - an MCP tool's arguments come by name
    room: str,
    day: datetime.date,
    start: datetime.time,
    minutes: int,
    title: str,
    attendees: list[str],
) -> str:
    """Cancel a booking, given what book_room was given to make it.

    Args:
        room: The room's name.
        day: The day of the meeting.
        start: When it starts (local time).
        minutes: How long it lasts.
        title: The meeting's title.
        attendees: The email addresses invited.
    """
    booking_id = f"{room}-{day:%Y%m%d}-{start:%H%M}"
    _record({"cancelled": booking_id})
    return f"cancelled {booking_id} ({title}, {minutes} min, {len(attendees)} invited)"


def _record(line: dict[str, object]) -> None:
    """Append one line to the service's own record, when ``ROOMS_LOG`` names one."""
    log = os.environ.get("ROOMS_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    server.run()
