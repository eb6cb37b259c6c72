"""The `pev` command line (docs/design.md §9.2). The library never imports this package.

:func:`main` is the entry point: it takes SIGTERM and Ctrl-C first (:mod:`pev.cli._early`), then
loads the commands; the other names are loaded on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pev._lazy import lazy_names
from pev.cli._early import EarlySignals

if TYPE_CHECKING:
    from pev.cli._app import EXIT_CODES, cli, default_db
    from pev.cli._schemas import JSON_SCHEMAS

__all__ = ["EXIT_CODES", "JSON_SCHEMAS", "cli", "default_db", "main"]

__getattr__ = lazy_names(
    __name__,
    {
        "EXIT_CODES": "pev.cli._app",
        "cli": "pev.cli._app",
        "default_db": "pev.cli._app",
        "JSON_SCHEMAS": "pev.cli._schemas",
    },
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `pev` command: run it with ``argv`` (default: the process's own).

    SIGTERM and Ctrl-C are noted from the very start, while the engine loads, and handed to the
    command once it is known (docs/cli.md): a worker told to stop in its first moments stops
    cleanly, exit 0.
    """
    early = EarlySignals.install()
    try:
        from pev.cli._app import main as run  # noqa: PLC0415 - after the signals are taken

        run(argv)
    finally:
        early.restore()
