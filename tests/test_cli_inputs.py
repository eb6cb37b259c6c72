"""Every bad input to `pev` is one line and exit 2, never a traceback (issue 12, item 2).

Task files (nesting, encoding, size, the type of every field), store paths that cannot hold a
ledger, files that are not pev ledgers or are damaged, PostgreSQL schemas that are not pev's,
and bad task ids and options.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.support import postgres

import pev
from pev.cli import cli
from pev.cli._taskfile import MAX_TASK_FILE_BYTES
from pev.model import Plan, PlanNode
from pev.policy import RecoveryPolicy
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner

AGENT = """
import pev
from pev.model import Plan, PlanNode


@pev.tool(effect="query")
def look() -> int:
    return 1


def planner(request):
    return Plan("look", (PlanNode("a", "look", tool="look", effect="query"),))
"""

COMPONENTS = '[components]\nplanner = "inputs_agent:planner"\ntools = ["inputs_agent:look"]\n'


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding the agent module, the current directory."""
    (tmp_path / "inputs_agent.py").write_text(AGENT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("inputs_agent", None)


def _pev(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "300", **(env or {})})


def _one_line_exit_2(result: Result) -> str:
    """The single line of a usage error; fails on a traceback, more lines, or another code."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def _run(folder: Path, text: str | bytes) -> str:
    """`pev run` of a task file holding ``text``: its one line of error."""
    path = folder / "task.toml"
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return _one_line_exit_2(_pev("--db", str(folder / "ledger.db"), "run", str(path)))


# -- task files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("[" * 2000 + "]" * 2000, id="arrays"),
        pytest.param("{a = " * 2000 + "1" + "}" * 2000, id="inline-tables"),
    ],
)
def test_a_task_file_nested_2000_deep_is_one_line(workdir: Path, value: str) -> None:
    """Arrays or tables nested 2,000 deep: one line saying so (TOML's reader would recurse)."""
    line = _run(workdir, f"input = {value}\n{COMPONENTS}")
    assert "nest" in line
    assert "task.toml" in line


def test_dotted_keys_2000_deep_are_one_line(workdir: Path) -> None:
    """A table 2,000 levels deep made of dotted keys: one line naming the input."""
    line = _run(workdir, "input." + ".".join(["a"] * 2000) + " = 1\n" + COMPONENTS)
    assert ": input: " in line


def test_a_task_file_that_is_not_utf8_is_one_line(workdir: Path) -> None:
    """Bytes that are not UTF-8: one line asking for UTF-8."""
    line = _run(workdir, b"input = '\xff\xfe'\n" + COMPONENTS.encode())
    assert "is not UTF-8 text" in line


def test_a_huge_task_file_is_refused_before_it_is_parsed(workdir: Path) -> None:
    """A file over the limit is one line naming the limit."""
    filler = b"#" + b"x" * MAX_TASK_FILE_BYTES + b"\n"
    line = _run(workdir, filler + b"input = 1\n" + COMPONENTS.encode())
    assert f"larger than {MAX_TASK_FILE_BYTES // 2**20} MiB" in line


def test_an_integer_of_5000_digits_is_one_line(workdir: Path) -> None:
    """A number Python will not convert from text: one line suggesting a string."""
    line = _run(workdir, "input = " + "9" * 5000 + "\n" + COMPONENTS)
    assert "as a string" in line


POLICY_FIELDS = [field.name for field in dataclasses.fields(RecoveryPolicy)]
POLICY_SWITCHES = {
    field.name for field in dataclasses.fields(RecoveryPolicy) if field.type == "bool"
}

WRONG_TYPES = [
    pytest.param("store = [1]\n", "store", id="store"),
    pytest.param("[contract]\nmode = 3\n", "contract.mode", id="contract.mode"),
    pytest.param("[contract]\nmode = 'off'\ngoal = {a = 1}\n", "contract.goal", id="goal"),
    *(
        pytest.param(
            f"[contract]\nmode = 'off'\n{name} = [[1]]\n", f"contract.{name}", id=f"{name}"
        )
        for name in ("success_criteria", "constraints", "required_evidence")
    ),
    pytest.param("policy = [1]\n", "policy", id="policy"),
    *(
        pytest.param(f"[policy]\n{name} = {value}\n", f"policy.{name}", id=f"{name}={value}")
        for name in POLICY_FIELDS
        for value in ("'x'", "[1]", "inf", "1e300", "true", "1979-05-27", "0")
        # A switch takes true; every other field refuses it, and a switch refuses 0.
        if (value == "0") is (name in POLICY_SWITCHES) or value not in ("true", "0")
    ),
]


@pytest.mark.parametrize(("section", "field"), WRONG_TYPES)
def test_a_wrong_value_in_any_field_is_one_line_naming_it(
    workdir: Path, section: str, field: str
) -> None:
    """A value of the wrong type (or out of range) in any field: one line naming that field."""
    line = _run(workdir, f"input = 1\n{section}{COMPONENTS}")
    assert f"task.toml: {field}: " in line


@pytest.mark.parametrize(
    ("components", "field"),
    [
        pytest.param("components = [1]\n", "components", id="components"),
        pytest.param("[components]\nagent = [1]\n", "components.agent", id="agent"),
        pytest.param("[components]\nplanner = 1\ntools = []\n", "components.planner", id="planner"),
        pytest.param(
            "[components]\nplanner = 'inputs_agent:planner'\nexecutor = 1.5\n",
            "components.executor",
            id="executor",
        ),
        pytest.param(f"{COMPONENTS}verifier = true\n", "components.verifier", id="verifier"),
        pytest.param(f"{COMPONENTS}observer = {{}}\n", "components.observer", id="observer"),
        pytest.param(
            "[components]\nplanner = 'inputs_agent:planner'\ntools = [{}]\n",
            "components.tools",
            id="tools",
        ),
    ],
)
def test_a_component_of_the_wrong_type_is_one_line(
    workdir: Path, components: str, field: str
) -> None:
    """Each component role given a value that is not an import path: one line naming it."""
    line = _run(workdir, f"input = 1\n{components}")
    assert f"task.toml: {field}: " in line


@pytest.mark.parametrize(
    "store",
    [
        pytest.param("inputs_agent.py/ledger.db", id="under-a-file"),
        pytest.param("a" * 300 + "/ledger.db", id="folder-name-too-long"),
        pytest.param("a" * 300, id="file-name-too-long"),
        pytest.param(".", id="a-folder"),
    ],
)
def test_a_task_files_store_that_cannot_hold_a_ledger_is_one_line(
    workdir: Path, store: str
) -> None:
    """The task file's own store, a path that cannot be a ledger: one line naming the field."""
    path = workdir / "task.toml"
    path.write_text(f"input = 1\nstore = '{store}'\n{COMPONENTS}", encoding="utf-8")
    line = _one_line_exit_2(_pev("run", str(path)))
    assert f"{path}: store: " in line


# -- store paths --------------------------------------------------------------------------------


def _store_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Paths that cannot hold a ledger, each with the words its error must hold."""
    regular = tmp_path / "somefile"
    regular.write_text("x", encoding="utf-8")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    return {
        "under-a-file": (regular / "x.db", f"{regular} is a file, not a folder"),
        "folder-name-too-long": (tmp_path / ("a" * 300) / "x.db", "File name too long"),
        "file-name-too-long": (tmp_path / ("a" * 300), "File name too long"),
        "a-folder": (tmp_path, "is a folder, not a ledger file"),
        "a-pipe": (pipe, "is not a regular file"),
    }


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize(
    "case", ["under-a-file", "folder-name-too-long", "file-name-too-long", "a-folder", "a-pipe"]
)
@pytest.mark.parametrize("command", [("tasks",), ("show", "t"), ("lessons",)])
def test_a_db_that_cannot_hold_a_ledger_is_one_line(
    tmp_path: Path, case: str, command: tuple[str, ...]
) -> None:
    """--db under a regular file, too long, or a folder: one line naming it, for every command."""
    path, words = _store_paths(tmp_path)[case]
    line = _one_line_exit_2(_pev("--db", str(path), *command))
    assert line.startswith("Error: --db: ")
    assert words in line


@pytest.mark.parametrize("command", ["verify", "anchor"])
def test_a_name_too_long_for_the_ledger_commands_is_one_line(tmp_path: Path, command: str) -> None:
    """`pev ledger verify|anchor` look for the file first: a name too long is one line too."""
    line = _one_line_exit_2(_pev("--db", str(tmp_path / ("a" * 300)), "ledger", command))
    assert "File name too long" in line


def test_a_db_in_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    """--db in a folder that cannot be created: one line saying so and how to fix it.

    A command that writes tries to make the folder; one that reads finds no ledger there.
    """
    if not Path("/proc/self").exists():
        pytest.skip("needs /proc, where no folder can be made")
    line = _one_line_exit_2(_pev("--db", "/proc/pev-no-such/ledger.db", "cancel", "t"))
    assert "cannot make the folder of the ledger /proc/pev-no-such/ledger.db" in line
    line = _one_line_exit_2(_pev("--db", "/proc/pev-no-such/ledger.db", "tasks"))
    assert "there is no ledger at /proc/pev-no-such/ledger.db (no such folder" in line


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_a_db_without_permission_is_one_line(tmp_path: Path) -> None:
    """A file this user may not open: one line with the system's reason."""
    locked = tmp_path / "locked.db"
    locked.write_bytes(b"")
    locked.chmod(0)
    try:
        line = _one_line_exit_2(_pev("--db", str(locked), "tasks"))
    finally:
        locked.chmod(0o600)
    assert "Permission denied" in line


def test_a_db_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A path with a byte that is not UTF-8 (a lone surrogate in Python): one line, exit 2."""
    line = _one_line_exit_2(_pev("--db", str(tmp_path / "l\udcff.db"), "tasks"))
    assert "not UTF-8" in line


def test_a_nul_in_the_db_path_is_one_line() -> None:
    """A path with a NUL character (possible through PEV_DB): one line, exit 2."""
    line = _one_line_exit_2(_pev("--db", "led\x00ger.db", "tasks"))
    assert "NUL" in line


# -- files that are not pev ledgers, and damaged ones --------------------------------------------


def test_a_text_file_is_not_a_ledger(tmp_path: Path) -> None:
    """A text file given as --db: one line saying it is not an SQLite database."""
    text = tmp_path / "notes.txt"
    text.write_text("shopping list\n" * 100, encoding="utf-8")
    line = _one_line_exit_2(_pev("--db", str(text), "tasks"))
    assert "is not an SQLite database" in line


def test_an_sqlite_file_of_another_app_is_refused_and_left_alone(tmp_path: Path) -> None:
    """An SQLite file of another application (no application id): refused, no tables added."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    line = _one_line_exit_2(_pev("--db", str(other), "tasks"))
    assert "of another application (it holds table invoices, none of pev's)" in line
    with sqlite3.connect(other) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {"invoices"}


async def _one_task(db: Path) -> None:
    plan = Plan("look", (PlanNode("a", "look", tool="look"),))
    store = pev.SQLiteStore(db)
    try:
        await pev.run(
            "look",
            planner=ScriptedPlanner(plan),
            executor=FunctionExecutor({"look": lambda: 1}),
            store=store,
            task_id="t",
        )
    finally:
        await store.close()


@pytest.fixture
def ledger_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a small pev ledger holding one ended task."""
    db = tmp_path_factory.mktemp("ledger") / "ledger.db"
    asyncio.run(_one_task(db))
    return db.read_bytes()


COMMANDS = [("tasks",), ("show", "t"), ("ledger", "verify")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_byte_flipped_in_the_schema_is_one_line(
    tmp_path: Path, ledger_bytes: bytes, command: tuple[str, ...]
) -> None:
    """A byte of the schema's SQL text made invalid UTF-8: one line saying the file is damaged."""
    at = ledger_bytes.index(b"CREATE TABLE pev_meta") + 3
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(ledger_bytes[:at] + b"\xa0" + ledger_bytes[at + 1 :])
    line = _one_line_exit_2(_pev("--db", str(damaged), *command))
    assert "damaged" in line


def test_no_byte_flip_in_the_first_pages_gives_a_traceback(
    tmp_path: Path, ledger_bytes: bytes
) -> None:
    """Flipping bytes across the first two pages: every command ends in one line or works."""
    for at in range(0, 8192, 61):
        damaged = tmp_path / f"flip-{at}.db"
        flipped = bytes([ledger_bytes[at] ^ 0xFF])
        damaged.write_bytes(ledger_bytes[:at] + flipped + ledger_bytes[at + 1 :])
        for command in COMMANDS:
            result = _pev("--db", str(damaged), *command)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                at,
                command,
                result.exception,
            )
            if result.exit_code not in (0, 1):
                _one_line_exit_2(result)


def test_a_damaged_schema_version_is_one_line(tmp_path: Path, ledger_bytes: bytes) -> None:
    """pev_meta's schema_version made unreadable: one line naming the file, exit 2."""
    db = tmp_path / "ledger.db"
    db.write_bytes(ledger_bytes)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE pev_meta SET value = 'x1' WHERE key = 'schema_version'")
    line = _one_line_exit_2(_pev("--db", str(db), "tasks"))
    assert "schema_version 'x1' is not a number" in line


# -- PostgreSQL ---------------------------------------------------------------------------------


def test_a_postgres_schema_that_is_not_pevs_is_one_line() -> None:
    """A schema holding a table named as pev's that pev did not make: one line, exit 2."""
    with postgres.throwaway_schema() as schema:
        postgres.execute("CREATE SCHEMA {s}", "CREATE TABLE {s}.pev_tasks (id int)", schema=schema)
        line = _one_line_exit_2(_pev("--db", postgres.url_of(schema), "tasks"))
    assert "pev did not make" in line


# -- task ids and options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task_id", "words"),
    [
        pytest.param("", "is empty", id="empty"),
        pytest.param("a\x00b", "control character", id="nul"),
        pytest.param("a\udcffb", "undecodable byte", id="not-utf8"),
        pytest.param("x" * 201, "has 201 characters, more than 200", id="too-long"),
        pytest.param(" padded", "surrounding spaces", id="spaces"),
    ],
)
def test_a_bad_new_task_id_is_one_line(workdir: Path, task_id: str, words: str) -> None:
    """--task-id of `pev run`: empty, a control character, not UTF-8, too long: one line."""
    path = workdir / "task.toml"
    path.write_text(f"input = 1\n{COMPONENTS}", encoding="utf-8")
    line = _one_line_exit_2(
        _pev("--db", str(workdir / "l.db"), "run", "--task-id", task_id, str(path))
    )
    assert words in line
    assert "--task-id" in line


@pytest.mark.parametrize("command", ["show", "resume", "cancel"])
@pytest.mark.parametrize("task_id", ["a\udcffb", "a\x00b"], ids=["not-utf8", "nul"])
def test_a_task_id_no_store_can_hold_is_an_unknown_task(
    tmp_path: Path, command: str, task_id: str
) -> None:
    """A TASK with a byte that is not UTF-8, or a NUL: one line, no such task."""
    asyncio.run(SQLiteStore(tmp_path / "l.db").close())  # show reads: the ledger must exist
    line = _one_line_exit_2(_pev("--db", str(tmp_path / "l.db"), command, task_id))
    assert "no task with id" in line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(("show",), "Missing argument 'TASK'", id="missing-argument"),
        pytest.param(("tasks", "--limit", "0"), "'--limit'", id="out-of-range"),
        pytest.param(("tasks", "--nope"), "No such option '--nope'", id="unknown-option"),
        pytest.param(("nope",), "No such command 'nope'", id="unknown-command"),
        pytest.param(("ledger", "nope"), "No such command 'nope'", id="unknown-subcommand"),
        pytest.param(("worker", "--poll-s", "-1"), "'--poll-s'", id="negative-poll"),
        pytest.param(("worker", "--poll-s", "nan"), "'--poll-s'", id="nan-poll"),
        pytest.param(("worker", "--lease-s", "inf"), "'--lease-s'", id="infinite-lease"),
        pytest.param(
            ("worker", "--concurrency", "9" * 30), "'--concurrency'", id="huge-concurrency"
        ),
        pytest.param(("tasks", "--limit", "9" * 30), "'--limit'", id="huge-limit"),
        pytest.param(
            ("worker", "--gc-threshold", "700,10"), "'--gc-threshold'", id="gc-two-numbers"
        ),
        pytest.param(("worker", "--gc-threshold", "0,10,10"), "G0 at least 1", id="gc-zero-first"),
        pytest.param(
            ("worker", "--gc-threshold", "1e9,1,1"), "three whole numbers", id="gc-not-whole"
        ),
        pytest.param(("cancel", "t", "--reason", "a\udcffb"), "'--reason'", id="reason-not-utf8"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_help(
    tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    """Click's usage errors are one line too, naming the command's --help."""
    line = _one_line_exit_2(_pev("--db", str(tmp_path / "l.db"), *args))
    assert words in line
    assert "--help`)" in line


@pytest.mark.parametrize("group", [(), ("ledger",), ("db",)], ids=["pev", "ledger", "db"])
def test_a_group_given_nothing_prints_its_help(group: tuple[str, ...]) -> None:
    """`pev`, `pev ledger` alone print their help on stdout and exit 0, as --help does."""
    result = _pev(*group)
    assert result.exit_code == 0
    assert "Commands:" in result.stdout
    assert result.stderr == ""


def test_options_without_a_command_are_one_line(tmp_path: Path) -> None:
    """`pev --db X` and nothing more: one line saying a command is missing, exit 2."""
    line = _one_line_exit_2(_pev("--db", str(tmp_path / "l.db")))
    assert "Missing command (see `" in line
