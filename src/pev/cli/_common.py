"""What every `pev` command shares: opening the store it names, one-line errors, exit codes.

A command names its store with ``--db`` (or ``PEV_DB``; for a task file's task, else its
``store``): an SQLite file path or a ``postgresql://`` URL (docs/stores.md). Pev errors become one
line, and a command that ends with a task's status exits with :data:`EXIT_CODES`.
"""

from __future__ import annotations

import asyncio
import errno
import math
import stat
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import platformdirs
from click.core import ParameterSource
from click.exceptions import NoArgsIsHelpError
from rich.console import Console

from pev.cli._progress import result_line
from pev.cli._render import timeline
from pev.cli._taskfile import TaskFile
from pev.engine import RunResult
from pev.errors import (
    LedgerCorruptError,
    PevError,
    SchemaVersionError,
    StoreUnavailable,
    UnknownTaskError,
)
from pev.kernel import TaskStatus
from pev.ledger import Ledger, Store, TaskState
from pev.stores import open_store
from pev.stores._open import is_url

if TYPE_CHECKING:
    from pev.rails import ConsoleRail

__all__ = [
    "EXIT_CODES",
    "EXIT_UNAVAILABLE",
    "MAX_TASK_ID",
    "BadArgument",
    "FilePath",
    "OneLineGroup",
    "Seconds",
    "Unavailable",
    "all_task_ids",
    "default_db",
    "ended",
    "existing_ledger",
    "fail",
    "interruptible",
    "known_task_ids",
    "new_task_id_option",
    "on_ledger",
    "open_named",
    "opened",
    "resolve_task_id",
    "task_db",
    "text_option",
    "where_of",
]

DB_HELP = (
    "The ledger: an SQLite file, or a postgresql:// URL (?schema=NAME picks the PostgreSQL "
    "schema; see docs/stores.md). Given before or after the command name. [default: ledger.db "
    "in your data directory]"
)

T = TypeVar("T")

EXIT_CODES = {
    TaskStatus.SUCCEEDED: 0,
    TaskStatus.FAILED: 1,
    TaskStatus.PARTIAL: 3,
    TaskStatus.CANCELLED: 4,
}
"""The exit code of a command that ends with a task's status."""

EXIT_UNAVAILABLE = 75
"""The exit code of a command the store did not answer: a transient fault, try again.

75 is ``EX_TEMPFAIL`` of BSD's ``sysexits.h``, which schedulers and mail systems already read as
"try again later"; it is far from the codes of a task's status and from 130 (Ctrl-C).
"""


class BadArgument(click.ClickException):
    """A bad argument (an unknown task, a database of another version): one line, exit 2."""

    exit_code = 2


class Unavailable(click.ClickException):
    """The store did not answer (:class:`~pev.errors.StoreUnavailable`): one line, exit 75.

    Not damage, and not the argument's fault: the same command may simply be run again.
    """

    exit_code = EXIT_UNAVAILABLE

    def __init__(self, exc: StoreUnavailable, *, named_by: str = "--db") -> None:
        said = " ".join(str(exc).split())
        if exc.location and exc.location not in said:
            said = f"{exc.location}: {said}"
        if said.startswith("postgres") or "PostgreSQL" in said:
            hint = f"check that the server is up and reachable, and that {named_by} names it"
        else:
            hint = "look for a process holding the SQLite file locked"
        super().__init__(
            f"{named_by}: the store did not answer ({said}); a transient fault, not damage to "
            f"the ledger: run the command again (if it keeps failing, {hint})"
        )


class OneLineGroup(click.Group):
    """A command group whose usage errors are one line, and whose commands all take ``--db``.

    Click prints a usage error as the command's usage, a hint and the error on three lines;
    pev's errors are one line each, so a script or a person reads the problem at once. A group
    given nothing at all (``pev``, ``pev ledger``) prints its help, as ``--help`` would.

    Each command added (but a group, whose own commands get it) takes ``--db`` too, so that
    ``pev tasks --db x`` works as ``pev --db x tasks`` does; the one given after the command
    wins. A command that declares its own ``db`` parameter keeps it.
    """

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Add ``cmd``, with a ``--db`` option of its own unless it is a group or has one."""
        if not isinstance(cmd, click.Group) and all(p.name != "db" for p in cmd.params):
            cmd.params.append(
                click.Option(
                    ["--db"],
                    metavar="PATH|URL",
                    default=None,
                    expose_value=False,
                    is_eager=True,
                    callback=_command_db,
                    help=DB_HELP,
                )
            )
        super().add_command(cmd, name)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the group's own options; a bad one is one line."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command named; a usage error of it (or of a group below) is one line."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from exc


_DB_AFTER = "pev.db_after_command"  # ctx.meta key: --db was given after the command name


def _command_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """A command's own ``--db``: it takes the place of the one given before the command."""
    if value is not None:
        ctx.obj = value
        ctx.meta[_DB_AFTER] = True


def _one_line(exc: click.UsageError) -> click.ClickException | click.exceptions.Exit:
    """``exc`` as one line naming the command's help; a bare group's help is printed instead."""
    if isinstance(exc, NoArgsIsHelpError) and exc.ctx is not None:
        click.echo(exc.ctx.get_help())
        return click.exceptions.Exit(0)
    command = exc.ctx.command_path if exc.ctx is not None else "pev"
    message = " ".join(exc.format_message().split()).rstrip(".")
    return BadArgument(f"{message} (see `{command} --help`)")


if TYPE_CHECKING:
    _PathParam = click.ParamType[Path]
else:  # click before 8.2 has no generic ParamType (pyproject allows 8.1)
    _PathParam = click.ParamType


class FilePath(_PathParam):
    """A path argument, as a :class:`~pathlib.Path`; the command opens it and names what fails.

    ``click.Path`` looks at the file while parsing, and a NUL in the name makes that raise
    instead of fail; here, only a NUL is refused, in one line, and the rest is left to the
    command, whose errors name the file and the way out.
    """

    name = "path"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path:
        """``value`` as a path; a NUL in it is a usage error."""
        if isinstance(value, Path):
            return value
        text = str(value)
        if "\0" in text:
            self.fail(f"{text!r} holds a NUL character, which no file name can", param, ctx)
        return Path(text)


class Seconds(click.FloatRange):
    """A number of seconds above 0 and at most ``max_s``; ``nan`` and ``inf`` are refused.

    ``click.FloatRange`` lets ``nan`` through (no comparison holds for it).
    """

    name = "seconds"

    def __init__(self, max_s: float) -> None:
        super().__init__(min=0, max=max_s, min_open=True)

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """``value`` as seconds, in range."""
        seconds = float(super().convert(value, param, ctx))
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def default_db() -> Path:
    """The default ledger: ``ledger.db`` in the user's data directory for pev."""
    return platformdirs.user_data_path("pev", appauthor=False) / "ledger.db"


def open_named(db: str, *, named_by: str = "--db", create: bool = True) -> Store:
    """The store ``db`` names; one that cannot be opened is one line (exit 2).

    A missing extra is one line too (exit 1: the name is good, the installation lacks it), and
    so is a store that does not answer (exit 75: try again). With ``create=False`` a ledger that
    does not exist yet is refused and nothing is created (see :func:`opened`).
    """
    if not _storable(db.replace("\0", "")):  # a NUL is the store's to name
        raise BadArgument(
            f"{named_by}: {db!r} holds bytes that are not UTF-8; name the ledger by a path (or "
            "URL) in UTF-8"
        )
    try:
        return open_store(db, create=create)
    except StoreUnavailable as exc:
        raise Unavailable(exc, named_by=named_by) from exc
    except PevError as exc:
        # A bad URL, a path that cannot hold a file, a file that is not a pev ledger (or is
        # damaged), a ledger of another schema version: the --db given is at fault.
        raise BadArgument(f"{named_by}: {exc}") from exc
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc


def existing_ledger(db: str, *, named_by: str = "--db") -> None:
    """Refuse an SQLite path that holds no ledger (missing, empty, not a file): nothing to read.

    Commands that only read a ledger (``tasks``, ``show``, ``ledger verify``...) would otherwise
    report a missing ledger as "no tasks", and create the file and its folder. The store opened
    with ``create=False`` refuses it too; this says first, in one line, what is there instead
    and the way out. A path that holds bytes no file name can is left to :func:`open_named`.
    """
    if is_url(db) or not _storable(db.replace("\0", "")):
        return
    if "\0" in db:
        raise BadArgument(
            f"{named_by}: {db!r} holds a NUL character, which no file name can; name the "
            "ledger's file by its path"
        )
    path = Path(db).expanduser()
    way_out = "name an existing ledger with --db or PEV_DB"
    try:
        found = path.stat()
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            return  # no permission to look, say: opening it says why
        raise BadArgument(
            f"{named_by}: there is no ledger at {path} ({_missing(path, exc)}); {way_out} "
            "(`pev run` and `pev submit` create one)"
        ) from None
    if stat.S_ISDIR(found.st_mode):
        raise BadArgument(
            f"{named_by}: {path} is a folder, not a ledger file; name the file, such as "
            f"{path / 'ledger.db'}"
        )
    if not stat.S_ISREG(found.st_mode):
        raise BadArgument(
            f"{named_by}: {path} is not a regular file (a device, a pipe or a socket); {way_out}"
        )
    if found.st_size == 0:
        raise BadArgument(f"{named_by}: {path} is an empty file, not a pev ledger; {way_out}")


def _missing(path: Path, exc: OSError) -> str:
    """Why there is nothing at ``path``: its folder is missing or is a file, or it is too long."""
    if exc.errno == errno.ENAMETOOLONG:
        return exc.strerror or "File name too long"
    for folder in path.parents:
        with suppress(OSError):
            if folder.is_file():
                return f"{folder} is a file, not a folder"
            if folder.is_dir():
                return "no such file" if folder == path.parent else f"no such folder {path.parent}"
    return "no such file"


async def opened(
    db: str, *, named_by: str = "--db", check: bool = True, create: bool = True
) -> Store:
    """The store ``db`` names, opened; with ``check``, a first read proves it can be used.

    A PostgreSQL store connects, and prepares or checks its schema, on first use: that first
    read here makes a schema that is not pev's a one-line usage error (exit 2), and a server
    that does not answer a one-line transient failure (exit 75), rather than the failure of
    whatever the command went on to do. With ``create=False`` (commands that only read), a
    store that holds no ledger yet (a missing or empty SQLite file, or its folder, a schema
    without pev's tables) is refused, and nothing is created.
    """
    if not create:
        existing_ledger(db, named_by=named_by)
    store = open_named(db, named_by=named_by, create=create)
    if not check:
        return store
    try:
        await _first_read(store)
    except (PevError, BadArgument) as exc:
        with suppress(PevError):
            await store.close()
        if isinstance(exc, BadArgument):
            raise
        if isinstance(exc, StoreUnavailable):
            raise Unavailable(exc, named_by=named_by) from exc
        raise BadArgument(f"{named_by}: {exc}") from exc
    return store


async def _first_read(store: Store) -> None:
    """Read from ``store`` once (see :func:`opened`).

    A PostgreSQL store opened with ``create=False`` refuses a schema without pev's tables here,
    naming `pev db upgrade`.
    """
    await store.list_tasks(limit=1)


def where_of(store: Store) -> str:
    """Where a store keeps its ledgers, for messages (a URL without its password)."""
    return str(getattr(store, "location", type(store).__name__))


def on_ledger(
    db: str,
    work: Callable[[Ledger], Awaitable[T]],
    *,
    named_by: str = "--db",
    check: bool = True,
    create: bool = True,
) -> T:
    """Open the ledger ``db`` names, run ``work`` on it, close it; pev errors become one line.

    A store that cannot be opened or used is a usage error (exit 2), as are an unknown task
    and a schema of another version; a store that does not answer, now or while ``work`` runs,
    is a transient failure (exit 75: run it again); any other pev error exits 1.

    Args:
        db: The store's path or URL.
        work: What to do with it.
        named_by: Where ``db`` came from, for the message of a name that cannot be opened.
        check: Read from the store once before ``work`` (see :func:`opened`); ``False`` for
            work that must see the store as it is (``pev db upgrade``).
        create: Create the ledger if there is none yet; ``False`` for the commands that only
            read one, which refuse a missing ledger (exit 2) and create nothing.
    """

    async def session() -> T:
        store = await opened(db, named_by=named_by, check=check, create=create)
        try:
            return await work(Ledger(store))
        finally:
            await store.close()

    try:
        return asyncio.run(session())
    except (UnknownTaskError, SchemaVersionError, LedgerCorruptError) as exc:
        # An id that names no task, a ledger of another version, a task whose chain is broken
        # (show and resume refuse it): the argument is at fault, not the run.
        raise BadArgument(str(exc)) from exc
    except StoreUnavailable as exc:
        raise Unavailable(exc, named_by=named_by) from exc
    except PevError as exc:
        raise click.ClickException(str(exc)) from exc


def task_db(db: str, spec: TaskFile) -> tuple[str, str]:
    """Where a task file's task is written, and what named it (for messages).

    ``--db`` or ``PEV_DB`` when given, else the task file's ``store``, else the default ledger.
    """
    ctx = click.get_current_context()
    source = ctx.find_root().get_parameter_source("db")
    given = ctx.meta.get(_DB_AFTER, False) or source not in (None, ParameterSource.DEFAULT)
    if spec.store is not None and not given:
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
    """Every task's id in the task index, newest first, read a page at a time."""
    ids: list[str] = []
    while page := await ledger.tasks(limit=500, offset=len(ids)):
        ids.extend(summary.task_id for summary in page)
    return ids


async def known_task_ids(ledger: Ledger) -> list[str]:
    """Every task the ledger knows, sorted: those with events, and those in the task index.

    The two differ only in a damaged ledger (an index row deleted, or events without one);
    ``pev ledger verify`` checks, and names, both kinds.
    """
    indexed = await all_task_ids(ledger)
    return sorted({*indexed, *await ledger.store.ledger_task_ids()})


MAX_TASK_ID = 200
"""The longest task id ``--task-id`` accepts."""


def new_task_id_option(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> str | None:
    """Check ``--task-id``: printable text of 1 to :data:`MAX_TASK_ID` characters."""
    if value is None:
        return None
    problem = None
    if not value:
        problem = "is empty"
    elif len(value) > MAX_TASK_ID:
        problem = f"has {len(value)} characters, more than {MAX_TASK_ID}"
    elif not value.isprintable() or value != value.strip():
        problem = "holds a control character, an undecodable byte or surrounding spaces"
    if problem is not None:
        shown = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
        raise click.BadParameter(
            f"{shown} {problem}; a task id is printable text of 1 to {MAX_TASK_ID} characters, "
            "or leave --task-id out for a fresh one"
        )
    return value


def text_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check a free-text option: text the ledger can store (UTF-8, so no lone surrogate)."""
    if value is not None and not _storable(value.replace("\0", "")):
        raise click.BadParameter(
            "holds a byte that is not UTF-8 (from the command line's encoding); give it as "
            "UTF-8 text",
            param=param,
        )
    return value


def _storable(text: str) -> bool:
    """Whether a store can hold ``text`` at all (UTF-8 encodable, without NUL)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a byte of the command line that is not UTF-8
        return False
    return "\0" not in text


async def resolve_task_id(ledger: Ledger, task_id: str) -> str:
    """The full id of the one task whose id is ``task_id`` or starts with it."""
    if not _storable(task_id):
        raise UnknownTaskError(task_id)  # no stored id holds a NUL or an undecodable byte
    if await ledger.store.summary(task_id) is not None:
        return task_id
    known = await known_task_ids(ledger)  # a task whose index row is gone is found, to be refused
    if task_id in known:
        return task_id
    matches = [full for full in known if full.startswith(task_id)]
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:5])
        raise BadArgument(f"task id prefix {task_id!r} is ambiguous ({shown}); type more")
    if not matches:
        raise UnknownTaskError(task_id)
    return matches[0]
