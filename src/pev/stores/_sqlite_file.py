"""What a path must be to hold a pev ledger file, and what to say when it is not.

Opening an SQLite ledger meets every way a path or a file can be wrong: a folder, a pipe, a path
under a regular file or too long, a file this user may not open, a text file, another
application's database, a file whose pages are damaged. SQLite says little more than "unable to
open database file" or raises while decoding; each case here becomes a
:class:`~pev.errors.StoreError` of one line that names the file, what is wrong, and the way out.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from pev.errors import StoreError

__all__ = [
    "check_ledger_path",
    "check_not_foreign",
    "make_room",
    "one_line",
    "os_reason",
    "unreadable",
    "why_not_there",
]


def check_ledger_path(location: str) -> None:
    """Refuse a path that cannot name a ledger file, whether or not the file is to be made.

    Raises:
        StoreError: The path holds a NUL, or names a folder, a device, a pipe or a socket.
    """
    path = Path(location)
    if "\0" in location:
        raise StoreError(f"{location!r} holds a NUL character; name the ledger's file by its path")
    if _is(path, Path.is_dir):
        raise StoreError(
            f"{location} is a folder, not a ledger file; name a file, such as {path / 'ledger.db'}"
        )
    if _is(path, Path.exists) and not _is(path, Path.is_file):
        # A device or a pipe: SQLite would fail on it oddly, or wait on a pipe for ever.
        raise StoreError(
            f"{location} is not a regular file (a device, a pipe or a socket); name a ledger file"
        )


def make_room(location: str) -> None:
    """Create the folders a new ledger file goes in; a path that cannot hold one is named.

    Raises:
        StoreError: The path holds a NUL, names a folder, a device, a pipe or a socket, or its
            folder cannot be made (a regular file in the way, a name too long, no permission).
    """
    check_ledger_path(location)
    try:
        Path(location).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot make the folder of the ledger {location} ({why_not_there(location, exc)}); "
            "name a path in a folder you can write"
        ) from exc


def why_not_there(location: str, exc: OSError) -> str:
    """Why the system found nothing at ``location`` (or could not make its folder), in words."""
    blocker = next((p for p in Path(location).parents if _is(p, Path.is_file)), None)
    if blocker is not None:
        return f"{blocker} is a file, not a folder"
    return exc.strerror or type(exc).__name__


def unreadable(location: str, exc: BaseException) -> StoreError:
    """The error for a file SQLite cannot read as a pev ledger: what it is, and what to do."""
    if str(exc) == "unable to open database file":
        return StoreError(
            f"cannot open the ledger {location} ({os_reason(location) or exc}); name a file you "
            "can read and write"
        )
    if isinstance(exc, sqlite3.DatabaseError) and str(exc) == "file is not a database":
        return StoreError(
            f"{location} is not an SQLite database (nor a pev ledger); point pev at a pev ledger, "
            "or at a new file to start one"
        )
    return StoreError(
        f"{location}: the ledger is damaged and cannot be read ({one_line(exc)}); restore it "
        "from a backup, or point pev at another file"
    )


def check_not_foreign(conn: sqlite3.Connection, location: str) -> None:
    """Refuse a file without pev's application id that holds tables, none of them pev's.

    Raises:
        StoreError: The file is another application's database.
    """
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    if names and not any(name.startswith("pev_") for name in names):
        raise StoreError(
            f"{location} is an SQLite database of another application (it holds "
            f"{_counted(names)}, none of pev's); point pev at a pev ledger, or at a new file"
        )


def os_reason(location: str) -> str | None:
    """Why the system will not open ``location`` for writing (SQLite only says it cannot).

    Creates nothing: a file that is not there is judged by its folder (a read-only opening
    must leave no file behind, not even through a symbolic link to nothing).
    """
    try:
        fd = os.open(location, os.O_RDWR)
    except FileNotFoundError:
        if os.path.islink(location):
            return "a symbolic link to a file that does not exist"
        folder = os.path.dirname(os.path.abspath(location))
        if not os.path.isdir(folder):
            return "its folder does not exist"
        return None if os.access(folder, os.W_OK | os.X_OK) else "Permission denied"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    os.close(fd)
    return None


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _is(path: Path, kind: Callable[[Path], bool]) -> bool:
    """``kind(path)`` (``Path.is_dir``, ``Path.is_file``); False for a path that cannot be seen."""
    try:
        return kind(path)
    except OSError:  # a name too long, say: then it is neither
        return False


def _counted(names: Sequence[str]) -> str:
    """``table a`` or ``tables a, b, c, ... (n in all)``, for messages."""
    if len(names) == 1:
        return f"table {names[0]}"
    shown = ", ".join(sorted(names)[:3])
    return f"tables {shown}" + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
