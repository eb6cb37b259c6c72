"""Nothing escapes, nothing sticks: bad values from components end as recorded failures.

What a planner returns that cannot run or cannot be recorded is a rejected plan (docs/design.md
§2.1); what a tool returns that cannot be recorded ends its record ``failed`` (a query) or
``unknown`` (an action) (§2.2); a verifier's return that is not a recordable verdict is
``malformed`` (§2.5); an observer's that cannot be recorded is a failed capture. In every case
``pev.run`` returns, the task is terminal, and the ledger reads back and verifies from a fresh
store.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.watering import CRITERION, GOAL, RECOVERY

import pev
from pev.engine import Observation
from pev.ledger import Ledger, RevisionStarted, TaskState
from pev.model import (
    CriterionResult,
    CriterionStatus,
    Effect,
    EvidencePhase,
    Plan,
    PlanNode,
    RecordStatus,
    Reliability,
    Verdict,
    VerdictStatus,
)
from pev.policy import RecoveryPolicy
from pev.stores import SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier


def _ANY(value: object) -> Any:  # noqa: N802 - reads as a cast in the tables below
    """``value``, typed as anything: the tables hand pev values of the wrong type on purpose."""
    return value


def _nested(depth: int, kind: str = "dict") -> object:
    value: object = 0
    for _ in range(depth):
        value = {"a": value} if kind == "dict" else [value]
    return value


class _Raising(Mapping[str, object]):
    """A planner's own mapping that fails when it is read."""

    def __getitem__(self, key: str) -> object:
        raise RuntimeError("unreadable")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("unreadable")

    def __len__(self) -> int:
        return 1


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A SQLite ledger file: each check reads it back through a store of its own."""
    return tmp_path / "ledger.db"


async def _run(db: Path, *, input: object = GOAL, **options: object) -> pev.RunResult:  # noqa: A002
    store = SQLiteStore(db)
    try:
        return await pev.run(input, store=store, **options)  # type: ignore[arg-type]
    finally:
        await store.close()


async def _reread(db: Path, task_id: str) -> TaskState:
    """The task folded from a fresh store; its chain verifies and it is terminal."""
    store = SQLiteStore(db)
    try:
        ledger = Ledger(store)
        report = await ledger.verify(task_id)
        assert report.ok, report.problem
        state = await ledger.state(task_id)
    finally:
        await store.close()
    assert state.terminal, state.phase
    assert not any(not record.terminal for record in state.records.values())
    return state


@pev.tool(effect=Effect.QUERY)
def soil(depth: object = None) -> str:
    """Read the soil sensor (args of any type, to carry what the planner gives it)."""
    return "dry"


BAD_ARGS = [
    pytest.param(math.nan, "nan is not a JSON number", id="nan"),
    pytest.param(math.inf, "inf is not a JSON number", id="inf"),
    pytest.param(-math.inf, "-inf is not a JSON number", id="minus-inf"),
    pytest.param(object(), "a object is not a JSON value", id="object"),
    pytest.param("dry\ud800", "text that is not valid Unicode", id="surrogate"),
    pytest.param(10**5000, "the integer of about 5001 digits", id="5000-digit-int"),
    pytest.param(_nested(900), "nested deeper than 64 levels", id="900-deep-dict"),
    pytest.param(_nested(100_000, "list"), "nested deeper than 64 levels", id="100000-deep-list"),
    pytest.param(b"bytes", "a bytes is not a JSON value", id="bytes"),
    pytest.param({1, 2}, "a set is not a JSON value", id="set"),
    pytest.param({1: "one"}, "object key 1 is not a string", id="int-key"),
    pytest.param({"x": "y" * 2_000_000}, "more than 1048576 bytes", id="two-megabytes"),
]


@pytest.mark.parametrize(("bad", "named"), BAD_ARGS)
async def test_planner_args_that_cannot_be_recorded_are_a_rejected_plan(
    db: Path, bad: object, named: str
) -> None:
    """The issue's planner values: every plan is rejected naming the value; the budget ends it."""
    node = PlanNode(
        "look", "read the soil", tool="soil", args={"depth": _ANY(bad)}, effect=Effect.QUERY
    )
    planner = ScriptedPlanner(Plan(GOAL, (node,)), repeat_last=True)

    result = await _run(
        db, planner=planner, tools=[soil], verifier=ScriptedVerifier.passing(), contract=RECOVERY
    )

    assert (result.status, result.reason) == ("failed", "invalid_plan")
    state = await _reread(db, result.task_id)
    assert len(state.rejections) == 3  # the initial plan and both replans
    for rejected in state.rejections:
        assert any(named in problem and ": args" in problem for problem in rejected.problems)
        assert rejected.plan is None  # a plan the ledger cannot hold is not kept
    assert named in result.detail


WRONG_RETURNS = [
    pytest.param(lambda request: None, "returned no plan", id="none"),
    pytest.param(lambda request: {"goal": GOAL, "nodes": []}, "returned a dict", id="dict"),
    pytest.param(lambda request: "water them", "returned a str", id="str"),
    pytest.param(lambda request: 42, "returned a int", id="int"),
    pytest.param(lambda request: Plan(GOAL, _ANY([1, 2])), "sequence of PlanNode", id="bad-nodes"),
    pytest.param(lambda request: Plan(GOAL, _ANY(5)), "sequence of PlanNode", id="nodes-int"),
    pytest.param(lambda request: Plan(_ANY(5), (PlanNode("n", "x"),)), "goal must", id="goal-int"),
    pytest.param(lambda request: Plan(GOAL, (PlanNode(_ANY(5), "x"),)), "non-empty", id="id-int"),
    pytest.param(
        lambda request: Plan(GOAL, (PlanNode("n", "x", after=_ANY([1])),)),
        "after must be a list of node ids",
        id="after-ints",
    ),
    pytest.param(
        lambda request: Plan(GOAL, (PlanNode("n", "x", effect=_ANY("banana")),)),
        "effect must be",
        id="effect-unknown",
    ),
    pytest.param(
        lambda request: Plan(GOAL, (PlanNode("n\ud800", "x"),)),
        "not valid Unicode",
        id="id-surrogate",
    ),
    pytest.param(
        lambda request: Plan("\udfff", (PlanNode("n", "x"),)),
        "not valid Unicode",
        id="goal-surrogate",
    ),
    pytest.param(
        lambda request: Plan(GOAL, (PlanNode("n", "x", args=_ANY(_Raising())),)),
        "unreadable",
        id="args-unreadable",
    ),
]


@pytest.mark.parametrize(("planner", "named"), WRONG_RETURNS)
async def test_a_planner_return_of_the_wrong_shape_is_a_rejected_plan(
    db: Path, planner: object, named: str
) -> None:
    """Whatever a planner returns, run returns: a rejection naming it, and the task ends."""
    result = await _run(
        db,
        planner=planner,
        executor=FunctionExecutor(),
        contract=RECOVERY,
        verifier=ScriptedVerifier.passing(),
    )

    assert (result.status, result.reason) == ("failed", "invalid_plan")
    state = await _reread(db, result.task_id)
    assert all(any(named in p for p in r.problems) for r in state.rejections), state.rejections


async def test_a_rejected_plan_that_can_be_recorded_is_kept(db: Path) -> None:
    """A plan rejected for its structure alone (a cycle) is kept in the rejection, as before."""
    cycle = Plan(
        GOAL,
        (PlanNode("x", "one", after=("y",)), PlanNode("y", "two", after=("x",))),
    )
    result = await _run(db, planner=ScriptedPlanner(cycle), executor=FunctionExecutor())

    [rejected] = (await _reread(db, result.task_id)).rejections
    assert rejected.plan == cycle


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(10**5000, id="5000-digit-int"),
        pytest.param(_nested(900), id="900-deep-dict"),
        pytest.param(math.nan, id="nan"),
        pytest.param({"when": object()}, id="object"),
        pytest.param("\ud800", id="surrogate"),
        pytest.param("x" * 2_000_000, id="two-megabytes"),
        pytest.param({(1, 2): "tuple key"}, id="tuple-key"),
    ],
)
@pytest.mark.parametrize(
    ("effect", "status"),
    [("query", RecordStatus.FAILED), ("action", RecordStatus.UNKNOWN)],
)
async def test_a_tool_output_that_cannot_be_recorded_ends_its_record(
    db: Path, value: object, effect: str, status: RecordStatus
) -> None:
    """The issue's tool values: failed for a query, unknown for an action; never pending."""

    @pev.tool(effect=Effect(effect))
    def measure() -> object:
        """Measure the soil."""
        return value

    node = PlanNode("m", "measure", tool="measure", effect=Effect(effect))
    result = await _run(db, planner=ScriptedPlanner(Plan(GOAL, (node,))), tools=[measure])

    assert (result.status, result.reason) == ("failed", "execution_failed")
    [record] = (await _reread(db, result.task_id)).records.values()
    assert record.status is status
    assert record.error is not None
    assert "returned a non-JSON value" in record.error
    assert ("the action ran" in record.error) is (effect == "action")


async def test_an_executor_result_past_the_limits_is_unknown_for_an_action(db: Path) -> None:
    """An executor's own Success holding a 5,000-digit int is caught before the ledger."""
    executor = FunctionExecutor({"m": lambda: pev.Success(10**5000)})
    node = PlanNode("m", "measure")  # no tool: an action
    result = await _run(db, planner=ScriptedPlanner(Plan(GOAL, (node,))), executor=executor)

    [record] = (await _reread(db, result.task_id)).records.values()
    assert record.status is RecordStatus.UNKNOWN
    assert "integer of about 5001 digits" in (record.error or "")


async def test_an_executor_failure_with_unstorable_text_is_stored_escaped(db: Path) -> None:
    """A DeviceFailure whose error holds a lone surrogate is kept, with the surrogate escaped."""
    executor = FunctionExecutor({"m": lambda: pev.DeviceFailure("m", "jammed \ud800")})
    node = PlanNode("m", "measure")
    result = await _run(db, planner=ScriptedPlanner(Plan(GOAL, (node,))), executor=executor)

    [record] = (await _reread(db, result.task_id)).records.values()
    assert (record.status, record.error) == (RecordStatus.FAILED, "jammed \\ud800")


async def test_the_value_limits_are_the_policys(db: Path) -> None:
    """max_value_bytes and max_value_depth come from the policy, and errors name the setting."""
    executor = FunctionExecutor({"m": lambda: "x" * 200})
    node = PlanNode("m", "measure", effect=Effect.QUERY)
    tight = RecoveryPolicy(max_value_bytes=100)
    result = await _run(
        db, planner=ScriptedPlanner(Plan(GOAL, (node,))), executor=executor, policy=tight
    )
    assert "RecoveryPolicy.max_value_bytes=100" in result.detail

    loose = RecoveryPolicy(max_value_bytes=4 << 20)
    executor = FunctionExecutor({"m": lambda: "x" * (2 << 20)})
    result = await _run(
        db, planner=ScriptedPlanner(Plan(GOAL, (node,))), executor=executor, policy=loose
    )
    assert result.ok


async def test_a_deeper_depth_limit_lets_deeper_args_through(db: Path) -> None:
    """Args five deep are refused under max_value_depth=4 and run under the default."""
    node = PlanNode(
        "look", "read", tool="soil", args={"depth": _ANY(_nested(4))}, effect=Effect.QUERY
    )
    refused = await _run(
        db,
        planner=ScriptedPlanner(Plan(GOAL, (node,))),
        tools=[soil],
        policy=RecoveryPolicy(max_value_depth=4),
    )
    assert "RecoveryPolicy.max_value_depth=4" in refused.detail
    assert (await _run(db, planner=ScriptedPlanner(Plan(GOAL, (node,))), tools=[soil])).ok


def _verdict_of(raw: object) -> object:
    return lambda request: raw


class _Unshowable:
    """A verifier's own object that refuses to be turned into text."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


MALFORMED = [
    pytest.param(42, "returned a int", id="int"),
    pytest.param(Verdict("banana"), "status 'banana'", id="unknown-status"),  # type: ignore[arg-type]
    pytest.param(
        Verdict(
            "replan_required",  # type: ignore[arg-type]
            failed_nodes=frozenset({1, 2}),  # type: ignore[arg-type]
            criteria=(CriterionResult(CRITERION, "unsatisfied"),),  # type: ignore[arg-type]
        ),
        "failed_nodes names ids that are not in the plan",
        id="failed-nodes-ints",
    ),
    pytest.param(
        Verdict(
            "replan_required",  # type: ignore[arg-type]
            feedback="too dry \ud800",
            criteria=(CriterionResult(CRITERION, "unsatisfied"),),  # type: ignore[arg-type]
        ),
        "the verdict cannot be recorded: feedback: text that is not valid Unicode",
        id="feedback-surrogate",
    ),
    pytest.param(
        Verdict(
            "replan_required",  # type: ignore[arg-type]
            feedback="x" * 2_000_000,
            criteria=(CriterionResult(CRITERION, "unsatisfied"),),  # type: ignore[arg-type]
        ),
        "the verdict cannot be recorded: feedback: more than 1048576 bytes",
        id="feedback-two-megabytes",
    ),
    pytest.param(
        Verdict("success", criteria=(CriterionResult(CRITERION + "\ud800", "satisfied"),)),  # type: ignore[arg-type]
        "not in the contract",
        id="criterion-surrogate",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.REPLAN_REQUIRED,
            criteria=(CriterionResult(CRITERION, CriterionStatus.UNSATISFIED),),
            evidence_refs=_ANY((_Unshowable(),)),
        ),
        "could not be read",
        id="evidence-ref-unshowable",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=_ANY((1, 2))),
        "list of CriterionResult",
        id="criteria-junk",
    ),
    pytest.param(
        {
            "status": "success",
            "criteria": [{"criterion": CRITERION, "status": "satisfied"}],
            "feedback": math.nan,
        },
        "not a verdict",
        id="mapping-nan",
    ),
]


@pytest.mark.parametrize(("raw", "named"), MALFORMED)
async def test_a_verifier_return_that_cannot_be_recorded_is_malformed(
    db: Path, raw: object, named: str
) -> None:
    """A malformed return is recorded as malformed with the reason; the task ends partial."""
    node = PlanNode("look", "read", tool="soil", effect=Effect.QUERY)
    result = await _run(
        db,
        planner=ScriptedPlanner(Plan(GOAL, (node,))),
        tools=[soil],
        verifier=_verdict_of(raw),
        contract=RECOVERY,
    )

    assert (result.status, result.reason) == ("partial", "verifier_unreliable")
    state = await _reread(db, result.task_id)
    [recorded] = state.verdicts
    assert recorded.reliability is Reliability.MALFORMED
    assert any(named in problem for problem in recorded.problems), recorded.problems
    assert named.replace("\ud800", "") in result.detail or "verifier:" in result.detail


def _observer_of(*observations: object) -> object:
    return lambda phase, context: list(observations)


@pytest.mark.parametrize(
    ("observed", "named"),
    [
        pytest.param(Observation(kind="state", payload=_ANY({"t": math.nan})), "nan", id="nan"),
        pytest.param(
            Observation(kind="state", payload=_ANY({"n": 10**5000})), "5001 digits", id="int"
        ),
        pytest.param(Observation(kind="state", payload=_ANY(_nested(900))), "nested", id="deep"),
        pytest.param(Observation(kind="st\ud800te"), "kind: text that is not valid", id="kind"),
        pytest.param(
            pev.Evidence(
                id="e1",  # type: ignore[arg-type]
                phase=EvidencePhase.AFTER,
                kind="state",
                source="cam",
                captured_at=datetime(2025, 1, 1),  # noqa: DTZ001 - the observer's mistake
                revision=1,
            ),
            "cannot be recorded as it is",
            id="naive-time",
        ),
        pytest.param(object(), "not an Observation", id="object"),
    ],
)
async def test_an_observation_that_cannot_be_recorded_is_a_failed_capture(
    db: Path, observed: object, named: str
) -> None:
    """An observer's value that cannot be recorded fails the capture, named; the run goes on."""
    node = PlanNode("look", "read", tool="soil", effect=Effect.QUERY)
    result = await _run(
        db,
        planner=ScriptedPlanner(Plan(GOAL, (node,))),
        tools=[soil],
        observer=_observer_of(observed),
    )

    assert result.ok
    state = await _reread(db, result.task_id)
    errors = [failure.error for failure in state.capture_failures]
    assert len(errors) == 2
    assert all(named in error for error in errors), errors


async def test_a_task_input_that_cannot_be_recorded_is_a_usage_error(db: Path) -> None:
    """The caller's own input is checked before anything is written."""
    with pytest.raises(pev.UsageError, match=r"the task's input cannot be recorded: input\.t: nan"):
        await _run(
            db, planner=ScriptedPlanner(), executor=FunctionExecutor(), input={"t": math.nan}
        )


async def test_a_tool_reporting_a_status_it_may_not_report_fails_its_own_record(db: Path) -> None:
    """context.report takes accepted or running only; anything else is the tool's failure."""

    @pev.tool
    async def pump() -> str:
        """Start the pump (an action)."""
        await pev.engine.current_node_context().report(RecordStatus.SUCCEEDED)
        return "on"

    node = PlanNode("p", "pump", tool="pump")
    result = await _run(db, planner=ScriptedPlanner(Plan(GOAL, (node,))), tools=[pump])

    [record] = (await _reread(db, result.task_id)).records.values()
    assert record.status is RecordStatus.FAILED
    assert "context.report takes RecordStatus.ACCEPTED or RecordStatus.RUNNING" in (
        record.error or ""
    )


async def test_usage_that_cannot_be_recorded_is_left_out(db: Path) -> None:
    """A planner reporting a model name that is not valid text still gets its plan recorded."""

    def planner(request: object) -> Plan:
        pev.engine.report_usage("model \ud800", input_tokens=10**30)
        return Plan(GOAL, (PlanNode("look", "read", tool="soil", effect=Effect.QUERY),))

    result = await _run(db, planner=planner, tools=[soil])

    assert result.ok
    await _reread(db, result.task_id)
    store = SQLiteStore(db)
    try:
        entries = await Ledger(store).entries(result.task_id)
    finally:
        await store.close()
    [started] = [e.event for e in entries if isinstance(e.event, RevisionStarted)]
    assert started.usage is None
