"""The public entry points are typed with the protocols: mypy --strict helps their users.

One mypy run checks two small user programs: one that uses the API correctly must be clean (a
typed agent, ``pev.Agent[Order, Receipt]``, among them), and one that passes a wrong component (a
verifier where the planner goes, a number as a tool, an input type its planner does not take) or
misuses a typed output must be refused on exactly those lines.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

GOOD = '''
import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

import pev
from pev.engine import NodeContext, PlanRequest, VerifyRequest
from pev.model import (
    JsonValue, NodeResult, Plan, PlanNode, Success, Verdict, VerificationContract
)


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


# A typed agent: pev.Agent[Order, Receipt], as docs/engine.md ("Typed agents") writes one.
class Order(BaseModel):
    sku: str
    qty: int = 1


@dataclass(frozen=True)
class Receipt:
    total: int


@pev.tool(effect="query")
def price(sku: str, qty: int) -> int:
    """The price of qty items of sku."""
    return 3 * qty


def order_planner(request: PlanRequest[Order]) -> Plan:
    order: Order = request.input
    args: dict[str, JsonValue] = {"sku": order.sku, "qty": order.qty}
    return Plan("price", (PlanNode("n1", "price it", tool="price", args=args),))


def order_verifier(request: VerifyRequest[Order]) -> Verdict:
    return Verdict.judge(request.input.qty > 0, request.contract)


def receipt(outputs: Mapping[str, JsonValue]) -> Receipt:
    total = outputs["n1"]
    return Receipt(total if isinstance(total, int) else 0)


shop = pev.Agent(
    order_planner, tools=[price], verifier=order_verifier, input_type=Order, output=receipt
)


async def buy(store: pev.Store) -> int:
    result = await pev.run(Order(sku="apple"), agent=shop, store=store)
    later = await pev.start({"sku": "pear"}, agent=shop, store=store).result()
    again = pev.run_sync(Order(sku="apple"), agent=shop)
    resumed = await pev.resume(result.task_id, store=store, agent=shop)
    return sum(r.output.total for r in (result, later, again, resumed) if r.output is not None)
'''

BAD = """
from collections.abc import Mapping

from pydantic import BaseModel

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.model import JsonValue, Plan, Verdict


def planner(request: PlanRequest) -> Plan:
    raise NotImplementedError


def verifier(request: VerifyRequest) -> Verdict:
    raise NotImplementedError


wrong_role = pev.Agent(verifier, tools=[])  # WRONG: a verifier where the planner goes
wrong_verifier = pev.run_sync("x", planner=planner, tools=[], verifier=planner)  # WRONG
wrong_tool = pev.Agent(planner, tools=[42])  # WRONG: a number is not a tool


class Order(BaseModel):
    sku: str


def order_planner(request: PlanRequest[Order]) -> Plan:
    raise NotImplementedError


def count(outputs: Mapping[str, JsonValue]) -> int:
    raise NotImplementedError


wrong_input = pev.Agent(order_planner, tools=[], input_type=int)  # WRONG: not what it plans for
shop = pev.Agent(order_planner, tools=[], input_type=Order, output=count)


async def receipt_text() -> str:
    result = await pev.run(Order(sku="apple"), agent=shop)
    assert result.output is not None
    return result.output  # WRONG: the output is an int
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
    codes = ("[arg-type]", "[list-item]", "[return-value]")
    assert all(any(code in line for code in codes) for line in errors), done.stdout
