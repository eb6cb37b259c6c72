"""`pev serve` as a command: what it hands the web server, and its errors, without serving."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pev
from pev.cli import cli

pytest.importorskip("uvicorn", reason="pev serve needs the web extra")


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """An SQLite ledger with one task."""
    db = tmp_path / "ledger.db"

    async def write() -> None:
        store = pev.SQLiteStore(db)
        try:
            await pev.Ledger(store).create({"goal": "serve"})
        finally:
            await store.close()

    asyncio.run(write())
    return db


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """uvicorn.run replaced: each call's app and options, noted instead of served."""
    import uvicorn

    calls: list[dict[str, Any]] = []

    def run(app: Any, **options: Any) -> None:
        calls.append({"app": app, **options})

    monkeypatch.setattr(uvicorn, "run", run)
    # Nothing listens: the look for a free port and a local address has nothing to find.
    monkeypatch.setattr("pev.cli._serve._check_free", lambda host, port: None)
    return calls


@pytest.mark.parametrize(
    ("options", "hosts"),
    [
        pytest.param([], {"127.0.0.1", "localhost", "::1"}, id="loopback"),
        pytest.param(
            ["--host", "viewer.lan", "--allow-host", "pev.example"],
            {"127.0.0.1", "localhost", "::1", "viewer.lan", "pev.example"},
            id="named-host",
        ),
        pytest.param(["--host", "0.0.0.0"], {"127.0.0.1", "localhost", "::1"}, id="any-address"),  # noqa: S104
    ],
)
def test_serve_hands_uvicorn_the_app_and_the_hosts_it_answers(
    ledger: Path, served: list[dict[str, Any]], options: list[str], hosts: set[str]
) -> None:
    """The bound address, the port and the Host names the app accepts."""
    result = CliRunner().invoke(cli, ["serve", "--db", str(ledger), "--port", "9123", *options])
    assert result.exit_code == 0, result.output
    [call] = served
    assert call["port"] == 9123
    assert call["host"] == (options[1] if options else "127.0.0.1")
    assert call["app"]._hosts == frozenset(hosts)
    assert "read-only" in result.output


def test_serve_says_when_it_is_an_operator(ledger: Path, served: list[dict[str, Any]]) -> None:
    """--operator is announced, so nobody runs one by mistake."""
    result = CliRunner().invoke(cli, ["--db", str(ledger), "serve", "--operator"])
    assert result.exit_code == 0, result.output
    assert "(operator)" in result.output
    assert len(served) == 1


def test_serve_refuses_a_ledger_that_is_not_there(
    tmp_path: Path, served: list[dict[str, Any]]
) -> None:
    """A --db that names no ledger is a usage error, and nothing is served."""
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "none.db"), "serve"])
    assert result.exit_code == 2
    assert served == []


def test_serve_without_the_extra_names_it(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without uvicorn: one line naming the extra to install."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(cli, ["--db", str(ledger), "serve"])
    assert result.exit_code != 0
    assert "pip install 'pev-agent[web]'" in result.output


def test_serve_on_a_taken_port_is_one_line_and_serves_nothing(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port's listener is named with the way out, exit 2: no address, then a traceback."""
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("served on a taken port"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["--db", str(ledger), "serve", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"pev: cannot serve on 127.0.0.1:{port}: Address already in use; pass --port with a "
        "free port, or stop what listens there\n"
    )


@pytest.mark.parametrize("host", ["nowhere.invalid", "192.0.2.1"])
def test_serve_on_an_address_not_of_this_machine_is_one_line(
    ledger: Path, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """A host that does not resolve, or is not this machine's, is named; exit 2."""
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("served elsewhere"))
    result = CliRunner().invoke(cli, ["--db", str(ledger), "serve", "--host", host])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"pev: --host {host}: ")
    assert result.output.count("\n") == 1
