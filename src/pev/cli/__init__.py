"""The `pev` command line (docs/design.md §9.2). The library never imports this package."""

from pev.cli._app import EXIT_CODES, cli, default_db, main

__all__ = ["EXIT_CODES", "cli", "default_db", "main"]
