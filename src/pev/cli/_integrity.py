"""`pev ledger verify` and `pev ledger anchor`: is the ledger whole, and is it the one anchored?

``verify`` recomputes each task's chain from the stored events (docs/security.md): the tasks it
checks are listed from the events as well as from the task index, so a task whose index row is
gone is still checked, and reported. A damaged task is reported with its first bad event, and the
check goes on to the next; nothing one task holds stops the others being checked.

``anchor`` prints each task's head (task id, sequence number, hash) as one JSON object a line, to
be kept somewhere the ledger's writers cannot reach. ``verify --anchors FILE`` then proves that
each anchored event is still in the ledger, with that hash, on a chain that verifies up to it:
a committed suffix that was dropped (even with the index edited to match) is found.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from rich.text import Text

from pev.cli._common import (
    BadArgument,
    FilePath,
    known_task_ids,
    on_ledger,
    resolve_task_id,
)
from pev.cli._documents import anchor_document, chain_document
from pev.cli._output import echo_json, echo_line, stdout_console
from pev.cli._render import chain_report
from pev.engine._trust import verified
from pev.errors import PevError, StoreUnavailable, UnknownTaskError
from pev.ledger import ChainReport, Ledger

__all__ = ["Anchor", "anchor_command", "read_anchors", "verify_command"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """A task's head as `pev ledger anchor` printed it: the event at ``seq`` had ``hash``."""

    task_id: str
    seq: int
    hash: str

    def line(self) -> str:
        """The anchor as one line of JSON, as `pev ledger anchor` prints it."""
        return json.dumps({"task_id": self.task_id, "seq": self.seq, "hash": self.hash})


@dataclass(frozen=True, slots=True)
class _AnchorCheck:
    """An anchor and what is wrong with it (``""``: the ledger still holds it)."""

    anchor: Anchor
    problem: str


@click.command("verify")
@click.argument("task_ids", metavar="[TASK]...", nargs=-1)
@click.option(
    "--anchors",
    "anchors_file",
    metavar="FILE",
    type=FilePath(),
    help="Also check the heads `pev ledger anchor` printed earlier (JSON lines; - reads "
    "stdin): each anchored event must still be in the ledger, with its hash.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON document {"ok", "tasks", "anchors"} (fields in docs/cli.md); '
    "the exit code is the same.",
)
@click.pass_obj
def verify_command(
    db: str, task_ids: Sequence[str], anchors_file: Path | None, as_json: bool
) -> None:
    """Check each task's ledger from its events; exit 1 if any fails.

    TASK is a task id or a unique prefix of one; by default every task, listed from the events
    and from the task index, so that a task whose index row is gone is checked too. Each chain
    is recomputed from the stored events: an edited, dropped (the last one too) or reordered
    event is named, as is an index row that disagrees with the events. A damaged task is
    reported and the check goes on. With --anchors, each anchored head of the tasks checked
    must still be in the ledger: a dropped suffix is found even if the index was edited to
    match. With --json, one JSON document: {"ok", "tasks": [{"task_id", "ok", "events",
    "keyed_events", "first_bad_seq", "problem", "needs_key"}], "anchors": [{"task_id", "seq",
    "hash", "ok", "problem"}]}. Exit codes: 0 all good, 1 a task or an anchor failed, 2 a bad
    argument.
    """
    anchors = read_anchors(anchors_file) if anchors_file is not None else ()

    async def check(ledger: Ledger) -> tuple[list[ChainReport], list[_AnchorCheck]]:
        if task_ids:
            ids = list(dict.fromkeys([await resolve_task_id(ledger, t) for t in task_ids]))
            checked = [a for a in anchors if a.task_id in ids]
        else:
            ids = await known_task_ids(ledger)
            checked = list(anchors)
            ids += sorted({a.task_id for a in anchors} - set(ids))  # anchored, gone since
        reports = {task_id: await _verified(ledger, task_id) for task_id in ids}
        return list(reports.values()), [await _check(ledger, a, reports) for a in checked]

    reports, anchor_checks = on_ledger(db, check, create=False)
    bad = sum(not report.ok for report in reports)
    bad_anchors = sum(bool(found.problem) for found in anchor_checks)
    if as_json:
        echo_json(
            {
                "ok": not (bad or bad_anchors),
                "tasks": [chain_document(report) for report in reports],
                "anchors": [
                    anchor_document(a.anchor.task_id, a.anchor.seq, a.anchor.hash, a.problem)
                    for a in anchor_checks
                ],
            }
        )
        if bad or bad_anchors:
            raise click.exceptions.Exit(1)
        return
    console = stdout_console()
    for report in reports:
        console.print(chain_report(report))
    for found in anchor_checks:
        console.print(_anchor_line(found))
    summary = f"{len(reports)} task(s) checked, {bad} failed verification"
    if anchors_file is not None:
        summary += f"; {len(anchor_checks)} anchor(s) checked, {bad_anchors} not found as anchored"
    console.print(summary)
    if bad or bad_anchors:
        raise click.exceptions.Exit(1)


@click.command("anchor")
@click.argument("task_ids", metavar="[TASK]...", nargs=-1)
@click.pass_obj
def anchor_command(db: str, task_ids: Sequence[str]) -> None:
    """Print each task's head as a line of JSON: {"task_id", "seq", "hash"}.

    TASK is a task id or a unique prefix of one; by default every task that has events. Keep
    the lines where the ledger's writers cannot change them (append them to a file elsewhere,
    say); `pev ledger verify --anchors FILE` later proves each head is still in the ledger, so
    that no committed suffix was dropped. A task whose chain fails verification is not
    anchored: it is named on stderr, and the command exits 1.
    """

    async def heads(ledger: Ledger) -> list[Anchor | ChainReport]:
        if task_ids:
            ids = list(dict.fromkeys([await resolve_task_id(ledger, t) for t in task_ids]))
        else:
            ids = list(await ledger.store.ledger_task_ids())
        return [await _head(ledger, task_id) for task_id in ids]

    refused = 0
    for found in on_ledger(db, heads, create=False):
        if isinstance(found, Anchor):
            echo_line(found.line())
        else:
            refused += 1
            where = f" at event {found.first_bad_seq}" if found.first_bad_seq is not None else ""
            message = f"task {found.task_id} not anchored: it fails verification{where}"
            click.echo(f"pev: {message} ({' '.join(found.problem.split())})", err=True)
    if refused:
        raise click.exceptions.Exit(1)


def read_anchors(path: Path) -> tuple[Anchor, ...]:
    """The anchors in a file of JSON lines (``-``: stdin); blank lines are skipped.

    Raises:
        BadArgument: The file cannot be read, or a line is not an anchor (naming the line).
    """
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise BadArgument(f"--anchors: there is no file {path}; check the path") from exc
    except IsADirectoryError as exc:
        raise BadArgument(f"--anchors: {path} is a folder; name the anchors file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadArgument(f"--anchors: {path} cannot be read ({why})") from exc
    anchors = tuple(_anchors(text.splitlines(), path))
    if not anchors:
        raise BadArgument(
            f"--anchors: {path} holds no anchors; give the file `pev ledger anchor` wrote"
        )
    return anchors


def _anchors(lines: Iterable[str], path: Path) -> Iterable[Anchor]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            value = None
        anchor = _anchor_of(value)
        if anchor is None:
            raise BadArgument(
                f"--anchors: {path} line {number} is not an anchor; each line holds one JSON "
                'object {"task_id": "...", "seq": N, "hash": "..."}, as `pev ledger anchor` '
                "prints"
            )
        yield anchor


def _anchor_of(value: object) -> Anchor | None:
    """The anchor a parsed JSON line holds, or ``None`` if it holds none."""
    if not isinstance(value, dict):
        return None
    task_id, seq, digest = value.get("task_id"), value.get("seq"), value.get("hash")
    if not (isinstance(task_id, str) and task_id and isinstance(digest, str) and digest):
        return None
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return None
    return Anchor(task_id, seq, digest)


async def _verified(ledger: Ledger, task_id: str) -> ChainReport:
    """The task's report; a task nothing knows, or that cannot be read, is a failed one."""
    try:
        return await verified(ledger, task_id)
    except UnknownTaskError:
        problem = "the ledger holds neither events nor an index row of this task"
    except StoreUnavailable:
        raise  # the store did not answer: nothing is known of the chain, least of all damage
    except PevError as exc:
        problem = f"the task cannot be checked: {exc}"
    return ChainReport(task_id=task_id, ok=False, events=0, problem=problem)


async def _head(ledger: Ledger, task_id: str) -> Anchor | ChainReport:
    """The task's last stored event as an anchor, if its chain verifies; else its report."""
    try:
        entries = await ledger.store.read_raw(task_id)
    except StoreUnavailable:
        raise
    except PevError as exc:
        return ChainReport(task_id=task_id, ok=False, events=0, problem=str(exc))
    report = await _verified(ledger, task_id)
    if not report.ok:
        return report
    last = entries[-1]
    return Anchor(task_id, last.seq, last.hash)


async def _check(ledger: Ledger, anchor: Anchor, reports: dict[str, ChainReport]) -> _AnchorCheck:
    """Whether the ledger still holds the anchored event, with its hash, on a sound chain."""
    report = reports[anchor.task_id]
    try:
        entries = await ledger.store.read_raw(anchor.task_id)
    except UnknownTaskError:
        return _AnchorCheck(anchor, "the ledger holds no event of this task any more")
    except StoreUnavailable:
        raise
    except PevError as exc:
        return _AnchorCheck(anchor, f"its events cannot be read: {exc}")
    found = next((entry for entry in entries if entry.seq == anchor.seq), None)
    last = entries[-1].seq if entries else 0
    if found is None:
        return _AnchorCheck(
            anchor,
            f"event {anchor.seq} is gone: the ledger ends at event {last}, so committed events "
            "were dropped",
        )
    if found.hash != anchor.hash:
        return _AnchorCheck(
            anchor,
            f"event {anchor.seq} has hash {found.hash[:16]}..., not the anchored "
            f"{anchor.hash[:16]}...: the chain was rewritten",
        )
    bad_seq = report.first_bad_seq  # None: the index alone is wrong, not the events up to here
    if not report.ok and bad_seq is not None and bad_seq <= anchor.seq:
        return _AnchorCheck(anchor, f"the chain fails verification at event {bad_seq}, before it")
    return _AnchorCheck(anchor, "")


def _anchor_line(found: _AnchorCheck) -> Text:
    """One line per anchor: found as anchored, or what is wrong."""
    anchor = found.anchor
    where = f"{anchor.task_id}  anchor at event {anchor.seq}"
    if not found.problem:
        return Text.assemble(("ok  ", "bold green"), where)
    return Text.assemble(("BAD ", "bold red"), f"{where}: {found.problem}")
