"""Every `pev` command through the real binary, standard output a pipe and a file (docs/cli.md).

CliRunner calls the command line in this process, with standard streams of its own: a bug in
what :func:`pev.cli.main` puts around the real standard output (a wrapper without ``buffer``
made ``pev ledger export TASK`` crash) hides from it. Here each command runs as users and
scripts run it: the ``pev`` console script in a subprocess, once with standard output to a pipe
and once to a file, side by side. Each run is checked: its exit code, what it printed, no
traceback, no terminal escape in what is not a terminal, a usage error in one line; a command
that only reads prints the same bytes to a pipe and to a file.

One ledger, made once for the module, serves the commands that read; a command that writes
works on a copy of it. Each start of `pev` costs the better part of a second of CPU (importing
pev): the cases are few, one per command and way of printing, and the two runs of a case (pipe,
file) go side by side.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.cli_cases import GOOD_TASK, Snapshot, invoke, snapshot, workshop_in
from tests.support.cli_documents import valid_document
from tests.support.taskfiles import GOOD_POLICY, document

from pev.ledger import TaskPhase
from pev.stores import SQLiteStore

_BESIDE = Path(sys.executable).with_name("pev")
# The console script the package installs, else the module run as `pev` would run it.
PEV = [str(_BESIDE)] if _BESIDE.exists() else [sys.executable, "-m", "pev"]
MODES = ("pipe", "file")
TIMEOUT_S = 60  # any one command; each finishes in about a second
APPROVING_TASK = {**GOOD_TASK, "policy": {**GOOD_POLICY, "max_replans": 0, "approval": "actions"}}
TASKS = ("done-1", "partial-1", "queued-1", "approval-1", "cancelling-1")


@dataclass(frozen=True, slots=True)
class Ran:
    """One run of `pev`: how its standard output was taken, its exit code, what it printed."""

    args: tuple[str, ...]
    mode: str
    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        """Standard output as text."""
        return self.out.decode("utf-8")

    def shown(self) -> str:
        """The run, for a failing assertion's message."""
        out = self.out.decode("utf-8", "replace")[-2000:]
        said = f"pev {' '.join(self.args)} (stdout to a {self.mode}) exited {self.code}"
        return f"{said}\n{out}\n{self.err[-2000:]}"


@dataclass(frozen=True, slots=True)
class Shop:
    """The folder the commands run in (the agent module and task files), and its ledger."""

    folder: Path
    ledger: Path
    anchors: Path
    before: Snapshot

    def env(self) -> dict[str, str]:
        """The environment of every command: no PEV_DB, a default ledger inside the shop."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PEV_")}
        env.pop("FORCE_COLOR", None)
        env["XDG_DATA_HOME"] = str(self.folder / "xdg")
        return env

    def copy(self, name: str) -> Path:
        """A copy of the ledger (made with SQLite's backup, WAL and all), for a writing case."""
        path = self.folder / "copies" / f"{name}.db"
        path.parent.mkdir(exist_ok=True)
        source, target = sqlite3.connect(self.ledger), sqlite3.connect(path)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return path


def start(shop: Shop, args: list[str], mode: str, tag: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`pev ARGS` started in the shop, its standard output a pipe or the file it returns."""
    out = shop.folder / "out" / f"{tag}-{mode}.txt"
    out.parent.mkdir(exist_ok=True)
    with out.open("wb") as file:
        process = subprocess.Popen(
            [*PEV, *args],
            cwd=shop.folder,
            env=shop.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if mode == "pipe" else file,
            stderr=subprocess.PIPE,
        )
    return process, out


def finish(
    process: subprocess.Popen[bytes], out: Path, args: list[str], mode: str, *, timeout: float
) -> Ran:
    """Wait for a started `pev` and take what it printed."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"pev {' '.join(args)} ran past {timeout} s: {stderr.decode()[-2000:]}")
    if mode == "file":
        stdout = out.read_bytes()
    return Ran(tuple(args), mode, process.returncode, stdout, stderr.decode("utf-8", "replace"))


def pev(shop: Shop, args: list[str], mode: str = "pipe", *, tag: str = "run") -> Ran:
    """Run `pev ARGS` in the shop to its end, checking what any run must do."""
    process, out = start(shop, args, mode, tag)
    return sane(finish(process, out, args, mode, timeout=TIMEOUT_S))


def both(shop: Shop, args: Callable[[str], list[str]], *, tag: str) -> dict[str, Ran]:
    """`pev ARGS` with standard output to a pipe and to a file, side by side."""
    with ThreadPoolExecutor(len(MODES)) as pool:
        runs = {m: pool.submit(pev, shop, args(m), m, tag=f"{tag}-{m}") for m in MODES}
        return {mode: run.result() for mode, run in runs.items()}


def sane(ran: Ran) -> Ran:
    """What every run must be: no traceback, plain output, a usage error in one line."""
    assert "Traceback" not in ran.err, ran.shown()
    assert b"\x1b[" not in ran.out, ran.shown()  # no colour nor cursor moves off a terminal
    assert ran.code in {0, 1, 2, 3, 4}, ran.shown()
    if ran.code == 2:
        lines = [line for line in ran.err.splitlines() if line.strip()]
        assert len(lines) == 1, ran.shown()
        assert lines[0].startswith(("Error: ", "pev: ")), ran.shown()
    return ran


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """The module's folder and its ledger of ended, waiting and cancelled tasks.

    The ledger is made in this process (:func:`tests.support.cli_cases.workshop_in`, which runs
    `pev run`, `submit` and `cancel` through click), for speed: the commands under test run as
    subprocesses.
    """
    folder = tmp_path_factory.mktemp("binary")
    (folder / "approving.toml").write_text(document(APPROVING_TASK), encoding="utf-8")
    with workshop_in(folder) as made:
        submitted = invoke(
            ["--db", str(made.template), "submit", "--task-id", "approval-1", "approving.toml"]
        )
        assert submitted.exit_code == 0, submitted.output
        yield Shop(folder, made.template, folder / "anchors.jsonl", snapshot(made.template))


def _has(*parts: str) -> Callable[[Ran], None]:
    def check(ran: Ran) -> None:
        for part in parts:
            assert part in ran.text, ran.shown()

    return check


def _task_ids(ran: Ran) -> None:
    document = valid_document("tasks", ran.text)
    assert sorted(row["task_id"] for row in document["tasks"]) == sorted(TASKS)


def _events(ran: Ran) -> None:
    lines = ran.text.splitlines()
    assert lines[0].split()[:3:2] == ["1", "task_created"], ran.shown()
    assert lines[-1].split()[2] == "task_finished", ran.shown()


def _anchors(ran: Ran) -> None:
    heads = [json.loads(line) for line in ran.text.splitlines()]
    assert sorted(head["task_id"] for head in heads) == sorted(TASKS)


def _exported(ran: Ran) -> None:
    lines = [json.loads(line) for line in ran.text.splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert {line["task_id"] for line in lines} == {"done-1"}
    assert list(lines[0]) == ["at", "event", "hash", "prev_hash", "schema", "seq", "task_id"]


def _usage(*parts: str) -> Callable[[Ran], None]:
    def check(ran: Ran) -> None:
        assert ran.out == b"", ran.shown()
        for part in parts:
            assert part in ran.err, ran.shown()

    return check


# Commands that only read: (arguments after --db, exit code, what the output must hold).
READING = [
    pytest.param(["tasks"], 0, _has("tasks", "done-1", "succeeded"), id="tasks"),
    pytest.param(["tasks", "--json"], 0, _task_ids, id="tasks-json"),
    pytest.param(["show", "done"], 0, _has("done-1", "succeeded/passed"), id="show-prefix"),
    pytest.param(["events", "done-1", "--follow"], 0, _events, id="events-follow"),
    pytest.param(["lessons", "--all"], 0, _has("lesson"), id="lessons"),
    pytest.param(
        ["ledger", "verify", "--anchors", "anchors.jsonl"],
        0,
        _has("5 task(s) checked, 0 failed", "4 anchor(s) checked, 0 not found"),
        id="verify-anchors",
    ),
    pytest.param(["ledger", "anchor"], 0, _anchors, id="anchor"),
    pytest.param(["ledger", "export", "done-1"], 0, _exported, id="export"),
    pytest.param(["db", "upgrade"], 0, _has("nothing to upgrade"), id="db-upgrade"),
    pytest.param(["show", "nope"], 2, _usage("no task with id 'nope'"), id="show-unknown"),
]


@pytest.mark.parametrize(("args", "code", "check"), READING)
def test_a_reading_command_prints_the_same_to_a_pipe_and_a_file(
    shop: Shop, args: list[str], code: int, check: Callable[[Ran], None]
) -> None:
    """Each reading command exits as documented and prints the same bytes to a pipe and a file."""
    runs = both(shop, lambda _mode: ["--db", str(shop.ledger), *args], tag="-".join(args))
    for ran in runs.values():
        assert ran.code == code, ran.shown()
        check(ran)
        if code == 0:
            assert ran.err == "", ran.shown()
    assert runs["pipe"].out == runs["file"].out
    assert snapshot(shop.ledger) == shop.before  # read, never written


def test_export_to_stdout_is_the_export_to_a_file(shop: Shop) -> None:
    """`pev ledger export TASK` writes the same bytes to standard output as to `-o FILE`."""
    written = shop.folder / "out" / "export-o.jsonl"
    written.parent.mkdir(exist_ok=True)
    export = ["--db", str(shop.ledger), "ledger", "export", "done-1"]
    with ThreadPoolExecutor(2) as pool:
        to_file = pool.submit(pev, shop, [*export, "-o", str(written)], tag="export-o")
        piped = pool.submit(pev, shop, export, tag="export")
        assert (to_file.result().code, to_file.result().out) == (0, b"")
        assert piped.result().out == written.read_bytes()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["ledger", "export", "done-1"], id="export"),
        pytest.param(["show", "done-1"], id="show"),
    ],
)
def test_a_reader_gone_before_the_output_is_no_error(shop: Shop, args: list[str]) -> None:
    """Standard output a pipe nobody reads any more (`pev ... | head -0`): exit 0, nothing said."""
    process = subprocess.Popen(
        [*PEV, "--db", str(shop.ledger), *args],
        cwd=shop.folder,
        env=shop.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.close()  # long before pev, still importing, writes anything
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, err) == (0, b"")


# Commands that only read, and the ledger each is given: a missing folder, or a missing file in
# a folder that exists; named by --db, or by PEV_DB.
READ_ONLY = [
    pytest.param(["tasks"], "folder", "--db", id="tasks"),
    pytest.param(["show", "done-1"], "file", "--db", id="show"),
    pytest.param(["events", "done-1", "--follow"], "folder", "PEV_DB", id="events"),
    pytest.param(["lessons"], "file", "PEV_DB", id="lessons"),
    pytest.param(["ledger", "verify"], "folder", "--db", id="verify"),
    pytest.param(["ledger", "anchor"], "file", "--db", id="anchor"),
    pytest.param(["ledger", "export", "done-1"], "folder", "--db", id="export"),
    pytest.param(["serve", "--port", "1"], "file", "--db", id="serve"),
]


@pytest.mark.parametrize(("args", "missing", "by"), READ_ONLY)
def test_a_reading_command_never_creates_a_ledger(
    shop: Shop, args: list[str], missing: str, by: str
) -> None:
    """A missing ledger or folder: one line naming it and the way out, exit 2, nothing made."""
    folder = shop.folder / "missing" / "-".join(args) if missing == "folder" else shop.folder
    path = folder / f"missing-{args[0]}.db"
    env = {**shop.env(), "PEV_DB": str(path)} if by == "PEV_DB" else shop.env()
    named = ["--db", str(path)] if by == "--db" else []
    process = subprocess.run(
        [*PEV, *named, *args],
        cwd=shop.folder,
        env=env,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    ran = sane(
        Ran(tuple(args), "pipe", process.returncode, process.stdout, process.stderr.decode())
    )
    assert ran.code == 2, ran.shown()
    assert f"--db: there is no ledger at {path}" in ran.err, ran.shown()
    assert "name an existing ledger" in ran.err, ran.shown()
    assert not path.exists()
    assert folder.exists() == (missing == "file")


def phase_of(db: Path, task_id: str) -> TaskPhase | None:
    """The task's phase in the ledger at ``db`` (``None``: no such task)."""

    async def read() -> TaskPhase | None:
        store = SQLiteStore(db)
        try:
            summary = await store.summary(task_id)
        finally:
            await store.close()
        return None if summary is None else summary.phase

    return asyncio.run(read())


def wait_for(db: Path, task_id: str, phases: set[TaskPhase], *, within_s: float = 30) -> None:
    """Wait until the task is in one of ``phases``."""
    deadline = time.monotonic() + within_s
    while (phase := phase_of(db, task_id)) not in phases:
        assert time.monotonic() < deadline, f"{task_id} is {phase}, not in {phases}"
        time.sleep(0.1)


def test_run_and_submit_print_their_results(shop: Shop) -> None:
    """`pev run` prints its timeline and result line and exits with the status; `submit` the id."""
    db = {mode: str(shop.copy(f"run-{mode}")) for mode in MODES}
    ran = both(shop, lambda m: ["--db", db[m], "run", "--task-id", "r-1", "good.toml"], tag="run")
    submitted = both(shop, lambda m: ["--db", db[m], "submit", "good.toml"], tag="submit")
    for mode in MODES:
        assert ran[mode].code == 0, ran[mode].shown()
        assert ran[mode].text.splitlines()[-1] == "task r-1: succeeded/passed", ran[mode].shown()
        assert "revision 1" in ran[mode].text
        new_id = submitted[mode].text.strip()
        assert submitted[mode].code == 0, submitted[mode].shown()
        assert phase_of(Path(db[mode]), new_id) is TaskPhase.PLANNING


def test_resume_waits_for_approve_from_another_process(shop: Shop) -> None:
    """`pev resume` waits at approval; `pev approve` from another process lets it finish."""
    db = {mode: str(shop.copy(f"approve-{mode}")) for mode in MODES}
    started = {
        mode: start(shop, ["--db", db[mode], "resume", "approval-1"], mode, f"resume-{mode}")
        for mode in MODES
    }
    try:
        for mode in MODES:
            wait_for(Path(db[mode]), "approval-1", {TaskPhase.AWAITING_APPROVAL})
        approved = both(shop, lambda m: ["--db", db[m], "approve", "approval-1"], tag="approve")
        for mode, (process, out) in started.items():
            resumed = sane(finish(process, out, ["resume"], mode, timeout=TIMEOUT_S))
            assert resumed.code == 0, resumed.shown()
            assert resumed.text.splitlines()[-1] == "task approval-1: succeeded/passed"
            assert approved[mode].code == 0, approved[mode].shown()
            assert "revision 1 approved by" in approved[mode].text
    finally:
        for process, _ in started.values():
            process.kill()
            process.wait()


def test_a_worker_drives_rejects_and_stops_on_sigterm(shop: Shop) -> None:
    """`pev worker` ends the runnable tasks, acts on `pev reject`, and exits 0 on SIGTERM."""
    db = {mode: str(shop.copy(f"worker-{mode}")) for mode in MODES}
    started = {
        mode: start(shop, ["--db", db[mode], "worker", "--poll-s", "0.1"], mode, f"worker-{mode}")
        for mode in MODES
    }
    try:
        for mode in MODES:
            path = Path(db[mode])
            wait_for(path, "queued-1", {TaskPhase.SUCCEEDED})
            wait_for(path, "cancelling-1", {TaskPhase.CANCELLED})
            wait_for(path, "approval-1", {TaskPhase.AWAITING_APPROVAL})
        rejected = both(
            shop, lambda m: ["--db", db[m], "reject", "approval-1", "--reason", "no"], tag="reject"
        )
        for mode in MODES:
            assert rejected[mode].code == 0, rejected[mode].shown()
            assert "revision 1 rejected by" in rejected[mode].text
            wait_for(Path(db[mode]), "approval-1", {TaskPhase.FAILED})
        for mode, (process, out) in started.items():
            process.send_signal(signal.SIGTERM)
            stopped = sane(finish(process, out, ["worker"], mode, timeout=TIMEOUT_S))
            assert stopped.code == 0, stopped.shown()
            assert "claimed task queued-1" in stopped.err
            assert stopped.out == b"", stopped.shown()  # it logs to stderr only
    finally:
        for process, _ in started.values():
            process.kill()
            process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_shows_the_ledger_and_stops_on_ctrl_c(shop: Shop) -> None:
    """`pev serve` serves the task list over the ledger; SIGINT stops it, exit 0."""
    pytest.importorskip("uvicorn", reason="`pev serve` needs the web extra")
    port = _free_port()
    process, out = start(
        shop, ["--db", str(shop.ledger), "serve", "--port", str(port)], "file", "serve"
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    html = page.read().decode()
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the viewer did not answer"
                time.sleep(0.2)
        assert "done-1" in html
        process.send_signal(signal.SIGINT)
        stopped = sane(finish(process, out, ["serve"], "file", timeout=TIMEOUT_S))
        assert stopped.code == 0, stopped.shown()
        assert f"pev viewer on http://127.0.0.1:{port}/" in stopped.err
    finally:
        process.kill()
        process.wait()
    assert snapshot(shop.ledger) == shop.before


def test_demo_prints_plain_lines_of_a_sane_width(shop: Shop) -> None:
    """`pev demo --fault none` to a pipe exits 0, each line plain and of a sane width."""
    pytest.importorskip("pev.sim", reason="`pev demo` needs the sim extra", exc_type=ImportError)
    ran = pev(shop, ["--db", str(shop.folder / "out" / "demo.db"), "demo", "--fault", "none"])
    assert ran.code == 0, ran.shown()
    assert "as documented: " in ran.text
    widest = max(len(line) for line in ran.text.splitlines())
    assert widest < 1000, f"a line of {widest} characters"


def test_help_and_version(shop: Shop) -> None:
    """`pev --help` lists the commands; `pev --version` prints the version; both exit 0."""
    helped = pev(shop, ["--help"], "file")
    version = pev(shop, ["--version"])
    assert helped.code == 0
    for command in ("run", "submit", "worker", "tasks", "show", "ledger", "serve"):
        assert f"\n  {command} " in helped.text, helped.shown()
    assert version.code == 0
    assert version.text.startswith("pev, version ")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["ledger", "export", "done-1"], id="export"),
        pytest.param(["tasks", "--json"], id="tasks"),
    ],
)
def test_an_output_that_cannot_be_written_is_one_line_never_0(shop: Shop, args: list[str]) -> None:
    """Standard output on a full disk: one line on stderr, exit 1, no traceback."""
    with Path("/dev/full").open("wb") as full:
        done = subprocess.run(
            [*PEV, "--db", str(shop.ledger), *args],
            cwd=shop.folder,
            env=shop.env(),
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT_S,
            check=False,
        )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    said = "pev: standard output could not be written (No space left on device); what this "
    assert err.splitlines() == [said + "command printed is incomplete"]


def test_events_follow_wait_follows_a_task_written_after_it_started(shop: Shop) -> None:
    """`pev events ID --follow --wait` started before the task exists: it waits, says so once
    on stderr, then prints every event of the task as it is written, and ends with it."""
    ledger = shop.copy("waited")
    process = subprocess.Popen(
        [*PEV, "--db", str(ledger), "events", "waited-1", "--follow", "--wait"],
        cwd=shop.folder,
        env=shop.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _waits_then_follows(process, ledger)
    finally:
        if process.poll() is None:  # a failed check: the follower would wait for ever
            process.kill()
        process.communicate(timeout=TIMEOUT_S)


def _waits_then_follows(process: subprocess.Popen[bytes], ledger: Path) -> None:
    from pev import run
    from pev.model import Plan, PlanNode
    from pev.testing import FunctionExecutor, ScriptedPlanner

    assert process.stderr is not None
    said = process.stderr.readline().decode()  # once it is waiting
    assert said == "waiting for task waited-1 to be written (Ctrl-C stops)\n"

    async def write() -> None:
        store = SQLiteStore(ledger)
        try:
            plan = Plan("one step", (PlanNode("a", "do it"),))
            await run(
                "late",
                planner=ScriptedPlanner(plan),
                executor=FunctionExecutor({"a": lambda: 1}),
                store=store,
                task_id="waited-1",
            )
        finally:
            await store.close()

    asyncio.run(write())
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, err) == (0, b""), err
    kinds = [line.split()[2] for line in out.decode().splitlines()]
    assert kinds[0] == "task_created"
    assert kinds[-1] == "task_finished"
