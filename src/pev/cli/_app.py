"""The `pev` command line: list tasks, show one task's timeline, verify ledgers, run the demo.

Exit codes (SPEC §9): 0 succeeded or ok, 1 failed (or a ledger that fails verification),
2 usage error, 3 partial, 4 cancelled.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import click
import platformdirs
from rich.console import Console

from pev.cli._render import chain_report, task_table, timeline
from pev.cli._tour import SCENARIOS, run_scenario
from pev.errors import PevError, SchemaVersionError, UnknownTaskError
from pev.kernel import TaskStatus
from pev.ledger import TERMINAL_PHASES, ChainReport, Ledger, TaskPhase, TaskState
from pev.stores import SQLiteStore

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


def default_db() -> Path:
    """The default ledger: ``ledger.db`` in the user's data directory for pev."""
    return platformdirs.user_data_path("pev", appauthor=False) / "ledger.db"


def _run(db: Path, work: Callable[[Ledger], Awaitable[T]]) -> T:
    """Open the ledger at ``db``, run ``work`` on it, close it; pev errors become one line."""

    async def session() -> T:
        store = SQLiteStore(db)
        try:
            return await work(Ledger(store))
        finally:
            await store.close()

    try:
        return asyncio.run(session())
    except (UnknownTaskError, SchemaVersionError) as exc:
        raise click.UsageError(str(exc)) from exc
    except PevError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pev-agent", prog_name="pev")
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="PEV_DB",
    show_envvar=True,
    default=None,
    help="The SQLite ledger file. [default: ledger.db in your data directory]",
)
@click.pass_context
def cli(ctx: click.Context, db: Path | None) -> None:
    """pev: agents that plan, act, check their work, and diagnose before they re-plan."""
    ctx.obj = db if db is not None else default_db()


@cli.command()
@click.option(
    "--scenario",
    "names",
    multiple=True,
    type=click.Choice([scenario.name for scenario in SCENARIOS]),
    help="Run only this scenario (repeatable). [default: all]",
)
@click.pass_obj
def demo(db: Path, names: Sequence[str]) -> None:
    """Run the tour of the kernel's paths through the engine: slip, knock, timeout, camera.

    Each scenario is written to the ledger; inspect one with `pev show TASK`.
    """
    console = Console()
    chosen = [s for s in SCENARIOS if not names or s.name in names]

    async def tour(ledger: Ledger) -> bool:
        all_expected = True
        for scenario in chosen:
            console.rule(f"[bold]{scenario.name}[/]: {scenario.story}")
            result = await run_scenario(scenario, store=ledger.store)
            console.print(timeline(await ledger.state(result.task_id)))
            report = await ledger.verify(result.task_id)
            console.print(chain_report(report))
            all_expected &= report.ok and result.status is scenario.expected
        return all_expected

    ok = _run(db, tour)
    console.rule()
    console.print(f"ledger: {db}")
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
def tasks(db: Path, statuses: Sequence[str], limit: int) -> None:
    """List tasks, newest first."""
    phases: set[TaskPhase] | None = None
    if statuses:
        phases = set()
        for status in statuses:
            if status == "active":
                phases |= set(TaskPhase) - TERMINAL_PHASES
            else:
                phases.add(TaskPhase(status))
    summaries = _run(db, lambda ledger: ledger.tasks(phases=phases, limit=limit))
    console = Console()
    if summaries:
        console.print(task_table(summaries))
    else:
        console.print("no tasks" + (" with that status" if statuses else f" in {db}"))


async def _resolve(ledger: Ledger, task_id: str) -> str:
    """The full id of the one task whose id is ``task_id`` or starts with it."""
    if await ledger.store.summary(task_id) is not None:
        return task_id
    matches: list[str] = []
    offset = 0
    while page := await ledger.tasks(limit=500, offset=offset):
        matches.extend(s.task_id for s in page if s.task_id.startswith(task_id))
        offset += len(page)
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:5])
        raise click.UsageError(f"task id prefix {task_id!r} is ambiguous ({shown}); type more")
    if not matches:
        raise UnknownTaskError(task_id)
    return matches[0]


@cli.command()
@click.argument("task_id")
@click.pass_obj
def show(db: Path, task_id: str) -> None:
    """Show one task (by id or unique id prefix): plans and node status, verdicts, decisions."""

    async def load(ledger: Ledger) -> TaskState:
        return await ledger.state(await _resolve(ledger, task_id))

    Console().print(timeline(_run(db, load)))


@cli.group()
def ledger() -> None:
    """Inspect the ledger itself."""


@ledger.command("verify")
@click.argument("task_ids", nargs=-1)
@click.pass_obj
def verify(db: Path, task_ids: Sequence[str]) -> None:
    """Check the hash chain of tasks (ids or unique prefixes; all by default); exit 1 if any fails.

    Detects an edited, dropped (the last one too) or reordered event, and names the first bad one.
    """

    async def check(ledger: Ledger) -> list[ChainReport]:
        ids = [await _resolve(ledger, task_id) for task_id in task_ids]
        if not ids:
            offset = 0
            while page := await ledger.tasks(limit=500, offset=offset):
                ids.extend(summary.task_id for summary in page)
                offset += len(page)
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


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `pev` command."""
    cli.main(args=list(argv) if argv is not None else sys.argv[1:], prog_name="pev")
