"""The `pev` command line: demo, tasks, show, ledger verify, exit codes and one-line errors."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pev.cli import EXIT_CODES, cli, default_db, main
from pev.kernel import TaskStatus
from pev.stores import SQLiteStore


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def _invoke(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    return result.exit_code, result.output


def _needs_sim() -> None:
    """Skip the calling test without the sim extra, which `pev demo` needs."""
    pytest.importorskip("pev.sim", reason="`pev demo` needs the sim extra", exc_type=ImportError)


def _demo(db: Path, *faults: str) -> tuple[int, str]:
    """`pev demo --fault F...`; skipped without the sim extra, which the simulator needs."""
    _needs_sim()
    return _invoke(db, "demo", *(arg for fault in faults for arg in ("--fault", fault)))


def _task_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT task_id FROM pev_tasks ORDER BY title")]


def test_demo_runs_every_fault_along_its_documented_path(db: Path) -> None:
    """`pev demo` runs the six faults to their documented endings, each ledger verified."""
    _needs_sim()
    code, out = _invoke(db, "demo")
    assert code == 0
    assert out.count("ok  ") == 6
    assert out.count("as documented: ") == 6
    assert "NOT as documented" not in out
    assert "decision: local replan of pick_red, place_red" in out
    assert "decision: global replan" in out
    assert out.count("result: partial/device_failure") == 2
    assert "result: partial/verifier_unreliable" in out
    assert out.count("result: succeeded/passed") == 3


def test_demo_never_resends_the_action_whose_outcome_is_unknown(db: Path) -> None:
    """The timeout fault dispatches the hung move once and ends partial, not retried."""
    code, _ = _demo(db, "timeout")
    assert code == 0
    with sqlite3.connect(db) as conn:
        kinds = [row[0] for row in conn.execute("SELECT kind FROM pev_events ORDER BY seq")]
        moves = conn.execute(
            "SELECT COUNT(*) FROM pev_events WHERE kind = 'node_dispatched' "
            'AND event LIKE \'%"node_id":"place_red"%\''
        ).fetchone()[0]
    assert moves == 1
    assert "replan_started" not in kinds
    assert kinds[-1] == "task_finished"


def test_demo_saves_the_camera_images_of_its_last_task(db: Path) -> None:
    """The before and after pictures of the last task land in a folder the demo prints."""
    _, out = _demo(db, "timeout", "camera")
    folder = db.parent / "demo-images" / "camera"
    assert str(folder) in out.replace("\n", "")
    names = sorted(path.name for path in folder.iterdir())
    assert names == [
        "r1-after-image.png",
        "r1-after-segmentation.png",
        "r1-before-image.png",
        "r1-before-segmentation.png",
    ]
    assert (folder / "r1-after-image.png").read_bytes().startswith(b"\x89PNG")


def test_demo_exits_1_when_a_task_strays_from_its_path(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that ends other than its fault's documented path makes the demo exit 1."""
    _needs_sim()
    import pev.sim

    wrong = {**pev.sim.FAULT_PATHS, pev.sim.Fault.NONE: pev.sim.FAULT_PATHS[pev.sim.Fault.CAMERA]}
    monkeypatch.setattr(pev.sim, "FAULT_PATHS", wrong)
    code, out = _demo(db, "none")
    assert code == 1
    assert "documented: perception_unreliable" in out


def test_demo_without_the_sim_extra_says_what_to_install(db: Path) -> None:
    """Without pybullet, `pev demo` exits 1 with one line naming the extra; no traceback."""
    code = (
        "import sys; sys.modules['pybullet'] = None; from pev.cli import main; "
        f"main(['--db', {str(db)!r}, 'demo', '--fault', 'none'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 1
    assert "pip install 'pev-agent[sim]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_tasks_lists_and_filters_by_status(db: Path) -> None:
    """`pev tasks` lists every task; --status keeps only those with that status."""
    _demo(db, "slip", "camera")
    code, out = _invoke(db, "tasks")
    assert code == 0
    assert "succeeded" in out
    assert "partial" in out
    code, out = _invoke(db, "tasks", "--status", "partial")
    assert code == 0
    assert "partial" in out
    assert "succeeded" not in out


def _empty_ledger(db: Path) -> None:
    """Make ``db`` a ledger without tasks (reading commands never create one)."""
    asyncio.run(SQLiteStore(db).close())


def test_tasks_on_an_empty_ledger_says_so(db: Path) -> None:
    """An empty ledger prints a plain note, not an empty table."""
    _empty_ledger(db)
    code, out = _invoke(db, "tasks")
    assert code == 0
    assert "no tasks" in out


def test_show_prints_the_revision_timeline(db: Path) -> None:
    """`pev show TASK` prints each revision with node status, verdict, diagnosis and decision."""
    _demo(db, "slip")
    (task_id,) = _task_ids(db)
    code, out = _invoke(db, "show", task_id)
    assert code == 0
    for line in (
        "revision 1 (initial)",
        "revision 2 (local)",
        "kept",
        "diagnosis: plan_or_answer_error",
        "result: succeeded/passed",
        "(lease epoch 1)",
    ):
        assert line in out
    assert f"driven by {socket.gethostname()}:" in out


def test_show_unknown_task_is_a_usage_error(db: Path) -> None:
    """An unknown task id exits 2 with one line naming the id and the way out."""
    _demo(db, "camera")
    result = CliRunner().invoke(cli, ["--db", str(db), "show", "no-such-task"])
    assert result.exit_code == 2
    assert "no task with id 'no-such-task'" in result.output
    assert "pev tasks" in result.output


def test_ledger_verify_passes_then_names_the_tampered_event(db: Path) -> None:
    """`pev ledger verify` exits 0 on an intact ledger and 1 naming an edited event."""
    _demo(db, "camera")
    code, out = _invoke(db, "ledger", "verify")
    assert code == 0
    assert "0 failed verification" in out
    with sqlite3.connect(db) as conn:
        (seq,) = conn.execute(
            "SELECT seq FROM pev_events WHERE event LIKE '%camera driver%'"
        ).fetchone()
        conn.execute("DROP TRIGGER pev_events_no_update")
        conn.execute(
            "UPDATE pev_events SET event = replace(event, 'camera driver', 'lens') WHERE seq = ?",
            (seq,),
        )
    code, out = _invoke(db, "ledger", "verify")
    assert code == 1
    assert "BAD" in out
    assert f"event {seq}" in out


def test_bad_database_is_a_one_line_error(tmp_path: Path) -> None:
    """A file that is not a pev ledger is a one-line usage error (exit 2), not a traceback."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("PRAGMA application_id = 42")
        conn.execute("CREATE TABLE t (x)")
    result = CliRunner().invoke(cli, ["--db", str(other), "tasks"])
    assert result.exit_code == 2
    assert "another application" in result.output
    assert "Traceback" not in result.output


def test_database_comes_from_the_environment(db: Path) -> None:
    """PEV_DB names the ledger when --db is not given."""
    _needs_sim()
    result = CliRunner().invoke(cli, ["demo", "--fault", "camera"], env={"PEV_DB": str(db)})
    assert result.exit_code == 0
    assert len(_task_ids(db)) == 1


def test_unknown_option_is_a_usage_error(db: Path) -> None:
    """A bad argument exits 2."""
    result = CliRunner().invoke(cli, ["--db", str(db), "demo", "--fault", "nope"])
    assert result.exit_code == 2
    assert "nope" in result.output


def test_exit_codes_follow_the_spec() -> None:
    """Exit codes: 0 succeeded, 1 failed, 3 partial, 4 cancelled (2 is a usage error)."""
    assert EXIT_CODES == {
        TaskStatus.SUCCEEDED: 0,
        TaskStatus.FAILED: 1,
        TaskStatus.PARTIAL: 3,
        TaskStatus.CANCELLED: 4,
    }


def test_default_database_lives_in_the_user_data_directory() -> None:
    """Without --db or PEV_DB the ledger is ledger.db in pev's user data directory."""
    path = default_db()
    assert path.name == "ledger.db"
    assert "pev" in path.parts


def test_main_runs_the_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    """The entry point answers --version with the installed version."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert "pev, version" in capsys.readouterr().out


def test_show_accepts_a_unique_id_prefix(db: Path) -> None:
    """`pev show` takes the short id the task list prints."""
    _demo(db, "camera")
    (task_id,) = _task_ids(db)
    code, out = _invoke(db, "show", task_id[:8])
    assert code == 0
    assert task_id in out


def test_ambiguous_prefix_is_a_usage_error(db: Path) -> None:
    """A prefix that matches several tasks exits 2 and asks for more of the id."""
    _demo(db, "camera", "timeout")
    result = CliRunner().invoke(cli, ["--db", str(db), "show", ""])
    assert result.exit_code == 2
    assert "ambiguous" in result.output


@pytest.mark.parametrize("command", ["show", "resume", "cancel"])
def test_unknown_task_is_one_line_exit_2(db: Path, command: str) -> None:
    """An unknown task id is a one-line error with exit code 2, for every command taking one."""
    _empty_ledger(db)
    result = CliRunner().invoke(cli, ["--db", str(db), command, "no-such-task"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "no task with id 'no-such-task'" in lines[0]


def test_show_says_what_a_reconciliation_established(db: Path) -> None:
    """A record of unknown outcome that was reconciled shows both: unknown, then what was found."""
    import asyncio

    import pev
    from pev.model import ExecutionRecord, Plan, PlanNode
    from pev.testing import ScriptedPlanner

    async def post() -> str:
        await asyncio.sleep(1)  # past the timeout, after taking effect
        return "posted"

    async def looked_up(record: ExecutionRecord) -> str:
        # Async, so it answers within the tool's 0.05 s on a loaded machine too (a sync one
        # waits for a thread of pev's pool).
        return "posted"

    async def run() -> str:
        store = pev.SQLiteStore(db)
        try:
            result = await pev.run(
                "post it",
                planner=ScriptedPlanner(Plan("post", (PlanNode("post", "post", tool="post"),))),
                tools=[pev.tool(post, timeout_s=0.05, reconcile=looked_up)],
                store=store,
            )
        finally:
            await store.close()
        assert result.ok
        return result.task_id

    task_id = asyncio.run(run())
    code, out = _invoke(db, "show", task_id)
    assert code == 0
    assert "unknown" in out
    words = " ".join(out.replace("│", " ").split())  # the table may wrap the cell
    assert "unknown → reconciled: succeeded" in words
