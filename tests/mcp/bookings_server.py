"""An MCP server for the compensation tests, written with the SDK's server side: rooms to book.

Run as ``python bookings_server.py``. ``book_room`` is an action; ``cancel_booking`` undoes one
booking; ``find_rooms`` is read-only; ``cancel_fails`` always answers ``isError``. Every booking
and cancellation appends one line to the append-only file ``BOOKINGS_LOG`` names, with the
idempotency key the call carried in ``_meta`` (``pev/idempotency_key``): the service's own
record of what it did, which the tests read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("bookings", log_level="CRITICAL")


def _entries() -> list[dict[str, str]]:
    log = os.environ.get("BOOKINGS_LOG")
    if not log or not Path(log).exists():
        return []
    return [json.loads(line) for line in Path(log).read_text(encoding="utf-8").splitlines()]


def _append(what: str, room: str, who: str, ctx: Context) -> None:
    meta = ctx.request_context.meta or {}
    line = {"what": what, "room": room, "who": who, "key": meta.get("pev/idempotency_key")}
    log = os.environ.get("BOOKINGS_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_rooms(floor: int) -> list[str]:
    """The rooms free on a floor."""
    return [f"{floor}01", f"{floor}02"]


@server.tool()
def book_room(room: str, who: str, ctx: Context) -> dict[str, str]:
    """Book a room for someone; cancel_booking undoes it."""
    _append("book", room, who, ctx)
    return {"room": room, "booked_for": who}


@server.tool()
def cancel_booking(room: str, who: str, ctx: Context) -> str:
    """Cancel someone's booking of a room."""
    booked = sum(
        (1 if entry["what"] == "book" else -1)
        for entry in _entries()
        if (entry["room"], entry["who"]) == (room, who)
    )
    if booked <= 0:
        raise ToolError(f"{who} has no booking of room {room}")
    _append("cancel", room, who, ctx)
    return f"cancelled {room} for {who}"


@server.tool()
def cancel_fails(room: str, who: str) -> str:
    """A cancellation the service always refuses."""
    raise ToolError(f"room {room} cannot be cancelled for {who} today")


if __name__ == "__main__":
    server.run()
