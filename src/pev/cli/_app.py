"""The `pev` command line: the group, and its commands that read, migrate and demonstrate.

Here: tasks, show, lessons, db upgrade, demo, and the ``ledger`` group. The commands that drive
tasks (run, submit, worker, resume, cancel) are in :mod:`pev.cli._drive`; those that follow and
decide on them (events, approve, reject) in :mod:`pev.cli._control`; ``ledger verify`` and
``ledger anchor`` in :mod:`pev.cli._integrity`; what all commands share in
:mod:`pev.cli._common`.

Every command opens the store ``--db`` (or ``PEV_DB``) names: an SQLite file path or a
``postgresql://`` URL (docs/stores.md); ``pev db upgrade`` migrates a PostgreSQL schema.

``--db`` may come before the command name or after it. Listing and showing commands (tasks, show,
events, lessons, ledger verify) print one JSON document with ``--json``, whose fields
:data:`pev.cli.JSON_SCHEMAS` defines. Output that is not a terminal is never wrapped or coloured,
and a reader that goes away (``pev run task.toml | head -1``) never stops a running task
(:mod:`pev.cli._output`).

Exit codes (docs/design.md §9.2): 0 succeeded or ok, 1 failed (or a ledger that fails
verification), 2 usage error, 3 partial, 4 cancelled, 75 the store did not answer (try again),
130 interrupted with Ctrl-C.

The commands that only read (tasks, show, events, lessons, ledger verify/anchor/export, serve)
open the store with ``create=False``: a missing ledger is a usage error, never created.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from pev.cli._common import (
    DB_HELP,
    EXIT_CODES,
    BadArgument,
    OneLineGroup,
    default_db,
    on_ledger,
    resolve_task_id,
    where_of,
)
from pev.cli._control import approve_command, events_command, reject_command
from pev.cli._demo import DEMO_FAULTS, run_demos
from pev.cli._documents import episode_document, lesson_document, task_document, task_row
from pev.cli._drive import (
    cancel_command,
    resume_command,
    run_command,
    submit_command,
    worker_command,
)
from pev.cli._early import EarlySignals
from pev.cli._export import export_command
from pev.cli._integrity import anchor_command, verify_command
from pev.cli._lessons import lesson_list, lesson_view
from pev.cli._output import PipeSafeStdout, echo_json, stdout_console
from pev.cli._render import (
    driver_line,
    task_table,
    timeline,
)
from pev.cli._serve import serve_command
from pev.engine._trust import check_chain
from pev.errors import PevError, StoreUnavailable
from pev.experience import Episode, Lesson, LessonBook
from pev.ledger import (
    SCHEMA_VERSION,
    TERMINAL_PHASES,
    Lease,
    Ledger,
    TaskPhase,
    TaskState,
    TaskSummary,
    utc_now,
)
from pev.stores import SQLiteStore

__all__ = ["EXIT_CODES", "default_db", "main"]

_PHASE_CHOICES = [*sorted(str(phase) for phase in TaskPhase), "active"]
_JSON = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document (fields in docs/cli.md; schema: pev.cli.JSON_SCHEMAS).",
)


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pev-agent", prog_name="pev")
@click.option(
    "--db",
    metavar="PATH|URL",
    envvar="PEV_DB",
    show_envvar=True,
    default=None,
    help=DB_HELP,
)
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """pev: agents that plan, act, check their work, and diagnose before they re-plan."""
    early = EarlySignals.installed()
    if early is not None and ctx.invoked_subcommand != "worker":
        early.hand_back()  # a worker takes them over itself (pev.cli._early)
    ctx.obj = db or str(default_db())


@cli.command()
@click.option(
    "--fault",
    "faults",
    multiple=True,
    type=click.Choice(DEMO_FAULTS),
    help="Run the task with this fault injected (repeatable). [default: every fault, in order]",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(min=0, max=2**32 - 1),
    help="Where the cubes start; the same seed gives the same ledger, apart from times and ids.",
)
@click.option(
    "--approve",
    is_flag=True,
    help=(
        "Each revision that moves the arm waits for your approval: look at its plan with "
        "`pev show TASK` and run `pev approve TASK` (or `pev reject TASK --reason ...`) from "
        "another terminal."
    ),
)
@click.pass_obj
def demo(db: str, faults: Sequence[str], seed: int, approve: bool) -> None:
    """Run the simulator demo: a Panda arm puts three cubes in a tray, one task per fault.

    Each task (no fault, slip, knock, timeout, dead-joint, camera) takes its own path through
    diagnosis and recovery, and is written to the ledger; inspect one with `pev show TASK`.
    Needs the sim extra: pip install 'pev-agent[sim]'. Exits 1 if a task strays from its
    documented path.
    """
    console = stdout_console()
    chosen = list(faults) or list(DEMO_FAULTS)

    async def demos(ledger: Ledger) -> tuple[bool, str]:
        store = ledger.store
        # The images go next to an SQLite file, else next to the default one.
        beside = Path(store.location) if isinstance(store, SQLiteStore) else default_db()
        images = beside.parent / "demo-images"
        ok = await run_demos(
            ledger, chosen, seed=seed, console=console, images=images, approve=approve
        )
        return ok, where_of(store)

    try:
        ok, where = on_ledger(db, demos)
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"ledger: {where}")
    console.print("list the tasks with `pev tasks`, and show one with `pev show TASK`.")
    if not ok:
        raise click.exceptions.Exit(1)


@cli.command()
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(_PHASE_CHOICES),
    help="Only tasks in this status or phase (repeatable); 'active' means not ended.",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1, max=1_000_000))
@_JSON
@click.pass_obj
def tasks(db: str, statuses: Sequence[str], limit: int, as_json: bool) -> None:
    """List tasks, newest first; times are ISO 8601 with their offset (UTC).

    With --json, one JSON document: {"ledger", "tasks": [{"task_id", "title", "phase",
    "status", "reason", "created_at", "updated_at", "event_count", "head_hash", "deadline",
    "driver"}]} (docs/cli.md).
    """
    phases: set[TaskPhase] | None = None
    if statuses:
        phases = set()
        for status in statuses:
            if status == "active":
                phases |= set(TaskPhase) - TERMINAL_PHASES
            else:
                phases.add(TaskPhase(status))

    async def listed(ledger: Ledger) -> tuple[Sequence[TaskSummary], dict[str, str], str]:
        summaries = await ledger.tasks(phases=phases, limit=limit)
        now = utc_now()
        drivers: dict[str, str] = {}
        for summary in summaries:
            if summary.phase not in TERMINAL_PHASES:
                lease = await ledger.store.lease(summary.task_id)
                if lease is not None and lease.live(now):
                    drivers[summary.task_id] = lease.owner
        return summaries, drivers, where_of(ledger.store)

    summaries, drivers, where = on_ledger(db, listed, create=False)
    if as_json:
        rows = [task_row(summary, drivers.get(summary.task_id)) for summary in summaries]
        echo_json({"ledger": where, "tasks": rows})
        return
    console = stdout_console()
    if summaries:
        console.print(task_table(summaries, drivers))
    else:
        console.print("no tasks" + (" with that status" if statuses else f" in {where}"))


@cli.command()
@click.argument("task_id", metavar="TASK")
@_JSON
@click.pass_obj
def show(db: str, task_id: str, as_json: bool) -> None:
    """Show one task (by id or unique id prefix): plans and node status, verdicts, decisions.

    Its ledger is verified first: a task whose chain is broken is refused, naming the first bad
    event (exit 2); `pev ledger verify TASK` says more. With --json, one JSON document: the
    task with its revisions, their nodes and records, verdicts, diagnoses and decisions
    (docs/cli.md).
    """

    async def load(ledger: Ledger) -> tuple[TaskState, Lease | None]:
        full_id = await resolve_task_id(ledger, task_id)
        await check_chain(ledger, full_id)
        return await ledger.state(full_id), await ledger.store.lease(full_id)

    state, lease = on_ledger(db, load, create=False)
    now = utc_now()
    if as_json:
        echo_json(task_document(state, lease, now))
        return
    stdout_console().print(timeline(state, driver=driver_line(state, lease, now)))


@cli.group(cls=OneLineGroup)
def ledger() -> None:
    """Check the ledger itself: verify its chains, print heads to keep (docs/security.md)."""


ledger.add_command(verify_command)
ledger.add_command(anchor_command)


@cli.command("lessons")
@click.argument("lesson_id", metavar="[LESSON]", required=False)
@click.option("--all", "show_all", is_flag=True, help="List candidates too, not only active ones.")
@_JSON
@click.pass_obj
def lessons_command(db: str, lesson_id: str | None, show_all: bool, as_json: bool) -> None:
    """List the lessons learned from ended tasks, or show one with the episodes behind it.

    LESSON is a lesson id or a unique prefix of one. Active lessons are given to planners as
    advice (`pev.run(..., experience=LessonBook(store))`); a candidate waits for enough
    independent tasks to support it. With --json, one JSON document: {"lessons": [...]}, or
    {"lesson", "episodes"} for one (docs/cli.md).
    """
    console = stdout_console()
    if lesson_id is None:

        async def listed(ledger: Ledger) -> tuple[tuple[Lesson, ...], str]:
            return await LessonBook(ledger.store).all(), where_of(ledger.store)

        every, where = on_ledger(db, listed, create=False)
        lessons = [lesson for lesson in every if show_all or lesson.active]
        if as_json:
            echo_json({"lessons": [lesson_document(lesson) for lesson in lessons]})
        elif lessons:
            console.print(lesson_list(lessons))
        else:
            what = "lessons" if show_all else "active lessons (`pev lessons --all` adds candidates)"
            console.print(f"no {what} in {where}")
        return

    async def shown(ledger: Ledger) -> tuple[Lesson, tuple[Episode, ...]]:
        book = LessonBook(ledger.store)
        matches = [lesson for lesson in await book.all() if lesson.id.startswith(lesson_id)]
        if len(matches) != 1:
            shown_ids = ", ".join(lesson.id for lesson in matches[:5])
            raise BadArgument(
                f"lesson id prefix {lesson_id!r} is ambiguous ({shown_ids}); type more"
                if matches
                else f"no lesson has id {lesson_id!r}; list them with `pev lessons --all`"
            )
        return matches[0], await book.episodes(matches[0].id)

    lesson, episodes = on_ledger(db, shown, create=False)
    if as_json:
        echo_json(
            {
                "lesson": lesson_document(lesson),
                "episodes": [episode_document(episode) for episode in episodes],
            }
        )
        return
    console.print(lesson_view(lesson, episodes))


@cli.group("db", cls=OneLineGroup)
def db_group() -> None:
    """The ledger database itself: its schema version."""


@db_group.command("upgrade")
@click.pass_obj
def db_upgrade(db: str) -> None:
    """Bring the ledger's schema to this pev's version, and say what was done.

    For a postgresql:// --db: applies the missing migrations in order, in one transaction, while
    a lock makes any other upgrader wait; an empty schema gets pev's tables. Run it after
    installing a newer pev, before its workers start (they refuse an older schema). An SQLite
    file needs no upgrade and is left as it is. Exit codes: 0 done or already current, 1 the
    upgrade failed, 2 a --db that cannot be reached or is not a pev ledger, or a schema newer
    than this pev.
    """

    async def upgrade(ledger: Ledger) -> str:
        store = ledger.store
        if isinstance(store, SQLiteStore):
            return (
                f"{store.location}: an SQLite ledger at schema version {SCHEMA_VERSION}; "
                "nothing to upgrade"
            )
        from pev.stores import PostgresStore  # noqa: PLC0415 - a URL named it: the extra is here

        assert isinstance(store, PostgresStore)  # noqa: S101 - open_store gives one or the other
        try:
            await store.version()  # connects: a URL that names no pev schema is a bad --db
        except StoreUnavailable:
            raise  # not the URL's fault, as far as anyone can tell: exit 75, try again
        except PevError as exc:
            raise BadArgument(f"--db: {exc}") from exc
        before, after = await store.upgrade()
        if before == after:
            return f"{store.location}: schema version {after}, already current; nothing to do"
        if before == 0:
            return f"{store.location}: created pev's tables at schema version {after}"
        return f"{store.location}: upgraded from schema version {before} to {after}"

    stdout_console().print(on_ledger(db, upgrade, check=False), soft_wrap=True, highlight=False)


for command in (
    run_command,
    submit_command,
    worker_command,
    resume_command,
    cancel_command,
    events_command,
    approve_command,
    reject_command,
    serve_command,
):
    cli.add_command(command)
ledger.add_command(export_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `pev` command.

    Standard output is guarded first: a reader that goes away stops nothing (docs/cli.md). An
    output that cannot be written (a full disk) stops nothing either, but is said at the end in
    one line, and the command then never exits 0: what it printed is incomplete.
    """
    out = PipeSafeStdout.install()
    code: int | str | None = 0
    try:
        cli.main(args=list(argv) if argv is not None else sys.argv[1:], prog_name="pev")
    except SystemExit as done:
        code = done.code
    if out is not None:
        out.flush()  # what is still buffered, before the interpreter's own flush at exit
        if out.failed is not None:
            reason = out.failed.strerror or type(out.failed).__name__
            click.echo(
                f"pev: standard output could not be written ({reason}); what this command "
                "printed is incomplete",
                err=True,
            )
            code = code or 1
    sys.exit(code)
