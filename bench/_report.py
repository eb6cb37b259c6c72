"""Writing a benchmark's figures into its marked section of docs/benchmarks.md."""

from __future__ import annotations

import argparse
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


QUICK_BANNER = "QUICK RUN (--quick): small sizes to check that the bench works; not for the docs"


def bench_parser(doc: str | None, *, quick: bool = False) -> argparse.ArgumentParser:
    """A bench's command line: `--write` (and `--quick` where the bench has a quick mode)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--write", type=Path, help="update the figures in this Markdown file")
    if quick:
        parser.add_argument(
            "--quick",
            action="store_true",
            help="small sizes, to check that the bench works (its figures are not for the docs)",
        )
    return parser


def parse_bench_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed arguments; a quick run says so, and refuses to write its figures anywhere."""
    args = parser.parse_args(argv)
    if getattr(args, "quick", False):
        if any(value for name, value in vars(args).items() if name in ("write", "readme")):
            parser.error("--quick figures are not for the docs: drop --write and --readme")
        print(QUICK_BANNER)
    return args


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
