"""`pev ledger export`: a task's events as JSON lines, exactly as stored, for any verifier.

Each line is one stored entry: ``{"at":...,"event":...,"hash":...,"prev_hash":...,"schema":...,
"seq":...,"task_id":...}``, keys in that order, with the stored time and event texts spliced in
unchanged (so the event's canonical text can be recovered from the line). This is the format of
the golden ledgers in the test suite; docs/ledger-format.md specifies it, and how to check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from json.encoder import encode_basestring
from pathlib import Path

import click

from pev.cli._common import BadArgument, FilePath, on_ledger
from pev.cli._output import echo_bytes
from pev.errors import UnknownTaskError
from pev.ledger import Ledger, RawEntry

__all__ = ["export_command", "export_line"]


def export_line(entry: RawEntry) -> str:
    """One stored entry as a line of the export (no newline), its texts as stored."""
    return (
        f'{{"at":{entry.at},"event":{entry.event},"hash":{encode_basestring(entry.hash)},'
        f'"prev_hash":{encode_basestring(entry.prev_hash)},"schema":{entry.schema},'
        f'"seq":{entry.seq},"task_id":{encode_basestring(entry.task_id)}}}'
    )


async def _task_entries(ledger: Ledger, task_id: str) -> tuple[RawEntry, ...]:
    """The stored entries of the one task whose id is ``task_id`` or starts with it."""
    store = ledger.store
    ids = await store.ledger_task_ids()
    if task_id not in ids:
        matches = [full for full in ids if full.startswith(task_id)]
        if len(matches) > 1:
            shown = ", ".join(matches[:5])
            raise BadArgument(f"task id prefix {task_id!r} is ambiguous ({shown}); type more")
        if not matches:
            raise UnknownTaskError(task_id)
        task_id = matches[0]
    return await store.read_raw(task_id)


def _lines(entries: Sequence[RawEntry]) -> bytes:
    # A damaged text keeps its stored bytes (read as surrogate escapes): an honest copy.
    return b"".join(export_line(e).encode("utf-8", "surrogateescape") + b"\n" for e in entries)


@click.command("export")
@click.argument("task_id")
@click.option(
    "--output",
    "-o",
    type=FilePath(),
    help="Write the lines to this file instead of standard output.",
)
@click.pass_obj
def export_command(db: str, task_id: str, output: Path | None) -> None:
    """Write a task's events (id or unique prefix) as JSON lines, exactly as stored.

    The lines read from the events themselves, not the task index, and nothing is checked:
    a damaged ledger is exported as it is. docs/ledger-format.md says how to verify them
    without pev, in any language.
    """
    entries = on_ledger(db, lambda ledger: _task_entries(ledger, task_id), create=False)
    if output is None:
        echo_bytes(_lines(entries))
        return
    try:
        with output.open("wb") as out:
            out.write(_lines(entries))
    except OSError as exc:
        raise BadArgument(f"--output: cannot write {output} ({exc.strerror})") from exc
