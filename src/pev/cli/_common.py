"""What every `pev` command shares: opening the store it names, one-line errors, exit codes.

A command names its store with ``--db`` (or ``PEV_DB``; for a task file's task, else its
``store``): an SQLite file path or a ``postgresql://`` URL (docs/stores.md). Pev errors become one
line, and a command that ends with a task's status exits with :data:`EXIT_CODES`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import click
import platformdirs
from click.core import ParameterSource
from rich.console import Console

from pev.cli._progress import ConsoleRail, result_line
from pev.cli._render import timeline
from pev.cli._taskfile import TaskFile
from pev.engine import RunResult
from pev.errors import PevError, SchemaVersionError, UnknownTaskError, UsageError
from pev.kernel import TaskStatus
from pev.ledger import Ledger, Store, TaskState
from pev.stores import open_store

__all__ = [
    "EXIT_CODES",
    "BadArgument",
    "all_task_ids",
    "default_db",
    "ended",
    "fail",
    "interruptible",
    "on_ledger",
    "open_named",
    "resolve_task_id",
    "task_db",
    "where_of",
]

T = TypeVar("T")

EXIT_CODES = {
    TaskStatus.SUCCEEDED: 0,
    TaskStatus.FAILED: 1,
    TaskStatus.PARTIAL: 3,
    TaskStatus.CANCELLED: 4,
}
"""The exit code of a command that ends with a task's status."""


class BadArgument(click.ClickException):
    """A bad argument (an unknown task, a database of another version): one line, exit 2."""

    exit_code = 2


def default_db() -> Path:
    """The default ledger: ``ledger.db`` in the user's data directory for pev."""
    return platformdirs.user_data_path("pev", appauthor=False) / "ledger.db"


def open_named(db: str, *, named_by: str = "--db") -> Store:
    """The store ``db`` names; a bad name is one line (exit 2), a missing extra one line too."""
    try:
        return open_store(db)
    except UsageError as exc:
        raise BadArgument(f"{named_by}: {exc}") from exc
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc


def where_of(store: Store) -> str:
    """Where a store keeps its ledgers, for messages (a URL without its password)."""
    return str(getattr(store, "location", type(store).__name__))


def on_ledger(db: str, work: Callable[[Ledger], Awaitable[T]], *, named_by: str = "--db") -> T:
    """Open the ledger ``db`` names, run ``work`` on it, close it; pev errors become one line.

    ``named_by`` says where ``db`` came from, for the message of a name that cannot be opened.
    """

    async def session() -> T:
        store = open_named(db, named_by=named_by)
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


def task_db(db: str, spec: TaskFile) -> tuple[str, str]:
    """Where a task file's task is written, and what named it (for messages).

    ``--db`` or ``PEV_DB`` when given, else the task file's ``store``, else the default ledger.
    """
    source = click.get_current_context().find_root().get_parameter_source("db")
    if spec.store is not None and source in (None, ParameterSource.DEFAULT):
        return spec.store, f"{spec.path}: store"
    return db, "--db"


def fail(message: str, *, code: int = 2) -> NoReturn:
    """Print a one-line error (``pev: <message>``) and exit with ``code`` (2: usage error)."""
    click.echo(f"pev: {' '.join(message.split())}", err=True)
    raise click.exceptions.Exit(code)


def interruptible(task_id: str, work: Callable[[], T]) -> T:
    """Run ``work``; on Ctrl-C, say how to continue or stop the task left behind (exit 130)."""
    try:
        return work()
    except KeyboardInterrupt:
        fail(
            f"interrupted; task {task_id} stays in the ledger as it was: `pev resume {task_id}` "
            f"continues it, `pev cancel {task_id}` stops it",
            code=130,
        )


def ended(console: Console, state: TaskState, *, progress: ConsoleRail | None) -> NoReturn:
    """Print how a task ended (its timeline unless quiet, then one result line); exit with it."""
    result = RunResult.from_state(state)
    if progress is not None:
        if progress.printed:
            console.print()
        console.print(timeline(state))
    console.print(result_line(result), soft_wrap=True)
    raise click.exceptions.Exit(EXIT_CODES[result.status])


async def all_task_ids(ledger: Ledger) -> list[str]:
    """Every task's id, newest first, read a page at a time."""
    ids: list[str] = []
    while page := await ledger.tasks(limit=500, offset=len(ids)):
        ids.extend(summary.task_id for summary in page)
    return ids


async def resolve_task_id(ledger: Ledger, task_id: str) -> str:
    """The full id of the one task whose id is ``task_id`` or starts with it."""
    if await ledger.store.summary(task_id) is not None:
        return task_id
    matches = [full for full in await all_task_ids(ledger) if full.startswith(task_id)]
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:5])
        raise BadArgument(f"task id prefix {task_id!r} is ambiguous ({shown}); type more")
    if not matches:
        raise UnknownTaskError(task_id)
    return matches[0]
