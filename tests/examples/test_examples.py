"""The examples run offline and end as their READMEs say; their task files match their agents."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pev
from pev.engine import PlanRequest
from pev.kernel import LocalReplan, RootCause, TaskStatus, TerminalReason
from pev.ledger import Ledger, RevisionKind, TaskState
from pev.model import (
    CriterionStatus,
    RecordStatus,
    Success,
    VerdictStatus,
    VerificationContract,
    VerifierFailure,
)
from pev.policy import RecoveryPolicy
from pev.testing import MemoryStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    """Import examples/<name>/agent.py under a name of its own (both files are `agent`)."""
    module_name = f"pev_example_{name}_agent"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / name / "agent.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


weather = _load("weather")
claims = _load("claims")
WEATHER_TOOLS = [weather.geocode, weather.forecast, weather.publish]
CLAIMS_TOOLS = [
    claims.fetch_claim,
    claims.fetch_policy,
    claims.compute_payout,
    claims.check_coverage,
    claims.issue_payment,
]


async def _run(
    agent: ModuleType, tools: list[Any], task_input: Any, *, planner: Any = None
) -> tuple[pev.RunResult, TaskState, Ledger]:
    store = MemoryStore()
    result = await pev.run(
        task_input,
        planner=planner or agent.planner,
        tools=tools,
        verifier=agent.verifier,
        contract=agent.CONTRACT,
        policy=RecoveryPolicy(max_replans=2),
        store=store,
    )
    ledger = Ledger(store)
    return result, await ledger.state(result.task_id), ledger


# ---------------------------------------------------------------------------------------------
# weather


async def test_weather_publishes_tomorrows_report_for_lisbon() -> None:
    """Geocode → forecast → publish succeeds first time, with exact outputs."""
    result, _, ledger = await _run(weather, WEATHER_TOOLS, {"city": "Lisbon"})

    assert (await ledger.verify(result.task_id)).ok
    assert (result.status, result.reason, result.revisions) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.PASSED,
        1,
    )
    assert result.outputs == {
        "place": {"city": "Lisbon", "country": "Portugal", "lat": 38.72, "lon": -9.14},
        "forecast": {
            "lat": 38.72,
            "lon": -9.14,
            "units": "metric",
            "tomorrow": {"sky": "light rain", "high_c": 17.4, "low_c": 11.2},
        },
        "report": {
            "channel": "weather/lisbon",
            "text": "Tomorrow in Lisbon: light rain, high 17 °C, low 11 °C.",
        },
    }


async def test_weather_data_flows_along_refs() -> None:
    """The forecast and the bulletin get their args from earlier nodes' outputs via $ref."""
    _, state, _ = await _run(weather, WEATHER_TOOLS, {"city": "oslo"})

    plan = state.revisions[-1].plan
    assert {node.id: node.after for node in plan.nodes} == {
        "place": (),
        "forecast": ("place",),
        "report": ("place", "forecast"),
    }
    assert state.finished is not None
    assert state.finished.outputs["report"]["text"] == (
        "Tomorrow in Oslo: snow showers, high -3 °C, low -8 °C."
    )


async def test_weather_verdict_cites_the_records_it_read() -> None:
    """Each criterion is satisfied and cites the execution records behind it."""
    _, state, _ = await _run(weather, WEATHER_TOOLS, {"city": "Lisbon"})

    verdict = state.verdicts[-1].verdict
    assert verdict is not None
    assert verdict.status is VerdictStatus.SUCCESS
    assert {c.criterion: (c.status, c.evidence_refs) for c in verdict.criteria} == {
        "the report names the city": (
            CriterionStatus.SATISFIED,
            ("record:1:place", "record:1:report"),
        ),
        "the report gives tomorrow's high in °C": (
            CriterionStatus.SATISFIED,
            ("record:1:forecast", "record:1:report"),
        ),
        "the report is published": (CriterionStatus.SATISFIED, ("record:1:report",)),
    }


async def test_weather_for_an_unknown_city_ends_partial_with_a_device_failure() -> None:
    """A geocoder that finds nothing is a broken tool: no replan, an honest partial result."""
    result, state, _ = await _run(weather, WEATHER_TOOLS, {"city": "Atlantis"})

    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert result.diagnosis is not None
    assert result.diagnosis.cause is RootCause.DEVICE_FAILURE
    assert result.diagnosis.nodes == {"place"}
    verdict = state.verdicts[-1].verdict
    assert verdict is not None
    assert "no place called 'Atlantis'" in verdict.feedback


async def test_weather_verifier_blames_a_report_that_misstates_the_high() -> None:
    """A bulletin with the wrong high fails its criterion, and the report node is blamed."""

    @pev.tool(name="publish")
    def misreport(city: str, tomorrow: dict[str, Any]) -> dict[str, Any]:
        """Publish a bulletin with a typo in the high."""
        return {"channel": "weather/x", "text": f"Tomorrow in {city}: high 71 °C."}

    result, state, _ = await _run(
        weather, [weather.geocode, weather.forecast, misreport], {"city": "Lisbon"}
    )

    first = state.verdicts[0].verdict
    assert first is not None
    assert first.failed_nodes == {"report"}
    assert first.unmet_criteria == ("the report gives tomorrow's high in °C",)
    assert "does not give tomorrow's high (17 °C)" in first.feedback
    # The planner has nothing better to offer, so the budget runs out.
    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
    )


# ---------------------------------------------------------------------------------------------
# claims


ClaimsRun = tuple[pev.RunResult, TaskState, Ledger, list[PlanRequest]]


@pytest.fixture
async def claims_run() -> ClaimsRun:
    """CLM-1042 run once, with every request the planner was given."""
    requests: list[PlanRequest] = []

    def recording_planner(request: PlanRequest) -> Any:
        requests.append(request)
        return claims.planner(request)

    result, state, ledger = await _run(
        claims, CLAIMS_TOOLS, {"claim_id": "CLM-1042"}, planner=recording_planner
    )
    return result, state, ledger, requests


CLAIMS_FEEDBACK = (
    "the payout of 4800.00 (4800.00 claimed, reimbursed in full) is not what the policy allows: "
    "POL-77 pays the claimed 4800.00 less its 500.00 deductible, capped at its 4000.00 limit: "
    "4000.00; recompute it from the policy's deductible and limit, not in full; nothing was paid"
)


async def test_claims_first_plan_takes_the_full_reimbursement_lure(claims_run: ClaimsRun) -> None:
    """Revision 1 computes the payout with full=True: the claimed 4800 in full."""
    _, state, _, _ = claims_run

    first = state.revisions[0]
    payout = next(node for node in first.plan.nodes if node.id == "payout")
    assert payout.args["full"] is True
    results = {
        state.records[rid].node_id: result
        for rid, result in state.results.items()
        if state.records[rid].revision == 1
    }
    assert results["payout"] == Success(
        {"amount": 4800.0, "basis": "4800.00 claimed, reimbursed in full"}
    )
    assert results["coverage"] == VerifierFailure(
        "coverage", "payout 4800.00 is more than POL-77 allows"
    )


async def test_claims_wrong_payout_is_never_paid(claims_run: ClaimsRun) -> None:
    """The coverage check holds the payment back: the only payment is the corrected one."""
    _, state, _, _ = claims_run

    assert [(s.revision, s.node_id, s.blocked_by) for s in state.skipped] == [
        (1, "payment", ("coverage",))
    ]
    payments = [
        (record.revision, record.status, state.results[record.id])
        for record in state.records.values()
        if record.tool == "issue_payment"
    ]
    assert payments == [
        (
            2,
            RecordStatus.SUCCEEDED,
            Success(
                {
                    "payment_id": "PAY-CLM-1042",
                    "claim_id": "CLM-1042",
                    "amount": 4000.0,
                    "status": "issued",
                }
            ),
        )
    ]


async def test_claims_verifier_blames_the_payout_with_the_over_limit_feedback(
    claims_run: ClaimsRun,
) -> None:
    """The first verdict blames `payout`, names deductible and limit, and cites the records."""
    _, state, _, _ = claims_run

    first = state.verdicts[0].verdict
    assert first is not None
    assert first.status is VerdictStatus.REPLAN_REQUIRED
    assert first.failed_nodes == {"payout"}
    assert first.feedback == CLAIMS_FEEDBACK
    assert first.unmet_criteria == (claims.WITHIN_TERMS, claims.PAID)
    assert first.evidence_refs == ("record:1:claim", "record:1:policy", "record:1:payout")
    assert state.diagnoses[0].diagnosis.cause is RootCause.PLAN_OR_ANSWER_ERROR
    assert state.decisions[0].decision == LocalReplan(frozenset({"payout"}), CLAIMS_FEEDBACK)


async def test_claims_replans_locally_from_the_feedback(claims_run: ClaimsRun) -> None:
    """The planner's second request is local and carries the verdict; its plan follows it."""
    _, state, _, requests = claims_run

    assert [request.kind for request in requests] == [RevisionKind.INITIAL, RevisionKind.LOCAL]
    second = requests[1]
    assert second.feedback == CLAIMS_FEEDBACK
    assert second.verdict is not None
    assert second.verdict.failed_nodes == {"payout"}
    assert second.redo_nodes == {"payout", "coverage", "payment"}
    assert set(second.kept_results) == {"claim", "policy"}

    revision = state.revisions[1]
    assert (revision.kind, revision.redo) == (
        RevisionKind.LOCAL,
        {"payout", "coverage", "payment"},
    )
    payout = next(node for node in revision.plan.nodes if node.id == "payout")
    assert "full" not in payout.args
    assert payout.args["limit"] == {"$ref": "policy.limit"}
    assert CLAIMS_FEEDBACK in payout.description
    # The kept fetches ran once, in revision 1.
    runs = sorted((r.node_id, r.revision) for r in state.records.values())
    assert runs == [
        ("claim", 1),
        ("coverage", 1),
        ("coverage", 2),
        ("payment", 2),
        ("payout", 1),
        ("payout", 2),
        ("policy", 1),
    ]


async def test_claims_end_succeeded_with_the_reduced_payout(claims_run: ClaimsRun) -> None:
    """The task passes on revision 2 with 4000 (4800 less 500, capped at 4000) paid."""
    result, state, ledger, _ = claims_run

    assert (result.status, result.reason, result.revisions) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.PASSED,
        2,
    )
    assert result.outputs["payout"] == {
        "amount": 4000.0,
        "basis": "4800.00 claimed less the 500.00 deductible, capped at the 4000.00 limit",
    }
    assert result.outputs["payment"]["amount"] == 4000.0
    last = state.verdicts[-1].verdict
    assert last is not None
    assert last.status is VerdictStatus.SUCCESS
    assert last.evidence_refs == (
        "record:1:claim",
        "record:1:policy",
        "record:2:payout",
        "record:2:payment",
    )
    assert (await ledger.verify(result.task_id)).ok


async def test_claims_planner_that_ignores_the_feedback_runs_out_of_budget() -> None:
    """Without the verdict, the planner repeats the lure until the budget is spent, unpaid."""

    def deaf(request: PlanRequest) -> Any:
        return claims.planner(dataclasses.replace(request, verdict=None, feedback=""))

    result, state, _ = await _run(claims, CLAIMS_TOOLS, {"claim_id": "CLM-1042"}, planner=deaf)

    assert (result.status, result.reason, result.revisions) == (
        TaskStatus.FAILED,
        TerminalReason.REPLAN_BUDGET_EXHAUSTED,
        3,
    )
    assert [s.node_id for s in state.skipped] == ["payment", "payment", "payment"]
    assert not [r for r in state.records.values() if r.tool == "issue_payment"]


async def test_claims_uncovered_peril_is_judged_unreachable() -> None:
    """CLM-2001's flood is not covered: a `failure` verdict, no replan, nothing paid."""
    result, state, _ = await _run(claims, CLAIMS_TOOLS, {"claim_id": "CLM-2001"})

    assert (result.status, result.reason, result.revisions) == (
        TaskStatus.FAILED,
        TerminalReason.VERIFICATION_FAILED,
        1,
    )
    verdict = state.verdicts[-1].verdict
    assert verdict is not None
    assert verdict.status is VerdictStatus.FAILURE
    assert verdict.feedback == "POL-77 does not cover flood"
    assert [s.node_id for s in state.skipped] == ["payment"]


# ---------------------------------------------------------------------------------------------
# task files and scripts


@pytest.mark.parametrize(
    ("name", "agent", "tools"),
    [
        pytest.param("weather", weather, WEATHER_TOOLS, id="weather"),
        pytest.param("claims", claims, CLAIMS_TOOLS, id="claims"),
    ],
)
async def test_task_file_matches_its_agent(name: str, agent: ModuleType, tools: list[Any]) -> None:
    """task.toml names the agent's components and contract, and running from it passes."""
    task = tomllib.loads((EXAMPLES / name / "task.toml").read_text(encoding="utf-8"))

    assert set(task) == {"input", "contract", "policy", "components"}
    assert VerificationContract(**task["contract"]) == agent.CONTRACT
    components = task["components"]
    assert components["planner"] == "agent:planner"
    assert components["verifier"] == "agent:verifier"
    named = [getattr(agent, path.removeprefix("agent:")) for path in components["tools"]]
    assert named == tools
    result = await pev.run(
        task["input"],
        planner=agent.planner,
        tools=named,
        verifier=agent.verifier,
        contract=VerificationContract(**task["contract"]),
        policy=RecoveryPolicy(**task["policy"]),
        store=MemoryStore(),
    )
    assert result.ok


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "weather",
            [
                "status: succeeded (passed) after 1 revision(s)",
                (
                    "published on weather/lisbon: Tomorrow in Lisbon: light rain, high 17 °C, "
                    "low 11 °C."
                ),
            ],
            id="weather",
        ),
        pytest.param(
            "claims",
            [
                "  payment: skipped (blocked by coverage)",
                "  verdict: replan_required, blames payout",
                "  decision: local replan of payout",
                "revision 2 (local, redo ['coverage', 'payment', 'payout'])",
                "ledger: verified (29 events)",
                "status: succeeded (passed) after 2 revision(s)",
                (
                    'paid: {"amount":4000.0,"claim_id":"CLM-1042","payment_id":"PAY-CLM-1042",'
                    '"status":"issued"}'
                ),
            ],
            id="claims",
        ),
    ],
)
def test_run_script_prints_the_result(name: str, expected: list[str]) -> None:
    """`python examples/<name>/run.py` exits 0 and prints how the task ended."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name / "run.py")],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for line in expected:
        assert line in lines
