"""`--db` / `PEV_DB` naming a PostgreSQL store, and `pev db upgrade`.

The tests that need the server skip without one (and fail under CI=true): see
tests/support/postgres.py. A bad URL needs no server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.support import postgres

from pev.cli import cli
from pev.ledger import SCHEMA_VERSION


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "250", **(env or {})})


def lines(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema of the test's own (skipped without a server), dropped afterwards."""
    with postgres.throwaway_schema() as name:
        yield name


@pytest.fixture
def url(schema: str) -> str:
    """The test server's URL, naming the test's schema."""
    return postgres.url_of(schema)


def current() -> int:
    from pev.stores._postgres_schema import STORE_SCHEMA_VERSION

    return int(STORE_SCHEMA_VERSION)


def test_db_upgrade_creates_then_finds_the_schema_current(url: str, schema: str) -> None:
    """On an empty schema it creates pev's tables; run again, it says there is nothing to do."""
    created = invoke("--db", url, "db", "upgrade")
    assert created.exit_code == 0, created.output
    assert len(lines(created)) == 1
    assert created.output.startswith("postgresql://")
    assert f"(schema {schema}): created pev's tables at schema version {current()}" in (
        created.output
    )
    again = invoke("--db", url, "db", "upgrade")
    assert again.exit_code == 0
    assert f"schema version {current()}, already current; nothing to do" in again.output


def test_an_older_schema_is_refused_until_db_upgrade(url: str, schema: str) -> None:
    """`pev tasks` on an older schema exits 2 naming `pev db upgrade`, which then fixes it."""
    from pev.stores import _postgres_schema as ddl

    statements = ["CREATE SCHEMA {s}", *ddl.MIGRATIONS[0].statements]
    statements.append(
        "INSERT INTO {s}.pev_meta VALUES ('application', 'pev ledger'), ('schema_version', '1')"
    )
    postgres.execute(*statements, schema=schema)
    refused = invoke("--db", url, "tasks")
    assert refused.exit_code == 2
    assert len(lines(refused)) == 1
    assert "run `pev db upgrade`" in refused.output
    upgraded = invoke("--db", url, "db", "upgrade")
    assert upgraded.exit_code == 0
    assert f"upgraded from schema version 1 to {current()}" in upgraded.output
    listed = invoke("--db", url, "tasks")
    assert listed.exit_code == 0
    assert re.search(rf"no tasks in postgresql://\S+ \(schema {schema}\)", listed.output)


def test_a_newer_schema_is_a_usage_error(url: str, schema: str) -> None:
    """A schema newer than this pev: `pev db upgrade` refuses it in one line, exit 2."""
    assert invoke("--db", url, "db", "upgrade").exit_code == 0
    postgres.execute(
        "UPDATE {s}.pev_meta SET value = %s WHERE key = 'schema_version'",
        schema=schema,
        params=(str(current() + 1),),
    )
    refused = invoke("--db", url, "db", "upgrade")
    assert refused.exit_code == 2
    assert len(lines(refused)) == 1
    assert "upgrade pev" in refused.output


def test_pev_db_names_a_postgres_store_for_every_command(url: str, tmp_path: Path) -> None:
    """PEV_DB takes a URL as --db does: a task file runs into PostgreSQL and is listed there."""
    (tmp_path / "pg_agent.py").write_text(
        "import pev\n"
        "from pev.model import Plan, PlanNode\n\n\n"
        "@pev.tool(effect='query')\n"
        "def fetch() -> int:\n"
        "    return 42\n\n\n"
        "def planner(request):\n"
        "    return Plan('fetch', (PlanNode('a', 'fetch it', tool='fetch', effect='query'),))\n",
        encoding="utf-8",
    )
    (tmp_path / "task.toml").write_text(
        'input = "the answer"\n\n[components]\n'
        'planner = "pg_agent:planner"\ntools = ["pg_agent:fetch"]\n',
        encoding="utf-8",
    )
    task_file = str(tmp_path / "task.toml")
    ran = invoke("run", task_file, "--task-id", "pg-1", "-q", env={"PEV_DB": url})
    assert ran.exit_code == 0, ran.output
    listed = invoke("tasks", env={"PEV_DB": url})
    assert "pg-1" in listed.output
    verified = invoke("--db", url, "ledger", "verify")
    assert verified.exit_code == 0
    assert "1 task(s) checked, 0 failed verification" in verified.output


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        pytest.param("mysql://db.example/ledgers", "mysql:// is not a store", id="scheme"),
        pytest.param("postgresql://u:secret@db.example:port/x", "(?i)port", id="port"),
    ],
)
def test_a_bad_url_is_one_line_exit_2(target: str, problem: str) -> None:
    """A URL pev cannot open: one line naming --db, exit 2, and never the password."""
    for args in (("--db", target, "db", "upgrade"), ("--db", target, "tasks")):
        result = invoke(*args)
        assert result.exit_code == 2
        assert len(lines(result)) == 1
        assert "--db" in result.output
        assert "secret" not in result.output
        assert "Traceback" not in result.output
        assert re.search(problem, result.output)


def test_an_unreachable_server_is_one_transient_line_exit_75() -> None:
    """No server at the URL: one line saying it did not answer and to try again, exit 75."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    for command in (["tasks"], ["ledger", "verify"], ["db", "upgrade"]):
        result = invoke("--db", "postgresql://pev:secret@127.0.0.1:1/ledgers", *command)
        assert result.exit_code == 75, result.output
        assert len(lines(result)) == 1
        assert "cannot connect" in result.output
        assert "did not answer" in result.output
        assert "run the command again" in result.output
        assert "secret" not in result.output


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["tasks"], id="tasks"),
        pytest.param(["show", "t-1"], id="show"),
        pytest.param(["events", "t-1"], id="events"),
        pytest.param(["lessons"], id="lessons"),
        pytest.param(["ledger", "verify"], id="verify"),
        pytest.param(["ledger", "export", "t-1"], id="export"),
    ],
)
def test_a_reading_command_never_creates_the_schema(
    url: str, schema: str, command: list[str]
) -> None:
    """A schema without pev's tables: one line naming `pev db upgrade`, exit 2, nothing made."""
    result = invoke("--db", url, *command)
    assert result.exit_code == 2, result.output
    assert len(lines(result)) == 1
    assert "holds no pev ledger" in result.output
    assert "pev db upgrade" in result.output
    found = postgres.execute(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
        schema=schema,
        params=(schema,),
    )
    assert found == [(0,)]


def test_db_upgrade_of_an_sqlite_file_has_nothing_to_do(tmp_path: Path) -> None:
    """An SQLite ledger has no migrations: reported at its version, exit 0."""
    db = tmp_path / "ledger.db"
    result = invoke("--db", str(db), "db", "upgrade")
    assert result.exit_code == 0
    assert " ".join(result.output.split()) == (
        f"{db}: an SQLite ledger at schema version {SCHEMA_VERSION}; nothing to upgrade"
    )


def test_db_upgrade_has_help() -> None:
    """`pev db upgrade --help` says what it does and when to run it."""
    result = invoke("db", "upgrade", "--help")
    assert result.exit_code == 0
    assert "migrations" in result.output
    top = invoke("--help").output
    assert "postgresql://" in top
    assert "PEV_DB" in top
    assert re.search(r"^\s+db\s", top, re.MULTILINE)
