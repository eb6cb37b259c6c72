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
from pev.ledger import EffectStatus, Ledger, RevisionKind, TaskEffect, TaskState
from pev.model import (
    CriterionStatus,
    RecordId,
    RecordStatus,
    Success,
    VerdictStatus,
    VerificationContract,
    VerifierFailure,
)
from pev.policy import RecoveryPolicy
from pev.stores import SQLiteStore
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

POL_77_ACCOUNT = "GB33 BUKB 2020 1555 5555 55"
POL_88_ACCOUNT = "PT50 0002 0123 1234 5678 9015 4"
NEW_ACCOUNT = "NL91 ABNA 0417 1643 00"


@pytest.fixture(autouse=True)
def fresh_books() -> None:
    """Each test starts with the claims system's payment ledger empty (it numbers payments)."""
    claims.PAYMENTS.clear()


def _books() -> list[tuple[str, str, float, str]]:
    """The claims system's own payment ledger: (entry, payment id, amount, account)."""
    return [(e["entry"], e["payment_id"], e["amount"], e["account"]) for e in claims.PAYMENTS]


async def _claim_run(claim_id: str) -> ClaimsRun:
    """A claim settled once, with every request the planner was given."""
    requests: list[PlanRequest] = []

    def recording_planner(request: PlanRequest) -> Any:
        requests.append(request)
        return claims.planner(request)

    result, state, ledger = await _run(
        claims, CLAIMS_TOOLS, {"claim_id": claim_id}, planner=recording_planner
    )
    return result, state, ledger, requests


@pytest.fixture
async def claims_run() -> ClaimsRun:
    """CLM-1042 run once, with every request the planner was given."""
    return await _claim_run("CLM-1042")


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


async def test_claims_pays_once_into_the_account_on_file(claims_run: ClaimsRun) -> None:
    """CLM-1042's payment is the claims system's only entry: 4000.00, on file, nothing refunded."""
    result, state, _, _ = claims_run

    assert _books() == [("payment", "PAY-CLM-1042", 4000.0, POL_77_ACCOUNT)]
    [effect] = result.effects
    assert (effect.node_id, effect.compensated, effect.superseded) == ("payment", False, None)
    assert not [e for e in state.effects.values() if e.compensation is not None]


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
    assert _books() == []


CLAIM_3003_FEEDBACK = (
    f"1800.00 was paid into {NEW_ACCOUNT}, which is not the account on POL-88 "
    f"({POL_88_ACCOUNT}); pay the account on file"
)


@pytest.fixture
async def wrong_account_run() -> ClaimsRun:
    """CLM-3003 run once, with every request the planner was given."""
    return await _claim_run("CLM-3003")


async def test_claims_wrong_account_passes_the_coverage_check_and_is_paid(
    wrong_account_run: ClaimsRun,
) -> None:
    """CLM-3003's note names a new account: the amount is right, so the check lets it through."""
    _, state, _, _ = wrong_account_run

    first = {
        state.records[rid].node_id: result
        for rid, result in state.results.items()
        if state.records[rid].revision == 1
    }
    assert first["coverage"] == Success(
        {"covered": True, "peril": "theft", "approved_amount": 1800.0}
    )
    assert first["payment"] == Success(
        {
            "payment_id": "PAY-CLM-3003",
            "claim_id": "CLM-3003",
            "amount": 1800.0,
            "status": "issued",
            "account": NEW_ACCOUNT,
        }
    )


async def test_claims_verifier_blames_the_payment_into_the_wrong_account(
    wrong_account_run: ClaimsRun,
) -> None:
    """The verifier checks the account against the policy, blames `payment`; a local replan."""
    _, state, _, requests = wrong_account_run

    first = state.verdicts[0].verdict
    assert first is not None
    assert first.failed_nodes == {"payment"}
    assert first.feedback == CLAIM_3003_FEEDBACK
    assert first.unmet_criteria == (claims.PAID,)
    assert state.decisions[0].decision == LocalReplan(frozenset({"payment"}), CLAIM_3003_FEEDBACK)
    assert [request.kind for request in requests] == [RevisionKind.INITIAL, RevisionKind.LOCAL]
    assert requests[1].redo_nodes == {"payment"}
    payment = state.revisions[1].plan.node("payment")
    assert payment.args["account"] == {"$ref": "policy.settlement_account"}
    assert CLAIM_3003_FEEDBACK in payment.description


async def test_claims_wrong_payment_is_refunded_before_the_right_one_once(
    wrong_account_run: ClaimsRun,
) -> None:
    """The claims system's ledger: pay wrong, refund wrong (the compensation's key), pay right."""
    result, _, _, _ = wrong_account_run

    assert (result.status, result.reason, result.revisions) == (
        TaskStatus.SUCCEEDED,
        TerminalReason.PASSED,
        2,
    )
    assert _books() == [
        ("payment", "PAY-CLM-3003", 1800.0, NEW_ACCOUNT),
        ("refund", "PAY-CLM-3003", 1800.0, NEW_ACCOUNT),
        ("payment", "PAY-CLM-3003-2", 1800.0, POL_88_ACCOUNT),
    ]
    wrong, right = result.effects
    assert (wrong.compensated, wrong.superseded, right.compensated) == (True, 2, False)
    assert [e["key"] for e in claims.PAYMENTS] == [
        wrong.key,
        f"{wrong.key}/compensate",
        right.key,
    ]
    assert result.outputs["payment"]["account"] == POL_88_ACCOUNT


async def test_claims_ledger_tells_the_compensation_in_order(wrong_account_run: ClaimsRun) -> None:
    """Superseded, compensated, then paid again: the wrong payment is undone first."""
    result, _, ledger, _ = wrong_account_run

    kinds = [entry.event.kind for entry in await ledger.entries(result.task_id)]
    tail = kinds[kinds.index("effect_superseded") :]
    assert tail[:3] == ["effect_superseded", "compensation_dispatched", "effect_compensated"]
    assert tail.index("effect_compensated") < tail.index("node_dispatched")
    assert kinds.count("effect_compensated") == 1
    assert (await ledger.verify(result.task_id)).ok


def test_claims_refund_refuses_a_payment_it_does_not_know() -> None:
    """A compensation that finds no payment raises: pev records the effect as left in place."""
    effect = dataclasses.replace(
        _effect_of_payment(), result=Success({"payment_id": "PAY-NOWHERE"})
    )
    with pytest.raises(LookupError, match="no payment 'PAY-NOWHERE' to refund"):
        claims.refund_payment(effect)


def _effect_of_payment() -> TaskEffect:
    return TaskEffect(
        record_id=RecordId("1:payment"),
        node_id="payment",
        revision=1,
        tool="issue_payment",
        args=None,
        args_digest="d",
        occurrence=1,
        key="t/issue_payment/d/1",
        status=EffectStatus.SUCCEEDED,
    )


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


async def test_claims_task_file_compensates_through_the_command_line(tmp_path: Path) -> None:
    """`pev run` of the task file for CLM-3003: the tool rebuilt from its import path keeps its
    compensate, and the wrong payment is refunded before the right one."""
    text = (EXAMPLES / "claims" / "task.toml").read_text(encoding="utf-8")
    task_file = tmp_path / "task.toml"
    task_file.write_text(text.replace('"CLM-1042"', '"CLM-3003"'), encoding="utf-8")
    (tmp_path / "agent.py").write_text(
        (EXAMPLES / "claims" / "agent.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    db = tmp_path / "ledger.db"
    ran = subprocess.run(
        [sys.executable, "-m", "pev", "--db", str(db), "run", str(task_file), "--quiet"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    task_id = ran.stdout.strip().split()[1].rstrip(":")
    store = SQLiteStore(db)
    try:
        state = await Ledger(store).state(task_id)
    finally:
        await store.close()
    wrong, right = state.effects.values()
    assert (wrong.compensated, right.compensated) == (True, False)
    assert wrong.value["account"] == NEW_ACCOUNT  # type: ignore[index]
    assert right.value["account"] == POL_88_ACCOUNT  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        pytest.param(
            "weather",
            [],
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
            [],
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
                "the claims system's payment ledger:",
                f"  paid 4000.00 into {POL_77_ACCOUNT} (PAY-CLM-1042)",
            ],
            id="claims",
        ),
        pytest.param(
            "claims",
            ["CLM-3003"],
            [
                "  verdict: replan_required, blames payment",
                "  decision: local replan of payment",
                "revision 2 (local, redo ['payment'])",
                (
                    "  superseded: record 1:payment, as revision 2 redoes node 'payment' with "
                    "another call"
                ),
                "  compensating record 1:payment: undo:1:payment sent",
                "status: succeeded (passed) after 2 revision(s)",
                "the claims system's payment ledger:",
                f"  paid 1800.00 into {NEW_ACCOUNT} (PAY-CLM-3003)",
                f"  refunded PAY-CLM-3003: 1800.00 back from {NEW_ACCOUNT}",
                f"  paid 1800.00 into {POL_88_ACCOUNT} (PAY-CLM-3003-2)",
            ],
            id="claims-3003",
        ),
    ],
)
def test_run_script_prints_the_result(name: str, args: list[str], expected: list[str]) -> None:
    """`python examples/<name>/run.py` exits 0 and prints how the task ended."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name / "run.py"), *args],
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
