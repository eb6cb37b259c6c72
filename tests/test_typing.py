"""The public entry points are typed with the protocols: mypy --strict helps their users.

One mypy run checks two small user programs: one that uses the API correctly must be clean, and
one that passes a wrong component (a verifier where the planner goes, a number as a tool) must
be refused on exactly those lines.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

GOOD = '''
import asyncio

import pev
from pev.engine import NodeContext, PlanRequest, VerifyRequest
from pev.model import NodeResult, Plan, PlanNode, Success, Verdict, VerificationContract


@pev.tool(effect="query")
def forecast(city: str) -> dict[str, str]:
    """Tomorrow's forecast."""
    return {"city": city, "sky": "sunny"}


def planner(request: PlanRequest) -> Plan:
    return Plan("weather", (PlanNode("look", "forecast", tool="forecast", args={"city": "Oslo"}),))


async def async_planner(request: PlanRequest) -> Plan | None:
    return None


def verifier(request: VerifyRequest) -> Verdict:
    return Verdict.judge(request.output("look") is not None, request.contract)


class Executor:
    async def execute(self, node: PlanNode, context: NodeContext) -> NodeResult:
        return Success(node.id)


contract = VerificationContract("recovery", "weather", ["a forecast"])
agent = pev.Agent(planner, tools=[forecast], verifier=verifier, contract=contract)
other = pev.Agent(async_planner, executor=Executor())
result: pev.RunResult = pev.run_sync("weather in Oslo", agent=agent)
shortcut = pev.run_sync("weather", planner=planner, tools=[forecast], verifier=verifier)


async def main(store: pev.Store) -> bool:
    done = await pev.run("weather", agent=other, store=store)
    again = await pev.resume(done.task_id, store=store, agent=agent)
    return again.ok


asyncio.run(main(pev.MemoryStore()))
'''

BAD = """
import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.model import Plan, Verdict


def planner(request: PlanRequest) -> Plan:
    raise NotImplementedError


def verifier(request: VerifyRequest) -> Verdict:
    raise NotImplementedError


wrong_role = pev.Agent(verifier, tools=[])  # WRONG: a verifier where the planner goes
wrong_verifier = pev.run_sync("x", planner=planner, tools=[], verifier=planner)  # WRONG
wrong_tool = pev.Agent(planner, tools=[42])  # WRONG: a number is not a tool
"""


def test_mypy_accepts_correct_use_and_refuses_wrong_components(tmp_path: Path) -> None:
    """mypy --strict: the correct program is clean; each wrong component is an arg-type error."""
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD), encoding="utf-8")
    bad = textwrap.dedent(BAD)
    (tmp_path / "bad.py").write_text(bad, encoding="utf-8")
    wrong = {n for n, line in enumerate(bad.splitlines(), start=1) if "# WRONG" in line}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "good.py",
            "bad.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [line for line in errors if line.startswith("good.py")], done.stdout
    wrong_lines = {int(line.split(":")[1]) for line in errors if line.startswith("bad.py")}
    assert wrong_lines == wrong, done.stdout
    assert all("[arg-type]" in line or "[list-item]" in line for line in errors), done.stdout
