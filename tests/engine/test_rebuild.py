"""Resume rebuilds exactly what the run was given: the decorated tool, the module-level agent.

The payment case: ``pay_tool = pev.tool(pay, reconcile=..., timeout_s=...)`` is charged, and the
process dies before the charge returns. Resume must bring back ``pay_tool`` itself, so that its
``reconcile`` finds the charge by its idempotency key and the task succeeds without a second
charge. The side-effect log is written by the tool, not read from pev's ledger.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from tests.support.modules import log_lines, user_module

import pev
from pev.errors import ComponentError
from pev.ledger import Ledger
from pev.model import RecordStatus
from pev.stores import SQLiteStore

PEV = Path(sys.executable).with_name("pev")

PAYMENTS = '''
"""A payment tool whose process can die mid-charge, and a reconcile that finds a charge."""

import os
from pathlib import Path

import pev
from pev.model import DeviceFailure, Plan, PlanNode

LOG = Path(os.environ["PEV_TEST_CHARGES"])


class Crash(BaseException):
    """Stands in for the process dying during the call."""


async def pay(amount: int) -> dict:
    """Charge the card (an action)."""
    key = pev.engine.current_node_context().idempotency_key
    with LOG.open("a", encoding="utf-8") as log:
        log.write(key + "\\n")
    if os.environ.get("PEV_TEST_DIE_AFTER_CHARGE"):
        raise Crash
    return {"charged": amount}


def charged(record):
    """Look the charge up by the idempotency key pev handed the tool."""
    keys = LOG.read_text(encoding="utf-8").split() if LOG.exists() else []
    if record.idempotency_key in keys:
        return {"charged": "found"}
    return DeviceFailure(record.node_id, "no such charge")


pay_tool = pev.tool(pay, effect="action", timeout_s=0.5, reconcile=charged)


def planner(request):
    return Plan("pay the bill", (PlanNode("pay", "charge 30", tool="pay", args={"amount": 30}),))


booking = pev.Agent(planner, tools=[pay_tool])
'''


@pytest.fixture
def payments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A fresh payments module (a unique name) on the path, with its own charge log."""
    monkeypatch.setenv("PEV_TEST_CHARGES", str(tmp_path / "charges.log"))
    with user_module(tmp_path, monkeypatch, PAYMENTS, prefix="pev_payments") as module:
        yield module


def charges(module: ModuleType) -> list[str]:
    """The charges the tool made, from its own append-only log."""
    return log_lines(module.LOG)


def pev_resume(db: Path, task_id: str) -> subprocess.CompletedProcess[str]:
    """`pev resume TASK` in the folder of the ledger (where the payments module lives)."""
    return subprocess.run(
        [str(PEV), "--db", str(db), "resume", task_id],
        cwd=db.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def crash_mid_charge(
    module: ModuleType, store: pev.Store, monkeypatch: pytest.MonkeyPatch, **given: object
) -> str:
    """Run until the charge is made and the process "dies"; the record stays in flight."""
    monkeypatch.setenv("PEV_TEST_DIE_AFTER_CHARGE", "1")
    with pytest.raises(module.Crash):
        await pev.run("pay the bill", store=store, task_id="bill-1", **given)  # type: ignore[arg-type]
    monkeypatch.delenv("PEV_TEST_DIE_AFTER_CHARGE")
    state = await Ledger(store).state("bill-1")
    assert [r.status for r in state.records.values()] == [RecordStatus.PENDING]
    assert len(charges(module)) == 1
    return "bill-1"


async def test_resume_rebuilds_the_decorated_tool_with_its_reconcile(
    payments: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The payment case: resume rebuilds pay_tool, its reconcile finds the one charge."""
    store = pev.MemoryStore()
    task = await crash_mid_charge(
        payments, store, monkeypatch, planner=payments.planner, tools=[payments.pay_tool]
    )
    created = (await Ledger(store).state(task)).created
    assert created.components["tools"] == f"{payments.__name__}:pay_tool"

    result = await pev.resume(task, store=store)

    assert result.ok
    assert result.outputs["pay"] == {"charged": "found"}
    assert len(charges(payments)) == 1  # settled by reconcile, never charged again


async def test_a_module_level_agent_is_recorded_and_rebuilt_whole(
    payments: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run(agent=booking) records one path, and resume rebuilds that very agent."""
    store = pev.MemoryStore()
    task = await crash_mid_charge(payments, store, monkeypatch, agent=payments.booking)
    created = (await Ledger(store).state(task)).created
    assert dict(created.components) == {"agent": f"{payments.__name__}:booking"}

    result = await pev.resume(task, store=store)

    assert result.ok
    assert len(charges(payments)) == 1


async def test_a_bare_function_where_a_decorated_tool_stands_is_refused(
    payments: ModuleType,
) -> None:
    """A path naming pay (the function behind pay_tool) is refused, naming pay_tool."""
    store = pev.MemoryStore()
    module = payments.__name__
    await Ledger(store).create(
        "pay the bill",
        components={"planner": f"{module}:planner", "tools": f"{module}:pay"},
        task_id="bill-2",
    )

    with pytest.raises(ComponentError, match=f"decorated tool {module}:pay_tool") as raised:
        await pev.resume("bill-2", store=store)

    assert raised.value.role == "tools"
    assert "\n" not in str(raised.value)
    assert charges(payments) == []


async def test_a_recorded_agent_path_that_is_no_agent_is_refused(payments: ModuleType) -> None:
    """An agent path naming something else is a ComponentError on role agent."""
    store = pev.MemoryStore()
    await Ledger(store).create(
        "pay", components={"agent": f"{payments.__name__}:planner"}, task_id="bill-3"
    )
    with pytest.raises(ComponentError, match=r"not a pev\.Agent") as raised:
        await pev.resume("bill-3", store=store)
    assert raised.value.role == "agent"


async def test_tools_given_on_resume_replace_a_recorded_executor_unloaded(
    payments: ModuleType,
) -> None:
    """tools=... takes the place of the recorded executor, whose path is never imported."""
    store = pev.MemoryStore()
    await Ledger(store).create(
        "pay the bill",
        components={
            "planner": f"{payments.__name__}:planner",
            "executor": "pev_no_such_module:Arm",
        },
        task_id="bill-5",
    )

    result = await pev.resume("bill-5", store=store, tools=[payments.pay_tool])

    assert result.ok
    assert len(charges(payments)) == 1


def test_pev_resume_rebuilds_the_decorated_tool(
    payments: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The payment case through `pev resume`: exit 0, one charge in the tool's own log."""
    db = tmp_path / "ledger.db"

    async def crash() -> None:
        store = SQLiteStore(db)
        try:
            await crash_mid_charge(
                payments, store, monkeypatch, planner=payments.planner, tools=[payments.pay_tool]
            )
        finally:
            await store.close()

    asyncio.run(crash())
    done = pev_resume(db, "bill-1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reconciled" in done.stdout or "succeeded" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "task bill-1: succeeded/execution_succeeded"
    assert len(charges(payments)) == 1


def test_pev_resume_refuses_a_bare_function_in_one_line(
    payments: ModuleType, tmp_path: Path
) -> None:
    """`pev resume` of a task whose tool path names the bare function: one line, exit 2."""
    db = tmp_path / "ledger.db"
    module = payments.__name__

    async def create() -> None:
        store = SQLiteStore(db)
        try:
            await Ledger(store).create(
                "pay",
                components={"planner": f"{module}:planner", "tools": f"{module}:pay"},
                task_id="bill-4",
            )
        finally:
            await store.close()

    asyncio.run(create())
    done = pev_resume(db, "bill-4")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"decorated tool {module}:pay_tool" in done.stderr
    assert charges(payments) == []


TWIN = """
import pev
from pev.model import Plan


@pev.tool(effect="query")
def look() -> str:
    return "{name}"


def planner(request):
    return Plan("{name}", ())


agent = pev.Agent(planner, tools=[look])
"""


def test_a_module_of_the_same_name_from_another_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks whose agents are ``agent.py`` of two folders: a process that holds the first
    one's module refuses to rebuild the second task with it, naming both folders."""
    from pev.engine._components import IMPORT_ROOTS_KEY, rebuild

    name = f"twin_agent_{tmp_path.name.replace('-', '_')}"
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / f"{name}.py").write_text(TWIN.format(name=folder.name), encoding="utf-8")
    monkeypatch.syspath_prepend(str(first))
    monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        mine = rebuild({"agent": f"{name}:agent", IMPORT_ROOTS_KEY: str(first)}, {})
        assert mine.planner(None).goal == "first"
        with pytest.raises(ComponentError) as refused:
            rebuild({"agent": f"{name}:agent", IMPORT_ROOTS_KEY: str(second)}, {})
        message = str(refused.value)
        assert f"the task's module {name!r} is in {second}" in message
        assert f"from {first}" in message
    finally:
        sys.modules.pop(name, None)
