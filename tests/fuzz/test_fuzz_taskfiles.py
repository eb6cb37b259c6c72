"""Fuzzing `pev`'s command line: task files and arguments (docs/cli.md, docs/design.md §9.2).

Each case runs one command in process (click's runner), in a folder of its own, on a ledger
drawn from: none yet, a copy of a ledger holding ended, waiting and cancelled tasks, that copy
with bytes flipped, a file of junk, an empty file, a folder, a path under a regular file, one
too long, one with a NUL or an undecodable byte, an SQLite database that is not pev's; named
by ``--db``, ``PEV_DB`` or the task file. Task files are TOML built from drawn values (wrong
types, huge numbers, NaN and infinities, nesting thousands deep, surrogate escapes, unknown and
missing keys, bad import paths and stores), sometimes mangled, sometimes plain bytes; arguments
are drawn for every command. For every case:

* no traceback: the command exits 0, 1, 2, 3 or 4 (docs/cli.md), and prints no traceback;
* exit 2 (a usage error) is one line on stderr, starting ``Error:`` or ``pev:``;
* nothing is left stuck: a task the command wrote to has ended, unless the command only
  submitted it, asked it to cancel, or refused (exit 2) to drive a task that was waiting before;
* every ledger the command wrote still opens, and every chain in it that was whole verifies.

A few cases run as real ``pev`` processes too. The cases are derandomized (the same on every
run, no example database): 2,000 drawn in process (1,100 task files, 900 command lines), the
explicit examples (the issue's own cases, and what earlier runs found), and 8 real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.support.cli_cases import (
    BLAMING_TASK,
    ERROR_PREFIXES,
    TEMPLATE_TASKS,
    Case,
    Where,
    Workshop,
    workshop_in,
)
from tests.support.hostile import FUZZ, FUZZ_MARKS
from tests.support.taskfiles import (
    Raw,
    document,
    documents,
    toml_values,
    weighted,
)

pytestmark = FUZZ_MARKS
PEV = Path(sys.executable).with_name("pev")
TASK_IDS = st.one_of(
    st.sampled_from([*TEMPLATE_TASKS, "d", "q", "c", "", "-", "%", "_", "*", "'", "x" * 5000]),
    st.sampled_from(["\udcff", "a\x00b", "ü", "task\n2"]),
    st.text(max_size=12),
)


@pytest.fixture(scope="module")
def workshop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workshop]:
    """The folder the commands run in, with the agent module and the template ledger."""
    with workshop_in(tmp_path_factory.mktemp("pev-cli-fuzz")) as shop:
        yield shop


# ---------------------------------------------------------------------------------------------
# The ledgers a case may name


WHERE = weighted(
    (6, st.builds(Where, st.sampled_from(["fresh", "copy"]), st.sampled_from(["--db", "PEV_DB"]))),
    (
        4,
        st.builds(
            Where,
            st.sampled_from(
                [
                    "empty",
                    "folder",
                    "under_file",
                    "missing_folders",
                    "foreign",
                    "long",
                    "nul",
                    "undecodable",
                ]
            ),
            st.sampled_from(["--db", "PEV_DB"]),
        ),
    ),
    (
        1,
        st.builds(
            Where,
            st.just("damaged"),
            st.just("--db"),
            st.lists(
                st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=4
            ).map(tuple),
        ),
    ),
    (1, st.builds(Where, st.just("junk"), st.just("--db"), junk=st.binary(max_size=200))),
    (1, st.builds(Where, st.just("fresh"), st.just("default"))),
)


# ---------------------------------------------------------------------------------------------
# Task files


TASK_FILE_STORES = st.one_of(
    st.sampled_from(["from-file.db", "sub/dir/from-file.db", "", " ", ".", "plain.txt/x.db"]),
    st.sampled_from(["\udcff.db", "a\x00.db", "x" * 5000, "~/from-home.db"]),
    toml_values(),
)


def _with(**changes: object) -> str:
    """The blaming task file (its verifier asks for a replan), with ``changes``."""
    return document({**BLAMING_TASK, **changes})


RUN = ("run", [["-q"]])
ON_A_COPY = Where("copy", "--db")


# The issue's own cases are always tried.
@example(text="input = " + "[" * 2000 + "]" * 2000 + "\n", command=RUN, where=ON_A_COPY)
@example(text=_with(policy={"replan_timeout_s": 1e300}), command=RUN, where=ON_A_COPY)
@example(text=_with(policy={"node_timeout_s": Raw("inf")}), command=RUN, where=ON_A_COPY)
@example(text=_with(input=Raw("1" + "0" * 5000)), command=RUN, where=ON_A_COPY)
@example(text=_with(), command=RUN, where=Where("under_file", "--db"))
@example(text=_with(), command=RUN, where=Where("long", "--db"))
@pytest.mark.timeout(600)
@settings(FUZZ, max_examples=1100)
@given(
    text=weighted((9, documents(TASK_FILE_STORES)), (1, st.binary(max_size=300))),
    command=st.one_of(
        st.tuples(
            st.just("run"),
            st.lists(st.sampled_from([["-q"], ["--task-id", "done-1"], ["--task-id", "new-1"]])),
        ),
        st.tuples(st.just("submit"), st.lists(st.sampled_from([["--task-id", "done-1"]]))),
    ),
    where=WHERE,
)
def test_any_task_file_is_run_or_refused_in_one_line(
    workshop: Workshop, text: str | bytes, command: tuple[str, list[list[str]]], where: Where
) -> None:
    """A drawn task file: run or refused in one line, nothing stuck, every ledger verifies."""
    name, options = command
    args = [name, *[word for option in options for word in option], "task.toml"]
    case = Case.prepare(workshop, where, args)
    path = case.folder / "task.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    case.args[-1] = str(path)
    case.run()


# ---------------------------------------------------------------------------------------------
# Arguments


JUNK = st.one_of(
    st.sampled_from(
        ["--", "-", "-x", "--nope", "--db", "-q", "--help", "--version", "=", "\udcff"]
    ),
    st.text(max_size=8),
)
TASK_FILES = st.sampled_from(
    ["good.toml", "blaming.toml", "missing.toml", ".", "cases", "a\x00b.toml", "x" * 5000, ""]
)


ANCHORS = st.sampled_from(
    [
        "anchors.jsonl",
        "forged.jsonl",
        "ahead.jsonl",
        "junk.jsonl",
        "missing.jsonl",
        ".",
        "-",
        "",
        "a\x00b",
    ]
)
OUTPUTS = st.sampled_from(
    ["{case}/out.jsonl", "{case}", "{case}/plain.txt/out.jsonl", "{case}/a\x00b", "-", ""]
)


def _commands() -> st.SearchStrategy[list[str]]:
    ids = TASK_IDS.map(lambda task: [task])
    junk = st.lists(JUNK, max_size=2)
    options = {
        "run": st.lists(st.sampled_from([["-q"], ["--task-id", "r-1"]]), max_size=2),
        "submit": st.lists(st.sampled_from([["--task-id", "s-1"], ["--task-id", "queued-1"]])),
        "resume": st.lists(st.just(["-q"]), max_size=1),
        "cancel": st.lists(
            st.tuples(st.just("--reason"), st.text(max_size=8)).map(list), max_size=1
        ),
        "tasks": st.lists(
            st.one_of(
                st.tuples(st.just("--status"), st.sampled_from(["active", "succeeded", "nope"])),
                st.tuples(st.just("--limit"), st.sampled_from(["1", "0", "-1", "x", "9" * 30])),
            ).map(list),
            max_size=2,
        ),
        "lessons": st.lists(st.just(["--all"]), max_size=1),
    }

    def flat(parts: list[list[str]]) -> list[str]:
        return [word for part in parts for word in part]

    return st.one_of(
        st.tuples(options["run"], TASK_FILES).map(lambda d: ["run", *flat(d[0]), d[1]]),
        st.tuples(options["submit"], TASK_FILES).map(lambda d: ["submit", *flat(d[0]), d[1]]),
        st.tuples(options["resume"], ids).map(lambda d: ["resume", *flat(d[0]), *d[1]]),
        st.tuples(options["cancel"], ids).map(lambda d: ["cancel", *flat(d[0]), *d[1]]),
        ids.map(lambda d: ["show", *d]),
        options["tasks"].map(lambda d: ["tasks", *flat(d)]),
        st.lists(TASK_IDS, max_size=3).map(lambda d: ["ledger", "verify", *d]),
        st.tuples(ANCHORS, st.lists(TASK_IDS, max_size=2)).map(
            lambda d: ["ledger", "verify", "--anchors", d[0], *d[1]]
        ),
        st.lists(TASK_IDS, max_size=2).map(lambda d: ["ledger", "anchor", *d]),
        st.tuples(ids, st.lists(st.tuples(st.just("-o"), OUTPUTS).map(list), max_size=1)).map(
            lambda d: ["ledger", "export", *d[0], *flat(d[1])]
        ),
        st.tuples(options["lessons"], st.lists(TASK_IDS, max_size=1)).map(
            lambda d: ["lessons", *flat(d[0]), *d[1]]
        ),
        st.just(["db", "upgrade"]),
        st.just(["worker", "--help"]),
        st.just(["ledger"]),
    ).flatmap(
        lambda words: junk.map(lambda extra: words + extra if "--help" not in extra else words)
    )


# What earlier runs of this fuzz found is always tried.
@example(command=["tasks", "--limit", "9" * 30], where=ON_A_COPY)
@example(command=["ledger", "verify"], where=Where("long", "--db"))
@example(command=["submit", "a\x00b.toml"], where=ON_A_COPY)
@example(command=["ledger", "export", "done-1", "-o", "{case}/a\x00b"], where=ON_A_COPY)
@example(command=["db", "upgrade"], where=Where("undecodable", "--db"))
@example(command=["ledger"], where=ON_A_COPY)
@pytest.mark.timeout(600)
@settings(FUZZ, max_examples=900)
@given(command=_commands(), where=WHERE)
def test_any_command_line_is_carried_out_or_refused_in_one_line(
    workshop: Workshop, command: list[str], where: Where
) -> None:
    """Drawn arguments for every command: done or refused in one line, nothing stuck."""
    Case.prepare(workshop, where, command).run()


# ---------------------------------------------------------------------------------------------
# Real processes


def _deep_task(folder: Path) -> list[str]:
    path = folder / "deep.toml"
    path.write_text("input = " + "[" * 2000 + "]" * 2000 + "\n", encoding="utf-8")
    return ["--db", str(folder / "l.db"), "run", str(path)]


def _latin1_task(folder: Path) -> list[str]:
    path = folder / "latin1.toml"
    path.write_bytes('input = "café"\n'.encode("latin-1"))
    return ["--db", str(folder / "l.db"), "submit", str(path)]


def _under_a_file(folder: Path) -> list[str]:
    (folder / "plain.txt").write_text("x")
    return ["--db", str(folder / "plain.txt" / "l.db"), "tasks"]


def _junk_db(folder: Path) -> list[str]:
    (folder / "junk.db").write_bytes(os.urandom(4096))
    return ["--db", str(folder / "junk.db"), "ledger", "verify"]


def _empty_db(folder: Path) -> list[str]:
    (folder / "empty.db").write_bytes(b"")
    return ["--db", str(folder / "empty.db"), "ledger", "verify"]


def _too_long_db(folder: Path) -> list[str]:
    return ["--db", str(folder / ("x" * 5000 + ".db")), "ledger", "verify"]


def _refused_url(folder: Path) -> list[str]:
    return ["--db", "postgresql://someone:secret@127.0.0.1:1/nowhere", "show", "t"]


def _policy_overflow(folder: Path) -> list[str]:
    task = {**BLAMING_TASK, "policy": {"replan_timeout_s": 1e300, "max_replans": 1}}
    (folder / "overflow.toml").write_text(document(task), encoding="utf-8")
    return ["--db", str(folder / "l.db"), "run", "-q", str(folder / "overflow.toml")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "make",
    [
        _deep_task,
        _latin1_task,
        _under_a_file,
        _junk_db,
        _empty_db,
        _too_long_db,
        _refused_url,
        _policy_overflow,
    ],
)
def test_a_real_pev_process_refuses_bad_input_in_one_line(
    make: Any, workshop: Workshop, tmp_path: Path
) -> None:
    """`pev` itself, in a process of its own: one line on stderr and exit 2, no traceback.

    A server that refuses the connection is no bad input but a store that did not answer: exit
    75, "try again".
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workshop.folder), *sys.path]))
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run(
        [str(PEV), *make(tmp_path)],
        cwd=workshop.folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    code = 75 if make is _refused_url else 2
    assert (done.returncode, len(lines)) == (code, 1), done.stdout + done.stderr
    assert lines[0].startswith(ERROR_PREFIXES), done.stderr
