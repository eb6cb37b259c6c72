"""`pev run`, `pev resume`, `pev cancel`: task files, progress, exit codes, one-line errors."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import pev
from pev.cli import cli
from pev.cli._progress import ConsoleRail
from pev.cli._taskfile import TaskFileError, load_task_file
from pev.engine._components import IMPORT_ROOTS_KEY
from pev.ledger import Ledger
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner

AGENT = """
from pydantic import BaseModel

import pev
from pev.model import Plan, PlanNode, Verdict


@pev.tool(effect="query")
def forecast(city: str) -> dict:
    return {"city": city, "sky": "sunny"}


@pev.tool
def publish(text: str) -> str:
    return f"published: {text}"


@pev.tool(name="publish")
def broken_publish(text: str) -> str:
    raise RuntimeError("the newsroom is offline")


def planner(request):
    return Plan(
        "the Lisbon forecast",
        (
            PlanNode("look", "get the forecast", tool="forecast", args={"city": "Lisbon"}),
            PlanNode("post", "publish it", tool="publish", args={"text": "sunny"}, after=("look",)),
        ),
    )


class Planner:
    def plan(self, request):
        return planner(request)


class NeedsArguments:
    def __init__(self, model):
        self.model = model


def verifier(request):
    return Verdict.passed(request.contract)


def blame_post(request):
    return Verdict.failed(request.contract, failed_nodes=["post"], feedback="not published")


NUMBER = 7

forecaster = pev.Agent(planner, tools=[forecast, publish], verifier=verifier)


class Trip(BaseModel):
    city: str
    days: int = 1


def sky(outputs) -> str:
    return outputs["look"]["sky"]


traveller = pev.Agent(planner, tools=[forecast, publish], input_type=Trip, output=sky)
"""

CONTRACT = """
[contract]
mode = "recovery"
goal = "publish the Lisbon forecast"
success_criteria = ["the forecast is published"]
"""

COMPONENTS = """
[components]
planner = "agent:planner"
tools = ["agent:forecast", "agent:publish"]
verifier = "agent:verifier"
"""

PASSING = f'input = "weather in Lisbon"\n{CONTRACT}\n[policy]\nmax_replans = 1\n{COMPONENTS}'
PARTIAL = f"""input = {{ city = "Lisbon" }}
{CONTRACT}
[components]
planner = "agent:Planner"
tools = ["agent:forecast", "agent:broken_publish"]
verifier = "agent:blame_post"
"""
FAILED = """input = ["weather", "Lisbon"]
[components]
planner = "agent:planner"
tools = ["agent:forecast", "agent:broken_publish"]
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding agent.py, the current directory; imports of it are forgotten after."""
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "broken.py").write_text("raise RuntimeError('no API key')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("agent", "broken"):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in ("agent", "broken"):
        sys.modules.pop(name, None)


def _task_file(folder: Path, text: str, name: str = "task.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _pev(folder: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(folder / "ledger.db"), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def _task_ids(folder: Path, name: str = "ledger.db") -> list[str]:
    with sqlite3.connect(folder / name) as conn:
        return [row[0] for row in conn.execute("SELECT task_id FROM pev_tasks")]


def _event_count(folder: Path, task_id: str) -> int:
    with sqlite3.connect(folder / "ledger.db") as conn:
        query = "SELECT COUNT(*) FROM pev_events WHERE task_id = ?"
        count: int = conn.execute(query, (task_id,)).fetchone()[0]
        return count


def test_passing_run_prints_progress_timeline_and_result(workdir: Path) -> None:
    """A passing task exits 0 after its progress lines, its timeline and the result line."""
    path = _task_file(workdir, PASSING)
    code, out = _pev(workdir, "run", str(path))
    assert code == 0
    (task_id,) = _task_ids(workdir)
    for line in (
        f"task {task_id} started, verification recovery",
        "revision 1 (initial): initial plan  [2 nodes]",
        "▶ look (forecast)",
        "✓ look succeeded",
        "✓ post succeeded",
        "verdict: success  1/1 criteria met",
        "decision: finish succeeded/passed",
        "finished: succeeded/passed",
        "result: succeeded/passed",  # the timeline's ending
    ):
        assert line in out
    assert out.rstrip().splitlines()[-1] == f"task {task_id}: succeeded/passed"


def test_partial_run_exits_3(workdir: Path) -> None:
    """A device failure the verifier blames is accepted as partial: exit 3."""
    code, out = _pev(workdir, "run", str(_task_file(workdir, PARTIAL)))
    assert code == 3
    assert "✗ post failed: RuntimeError: the newsroom is offline" in out
    assert "diagnosis: device_failure" in out
    last = out.rstrip().splitlines()[-1]
    assert "partial/device_failure  device failure on post" in last
    assert "RuntimeError: the newsroom is offline" in last  # the detail names the node's error


def test_failed_run_exits_1(workdir: Path) -> None:
    """Without a verifier a failed node fails the task: exit 1."""
    code, out = _pev(workdir, "run", str(_task_file(workdir, FAILED)))
    assert code == 1
    assert "failed/execution_failed" in out.rstrip().splitlines()[-1]


def test_quiet_prints_only_the_result_line(workdir: Path) -> None:
    """--quiet prints one line: the task id and how it ended."""
    code, out = _pev(
        workdir, "run", "--quiet", "--task-id", "t-1", str(_task_file(workdir, PASSING))
    )
    assert code == 0
    assert out.splitlines() == ["task t-1: succeeded/passed"]


def test_components_are_imported_from_the_task_files_folder(
    workdir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """agent:planner is imported from the task file's folder first, whatever the current one."""
    project = tmp_path_factory.mktemp("project")
    (project / "agent.py").write_text(AGENT, encoding="utf-8")
    code, _ = _pev(workdir, "run", "-q", str(_task_file(project, PASSING)))
    assert code == 0
    assert Path(sys.modules["agent"].__file__ or "").parent == project
    assert str(project) not in sys.path


# Pieces of small task files, for the table of bad ones.
X = "input = 'x'\n"
TABLE = "[components]\n"
C = f"{X}{TABLE}"
PLANNER = "planner = 'agent:planner'\n"
TOOL = "tools = ['agent:forecast']\n"
MINI_CONTRACT = "[contract]\ngoal = 'g'\n"

BAD_FILES = [
    pytest.param("input = 'x'\ninput = 'y'\n", "line 2", id="toml-syntax"),
    pytest.param(f"{X}store = 5\n{COMPONENTS}", "store", id="store-not-text"),
    pytest.param(f"{X}store = ''\n{COMPONENTS}", "store", id="store-empty"),
    pytest.param(f"{X}contrat = 1\n{COMPONENTS}", "contrat", id="unknown-top-key"),
    pytest.param(
        f"{X}[policy]\nmax_replan = 1\n{COMPONENTS}", "policy.max_replan", id="unknown-key"
    ),
    pytest.param(
        f"{X}{MINI_CONTRACT}success_criteria = 'done'\n{COMPONENTS}",
        "contract.success_criteria",
        id="criteria-not-a-list",
    ),
    pytest.param(
        f"{X}{MINI_CONTRACT}success_criteria = ['done', 3]\n{COMPONENTS}",
        "contract.success_criteria",
        id="criteria-not-strings",
    ),
    pytest.param(
        f"{X}{MINI_CONTRACT}mode = 'recover'\nsuccess_criteria = ['c']\n{COMPONENTS}",
        "contract.mode",
        id="bad-mode",
    ),
    pytest.param(
        f"{X}{MINI_CONTRACT}success_criteria = []\n{COMPONENTS}",
        "contract.success_criteria",
        id="contract-error",
    ),
    pytest.param(
        f"{X}{CONTRACT}[policy]\nmax_replans = -1\n{COMPONENTS}",
        "policy.max_replans",
        id="policy-invalid",
    ),
    pytest.param(
        f"{X}[policy]\nnode_timeout_s = 'soon'\n{COMPONENTS}",
        "policy.node_timeout_s",
        id="policy-wrong-type",
    ),
    pytest.param(f"{CONTRACT}{COMPONENTS}", "input", id="input-missing"),
    pytest.param(f"input = 2024-05-01\n{COMPONENTS}", "input", id="input-date"),
    pytest.param(f"{X}contract = 'recovery'\n{COMPONENTS}", "contract", id="contract-not-a-table"),
    pytest.param(f"{X}", "components", id="components-missing"),
    pytest.param(f"{C}{TOOL}", "components.planner", id="planner-missing"),
    pytest.param(f"{C}planner = 'agent.planner'\n{TOOL}", "components.planner", id="no-colon"),
    pytest.param(f"{C}planner = 'agnet:planner'\n{TOOL}", "components.planner", id="no-module"),
    pytest.param(f"{C}planner = 'broken:planner'\n{TOOL}", "components.planner", id="import-fails"),
    pytest.param(f"{C}planner = 'agent:plannr'\n{TOOL}", "components.planner", id="no-attribute"),
    pytest.param(
        f"{C}planner = 'agent:NeedsArguments'\n{TOOL}", "components.planner", id="class-needs-args"
    ),
    pytest.param(f"{C}planner = 'agent:NUMBER'\n{TOOL}", "components.planner", id="not-callable"),
    pytest.param(
        f"{C}{PLANNER}tools = 'agent:forecast'\n", "components.tools", id="tools-not-list"
    ),
    pytest.param(
        f"{C}{PLANNER}tools = ['agent:NUMBER']\n", "components.tools", id="tool-not-callable"
    ),
    pytest.param(
        f"{C}{PLANNER}{TOOL}executor = 'agent:Planner'\n", "components", id="tools-and-executor"
    ),
    pytest.param(f"{C}{PLANNER}", "components", id="neither-tools-nor-executor"),
    pytest.param(
        f"{C}{PLANNER}{TOOL}verifer = 'agent:verifier'\n", "components.verifer", id="unknown-role"
    ),
    pytest.param(f"{C}agent = 'agent:forecaster'\n{PLANNER}", "components", id="agent-and-a-part"),
    pytest.param(f"{C}agent = 'agent:planner'\n", "components.agent", id="agent-not-an-agent"),
    pytest.param(
        f"{X}[contract]\ngoal = 'g'\nsuccess_criteria = ['c']\nrequired_evidence = ['state']\n"
        f"{TABLE}agent = 'agent:forecaster'\n",
        "contract.required_evidence",
        id="agent-without-observer",
    ),
    pytest.param(f"{X}{CONTRACT}{TABLE}{PLANNER}{TOOL}", "components.verifier", id="no-verifier"),
    pytest.param(
        f"{X}{CONTRACT}required_evidence = ['state']\n{COMPONENTS}",
        "components.observer",
        id="evidence-without-observer",
    ),
]


@pytest.mark.parametrize(("text", "field"), BAD_FILES)
def test_bad_task_file_is_one_line_naming_the_field(workdir: Path, text: str, field: str) -> None:
    """Every problem of a task file exits 2 with one line naming the field; no traceback."""
    path = _task_file(workdir, text)
    code, out = _pev(workdir, "run", str(path))
    assert code == 2
    assert len(out.strip().splitlines()) == 1, out
    assert out.startswith(f"pev: {path}: {field}: ")
    assert "Traceback" not in out
    assert not (workdir / "ledger.db").exists()


def test_suggests_the_closest_valid_name(workdir: Path) -> None:
    """A misspelt key or attribute gets the closest valid name as the fix."""
    with pytest.raises(TaskFileError, match="did you mean 'max_replans'"):
        load_task_file(_task_file(workdir, f"input = 'x'\n[policy]\nmax_replan = 1\n{COMPONENTS}"))
    with pytest.raises(TaskFileError, match="did you mean 'planner'") as caught:
        load_task_file(
            _task_file(
                workdir,
                "input = 'x'\n[components]\nplanner = 'agent:plannr'\ntools = ['agent:forecast']\n",
            )
        )
    assert caught.value.field == "components.planner"


def test_an_attribute_error_inside_a_module_is_reported_as_its_import_failing(
    workdir: Path,
) -> None:
    """A module whose own code raises AttributeError is not taken for a missing attribute."""
    (workdir / "stale.py").write_text("import os\n\nos.no_such_thing\n", encoding="utf-8")
    path = _task_file(workdir, f"{C}planner = 'stale:planner'\n{TOOL}")
    code, out = _pev(workdir, "run", str(path))
    assert code == 2
    assert out.splitlines() == [
        (
            f"pev: {path}: components.planner: importing 'stale' failed (AttributeError: "
            "module 'os' has no attribute 'no_such_thing'); fix the module"
        )
    ]


def test_missing_task_file_is_one_line(workdir: Path) -> None:
    """A task file that does not exist is a one-line error naming it (exit 2)."""
    code, out = _pev(workdir, "run", "nowhere.toml")
    assert code == 2
    assert out.splitlines() == ["pev: nowhere.toml: no such file; check the path"]


def test_existing_task_id_is_refused(workdir: Path) -> None:
    """--task-id naming a task that exists is a one-line usage error; nothing is written."""
    path = _task_file(workdir, PASSING)
    assert _pev(workdir, "run", "-q", "--task-id", "t-1", str(path))[0] == 0
    code, out = _pev(workdir, "run", "-q", "--task-id", "t-1", str(path))
    assert code == 2
    assert out.startswith("pev: --task-id: ")
    assert _task_ids(workdir) == ["t-1"]


def test_task_file_parses_into_a_frozen_value(workdir: Path) -> None:
    """The task file becomes a frozen TaskFile with its components imported."""
    spec = load_task_file(_task_file(workdir, PARTIAL))
    assert spec.input == {"city": "Lisbon"}
    assert spec.contract is not None
    assert spec.contract.success_criteria == ("the forecast is published",)
    assert spec.policy == pev.RecoveryPolicy()
    assert spec.tools is not None
    assert len(spec.tools) == 2
    assert spec.executor is None
    assert spec.observer is None
    assert dict(spec.components) == {
        "planner": "agent:Planner",
        "verifier": "agent:blame_post",
        "tools": "agent:forecast,agent:broken_publish",
    }
    with pytest.raises(AttributeError):
        spec.input = "x"  # type: ignore[misc]


def test_resume_of_a_finished_task_exits_with_its_status(workdir: Path) -> None:
    """Resuming a task that ended changes nothing and exits with its status code."""
    assert (
        _pev(workdir, "run", "-q", "--task-id", "partial-1", str(_task_file(workdir, PARTIAL)))[0]
        == 3
    )
    events = _event_count(workdir, "partial-1")
    code, out = _pev(workdir, "resume", "partial")
    assert code == 3
    assert "task partial-1 had already ended (partial/device_failure, " in out
    assert "nothing to resume; it is shown as it ended" in out
    assert "revision 1 (initial)" in out
    assert out.rstrip().splitlines()[-1].startswith("task partial-1: partial/device_failure")
    assert _event_count(workdir, "partial-1") == events


def test_cancel_of_a_finished_task_leaves_it_unchanged(workdir: Path) -> None:
    """Cancelling a task that ended reports its ending and writes nothing (exit 0)."""
    _pev(workdir, "run", "-q", "--task-id", "done-1", str(_task_file(workdir, PASSING)))
    events = _event_count(workdir, "done-1")
    code, out = _pev(workdir, "cancel", "done", "--reason", "too late")
    assert code == 0
    assert out.splitlines() == [
        "task done-1: succeeded/passed; it had already ended, left unchanged"
    ]
    assert _event_count(workdir, "done-1") == events


def _create(folder: Path, task_id: str, components: dict[str, str]) -> None:
    """A task left in the ledger without a driver, as a crash would leave it."""

    async def create() -> None:
        store = SQLiteStore(folder / "ledger.db")
        try:
            await Ledger(store).create("weather in Lisbon", components=components, task_id=task_id)
        finally:
            await store.close()

    asyncio.run(create())


def test_cancel_then_resume_ends_the_task_cancelled(workdir: Path) -> None:
    """A cancel written to a task nobody drives takes effect when it is resumed: exit 4."""
    _create(
        workdir, "idle-1", {"planner": "agent:planner", "tools": "agent:forecast,agent:publish"}
    )
    code, out = _pev(workdir, "cancel", "idle-1", "--reason", "changed my mind")
    assert code == 0
    assert "cancel requested" in out
    code, out = _pev(workdir, "resume", "idle-1")
    assert code == 4
    assert out.rstrip().splitlines()[-1].startswith("task idle-1: cancelled/cancelled")


def test_resume_runs_a_task_left_unfinished(workdir: Path) -> None:
    """A task left before planning is resumed with components rebuilt from their paths."""
    _create(
        workdir, "idle-2", {"planner": "agent:planner", "tools": "agent:forecast,agent:publish"}
    )
    code, out = _pev(workdir, "resume", "idle-2")
    assert code == 0
    assert "✓ post succeeded" in out
    assert out.rstrip().splitlines()[-1] == "task idle-2: succeeded/execution_succeeded"


def test_resume_without_a_rebuildable_component_is_one_line(workdir: Path) -> None:
    """A component that cannot be rebuilt is a one-line error naming the role (exit 2)."""
    _create(workdir, "idle-3", {"planner": "nowhere:planner", "tools": "agent:forecast"})
    code, out = _pev(workdir, "resume", "idle-3")
    assert code == 2
    assert len(out.strip().splitlines()) == 1, out
    assert out.startswith("pev: task idle-3: the planner cannot be rebuilt")
    assert "resume it from Python with the planner passed" in out
    assert "planner=..." in out


def test_console_rail_cannot_break_the_run() -> None:
    """A console that cannot be written to changes nothing: rails never raise into the run."""

    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("the terminal went away")

    rail = ConsoleRail(Console(file=Broken()))
    plan = pev.Plan("g", (pev.PlanNode("a", "do a", tool="a"),))
    result = pev.run_sync(
        "x",
        planner=ScriptedPlanner(plan),
        executor=FunctionExecutor({"a": lambda: 1}),
        rails=[rail],
    )
    assert result.ok
    assert rail.printed == 0


def test_a_task_file_names_an_agent_whole(workdir: Path) -> None:
    """components.agent names a module-level pev.Agent; the ledger records that one path."""
    path = _task_file(
        workdir,
        f'input = "weather in Lisbon"\n{CONTRACT}\n[components]\nagent = "agent:forecaster"\n',
    )
    code, out = _pev(workdir, "run", "-q", "--task-id", "agent-1", str(path))
    assert code == 0, out
    assert out.strip() == "task agent-1: succeeded/passed"

    async def components() -> dict[str, str]:
        store = SQLiteStore(workdir / "ledger.db")
        try:
            return dict((await Ledger(store).state("agent-1")).created.components)
        finally:
            await store.close()

    recorded = asyncio.run(components())
    # The task file's folder is recorded too when it left sys.path (the engine's import roots).
    assert recorded.pop(IMPORT_ROOTS_KEY, str(workdir)) == str(workdir)
    assert recorded == {"agent": "agent:forecaster"}


def test_a_task_files_input_is_checked_against_its_agents_input_type(workdir: Path) -> None:
    """A typed agent's input that does not fit is one line naming the field, and nothing runs;
    one that fits is recorded as the type's JSON."""
    components = '[components]\nagent = "agent:traveller"\n'
    bad = _task_file(workdir, f'input = {{ days = "three" }}\n{components}', "bad.toml")
    code, out = _pev(workdir, "run", "-q", str(bad))
    assert code == 2, out
    assert out.count("\n") == 1, out
    assert "input: does not fit the agent's input type Trip: city: Field required;" in out
    assert "days: Input should be a valid integer" in out
    assert "write it as a table of that type's fields" in out
    assert not (workdir / "ledger.db").exists() or _task_ids(workdir) == []
    good = _task_file(workdir, f'input = {{ city = "Lisbon" }}\n{components}', "good.toml")
    code, out = _pev(workdir, "run", "-q", "--task-id", "trip-1", str(good))
    assert code == 0, out

    async def recorded() -> tuple[object, object]:
        store = SQLiteStore(workdir / "ledger.db")
        try:
            state = await Ledger(store).state("trip-1")
            assert state.finished is not None
            return state.created.input, state.finished.output
        finally:
            await store.close()

    task_input, output = asyncio.run(recorded())
    assert dict(task_input) == {"city": "Lisbon", "days": 1}  # type: ignore[call-overload]
    assert output == "sunny"


def _recorded_input(folder: Path, task_id: str) -> object:
    async def read() -> object:
        store = SQLiteStore(folder / "ledger.db")
        try:
            return (await Ledger(store).state(task_id)).created.input
        finally:
            await store.close()

    return asyncio.run(read())


def test_input_on_the_command_line_takes_the_place_of_the_files(workdir: Path) -> None:
    """--input and --input-file give the input; the file then need not have one."""
    components = '[components]\nagent = "agent:traveller"\n'
    path = _task_file(workdir, f'input = {{ city = "Lisbon" }}\n{components}')
    bare = _task_file(workdir, components, "bare.toml")
    code, out = _pev(
        workdir, "run", "-q", "--task-id", "t1", "--input", '{"city": "Oslo"}', str(path)
    )
    assert code == 0, out
    assert dict(_recorded_input(workdir, "t1")) == {"city": "Oslo", "days": 1}  # type: ignore[call-overload]
    (workdir / "trip.json").write_text('{"city": "Rome", "days": 3}', encoding="utf-8")
    code, out = _pev(
        workdir, "run", "-q", "--task-id", "t2", "--input-file", "trip.json", str(bare)
    )
    assert code == 0, out
    assert dict(_recorded_input(workdir, "t2")) == {"city": "Rome", "days": 3}  # type: ignore[call-overload]
    submitted = CliRunner().invoke(
        cli,
        ["--db", str(workdir / "ledger.db"), "submit", "--task-id=t3", "--input-file=-", str(bare)],
        input='{"city": "Pisa"}',
    )
    assert (submitted.exit_code, submitted.output.strip()) == (0, "t3")
    assert dict(_recorded_input(workdir, "t3")) == {"city": "Pisa", "days": 1}  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--input", "Oslo"], "--input: not JSON (Expecting value at line 1, column 1); give a"),
        (["--input", "[1, NaN]"], "--input: input[1]: nan is not a JSON number"),
        (["--input", "1", "--input-file", "x.json"], "give --input or --input-file, not both"),
        (["--input-file", "missing.json"], "--input-file missing.json: cannot be read"),
        (["--input", '{"days": 2}'], "--input: does not fit the agent's input type Trip: city"),
        ([], "input: missing; add input = "),
    ],
)
@pytest.mark.parametrize("command", ["run", "submit"])
def test_input_that_cannot_be_used_is_one_line_and_nothing_is_written(
    workdir: Path, command: str, options: list[str], said: str
) -> None:
    bare = _task_file(workdir, '[components]\nagent = "agent:traveller"\n', "bare.toml")
    code, out = _pev(workdir, command, *options, str(bare))
    assert code == 2, out
    assert out.count("\n") == 1, out
    assert said in out
    assert not (workdir / "ledger.db").exists()


def test_a_task_file_names_its_store_and_the_command_line_overrides_it(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``store = "tasks.db"`` (from the file's folder) is where run and submit write, unless
    --db or PEV_DB names another; a store that cannot be opened names the file's field."""
    path = _task_file(workdir, f'store = "tasks.db"\n{PASSING}')
    (workdir / "elsewhere").mkdir()
    monkeypatch.chdir(workdir / "elsewhere")
    monkeypatch.delenv("PEV_DB", raising=False)
    runner = CliRunner()
    ran = runner.invoke(cli, ["run", "-q", "--task-id", "from-file", str(path)])
    assert ran.exit_code == 0, ran.output
    submitted = runner.invoke(cli, ["submit", "--task-id", "queued", str(path)])
    assert (submitted.exit_code, submitted.output) == (0, "queued\n")
    assert sorted(_task_ids(workdir, "tasks.db")) == ["from-file", "queued"]

    overridden = runner.invoke(cli, ["--db", "flag.db", "run", "-q", "--task-id", "f", str(path)])
    assert overridden.exit_code == 0, overridden.output
    assert _task_ids(workdir / "elsewhere", "flag.db") == ["f"]
    monkeypatch.setenv("PEV_DB", str(workdir / "env.db"))
    from_env = runner.invoke(cli, ["submit", "--task-id", "e", str(path)])
    assert from_env.exit_code == 0, from_env.output
    assert _task_ids(workdir, "env.db") == ["e"]

    monkeypatch.delenv("PEV_DB")
    bad = _task_file(workdir, f'store = "mysql://db/ledgers"\n{PASSING}', name="bad.toml")
    refused = runner.invoke(cli, ["submit", str(bad)])
    assert refused.exit_code == 2
    assert f"{bad}: store: mysql:// is not a store pev can open" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_resume_of_a_live_task_is_a_one_line_refusal(workdir: Path) -> None:
    """A task another driver holds: one line naming the owner and the lease's expiry, exit 2."""
    _create(workdir, "live-1", {"planner": "agent:planner", "tools": "agent:forecast"})
    _hold(workdir, "live-1", lease_s=600)
    events = _event_count(workdir, "live-1")
    code, out = _pev(workdir, "resume", "live-1")
    assert code == 2
    assert len(out.strip().splitlines()) == 1, out
    assert out.startswith("pev: task live-1 is being driven by other-host:99:abcd")
    assert "its lease runs until" in out
    assert _event_count(workdir, "live-1") == events


def _hold(folder: Path, task_id: str, *, lease_s: float) -> None:
    """Another driver (another host) takes the task's lease for ``lease_s``."""

    async def hold() -> None:
        store = SQLiteStore(folder / "ledger.db")
        try:
            await Ledger(store).acquire(task_id, "other-host:99:abcd", lease_s=lease_s)
        finally:
            await store.close()

    asyncio.run(hold())


def test_show_and_tasks_name_who_drives_a_task_now(workdir: Path) -> None:
    """A live lease: `pev show` names its owner and expiry, `pev tasks` has a driver column."""
    _create(workdir, "live-2", {"planner": "agent:planner", "tools": "agent:forecast"})
    code, out = _pev(workdir, "show", "live-2")
    assert code == 0
    assert "no driver has taken it yet: a worker (`pev worker`) or `pev resume` drives it" in out
    _hold(workdir, "live-2", lease_s=600)
    code, out = _pev(workdir, "show", "live-2")
    assert code == 0
    assert "driven now by other-host:99:abcd (lease epoch 1, until " in out
    code, out = _pev(workdir, "tasks")
    assert code == 0
    assert "driver" in out
    assert "other-host" in out  # folded to the column's width


def test_show_says_when_a_drivers_lease_has_run_out(workdir: Path) -> None:
    """An expired lease: `pev show` says there is no live driver and how to pick it up."""
    _create(workdir, "live-3", {"planner": "agent:planner", "tools": "agent:forecast"})
    _hold(workdir, "live-3", lease_s=0.001)
    code, out = _pev(workdir, "show", "live-3")
    assert code == 0
    assert "no live driver: the lease of other-host:99:abcd ended at" in out
    code, out = _pev(workdir, "tasks")
    assert "other-host" not in out
