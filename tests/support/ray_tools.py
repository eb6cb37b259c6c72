"""Tools the Ray tests run on a real cluster: Ray workers import them by this module's name.

Every call that does something writes a line to an append-only side-effect log (a file named in
its args, which only the tools write): ``<what> <idempotency key> <Ray node id>``. The tests read
that log, not pev's ledger, to prove where a call ran and that none was sent twice.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import ray

import pev
from pev.model import ExecutionRecord


def _note(log: str, what: str) -> None:
    key = pev.engine.current_node_context().idempotency_key
    node = ray.get_runtime_context().get_node_id()
    with Path(log).open("a", encoding="utf-8") as out:
        out.write(f"{what} {key} {node}\n")
        out.flush()
        os.fsync(out.fileno())


def lines(log: Path) -> list[list[str]]:
    """The side-effect log's lines, each split into its words (none: no file)."""
    if not log.exists():
        return []
    return [line.split() for line in log.read_text(encoding="utf-8").splitlines()]


def deliver(log: str) -> str:
    """Deliver a parcel: the action is its line in the log."""
    _note(log, "delivered")
    return "delivered"


async def deliver_async(log: str) -> str:
    """Deliver a parcel from an async tool."""
    await asyncio.sleep(0)
    _note(log, "delivered")
    return "delivered"


def where(log: str) -> str:
    """Say which Ray node this runs on (a query)."""
    _note(log, "looked")
    return ray.get_runtime_context().get_node_id()


def book(room: str) -> str:
    """Book a room from a table that lacks it: raises KeyError."""
    rooms = {"blue": "booked"}
    return rooms[room]


def deliver_slowly(log: str, seconds: float) -> str:
    """Deliver, then take ``seconds`` to confirm; an interrupt is logged as it arrives."""
    _note(log, "delivered")
    try:
        for _ in range(int(seconds * 10)):  # Python steps, where ray.cancel's interrupt lands
            time.sleep(0.1)
    except KeyboardInterrupt:
        _note(log, "interrupted")
        raise
    return "confirmed"


def deliver_stuck(log: str, seconds: float) -> str:
    """Deliver, then block in one C call: only killing the worker stops it."""
    _note(log, f"delivered-by-{os.getpid()}")
    time.sleep(seconds)
    _note(log, "confirmed")
    return "confirmed"


def deliver_and_crash(log: str) -> str:
    """Deliver, then the worker process dies before it can answer."""
    _note(log, "delivered")
    os._exit(1)


def look_slowly(log: str, seconds: float) -> str:
    """Look, slowly (a query that the tests cut short)."""
    _note(log, "looked")
    time.sleep(seconds)
    return "seen"


def delivered_in(log: str, record: ExecutionRecord) -> str | None:
    """Reconcile a delivery (bind ``log`` with functools.partial): done when the log has its key."""
    keys = {words[1] for words in lines(Path(log)) if words[0] == "delivered"}
    return "delivered" if record.idempotency_key in keys else None
