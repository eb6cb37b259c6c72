"""The `pev` command line: tasks (run, resume, cancel, list, show), ledgers, lessons, the demo.

Every command opens the store ``--db`` (or ``PEV_DB``) names: an SQLite file path or a
``postgresql://`` URL (docs/stores.md); ``pev db upgrade`` migrates a PostgreSQL schema.

Exit codes (docs/design.md §9.2): 0 succeeded or ok, 1 failed (or a ledger that fails
verification), 2 usage error, 3 partial, 4 cancelled, 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import click
import platformdirs
from click.core import ParameterSource
from rich.console import Console
from rich.text import Text

from pev import engine
from pev.cli._demo import DEMO_FAULTS, run_demos
from pev.cli._lessons import lesson_list, lesson_view
from pev.cli._progress import ConsoleRail, result_line
from pev.cli._render import (
    STATUS_STYLE,
    chain_report,
    driver_line,
    task_heading,
    task_table,
    timeline,
)
from pev.cli._taskfile import TaskFile, TaskFileError, load_task_file
from pev.engine import RunResult
from pev.errors import (
    ComponentError,
    ContractError,
    LeaseHeld,
    PevError,
    SchemaVersionError,
    UnknownTaskError,
    UsageError,
)
from pev.experience import Episode, Lesson, LessonBook
from pev.kernel import TaskStatus
from pev.ledger import (
    SCHEMA_VERSION,
    TERMINAL_PHASES,
    ChainReport,
    Lease,
    Ledger,
    Store,
    TaskPhase,
    TaskState,
    TaskSummary,
    new_task_id,
    utc_now,
)
from pev.stores import SQLiteStore, open_store

__all__ = ["EXIT_CODES", "default_db", "main"]

T = TypeVar("T")

EXIT_CODES = {
    TaskStatus.SUCCEEDED: 0,
    TaskStatus.FAILED: 1,
    TaskStatus.PARTIAL: 3,
    TaskStatus.CANCELLED: 4,
}
"""The exit code of a command that ends with a task's status."""

_PHASE_CHOICES = [*sorted(str(phase) for phase in TaskPhase), "active"]


class BadArgument(click.ClickException):
    """A bad argument (an unknown task, a database of another version): one line, exit 2."""

    exit_code = 2


def default_db() -> Path:
    """The default ledger: ``ledger.db`` in the user's data directory for pev."""
    return platformdirs.user_data_path("pev", appauthor=False) / "ledger.db"


def _open(db: str, *, named_by: str = "--db") -> Store:
    """The store ``db`` names; a bad name is one line (exit 2), a missing extra one line too."""
    try:
        return open_store(db)
    except UsageError as exc:
        raise BadArgument(f"{named_by}: {exc}") from exc
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc


def _where(store: Store) -> str:
    """Where a store keeps its ledgers, for messages (a URL without its password)."""
    return str(getattr(store, "location", type(store).__name__))


def _run(db: str, work: Callable[[Ledger], Awaitable[T]], *, named_by: str = "--db") -> T:
    """Open the ledger ``db`` names, run ``work`` on it, close it; pev errors become one line.

    ``named_by`` says where ``db`` came from, for the message of a name that cannot be opened.
    """

    async def session() -> T:
        store = _open(db, named_by=named_by)
        try:
            return await work(Ledger(store))
        finally:
            await store.close()

    try:
        return asyncio.run(session())
    except (UnknownTaskError, SchemaVersionError) as exc:
        raise BadArgument(str(exc)) from exc
    except PevError as exc:
        raise click.ClickException(str(exc)) from exc


def _task_db(db: str, spec: TaskFile) -> tuple[str, str]:
    """Where a task file's task is written, and what named it (for messages).

    ``--db`` or ``PEV_DB`` when given, else the task file's ``store``, else the default ledger.
    """
    source = click.get_current_context().find_root().get_parameter_source("db")
    if spec.store is not None and source in (None, ParameterSource.DEFAULT):
        return spec.store, f"{spec.path}: store"
    return db, "--db"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pev-agent", prog_name="pev")
@click.option(
    "--db",
    metavar="PATH|URL",
    envvar="PEV_DB",
    show_envvar=True,
    default=None,
    help=(
        "The ledger: an SQLite file, or a postgresql:// URL (?schema=NAME picks the PostgreSQL "
        "schema; see docs/stores.md). [default: ledger.db in your data directory]"
    ),
)
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """pev: agents that plan, act, check their work, and diagnose before they re-plan."""
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
    type=click.IntRange(min=0),
    help="Where the cubes start; the same seed gives the same ledger, apart from times and ids.",
)
@click.pass_obj
def demo(db: str, faults: Sequence[str], seed: int) -> None:
    """Run the simulator demo: a Panda arm puts three cubes in a tray, one task per fault.

    Each task (no fault, slip, knock, timeout, dead-joint, camera) takes its own path through
    diagnosis and recovery, and is written to the ledger; inspect one with `pev show TASK`.
    Needs the sim extra: pip install 'pev-agent[sim]'. Exits 1 if a task strays from its
    documented path.
    """
    console = Console()
    chosen = list(faults) or list(DEMO_FAULTS)

    async def demos(ledger: Ledger) -> tuple[bool, str]:
        store = ledger.store
        # The images go next to an SQLite file, else next to the default one.
        beside = Path(store.location) if isinstance(store, SQLiteStore) else default_db()
        images = beside.parent / "demo-images"
        ok = await run_demos(ledger, chosen, seed=seed, console=console, images=images)
        return ok, _where(store)

    try:
        ok, where = _run(db, demos)
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
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@click.pass_obj
def tasks(db: str, statuses: Sequence[str], limit: int) -> None:
    """List tasks, newest first."""
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
        return summaries, drivers, _where(ledger.store)

    summaries, drivers, where = _run(db, listed)
    console = Console()
    if summaries:
        console.print(task_table(summaries, drivers))
    else:
        console.print("no tasks" + (" with that status" if statuses else f" in {where}"))


async def _all_task_ids(ledger: Ledger) -> list[str]:
    """Every task's id, newest first, read a page at a time."""
    ids: list[str] = []
    while page := await ledger.tasks(limit=500, offset=len(ids)):
        ids.extend(summary.task_id for summary in page)
    return ids


async def _resolve(ledger: Ledger, task_id: str) -> str:
    """The full id of the one task whose id is ``task_id`` or starts with it."""
    if await ledger.store.summary(task_id) is not None:
        return task_id
    matches = [full for full in await _all_task_ids(ledger) if full.startswith(task_id)]
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:5])
        raise BadArgument(f"task id prefix {task_id!r} is ambiguous ({shown}); type more")
    if not matches:
        raise UnknownTaskError(task_id)
    return matches[0]


@cli.command()
@click.argument("task_id")
@click.pass_obj
def show(db: str, task_id: str) -> None:
    """Show one task (by id or unique id prefix): plans and node status, verdicts, decisions."""

    async def load(ledger: Ledger) -> tuple[TaskState, Lease | None]:
        full_id = await _resolve(ledger, task_id)
        return await ledger.state(full_id), await ledger.store.lease(full_id)

    state, lease = _run(db, load)
    Console().print(timeline(state, driver=driver_line(state, lease, utc_now())))


@cli.group()
def ledger() -> None:
    """Inspect the ledger itself."""


@ledger.command("verify")
@click.argument("task_ids", nargs=-1)
@click.pass_obj
def verify(db: str, task_ids: Sequence[str]) -> None:
    """Check the hash chain of tasks (ids or unique prefixes; all by default); exit 1 if any fails.

    Detects an edited, dropped (the last one too) or reordered event, and names the first bad one.
    """

    async def check(ledger: Ledger) -> list[ChainReport]:
        ids = [await _resolve(ledger, task_id) for task_id in task_ids]
        if not ids:
            ids = await _all_task_ids(ledger)
        return [await ledger.verify(task_id) for task_id in ids]

    reports = _run(db, check)
    console = Console()
    bad = 0
    for report in reports:
        console.print(chain_report(report))
        bad += not report.ok
    console.print(f"{len(reports)} task(s) checked, {bad} failed verification")
    if bad:
        raise click.exceptions.Exit(1)


@cli.command("lessons")
@click.argument("lesson_id", metavar="[LESSON]", required=False)
@click.option("--all", "show_all", is_flag=True, help="List candidates too, not only active ones.")
@click.pass_obj
def lessons_command(db: str, lesson_id: str | None, show_all: bool) -> None:
    """List the lessons learned from ended tasks, or show one with the episodes behind it.

    LESSON is a lesson id or a unique prefix of one. Active lessons are given to planners as
    advice (`pev.run(..., experience=LessonBook(store))`); a candidate waits for enough
    independent tasks to support it.
    """
    console = Console()
    if lesson_id is None:

        async def listed(ledger: Ledger) -> tuple[tuple[Lesson, ...], str]:
            return await LessonBook(ledger.store).all(), _where(ledger.store)

        every, where = _run(db, listed)
        lessons = [lesson for lesson in every if show_all or lesson.active]
        if lessons:
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

    console.print(lesson_view(*_run(db, shown)))


@cli.group("db")
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
    database cannot be reached or is not a pev ledger, 2 a bad --db or a schema newer than
    this pev.
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
        before, after = await store.upgrade()
        if before == after:
            return f"{store.location}: schema version {after}, already current; nothing to do"
        if before == 0:
            return f"{store.location}: created pev's tables at schema version {after}"
        return f"{store.location}: upgraded from schema version {before} to {after}"

    Console().print(_run(db, upgrade), soft_wrap=True, highlight=False)


def _fail(message: str, *, code: int = 2) -> NoReturn:
    """Print a one-line error (``pev: <message>``) and exit with ``code`` (2: usage error)."""
    click.echo(f"pev: {' '.join(message.split())}", err=True)
    raise click.exceptions.Exit(code)


def _interruptible(task_id: str, work: Callable[[], T]) -> T:
    """Run ``work``; on Ctrl-C, say how to continue or stop the task left behind (exit 130)."""
    try:
        return work()
    except KeyboardInterrupt:
        _fail(
            f"interrupted; task {task_id} stays in the ledger as it was: `pev resume {task_id}` "
            f"continues it, `pev cancel {task_id}` stops it",
            code=130,
        )


def _ended(console: Console, state: TaskState, *, progress: ConsoleRail | None) -> NoReturn:
    """Print how a task ended (its timeline unless quiet, then one result line); exit with it."""
    result = RunResult.from_state(state)
    if progress is not None:
        if progress.printed:
            console.print()
        console.print(timeline(state))
    console.print(result_line(result), soft_wrap=True)
    raise click.exceptions.Exit(EXIT_CODES[result.status])


@cli.command("run")
@click.argument("task_file", metavar="TASKFILE", type=click.Path(path_type=Path))
@click.option("--task-id", help="The new task's id. [default: a fresh UUID]")
@click.option("-q", "--quiet", is_flag=True, help="Print only the result line.")
@click.pass_obj
def run_command(db: str, task_file: Path, task_id: str | None, quiet: bool) -> None:
    """Run a task file; exit with the task's status.

    TASKFILE describes one task in TOML (see docs/cli.md). Prints each phase of the loop as it
    happens, then the task's timeline and a result line. Exit codes: 0 succeeded, 1 failed,
    2 a bad task file, 3 partial, 4 cancelled.
    """
    try:
        spec = load_task_file(task_file)
    except TaskFileError as exc:
        _fail(str(exc))
    console = Console()
    progress = None if quiet else ConsoleRail(console)
    rails = (progress,) if progress is not None else ()
    new_id = task_id or new_task_id()

    async def drive(ledger: Ledger) -> TaskState:
        if await ledger.store.summary(new_id) is not None:
            _fail(f"--task-id: a task with id {new_id!r} exists already; choose another id")
        try:
            result = await engine.run(
                spec.input,
                agent=spec.agent,
                contract=spec.contract,
                policy=spec.policy,
                store=ledger.store,
                rails=rails,
                task_id=new_id,
                experience=LessonBook(ledger.store),
            )
        except (ComponentError, ContractError) as exc:
            field = (
                f"components.{exc.role}"
                if isinstance(exc, ComponentError)
                else f"contract.{exc.field}"
            )
            _fail(str(TaskFileError(field, str(exc), path=task_file)))
        return await ledger.state(result.task_id)

    where, named_by = _task_db(db, spec)
    _ended(
        console,
        _interruptible(new_id, lambda: _run(where, drive, named_by=named_by)),
        progress=progress,
    )


@cli.command("submit")
@click.argument("task_file", metavar="TASKFILE", type=click.Path(path_type=Path))
@click.option("--task-id", help="The new task's id. [default: a fresh UUID]")
@click.pass_obj
def submit_command(db: str, task_file: Path, task_id: str | None) -> None:
    """Write a task file's task for a worker to run; print its id (nothing runs here).

    TASKFILE is the same TOML `pev run` reads (see docs/cli.md). Its components must be
    importable by the workers (module-level names; the task file's folder on their Python path).
    """
    try:
        spec = load_task_file(task_file)
    except TaskFileError as exc:
        _fail(str(exc))

    async def write(ledger: Ledger) -> str:
        if task_id is not None and await ledger.store.summary(task_id) is not None:
            _fail(f"--task-id: a task with id {task_id!r} exists already; choose another id")
        try:
            return await engine.submit(
                spec.input,
                agent=spec.agent,
                contract=spec.contract,
                policy=spec.policy,
                store=ledger.store,
                task_id=task_id,
            )
        except ComponentError as exc:
            _fail(str(TaskFileError(f"components.{exc.role}", str(exc), path=task_file)))

    where, named_by = _task_db(db, spec)
    click.echo(_run(where, write, named_by=named_by))


@cli.command("worker")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="The most tasks this worker drives at once.",
)
@click.option(
    "--lease-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The lease of the tasks this worker drives, in seconds; renewed every third of it. "
    "[default: each task's policy's, 30 unless set]",
)
@click.option(
    "--poll-s",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="How long an idle worker waits before it looks for runnable tasks again.",
)
@click.pass_obj
def worker_command(db: str, concurrency: int, lease_s: float | None, poll_s: float) -> None:
    """Claim runnable tasks from the ledger and drive them, until SIGTERM or Ctrl-C.

    A task is runnable when it has not ended and no live driver holds its lease: new tasks
    (`pev submit`), and tasks whose driver died (its lease expired). Each is driven as
    `pev resume` would: an action whose outcome is unknown is never sent again. Components are
    rebuilt from the import paths the task recorded, with the current folder on the Python path.
    On SIGTERM (or Ctrl-C) the worker claims nothing more, lets running nodes reach their
    terminal records within their timeouts, leaves each task in its phase and releases its
    leases; another worker continues them. It logs what it claims and releases to stderr.
    """
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    worker_log = logging.getLogger("pev.worker")
    worker_log.addHandler(handler)
    worker_log.setLevel(logging.INFO)

    async def serve(ledger: Ledger) -> engine.WorkerReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        # remove_signal_handler resets to the default, not to what was there: restore that.
        previous = {signum: signal.getsignal(signum) for signum in signals}
        for signum in signals:
            loop.add_signal_handler(signum, stop.set)
        try:
            return await engine.worker(
                ledger.store,
                concurrency=concurrency,
                lease_s=lease_s,
                poll_s=poll_s,
                stop=stop,
                experience=LessonBook(ledger.store),
            )
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)
                if (earlier := previous[signum]) is not None:  # None: not set from Python
                    signal.signal(signum, earlier)

    try:
        _run(db, serve)
    finally:
        worker_log.removeHandler(handler)


@cli.command("resume")
@click.argument("task_id", metavar="TASK")
@click.option("-q", "--quiet", is_flag=True, help="Print only the result line.")
@click.pass_obj
def resume_command(db: str, task_id: str, quiet: bool) -> None:
    """Continue a task after a crash; exit with its status.

    TASK is a task id or a unique prefix of one. Its components are rebuilt from the import
    paths recorded when it was created: run this where their modules import (the current
    folder is on the Python path). A task that has ended is shown as it is.
    """
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    console = Console()
    progress = None if quiet else ConsoleRail(console)
    rails = (progress,) if progress is not None else ()

    async def drive(ledger: Ledger) -> TaskState:
        full_id = await _resolve(ledger, task_id)
        try:
            result = await engine.resume(
                full_id, store=ledger.store, rails=rails, experience=LessonBook(ledger.store)
            )
        except LeaseHeld as exc:
            _fail(
                f"task {full_id} is being driven by {exc.owner} (its lease runs until "
                f"{exc.expires_at.isoformat(timespec='seconds')}); resuming it now would race "
                "that driver: wait for it to end, or, if it is gone, for its lease to expire"
            )
        except ComponentError as exc:
            # The engine's message says what failed and ends "pass planner=...", which only
            # Python can do: say so, with the call to make.
            _fail(
                f"task {full_id}: the {exc.role} cannot be rebuilt ({exc}); "
                f"`pev resume` cannot pass one: resume it from Python with the {exc.role} "
                f"passed, `await pev.resume({full_id!r}, store=..., {exc.role}=...)`"
            )
        return await ledger.state(result.task_id)

    _ended(console, _interruptible(task_id, lambda: _run(db, drive)), progress=progress)


@cli.command("cancel")
@click.argument("task_id", metavar="TASK")
@click.option("--reason", default="", help="Why; written to the ledger.")
@click.pass_obj
def cancel_command(db: str, task_id: str, reason: str) -> None:
    """Ask a task to stop (an ended one is left unchanged).

    TASK is a task id or a unique prefix of one. The process driving the task stops
    dispatching and ends it cancelled. A task nobody drives ends when `pev resume TASK` picks
    it up, or at once if it was waiting for a replan.
    """

    async def request(ledger: Ledger) -> tuple[TaskState, TaskState]:
        full_id = await _resolve(ledger, task_id)
        before = await ledger.state(full_id)
        return before, await engine.cancel(full_id, store=ledger.store, reason=reason)

    before, after = _run(db, request)
    Console().print(_cancel_report(before, after), soft_wrap=True)


def _cancel_report(before: TaskState, after: TaskState) -> Text:
    line = task_heading(after.task_id)
    line.append(": ")
    if after.finished is not None:
        ending = f"{after.finished.status}/{after.finished.reason}"
        line.append(ending, style=STATUS_STYLE[after.finished.status])
        line.append("; it had already ended, left unchanged" if before.terminal else "")
    elif before.cancel_requested:
        line.append(f"{after.phase}; a cancel was requested already")
    else:
        line.append(
            f"{after.phase}; cancel requested: the process driving it stops it, and if none "
            "is, `pev resume` ends it"
        )
    return line


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `pev` command."""
    cli.main(args=list(argv) if argv is not None else sys.argv[1:], prog_name="pev")
