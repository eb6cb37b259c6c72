"""PEV_TRUSTED_MODULES: with it set, nothing outside its prefixes is imported (docs/security.md).

Each test writes its own module, which leaves a marker file when it is imported, so that a test
can tell that pev refused a path *before* importing anything (a ledger naming ``this:s`` once
made ``resume`` import it).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.support.refusals import waiting_task, worker_until

import pev
from pev._imports import TRUSTED_MODULES_VARIABLE, ImportPathError, resolve
from pev.cli import cli
from pev.engine import WorkerReport
from pev.errors import ComponentError
from pev.ledger import Ledger, TaskState
from pev.stores import SQLiteStore

AGENT = """
from pathlib import Path

import pev
from pev.model import Plan, PlanNode

Path({marker!r}).write_text("imported")


@pev.tool(effect="query")
def look() -> int:
    return 1


def planner(request):
    return Plan("look", (PlanNode("a", "look", tool="look", effect="query"),))
"""


@dataclass(frozen=True)
class Module:
    """A module on the path that has not been imported yet, and the marker its import leaves."""

    name: str
    marker: Path

    @property
    def imported(self) -> bool:
        """Whether anything imported the module (its code ran)."""
        return self.marker.exists()


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Module]:
    """A fresh, unimported module ``<pkg>.agent`` under a package of a unique name."""
    package = f"untrusted_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    marker = tmp_path / "imported.marker"
    source = textwrap.dedent(AGENT.format(marker=str(marker)))
    (tmp_path / package / "agent.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield Module(f"{package}.agent", marker)
    for name in (package, f"{package}.agent"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("trusted", "module", "allowed"),
    [
        pytest.param("myapp", "myapp", True, id="the-module-itself"),
        pytest.param("myapp", "myapp.tools", True, id="a-submodule"),
        pytest.param("myapp", "myapp.tools.deep", True, id="a-deeper-submodule"),
        pytest.param("myapp", "myappevil", False, id="not-a-longer-name"),
        pytest.param("myapp.tools", "myapp", False, id="not-the-parent"),
        pytest.param("myapp.tools", "myapp.toolsx", False, id="not-a-longer-segment"),
        pytest.param(" other , myapp ", "myapp.x", True, id="any-entry-spaces-trimmed"),
        pytest.param("", "myapp", False, id="empty-trusts-nothing"),
    ],
)
def test_a_prefix_matches_whole_module_segments(
    monkeypatch: pytest.MonkeyPatch, trusted: str, module: str, allowed: bool
) -> None:
    """A prefix trusts the module of that name and those below it, never a longer name."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, trusted)
    from pev._imports import check_trusted

    if allowed:
        check_trusted(f"{module}:thing")
    else:
        with pytest.raises(ImportPathError, match=TRUSTED_MODULES_VARIABLE):
            check_trusted(f"{module}:thing")


def test_an_untrusted_path_is_refused_before_its_module_is_imported(
    modules: Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resolve() names the path and the variable, and the module's code never runs."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp")
    with pytest.raises(ImportPathError) as raised:
        resolve(f"{modules.name}:planner")
    assert f"{modules.name}:planner" in str(raised.value)
    assert TRUSTED_MODULES_VARIABLE in str(raised.value)
    assert not modules.imported
    assert modules.name not in sys.modules


def test_a_trusted_path_is_imported(modules: Module, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path under a trusted prefix resolves as it would without the variable."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp," + modules.name.split(".")[0])
    assert callable(resolve(f"{modules.name}:planner"))
    assert modules.imported


def test_a_bad_entry_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry that is not a module name is refused, naming the variable and the entry."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp, my app")
    with pytest.raises(ImportPathError, match=f"{TRUSTED_MODULES_VARIABLE}: 'my app'"):
        resolve("myapp:thing")


def test_unset_imports_anything(modules: Module, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the variable every import path is trusted, as before."""
    monkeypatch.delenv(TRUSTED_MODULES_VARIABLE, raising=False)
    assert callable(resolve(f"{modules.name}:planner"))


def test_resume_refuses_a_ledger_naming_an_untrusted_module(
    modules: Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pev.resume raises ComponentError naming the path and the variable; nothing is imported."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp")
    db = tmp_path / "ledger.db"
    paths = {"planner": f"{modules.name}:planner", "tools": f"{modules.name}:look"}
    task_id = asyncio.run(waiting_task(db, paths))

    async def resume() -> None:
        store = SQLiteStore(db)
        try:
            await pev.resume(task_id, store=store)
        finally:
            await store.close()

    with pytest.raises(ComponentError) as raised:
        asyncio.run(resume())
    assert f"{modules.name}:planner" in str(raised.value)
    assert TRUSTED_MODULES_VARIABLE in str(raised.value)
    assert not modules.imported


def test_pev_resume_refuses_in_one_line_exit_2(
    modules: Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pev resume` of such a task: one line naming the path and the variable, exit 2."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp")
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(waiting_task(db, {"agent": f"{modules.name}:agent"}))
    result = CliRunner().invoke(cli, ["--db", str(db), "resume", task_id])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    assert f"{modules.name}:agent" in lines[0]
    assert f"add '{modules.name}' to {TRUSTED_MODULES_VARIABLE}" in lines[0]
    assert not modules.imported


def test_pev_run_refuses_a_task_file_naming_an_untrusted_module(
    modules: Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task file's import path outside the prefixes: one line, exit 2, nothing imported."""
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp")
    task = tmp_path / "task.toml"
    task.write_text(
        f'input = "look"\n[components]\nplanner = "{modules.name}:planner"\n'
        f'tools = ["{modules.name}:look"]\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "ledger.db"), "run", str(task)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "components.planner" in result.output
    assert TRUSTED_MODULES_VARIABLE in result.output
    assert not modules.imported


def test_a_worker_refuses_an_untrusted_task_and_carries_on(
    modules: Module,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker logs one line naming the variable, records the start failed, imports nothing.

    The drive cannot start: each attempt is a ``start_failed`` event and a released lease, and
    the policy's last one ends the task ``failed``/``agent_unavailable`` (docs/workers.md).
    """
    monkeypatch.setenv(TRUSTED_MODULES_VARIABLE, "myapp")
    db = tmp_path / "ledger.db"
    task_id = asyncio.run(waiting_task(db, {"planner": f"{modules.name}:planner"}))

    def not_started() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "could not start" in r.getMessage()]

    def ended() -> bool:
        return any("agent_unavailable" in r.getMessage() for r in not_started())

    async def work() -> tuple[WorkerReport, TaskState]:
        store = SQLiteStore(db)
        try:
            report = await worker_until(
                store,
                lambda: "agent_unavailable" in " ".join(r.getMessage() for r in not_started()),
            )
            return report, await Ledger(store).state(task_id)
        finally:
            await store.close()

    with caplog.at_level(logging.INFO, logger="pev.worker"):
        report, state = asyncio.run(asyncio.wait_for(work(), timeout=30))
    attempts = state.policy.start_attempts
    assert (report.not_started, report.failed, report.ended) == (attempts, 0, 1)
    assert state.finished is not None
    assert state.finished.reason == "agent_unavailable"
    lines = not_started()
    assert len(lines) == attempts
    assert all(TRUSTED_MODULES_VARIABLE in line.getMessage() for line in lines)
    assert all(line.exc_info is None for line in lines)
    assert len(state.start_failures) == attempts
    assert all(TRUSTED_MODULES_VARIABLE in failed.cause for failed in state.start_failures)
    assert not modules.imported
