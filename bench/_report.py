"""Writing a benchmark's figures into its marked section of docs/benchmarks.md."""

from __future__ import annotations

import platform
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path


def machine_line() -> str:
    """Date, machine, Python and SQLite: the context every figure needs."""
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def met(ok: bool) -> str:
    """A target's verdict as the tables print it."""
    return "met" if ok else "**not met**"


def command_text(script: str, argv: list[str]) -> str:
    """How the figures were made: the command line, named as `make bench` when it is its own."""
    written = " ".join(["python", f"bench/{script}", *argv])
    default = f"python bench/{script} --write docs/benchmarks.md"
    return f"`make bench` (`{default}`)" if written == default else f"`{written}`"


def progress(message: str) -> None:
    """A line on stderr, so that stdout carries only the figures."""
    print(message, file=sys.stderr)


def write_section(path: Path, marker: str, body: str, *, heading: str = "") -> None:
    """Replace the text between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``.

    A file without the markers gets the section appended (under ``heading`` when given).
    """
    start, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    block = f"{start}\n{body}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        prefix = text.rstrip() + "\n\n" if text else "# Benchmarks\n\n"
        text = prefix + (f"{heading}\n\n" if heading else "") + block + "\n"
    path.write_text(text, encoding="utf-8")
