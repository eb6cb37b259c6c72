"""A store that does not answer (StoreUnavailable): one line saying so, exit 75, never damage.

The store is an SQLite ledger whose reads are made to fail as a lost connection does; every
command that reads says the fault is transient and to run it again (docs/cli.md), with its own
exit code, and none reports the ledger as damaged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

import pev
from pev.cli import cli
from pev.cli._common import EXIT_UNAVAILABLE
from pev.errors import StoreUnavailable
from pev.model import Plan, PlanNode
from pev.stores import SQLiteStore


@pev.tool(effect="query")
def look() -> str:
    return "sunny"


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger holding one ended task, ``t-1``."""
    db = tmp_path_factory.mktemp("unavailable") / "ledger.db"
    plan = Plan("look", (PlanNode("a", "look", tool="look", effect="query"),))

    async def run() -> None:
        store = SQLiteStore(db)
        try:
            await pev.run("x", planner=lambda _: plan, tools=[look], store=store, task_id="t-1")
        finally:
            await store.close()

    asyncio.run(run())
    return db


def _unanswered(*_args: object, **_kwargs: object) -> object:
    raise StoreUnavailable(
        "a read of the ledger failed: server closed the connection unexpectedly",
        location="db.example",
        operation="read",
    )


@pytest.fixture
def silent(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The SQLite store's reads named by the test's ``method`` parameter do not answer."""
    for method in request.param:
        monkeypatch.setattr(SQLiteStore, method, _unanswered)


COMMANDS = [
    pytest.param(["tasks"], ("list_tasks",), id="tasks-first-read"),
    pytest.param(["show", "t-1"], ("read_raw",), id="show"),
    pytest.param(["show", "t-1", "--json"], ("summary",), id="show-json"),
    pytest.param(["events", "t-1"], ("read",), id="events"),
    pytest.param(["ledger", "verify"], ("read_raw",), id="verify"),
    pytest.param(["ledger", "verify", "t-1"], ("summary",), id="verify-one"),
    pytest.param(["ledger", "anchor"], ("read_raw",), id="anchor"),
    pytest.param(["ledger", "export", "t-1"], ("read_raw",), id="export"),
    pytest.param(["lessons"], ("lessons",), id="lessons"),
    pytest.param(["cancel", "t-1"], ("read",), id="cancel"),
    pytest.param(["resume", "t-1"], ("read",), id="resume"),
]


@pytest.mark.parametrize(("args", "silent"), COMMANDS, indirect=["silent"])
@pytest.mark.usefixtures("silent")
def test_a_store_that_does_not_answer_is_one_transient_line(ledger: Path, args: list[str]) -> None:
    """Exit 75 and one line: the store did not answer, try again; never "fails verification"."""
    result = CliRunner().invoke(cli, ["--db", str(ledger), *args])
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "did not answer" in lines[0]
    assert "run the command again" in lines[0]
    assert "not damage" in lines[0]
    for damage in ("fails verification", "BAD", "corrupt", "damaged"):
        assert damage not in result.output + result.stderr


def test_the_exit_code_is_documented() -> None:
    """docs/cli.md's exit code table lists 75 for a store that did not answer."""
    text = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"| {EXIT_UNAVAILABLE} |" in text
