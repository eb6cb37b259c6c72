"""Shared values for the pev.testing tests: a contract, a plan, and the requests built from them."""

from __future__ import annotations

import pytest

from pev.engine import ObserveContext, PlanRequest, VerifyRequest
from pev.ledger import RevisionKind
from pev.model import Plan, PlanNode, Success, TaskId, VerificationContract


@pytest.fixture
def contract() -> VerificationContract:
    return VerificationContract(goal="stack the cubes", success_criteria=("red on blue",))


@pytest.fixture
def plan() -> Plan:
    return Plan(
        "stack the cubes",
        (
            PlanNode("look", tool="camera", effect="query"),
            PlanNode("move", tool="arm", args={"cube": "red", "to": [1, 2]}, after=("look",)),
        ),
    )


@pytest.fixture
def plan_request(contract: VerificationContract) -> PlanRequest:
    return PlanRequest(
        kind=RevisionKind.INITIAL,
        attempt=1,
        task_id=TaskId("task-1"),
        input="stack red on blue",
        contract=contract,
    )


@pytest.fixture
def verify_request(contract: VerificationContract, plan: Plan) -> VerifyRequest:
    return VerifyRequest(
        task_id=TaskId("task-1"),
        input="stack red on blue",
        contract=contract,
        plan=plan,
        revision=1,
        results={"look": Success("ok"), "move": Success(None)},
    )


@pytest.fixture
def observe_context(plan: Plan) -> ObserveContext:
    return ObserveContext(task_id=TaskId("task-1"), revision=1, plan=plan, results={})
