"""`pev events`, `pev approve` and `pev reject`: follow a task and decide on it, from any terminal.

``pev events TASK --follow`` prints a task's events as its ledger grows (docs/control.md);
``pev approve`` and ``pev reject`` write a person's decision on the revision a task awaits
approval for, which its driver, a worker or ``pev resume`` acts on in whatever process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

import click
from rich.text import Text

from pev import engine
from pev.cli._common import BadArgument, on_ledger, resolve_task_id, text_option
from pev.cli._documents import entry_document
from pev.cli._output import echo_json, echo_line, stdout_console
from pev.cli._progress import progress_line
from pev.cli._render import STATUS_STYLE, task_heading
from pev.errors import StateError, UnknownTaskError, UsageError
from pev.ledger import Ledger, LedgerEntry, Store, TaskPhase, TaskState, follow
from pev.rails import RailEvents

__all__ = ["approve_command", "event_line", "events_command", "reject_command"]


def event_line(entry: LedgerEntry, rails: RailEvents) -> str:
    """One entry as a line: sequence number, time (UTC), kind, and what it says, if anything.

    ``rails`` is fed every entry of the task in order: it knows the plan and records each
    entry's summary needs.
    """
    said = " ".join(
        line.plain.strip()
        for event in rails.feed((entry,))
        if (line := progress_line(event)) is not None
    )
    text = f"{entry.seq:>5}  {entry.at.isoformat(timespec='milliseconds')}  {entry.event.kind}"
    return f"{text}  {said}" if said else text


@click.command("events")
@click.argument("task_id", metavar="TASK")
@click.option(
    "--follow", "-f", "following", is_flag=True, help="Keep printing events until the task ends."
)
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Only the events after this sequence number.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON document {"task_id", "events": [...]}; with --follow, one JSON '
    "object per event, per line, as each is written.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="A task not written yet is waited for (by its full id) instead of refused: start "
    "following before the task is submitted.",
)
@click.pass_obj
def events_command(
    db: str, *, task_id: str, following: bool, after: int, as_json: bool, wait: bool
) -> None:
    """Print a task's events (id or unique prefix), one per line, oldest first.

    With --follow, keep printing them as the ledger grows, from any process's writes, until the
    task ends (PostgreSQL tells followers of each write; an SQLite file's version is looked at
    every 10 ms).
    With --json, one JSON document, {"task_id", "events"}, each event holding task_id, seq, at,
    kind, event (the event as the ledger encodes it) and hash; with --follow too, one such
    event object per line (JSON lines), printed as it is written.
    """

    async def printed(ledger: Ledger) -> None:
        full_id, written = await _named(ledger, task_id, wait=wait)
        rails = RailEvents()

        def echo(entries: Sequence[LedgerEntry]) -> None:
            for entry in entries:
                line = event_line(entry, rails) if not as_json else None
                if entry.seq > after:
                    echo_line(line) if line is not None else echo_json(entry_document(entry))

        if not following:
            if not written:  # until its first append: the follower waits for it
                async with contextlib.aclosing(follow(ledger.store, full_id, wait=True)) as tail:
                    await anext(tail)
            entries = await ledger.entries(full_id)
            if as_json:
                shown = [entry_document(entry) for entry in entries if entry.seq > after]
                echo_json({"task_id": full_id, "events": shown})
            else:
                echo(entries)
            return
        # Every entry is read (the lines need the plan), only those after --after printed.
        async with contextlib.aclosing(follow(ledger.store, full_id, wait=wait)) as batches:
            async for batch in batches:
                echo(batch)

    on_ledger(db, printed, create=False)


async def _named(ledger: Ledger, task_id: str, *, wait: bool) -> tuple[str, bool]:
    """The full id ``task_id`` names, and whether that task is written yet.

    A unique prefix of a task that exists names it. With ``wait``, an id that names no task is
    taken as the full id of one not written yet (said once on stderr): the follower waits for
    its first append, told of it by the store as of any other.
    """
    try:
        return await resolve_task_id(ledger, task_id), True
    except UnknownTaskError:
        if not wait:
            raise
    click.echo(f"waiting for task {task_id} to be written (Ctrl-C stops)", err=True)
    return task_id, False


def _decided(
    db: str, task_id: str, verb: str, decide: Callable[[Store, str], Awaitable[TaskState]]
) -> None:
    """Write a person's decision on the task ``task_id`` names, and say what came of it.

    ``verb`` is what is done (``approve``, ``reject``); ``decide`` writes it for the full id.
    A task that is not awaiting approval, or bad text, is a usage error (exit 2).
    """

    async def write(ledger: Ledger) -> TaskState:
        full_id = await resolve_task_id(ledger, task_id)
        try:
            return await decide(ledger.store, full_id)
        except UsageError as exc:
            raise BadArgument(str(exc)) from exc
        except StateError as exc:
            state = await ledger.state(full_id)
            if state.finished is not None:
                ending = f"{state.finished.status}/{state.finished.reason}"
                raise BadArgument(
                    f"task {full_id} has ended ({ending}): nothing to {verb}"
                ) from exc
            raise BadArgument(str(exc)) from exc

    state = on_ledger(db, write)
    done = f"{verb}d" if verb.endswith("e") else f"{verb}ed"  # approved, rejected
    stdout_console().print(_decision_report(state, done), soft_wrap=True)


def _decision_report(state: TaskState, verb: str) -> Text:
    line = task_heading(state.task_id)
    review = state.reviews[-1]
    line.append(f": revision {review.revision} {verb} by {review.by}; ")
    if state.finished is not None:
        finished = state.finished
        line.append(f"{finished.status}/{finished.reason}", style=STATUS_STYLE[finished.status])
    elif state.phase is TaskPhase.EXECUTING:
        line.append("its driver dispatches it now (a worker, or `pev resume`, if none waits)")
    else:
        line.append(f"{state.phase}: the planner is told why (a worker or `pev resume` goes on)")
    return line


_BY = click.option(
    "--by",
    default=None,
    callback=text_option,
    help="Who decides, kept in the ledger. [default: PEV_USER, else your user name]",
)
_REVISION = click.option(
    "--revision",
    type=click.IntRange(min=1),
    default=None,
    help="The revision you looked at: refused if the task awaits another one.",
)


@click.command("approve")
@click.argument("task_id", metavar="TASK")
@click.option("--note", default="", callback=text_option, help="What you add; kept in the ledger.")
@_BY
@_REVISION
@click.pass_obj
def approve_command(db: str, task_id: str, note: str, by: str | None, revision: int | None) -> None:
    """Approve the revision a task (id or unique prefix) awaits approval for.

    Look at its plan first with `pev show TASK`. The task's driver dispatches the revision as
    planned: the process of `pev run` that waits for it, else a worker or `pev resume`.
    Exit 2 if the task is not awaiting approval (of --revision, when given).
    """
    _decided(
        db,
        task_id,
        "approve",
        lambda store, full_id: engine.approve(
            full_id, store=store, by=by, note=note, revision=revision
        ),
    )


@click.command("reject")
@click.argument("task_id", metavar="TASK")
@click.option(
    "--reason",
    required=True,
    callback=text_option,
    help="Why, in words the planner can act on; kept in the ledger.",
)
@_BY
@_REVISION
@click.option(
    "--stop",
    is_flag=True,
    help="End the task failed/rejected now, with no other plan, whatever replans are left.",
)
@click.pass_obj
def reject_command(
    db: str, *, task_id: str, reason: str, by: str | None, revision: int | None, stop: bool
) -> None:
    """Reject the revision a task (id or unique prefix) awaits approval for; none of it runs.

    The reason goes to the planner as a rejected plan's problems do: in recovery mode the task
    is planned again while a replan is left, else it ends failed/rejected; with --stop it ends
    failed/rejected at once. Exit 2 if the task is not awaiting approval (of --revision, when
    given).
    """
    _decided(
        db,
        task_id,
        "reject",
        lambda store, full_id: engine.reject(
            full_id, reason, store=store, by=by, revision=revision, stop=stop
        ),
    )
