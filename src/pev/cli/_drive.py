"""The `pev` commands that drive tasks: run, submit, worker, resume, cancel.

``pev run`` drives a task file's task here and now; ``pev submit`` writes one for ``pev worker``
processes, which claim and drive tasks until told to stop (docs/workers.md); ``pev resume``
continues a task a crash or a drain left behind, ``pev cancel`` stops one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.text import Text

from pev import engine
from pev._imports import UntrustedImportError
from pev._signals import stop_on_signals
from pev.cli._common import (
    FilePath,
    Seconds,
    ended,
    fail,
    interruptible,
    new_task_id_option,
    on_ledger,
    resolve_task_id,
    task_db,
    text_option,
)
from pev.cli._early import EarlySignals
from pev.cli._mcp import open_recorded, open_servers, recorded_agent, records_servers
from pev.cli._output import echo_line, stdout_console
from pev.cli._progress import ConsoleRail
from pev.cli._render import STATUS_STYLE, task_heading
from pev.cli._taskfile import TaskFile, TaskFileError, given_input, load_task_file
from pev.engine import Agent
from pev.errors import ComponentError, ContractError, LeaseHeld, UsageError
from pev.experience import LessonBook
from pev.ledger import Ledger, TaskState, new_task_id
from pev.rails._console import iso_time

__all__ = ["cancel_command", "resume_command", "run_command", "submit_command", "worker_command"]


F = TypeVar("F", bound=Callable[..., Any])


def _input_options(command: F) -> F:
    """``--input JSON`` and ``--input-file PATH``: the task's input, in place of the file's."""
    command = click.option(
        "--input-file",
        "input_file",
        type=click.Path(dir_okay=False, path_type=Path, allow_dash=True),
        help="Read the task's input from this JSON file (- for standard input) instead.",
    )(command)
    return click.option(
        "--input",
        "input_json",
        metavar="JSON",
        callback=text_option,
        help="""The task's input as JSON, in place of the task file's: '{"city": "Oslo"}'.""",
    )(command)


def _task_file(task_file: Path, input_json: str | None, input_file: Path | None) -> TaskFile:
    """The task file, checked and imported, with the input given on the command line if any."""
    try:
        return load_task_file(task_file, given=given_input(input_json, input_file))
    except UsageError as exc:  # a bad task file, or an --input that cannot be used
        fail(str(exc))


@click.command("run")
@click.argument("task_file", metavar="TASKFILE", type=FilePath())
@click.option(
    "--task-id",
    callback=new_task_id_option,
    help="The new task's id: printable text, at most 200 characters. [default: a fresh UUID]",
)
@_input_options
@click.option("-q", "--quiet", is_flag=True, help="Print only the result line.")
@click.pass_obj
def run_command(
    db: str,
    *,
    task_file: Path,
    task_id: str | None,
    input_json: str | None,
    input_file: Path | None,
    quiet: bool,
) -> None:
    """Run a task file; exit with the task's status.

    TASKFILE describes one task in TOML (see docs/cli.md); --input or --input-file give its
    input instead of the file's. Prints each phase of the loop as it happens, then the task's
    timeline and a result line. Exit codes: 0 succeeded, 1 failed, 2 a bad task file or
    input, 3 partial, 4 cancelled.
    """
    spec = _task_file(task_file, input_json, input_file)
    console = stdout_console()
    progress = None if quiet else ConsoleRail(console)
    rails = (progress,) if progress is not None else ()
    new_id = task_id or new_task_id()

    async def drive(ledger: Ledger) -> TaskState:
        if await ledger.store.summary(new_id) is not None:
            fail(f"--task-id: a task with id {new_id!r} exists already; choose another id")
        try:
            async with _task_file_agent(task_file, spec) as agent:
                result = await engine.run(
                    spec.input,
                    agent=agent,
                    contract=spec.contract,
                    policy=spec.policy,
                    store=ledger.store,
                    rails=rails,
                    task_id=new_id,
                    experience=LessonBook(ledger.store),
                )
        except (UsageError, ContractError) as exc:
            fail(_task_file_problem(task_file, exc))
        return await ledger.state(result.task_id)

    where, named_by = task_db(db, spec)
    try:
        state = interruptible(new_id, lambda: on_ledger(where, drive, named_by=named_by))
    finally:
        if progress is not None:
            progress.close()
    ended(console, state, progress=progress)


@click.command("submit")
@click.argument("task_file", metavar="TASKFILE", type=FilePath())
@click.option(
    "--task-id",
    callback=new_task_id_option,
    help="The new task's id: printable text, at most 200 characters. [default: a fresh UUID]",
)
@_input_options
@click.pass_obj
def submit_command(
    db: str,
    *,
    task_file: Path,
    task_id: str | None,
    input_json: str | None,
    input_file: Path | None,
) -> None:
    """Write a task file's task for a worker to run; print its id (nothing runs here).

    TASKFILE is the same TOML `pev run` reads (see docs/cli.md); --input or --input-file give
    its input instead of the file's, so one file serves many tasks. Its components must be
    importable by the workers (module-level names; the task file's folder on their Python path).
    """
    spec = _task_file(task_file, input_json, input_file)

    async def write(ledger: Ledger) -> str:
        if task_id is not None and await ledger.store.summary(task_id) is not None:
            fail(f"--task-id: a task with id {task_id!r} exists already; choose another id")
        try:
            # A task file's MCP servers are opened once, to list their tools (for the record);
            # the workers open them again to drive the task.
            async with _task_file_agent(task_file, spec) as agent:
                return await engine.submit(
                    spec.input,
                    agent=agent,
                    contract=spec.contract,
                    policy=spec.policy,
                    store=ledger.store,
                    task_id=task_id,
                )
        except (UsageError, ContractError) as exc:
            fail(_task_file_problem(task_file, exc))

    where, named_by = task_db(db, spec)
    echo_line(on_ledger(where, write, named_by=named_by))


@asynccontextmanager
async def _task_file_agent(task_file: Path, spec: TaskFile) -> AsyncIterator[Agent]:
    """The task file's agent, with the tools of its MCP servers, open until the block ends."""
    if spec.agent is not None:
        yield spec.agent
        return
    async with _opening(open_servers(spec.mcp)) as tools:
        try:
            agent = spec.agent_with(tools)
        except TaskFileError as exc:
            exc.path = task_file
            fail(str(exc))
        yield agent


def _task_file_problem(task_file: Path, exc: UsageError | ContractError) -> str:
    """What the engine refused in a task file's task, as one line naming the field at fault."""
    if isinstance(exc, MCPOpenError):
        return str(TaskFileError("mcp", str(exc), path=task_file))
    if isinstance(exc, ComponentError):
        field = f"components.{exc.role}"
    elif isinstance(exc, ContractError):
        field = f"contract.{exc.field}"
    else:  # a value the engine's limits refuse, say: the file as a whole
        field = ""
    return str(TaskFileError(field, str(exc), path=task_file))


_A_YEAR_S = 365 * 24 * 3600.0  # the longest lease a policy allows, and so the longest wait


WORKER_GC_THRESHOLD = (100_000, 50, 100)
"""``pev worker``'s garbage collector thresholds: a first generation of 100,000 allocations.

With thousands of tasks alive, CPython's default (700, 10, 10) runs the collector over every
task's state thousands of times a second; docs/benchmarks.md ("Scale") measures the difference.
"""


def _gc_threshold(
    ctx: click.Context, param: click.Parameter, value: str
) -> tuple[int, int, int] | None:
    """``--gc-threshold``: ``G0,G1,G2`` (whole numbers, ``G0`` at least 1), or ``python``."""
    text = value.strip().lower()
    if text == "python":
        return None
    parts = [part.strip() for part in text.split(",")]
    if len(parts) == 3 and all(part.isdigit() and len(part) <= 9 for part in parts):
        first, second, third = (int(part) for part in parts)
        if first >= 1:
            return first, second, third
    raise click.BadParameter(
        f"{value!r} is not three whole numbers G0,G1,G2 with G0 at least 1 (such as "
        f"{','.join(map(str, WORKER_GC_THRESHOLD))}), nor 'python'",
        ctx,
        param,
    )


@click.command("worker")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=10_000),
    default=4,
    show_default=True,
    help="The most tasks this worker drives at once.",
)
@click.option(
    "--lease-s",
    type=Seconds(max_s=_A_YEAR_S),
    default=None,
    help="The lease of the tasks this worker drives, in seconds; renewed every third of it. "
    "[default: each task's policy's, 30 unless set]",
)
@click.option(
    "--poll-s",
    type=Seconds(max_s=_A_YEAR_S),
    default=1.0,
    show_default=True,
    help="The longest an idle worker waits before it looks for runnable tasks again (for tasks "
    "whose driver died); a new or released task wakes it sooner: at once on PostgreSQL, within "
    "50 ms on SQLite.",
)
@click.option(
    "--gc-threshold",
    metavar="G0,G1,G2",
    callback=_gc_threshold,
    default=",".join(map(str, WORKER_GC_THRESHOLD)),
    show_default=True,
    help="CPython's cyclic garbage collector thresholds for this process (gc.set_threshold), "
    "as G0,G1,G2; 'python' keeps Python's own. A worker driving many tasks keeps many live "
    "objects that the default thresholds make the collector walk over and over "
    "(docs/performance.md).",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    default=None,
    help="Run the task drivers as Ray actors on the Ray cluster at ADDRESS ('auto': the one "
    "`ray start` runs on this machine; host:port; ray://host:port) instead of in this process, "
    "over the PostgreSQL ledger --db names, which every node must reach. A driver whose node "
    "dies is replaced; its tasks are taken over once their leases expire. --concurrency, "
    "--lease-s and --poll-s apply to each driver. Needs the ray extra.",
)
@click.option(
    "--drivers",
    type=click.IntRange(min=1, max=10_000),
    default=None,
    help="With --ray: how many drivers to keep running. [default: one per Ray node alive at the "
    "start]",
)
@click.pass_obj
def worker_command(
    db: str,
    *,
    concurrency: int,
    lease_s: float | None,
    poll_s: float,
    gc_threshold: tuple[int, int, int] | None,
    ray_address: str | None,
    drivers: int | None,
) -> None:
    """Claim runnable tasks from the ledger and drive them, until SIGTERM or Ctrl-C.

    A task is runnable when it has not ended and no live driver holds its lease: new tasks
    (`pev submit`), and tasks whose driver died (its lease expired). Each is driven as
    `pev resume` would: an action whose outcome is unknown is never sent again. Components are
    rebuilt from the import paths the task recorded, with the current folder and the task
    file's folder on the Python path (only under PEV_TRUSTED_MODULES, when set, and without the
    task file's folder). A task whose drive cannot start (components that cannot or may not be
    rebuilt, an MCP server that will not start) gets a start_failed event naming the cause, its
    lease let go at once; after the policy's start_attempts (3 by default) it ends
    failed/agent_unavailable. A task whose chain fails verification is logged in one line and
    left, its lease held until it expires. A task whose driver was a process of this host that
    is gone is taken at once, without waiting for its lease to expire.
    On SIGTERM (or Ctrl-C) the worker claims nothing more, lets running nodes reach their
    terminal records within their timeouts, leaves each task in its phase and releases its
    leases; another worker continues them. It logs what it claims and releases to stderr.
    With --ray, the drivers run as Ray actors across the cluster (docs/ray.md), each as this
    command would, and this process supervises them: it starts a new driver for each one that
    is lost, and on SIGTERM (or Ctrl-C) stops them all as above. The agents' modules must import
    on every node; Ray puts the current folder on its workers' path.
    """
    # First of all, before anything slow (joining Ray, opening the store): a SIGTERM from now
    # on stops the worker cleanly (exit 0), however early it comes. The entry point noted the
    # signals while the engine loaded (pev.cli._early); a worker run otherwise notes them now.
    early = EarlySignals.installed() or EarlySignals.install()
    try:
        _serve_worker(
            db,
            early,
            concurrency=concurrency,
            lease_s=lease_s,
            poll_s=poll_s,
            gc_threshold=gc_threshold,
            ray_address=ray_address,
            drivers=drivers,
        )
    finally:
        early.restore()


def _serve_worker(
    db: str,
    early: EarlySignals,
    *,
    concurrency: int,
    lease_s: float | None,
    poll_s: float,
    gc_threshold: tuple[int, int, int] | None,
    ray_address: str | None,
    drivers: int | None,
) -> None:
    """`pev worker`, once its early signal handlers are in place."""
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    if drivers is not None and ray_address is None:
        fail("--drivers counts the drivers of --ray; give --ray ADDRESS too")
    on_ray = None
    if ray_address is not None:
        on_ray = _join_ray(db, ray_address)
        early.take_back()  # joining Ray set its own SIGTERM handler (an exit)
    # What the worker claims and releases (INFO), and pev's warnings (a lost lease, a listener
    # that reconnects), on stderr with the time; with --ray, the drivers' supervisor too.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    pev_log = logging.getLogger("pev")
    pev_log.addHandler(handler)
    worker_log = logging.getLogger("pev.worker")
    told = [worker_log, logging.getLogger("pev.ray")]
    levels = [logger.level for logger in told]
    for logger in told:
        logger.setLevel(logging.INFO)
    if gc_threshold is not None:  # the command owns its process; the library never does this
        gc.set_threshold(*gc_threshold)
    worker_log.info("garbage collector thresholds %s", ", ".join(map(str, gc.get_threshold())))

    async def serve(ledger: Ledger) -> object:
        stop = asyncio.Event()
        with stop_on_signals(stop):
            if early.received is not None:  # before the loop could hear it: stop at once
                worker_log.info(
                    "stopping: signal %d came while the worker was starting", early.received
                )
                stop.set()
            if on_ray is None:
                return await engine.worker(
                    ledger.store,
                    concurrency=concurrency,
                    lease_s=lease_s,
                    poll_s=poll_s,
                    stop=stop,
                    experience=LessonBook(ledger.store),
                    agent_for=recorded_agent,  # opens the MCP servers a task recorded
                )
            try:
                return await on_ray(
                    db,
                    drivers=drivers,
                    concurrency=concurrency,
                    lease_s=lease_s,
                    poll_s=poll_s,
                    experience=True,
                    log_level=logging.INFO,
                    gc_threshold=gc_threshold,
                    stop=stop,
                    handle_signals=False,  # handled here, around both kinds of worker
                )
            except UsageError as exc:  # no node can hold a driver, say: --ray is at fault
                fail(f"--ray: {exc}")

    try:
        on_ledger(db, serve)
    finally:
        pev_log.removeHandler(handler)
        for logger, level in zip(told, levels, strict=True):
            logger.setLevel(level)


def _join_ray(db: str, address: str) -> Callable[..., Awaitable[object]]:
    """What `pev worker --ray` needs, checked before the ledger is opened; its drivers' runner.

    Ray installed, a PostgreSQL ``--db`` (an SQLite path would be created here, for nothing),
    and the cluster joined: each missing one is one line, exit 2.
    """
    try:
        from pev import ray as on_ray  # noqa: PLC0415 - needs the ray extra
    except ImportError as exc:
        fail(str(exc))
    from pev.ray._drivers import check_ledger  # noqa: PLC0415 - needs the ray extra

    try:
        check_ledger(db)
    except UsageError as exc:
        fail(f"--db: {exc}")
    try:
        on_ray.connect(address)
    except on_ray.RayUnavailable as exc:
        fail(f"--ray: {exc}")
    return on_ray.drivers_on_ray


@click.command("resume")
@click.argument("task_id", metavar="TASK")
@click.option("-q", "--quiet", is_flag=True, help="Print only the result line.")
@click.pass_obj
def resume_command(db: str, task_id: str, quiet: bool) -> None:
    """Continue a task after a crash; exit with its status.

    TASK is a task id or a unique prefix of one. Its chain is verified first: a broken one is
    refused, naming its first bad event. Its components are rebuilt from the import paths
    recorded when it was created: run this where their modules import (the current folder is on
    the Python path); with PEV_TRUSTED_MODULES set, only modules under those prefixes are
    imported. A task that has ended is shown as it is. A task whose driver was a process of
    this host that is gone (killed, crashed) is taken over at once; one driven from another
    host, only once its lease expires.
    """
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    console = stdout_console()
    progress = None if quiet else ConsoleRail(console)
    rails = (progress,) if progress is not None else ()

    async def drive(ledger: Ledger) -> TaskState:
        full_id = await resolve_task_id(ledger, task_id)
        before = await ledger.store.summary(full_id)  # its index row: no fold of its ledger
        try:
            async with _recorded_tools(ledger, full_id) as tools:
                result = await engine.resume(
                    full_id,
                    store=ledger.store,
                    rails=rails,
                    experience=LessonBook(ledger.store),
                    tools=tools,
                )
        except MCPOpenError as exc:
            fail(f"task {full_id}: {exc}")
        except LeaseHeld as exc:
            fail(
                f"task {full_id} is being driven by {exc.owner} (its lease runs until "
                f"{exc.expires_at.isoformat(timespec='seconds')}); resuming it now would race "
                "that driver: wait for it to end, or, if it is gone (on another host: a process "
                "gone from this host is taken over at once), for its lease to expire"
            )
        except ComponentError as exc:
            if isinstance(exc.__cause__, UntrustedImportError):
                fail(f"task {full_id}: {exc}")  # the way out is PEV_TRUSTED_MODULES, as it says
            # The engine's message says what failed and ends "pass planner=...", which only
            # Python can do: say so, with the call to make.
            fail(
                f"task {full_id}: the {exc.role} cannot be rebuilt ({exc}); "
                f"`pev resume` cannot pass one: resume it from Python with the {exc.role} "
                f"passed, `await pev.resume({full_id!r}, store=..., {exc.role}=...)`"
            )
        if before is not None and before.status is not None:
            # Nothing was continued (resume verified the chain, and left the task as it was):
            # said on standard error, so that a script reading the result line (and the exit
            # code: the task's status, as when it ends here) sees the same either way.
            click.echo(
                f"task {full_id} had already ended ({before.status}/{before.reason}, "
                f"{iso_time(before.updated_at)}): nothing to resume; it is shown as it ended",
                err=True,
            )
        return await ledger.state(result.task_id)

    try:
        state = interruptible(task_id, lambda: on_ledger(db, drive))
    finally:
        if progress is not None:
            progress.close()
    ended(console, state, progress=progress)


@asynccontextmanager
async def _recorded_tools(ledger: Ledger, task_id: str) -> AsyncIterator[list[Any] | None]:
    """The tools of a task that recorded MCP servers, open meanwhile; ``None`` for others."""
    state = await ledger.state(task_id)
    if state.terminal or not records_servers(state.created.components):
        yield None
        return
    async with _opening(open_recorded(state.created.components)) as tools:
        yield tools


@asynccontextmanager
async def _opening(servers: AbstractAsyncContextManager[list[Any]]) -> AsyncIterator[list[Any]]:
    """``servers``' tools; a failure to open them is an :class:`MCPOpenError`, not the body's."""
    async with AsyncExitStack() as stack:
        try:
            tools = await stack.enter_async_context(servers)
        except UsageError as exc:
            raise MCPOpenError(str(exc)) from exc
        yield tools


class MCPOpenError(UsageError):
    """The MCP servers of a task could not be opened: one line, exit 2."""


@click.command("cancel")
@click.argument("task_id", metavar="TASK")
@click.option("--reason", default="", callback=text_option, help="Why; written to the ledger.")
@click.pass_obj
def cancel_command(db: str, task_id: str, reason: str) -> None:
    """Ask a task to stop (an ended one is left unchanged).

    TASK is a task id or a unique prefix of one. The process driving the task stops
    dispatching and ends it cancelled. A task nobody drives ends when `pev resume TASK` picks
    it up, or at once if it was waiting for a replan.
    """

    async def request(ledger: Ledger) -> tuple[TaskState, TaskState]:
        full_id = await resolve_task_id(ledger, task_id)
        before = await ledger.state(full_id)
        return before, await engine.cancel(full_id, store=ledger.store, reason=reason)

    before, after = on_ledger(db, request)
    stdout_console().print(_cancel_report(before, after), soft_wrap=True)


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
