"""The `pev` command line (docs/design.md §9.2). The library never imports this package."""

from pev.cli._app import EXIT_CODES, cli, default_db, main
from pev.cli._schemas import JSON_SCHEMAS

__all__ = ["EXIT_CODES", "JSON_SCHEMAS", "cli", "default_db", "main"]
