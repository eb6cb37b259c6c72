"""MCP test fixtures: a folder holding a task file's agent module, and `pev` run in it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from pev.cli import cli

AgentFolder = Callable[[str, str], Path]
PevCli = Callable[..., tuple[int, str]]


@pytest.fixture
def agent_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentFolder]:
    """Writes a module (name, source) into a folder, the current directory: the folder.

    The module is importable by its name from there, and forgotten after the test.
    """
    written: list[str] = []

    def write(name: str, source: str) -> Path:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        sys.modules.pop(name, None)
        written.append(name)
        return tmp_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield write
    for name in written:
        sys.modules.pop(name, None)


@pytest.fixture
def pev_cli() -> PevCli:
    """Runs `pev --db <folder>/ledger.db ARGS...` in this process: (exit code, output)."""

    def run(folder: Path, *args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["--db", str(folder / "ledger.db"), *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        return result.exit_code, result.output

    return run
