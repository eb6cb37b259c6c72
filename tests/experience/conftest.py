"""Experience fixtures: both stores, and a small claims agent whose tasks end every way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.support import postgres

import pev
from pev.experience import LessonBook
from pev.ledger import Ledger, TaskState
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import ScriptedPlanner, ScriptedVerifier

CONTRACT = VerificationContract(
    goal="file the insurance claim for the flooded kitchen",
    success_criteria=("the claim is filed",),
)
PLAN = Plan(
    CONTRACT.goal,
    (
        PlanNode(
            "find_policy",
            "look the policy up",
            tool="lookup",
            args={"holder": "Dana Whitfield"},
            effect=pev.Effect.QUERY,
        ),
        PlanNode(
            "file_claim",
            "file the claim",
            tool="submit",
            args={"claim": "CLM-7781", "amount": 1250.5, "note": "kitchen flood"},
            after=("find_policy",),
        ),
    ),
)

# The local replan of a claim filed to the wrong desk: the same claim, to the claims desk.
REFILED = Plan(
    CONTRACT.goal,
    (
        PLAN.nodes[0],
        replace(
            PLAN.nodes[1],
            args={"claim": "CLM-7781", "amount": 1250.5, "note": "kitchen flood; claims desk"},
        ),
    ),
)


@pev.tool(effect="query")
def lookup(holder: str) -> dict[str, Any]:
    """Find a holder's policy."""
    return {"holder": holder, "covered": True}


@pev.tool
def submit(claim: str, amount: float, note: str) -> str:
    """File a claim."""
    return f"filed {claim}"


@pev.tool(name="submit")
def broken_submit(claim: str, amount: float, note: str) -> str:
    """File a claim, on a server that is down."""
    raise ConnectionError("the claims server is down")


class Claims:
    """Runs claims tasks on one store, each ending a chosen way; returns the ended state."""

    plan = PLAN
    contract = CONTRACT
    lookup = lookup

    def __init__(self, store: pev.Store) -> None:
        self.store = store

    async def _run(self, input: object, verifier: object, **options: Any) -> TaskState:  # noqa: A002
        options.setdefault("tools", [lookup, submit])
        options.setdefault("planner", ScriptedPlanner(PLAN, repeat_last=True))
        result = await pev.run(
            input,  # type: ignore[arg-type]
            verifier=verifier,
            contract=CONTRACT,
            store=self.store,
            **options,
        )
        return await Ledger(self.store).state(result.task_id)

    async def success(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """Passes on the first revision."""
        return await self._run(input, ScriptedVerifier.passing(), **options)

    async def mixed(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """The verifier blames ``file_claim`` once (a plan error); it is filed again, passes."""
        options.setdefault("planner", ScriptedPlanner(PLAN, REFILED))
        verifier = ScriptedVerifier(
            lambda request: Verdict.failed(
                request.contract, failed_nodes=["file_claim"], feedback="filed to the wrong desk"
            ),
            lambda request: Verdict.passed(request.contract),
        )
        return await self._run(input, verifier, **options)

    async def exhausted(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """The verifier always blames ``file_claim``: failed/replan_budget_exhausted."""
        return await self._run(input, ScriptedVerifier.failing("file_claim"), **options)

    async def device_failure(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """``submit`` fails on its server and the verifier blames it: partial/device_failure."""
        options["tools"] = [lookup, broken_submit]
        return await self._run(input, ScriptedVerifier.failing("file_claim"), **options)

    async def unreliable(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """The verifier raises: partial/verifier_unreliable."""
        return await self._run(input, ScriptedVerifier(RuntimeError("judge offline")), **options)

    async def audit(self, input: object = "claim 1", **options: Any) -> TaskState:  # noqa: A002
        """Audit mode: the verifier's failure does not change the outcome."""
        contract = VerificationContract(
            pev.VerificationMode.AUDIT, CONTRACT.goal, CONTRACT.success_criteria
        )
        result = await pev.run(
            input,  # type: ignore[arg-type]
            planner=ScriptedPlanner(PLAN),
            verifier=ScriptedVerifier.failing("file_claim"),
            tools=[lookup, submit],
            contract=contract,
            store=self.store,
            **options,
        )
        return await Ledger(self.store).state(result.task_id)


async def _open(kind: str, tmp_path: Path) -> pev.Store:
    if kind == "postgres":
        postgres.require()
        return postgres.ThrowawayStore()
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "ledger.db")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh store of each kind (every one keeps lessons), closed afterwards."""
    opened = await _open(request.param, tmp_path)
    yield opened
    await opened.close()


@pytest.fixture
def book(store: Any) -> LessonBook:
    """A lesson book over ``store`` (min_support 3)."""
    return LessonBook(store)


@pytest.fixture
def claims(store: Any) -> Claims:
    """The claims agent on ``store``."""
    return Claims(store)


@pytest.fixture
def claims_type() -> type[Claims]:
    """The claims agent's class, for tests that open their own stores."""
    return Claims
