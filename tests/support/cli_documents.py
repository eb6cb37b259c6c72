"""Running `pev` on a ledger file in-process, and reading its --json documents by their schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from click.testing import CliRunner

from pev.cli import JSON_SCHEMAS, cli


def pev_stdout(db: Path, *args: str) -> str:
    """What `pev --db DB ARGS...` prints, after checking that it exits 0."""
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def valid_document(command: str, out: str) -> Any:
    """``out`` as JSON, valid against the schema of ``command``'s --json."""
    document = json.loads(out)
    jsonschema.Draft202012Validator(
        JSON_SCHEMAS[command], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(document)
    return document
