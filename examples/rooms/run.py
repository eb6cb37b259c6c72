"""Run the meeting-room example: ``python examples/rooms/run.py [TEAM]`` (platform by default).

Starts the rooms service (``server.py``) as an MCP server over stdio, books a room for the team's
meeting, and prints the outcome, the booking, and each attempt of the directory lookup. Exits 0
only if the task succeeded.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The example's own agent.py, found through the path set just above.
import agent

import pev
import pev.mcp

HERE = Path(__file__).resolve().parent


async def book(team: str, log: Path) -> int:
    """Open the rooms service, run the task in memory, print what it did; the exit code."""
    meeting = {
        "team": team,
        "day": "2026-12-08",
        "start": "10:00",
        "minutes": 45,
        "title": f"{team} weekly",
    }
    store = pev.MemoryStore()
    rooms = pev.mcp.MCPServer.stdio(
        sys.executable,
        args=[str(HERE / "server.py")],
        env={"ROOMS_LOG": str(log)},
        compensate={"book_room": "cancel_booking"},  # should a replan replace a booking
    )
    async with rooms:  # the session stays open for the task's life, and is closed after
        result = await pev.run(
            meeting,
            planner=agent.planner,
            tools=[agent.team_members, *await rooms.tools()],
            verifier=agent.verifier,
            contract=agent.CONTRACT,
            store=store,
        )
    print(f"status: {result.status} ({result.reason}) after {result.revisions} revision(s)")
    booking = result.outputs.get("book")
    if isinstance(booking, Mapping):
        print(
            f"booked {booking['room']} on {booking['day']} at {booking['start']} for "
            f"{booking['minutes']} min: {', '.join(booking['attendees'])}"
        )
    state = await pev.Ledger(store).state(result.task_id)
    for record_id, node_result in state.results.items():
        for attempt in node_result.attempts:
            outcome = attempt.error or "succeeded"
            print(f"  {state.records[record_id].node_id}, attempt {attempt.number}: {outcome}")
    return 0 if result.ok else 1


def main(team: str = "platform") -> int:
    """Book a room for ``team``, the service's record of bookings in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(os.environ.get("ROOMS_LOG", Path(folder) / "bookings.log"))
        code = asyncio.run(book(team, log))
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        bookings = [line for line in lines if not line.startswith('{"cancelled"')]
        print(f"the rooms service made {len(bookings)} booking(s)")
        return code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
