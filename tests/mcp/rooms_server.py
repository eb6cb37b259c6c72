"""An MCP server for the tests, written with the SDK's server side: meeting rooms to book.

Run as ``python rooms_server.py`` (stdio) or ``python rooms_server.py http PORT`` (streamable
HTTP on 127.0.0.1). ``ROOMS_LOG`` names an append-only file: every booking the server makes
appends one line to it, so a test can count what reached the outside world. ``ROOMS_HANG``
names a file: while it exists, ``book`` hangs after logging its line, so a test can kill the
server mid-call. ``ROOMS_PID`` names a file the server writes its process id to.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("rooms", log_level="CRITICAL")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def free_rooms(floor: int) -> list[str]:
    """The rooms free on a floor."""
    return [f"{floor}01", f"{floor}02"]


@server.tool()
def book(room: str, who: str) -> dict[str, str]:
    """Book a room for someone."""
    log = os.environ.get("ROOMS_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as file:
            file.write(f"{room} {who}\n")
    hang = os.environ.get("ROOMS_HANG")
    while hang and Path(hang).exists():
        time.sleep(0.05)
    return {"room": room, "booked_for": who}


@server.tool()
def cancel(room: str) -> str:
    """Cancel a room's booking (this one always fails, as the room is not booked)."""
    raise ToolError(f"room {room} is not booked")


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def motd() -> str:
    """The message of the day, as text."""
    return "all rooms open"


if __name__ == "__main__":
    if pid_file := os.environ.get("ROOMS_PID"):
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
