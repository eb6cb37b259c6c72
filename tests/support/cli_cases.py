"""Cases for fuzzing `pev`'s command line: a folder each, the ledger they name, their checks.

- :func:`workshop_in`: the folder every command runs in, with the agent module task files name,
  and a template ledger holding ended, waiting and cancelled tasks (made with `pev` itself).
- :class:`Where`: which ledger a case names (a copy of the template, junk, a folder, a path
  under a regular file, ...) and how (``--db``, ``PEV_DB``, the default).
- :class:`Case`: one command in its own folder, run in process, and every check of the fuzz:
  no traceback, a documented exit code, a usage error in one line, no task left stuck, every
  ledger written still opening and verifying.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tests.support.taskfiles import (
    AGENT,
    AGENT_MODULE,
    BROKEN,
    BROKEN_MODULE,
    GOOD_POLICY,
    GOOD_TOOLS,
    document,
)

from pev.cli import cli
from pev.errors import PevError
from pev.ledger import TERMINAL_PHASES, Ledger
from pev.stores import SQLiteStore

EXIT_CODES = {0, 1, 2, 3, 4}  # succeeded/ok, failed, usage error, partial, cancelled
ERROR_PREFIXES = ("Error: ", "pev: ")

GOOD_TASK = {
    "input": "weather in Lisbon",
    "contract": {"goal": "publish the forecast", "success_criteria": ["it is published"]},
    "policy": GOOD_POLICY,
    "components": {
        "planner": f"{AGENT_MODULE}:planner",
        "tools": GOOD_TOOLS,
        "verifier": f"{AGENT_MODULE}:verifier",
    },
}
BLAMING_TASK = {
    **GOOD_TASK,
    "components": {**GOOD_TASK["components"], "verifier": f"{AGENT_MODULE}:blame"},  # type: ignore[dict-item]
}
# The tasks of the ledger every "copy" case starts from, and how each stands.
TEMPLATE_TASKS = ("done-1", "partial-1", "queued-1", "cancelling-1")


@dataclass
class Workshop:
    """The folder the commands run in (the agent module is there), and the template ledger.

    Attributes:
        folder: The current folder of every command, on the Python path.
        template: A ledger holding the :data:`TEMPLATE_TASKS`.
        cases: How many case folders were made.
    """

    folder: Path
    template: Path
    cases: int = 0

    def case_folder(self) -> Path:
        """A fresh folder for one case."""
        self.cases += 1
        folder = self.folder / "cases" / str(self.cases)
        folder.mkdir(parents=True)
        return folder


def invoke(args: list[str], env: dict[str, str | None] | None = None) -> Result:
    """Run `pev` with ``args`` in process, catching what it raises."""
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=True)


@contextmanager
def workshop_in(folder: Path) -> Iterator[Workshop]:
    """A workshop in ``folder``: the current folder and on the Python path while entered.

    It holds the agent module and the template ledger of :data:`TEMPLATE_TASKS`, made with
    `pev` itself.
    """
    (folder / f"{AGENT_MODULE}.py").write_text(AGENT, encoding="utf-8")
    (folder / f"{BROKEN_MODULE}.py").write_text(BROKEN, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(sys, "path", [str(folder), *sys.path])
        patch.setenv("XDG_DATA_HOME", str(folder / "xdg"))  # the default ledger, if one is made
        for name in ("PEV_DB", "PEV_LEDGER_KEY", "PEV_TRUSTED_MODULES"):
            patch.delenv(name, raising=False)  # the commands see only what a case gives them
        template = folder / "template.db"
        (folder / "good.toml").write_text(document(GOOD_TASK), encoding="utf-8")
        (folder / "blaming.toml").write_text(document(BLAMING_TASK), encoding="utf-8")
        db = ["--db", str(template)]
        for args in (
            ["run", "-q", "--task-id", "done-1", "good.toml"],
            ["run", "-q", "--task-id", "partial-1", "blaming.toml"],
            ["submit", "--task-id", "queued-1", "good.toml"],
            ["submit", "--task-id", "cancelling-1", "good.toml"],
            ["cancel", "cancelling-1"],
        ):
            made = invoke([*db, *args])
            assert made.exception is None or isinstance(made.exception, SystemExit), made.output
            assert made.exit_code in EXIT_CODES, made.output
        shop = Workshop(folder, template)
        _anchor_files(folder, template)
        try:
            yield shop
        finally:
            for name in (AGENT_MODULE, BROKEN_MODULE):
                sys.modules.pop(name, None)


def _anchor_files(folder: Path, template: Path) -> None:
    """Files for ``--anchors``: the template's heads, and ones that lie about them.

    The heads are as `pev ledger anchor` prints them; the others have a forged hash, a head
    past the end, or junk.
    """
    made = invoke(["--db", str(template), "ledger", "anchor"])
    assert made.exit_code == 0, made.output
    (folder / "anchors.jsonl").write_text(made.stdout, encoding="utf-8")
    heads = [json.loads(line) for line in made.stdout.splitlines()]
    forged = [{**head, "hash": "0" * 64} for head in heads]
    ahead = [{**head, "seq": head["seq"] + 10**30} for head in heads]
    for name, lines in (("forged.jsonl", forged), ("ahead.jsonl", ahead)):
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "junk.jsonl").write_bytes(b'{"task_id": \xff\n[1, 2]\n"seq"\n{}\n')


def _flipped(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    damaged = bytearray(data)
    for at, mask in flips:
        damaged[at % len(damaged)] ^= mask or 1
    return bytes(damaged)


@dataclass(frozen=True, slots=True)
class Where:
    """Which ledger a case names, and how: ``--db``, ``PEV_DB``, or neither (the default)."""

    kind: str
    by: str
    flips: tuple[tuple[int, int], ...] = ()
    junk: bytes = b""

    def make(self, shop: Workshop, folder: Path) -> str:
        """Make the ledger (or the thing that is not one) in ``folder``; its path."""
        path = folder / "ledger.db"
        match self.kind:
            case "copy":
                shutil.copy(shop.template, path)
            case "damaged":
                path.write_bytes(_flipped(shop.template.read_bytes(), list(self.flips)))
            case "junk":
                path.write_bytes(self.junk)
            case "empty":
                path.write_bytes(b"")
            case "folder":
                path.mkdir()
            case "under_file":
                (folder / "plain.txt").write_text("not a folder")
                path = folder / "plain.txt" / "ledger.db"
            case "missing_folders":
                path = folder / "a" / "b" / "ledger.db"
            case "foreign":
                with sqlite3.connect(path) as conn:
                    conn.execute("CREATE TABLE users (name TEXT)")
                conn.close()
            case "long":
                return str(folder / ("x" * 5000 + ".db"))
            case "nul":
                return str(folder / "a\x00b.db")
            case "undecodable":
                return str(folder / "\udcff.db")
        return str(path)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A ledger's tasks: phase and event count of each, and which fail to verify."""

    phases: dict[str, str]
    counts: dict[str, int]
    broken: dict[str, str]


def snapshot(path: Path) -> Snapshot:
    """Every task of the ledger at ``path``, with its chain checked.

    Raises:
        PevError: The file does not open as a pev ledger.
    """

    async def read() -> Snapshot:
        store = SQLiteStore(path)
        try:
            ledger = Ledger(store)
            phases: dict[str, str] = {}
            counts: dict[str, int] = {}
            broken: dict[str, str] = {}
            while page := await store.list_tasks(limit=100, offset=len(phases)):
                for summary in page:
                    phases[summary.task_id] = str(summary.phase)
                    counts[summary.task_id] = summary.event_count
                    report = await ledger.verify(summary.task_id)
                    if not report.ok:
                        broken[summary.task_id] = report.problem
            return Snapshot(phases, counts, broken)
        finally:
            await store.close()

    return asyncio.run(read())


TERMINAL = {str(phase) for phase in TERMINAL_PHASES}


@dataclass
class Case:
    """One command in its own folder: what it ran on, and what it left."""

    shop: Workshop
    folder: Path
    args: list[str]
    env: dict[str, str | None]
    command: str
    ledgers_before: dict[Path, Snapshot | None] = field(default_factory=dict)

    @classmethod
    def prepare(cls, shop: Workshop, where: Where, command: list[str]) -> Case:
        """A case folder, the ledger ``where`` names made in it, and the command line."""
        folder = shop.case_folder()
        db = where.make(shop, folder)
        env: dict[str, str | None] = {
            "PEV_DB": None,
            "XDG_DATA_HOME": str(folder / "xdg"),
            "PEV_LEDGER_KEY": None,
            "HOME": str(folder),  # a task file's store "~/x.db" stays in the case's folder
        }
        # "{case}" in an argument is this case's folder (where `-o` writes, say).
        args = [word.replace("{case}", str(folder)) for word in command]
        if where.by == "--db" or "\x00" in db:  # no environment variable can hold a NUL
            args = ["--db", db, *args]
        elif where.by == "PEV_DB":
            env["PEV_DB"] = db
        case = cls(shop, folder, args, env, _command_of(command))
        case.ledgers_before = {path: case._read(path) for path in case._ledgers()}
        return case

    def _ledgers(self) -> list[Path]:
        """The SQLite files in the case's folder."""
        return [p for p in self.folder.rglob("*") if p.is_file() and _is_sqlite(p)]

    @staticmethod
    def _read(path: Path) -> Snapshot | None:
        try:
            return snapshot(path)
        except PevError:
            return None  # not a pev ledger (or damaged so that it does not open)

    def run(self) -> Result:
        """Run the command, then check everything the module docstring promises.

        A case that passes leaves nothing behind (thousands of them would fill the disk); the
        folder of one that fails is kept, to look at.
        """
        result = invoke(self.args, self.env)
        self.check_output(result)
        self.check_ledgers(result)
        shutil.rmtree(self.folder, ignore_errors=True)
        return result

    def check_output(self, result: Result) -> None:
        """No traceback, a documented exit code, and a usage error in one line."""
        shown = f"pev {_shown(self.args)} (env {self.env}) exited {result.exit_code}:\n"
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            trace = "".join(traceback.format_exception(*result.exc_info))  # type: ignore[misc]
            pytest.fail(f"{shown}it raised:\n{trace}")
        output = result.output + (result.stderr or "")
        assert "Traceback" not in output, shown + output
        assert result.exit_code in EXIT_CODES, shown + output
        if result.exit_code == 2:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, f"{shown}a usage error must be one line:\n{result.stderr}"
            assert lines[0].startswith(ERROR_PREFIXES), shown + result.stderr

    def check_ledgers(self, result: Result) -> None:
        """Every ledger written still opens and verifies; no task it touched is left stuck."""
        shown = f"pev {_shown(self.args)} exited {result.exit_code}: {result.output[-500:]}"
        for path in self._ledgers():
            before = self.ledgers_before.get(path)
            was_ledger = path in self.ledgers_before and before is not None
            if path in self.ledgers_before and before is None:
                continue  # it was not a ledger before: not this command's to keep
            try:
                after = snapshot(path)
            except PevError as exc:
                if was_ledger or _has_pev_tables(path):
                    pytest.fail(f"{shown}\n{path} no longer opens as a ledger: {exc}")
                continue
            # A damaged copy may hold broken chains already: none may break that was whole.
            broken = {
                t: p for t, p in after.broken.items() if before is None or t not in before.broken
            }
            assert not broken, f"{shown}\n{path}: chains broken: {broken}"
            stuck = [
                problem
                for task_id, phase in after.phases.items()
                if (problem := self._check_task(task_id, phase, (before, after), result.exit_code))
            ]
            assert not stuck, f"{shown}\n{path}: " + "; ".join(stuck)

    def _check_task(
        self, task_id: str, phase: str, ledgers: tuple[Snapshot | None, Snapshot], code: int
    ) -> str | None:
        """Why a task the command left unfinished is stuck, or ``None`` if it is not."""
        before, after = ledgers
        if phase in TERMINAL:
            return None
        if before is None or task_id not in before.phases:
            # Only submit leaves a new task for someone else to drive.
            return None if self.command == "submit" else f"new task {task_id} left in {phase}"
        if after.counts[task_id] == before.counts[task_id] or self.command == "cancel":
            return None  # untouched, or only asked to stop
        if self.command == "resume" and code == 2:
            return None  # resume refused to drive it (it stays as it was: waiting)
        return f"{task_id} was written to and left in {phase} (was {before.phases[task_id]})"


def _command_of(args: list[str]) -> str:
    words = [a for a in args if a in {"run", "submit", "resume", "cancel", "show", "tasks"}]
    return words[0] if words else "other"


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _has_pev_tables(path: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return any(name.startswith("pev_") for name in names)


def _shown(args: list[str]) -> str:
    return " ".join(repr(a) if len(a) < 200 else repr(a[:100] + "…") for a in args)
