"""ScriptedVerifier: scripted verdicts, and scripted mistakes for the engine to classify."""

from __future__ import annotations

import pytest

from pev.engine import Verifier, VerifyRequest
from pev.model import (
    CriterionStatus,
    Reliability,
    Verdict,
    VerdictStatus,
    VerificationContract,
    classify_verdict,
)
from pev.testing import ScriptedVerifier


async def test_returns_scripted_verdicts_in_order(
    verify_request: VerifyRequest, contract: VerificationContract
) -> None:
    """Each call returns the next scripted verdict."""
    failed = Verdict.failed(contract, failed_nodes=["move"])
    passed = Verdict.passed(contract)
    verifier = ScriptedVerifier(failed, passed)
    assert await verifier.verify(verify_request) is failed
    assert await verifier.verify(verify_request) is passed


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"status": "success"}, id="dict"),
        pytest.param("looks good to me", id="str"),
        pytest.param(None, id="none"),
    ],
)
async def test_raw_values_are_returned_as_they_are(
    verify_request: VerifyRequest, raw: object
) -> None:
    """A step that is not a verdict is returned unchanged, for malformed-answer tests."""
    assert await ScriptedVerifier(raw).verify(verify_request) == raw


async def test_exception_step_is_raised(verify_request: VerifyRequest) -> None:
    """An exception step is raised from verify()."""
    with pytest.raises(ValueError, match="unparsable"):
        await ScriptedVerifier(ValueError("unparsable")).verify(verify_request)


async def test_exception_class_step_is_raised(verify_request: VerifyRequest) -> None:
    """An exception class step is instantiated and raised."""
    with pytest.raises(ConnectionError):
        await ScriptedVerifier(ConnectionError).verify(verify_request)


async def test_function_step_gets_the_request(verify_request: VerifyRequest) -> None:
    """A function step is called with the request; what it returns is the answer."""
    verifier = ScriptedVerifier(
        lambda request: Verdict.judge("move" in request.results, request.contract)
    )
    verdict = await verifier.verify(verify_request)
    assert verdict.status is VerdictStatus.SUCCESS


async def test_async_function_step_is_awaited(verify_request: VerifyRequest) -> None:
    """An async function step is awaited."""

    async def judge(request: VerifyRequest) -> Verdict:
        return Verdict.passed(request.contract)

    verdict = await ScriptedVerifier(judge).verify(verify_request)
    assert verdict.status is VerdictStatus.SUCCESS


async def test_records_every_request(verify_request: VerifyRequest) -> None:
    """requests holds each request in call order, and calls counts them."""
    verifier = ScriptedVerifier(None, None)
    await verifier.verify(verify_request)
    await verifier.verify(verify_request)
    assert verifier.requests == (verify_request, verify_request)
    assert verifier.calls == 2


async def test_running_out_raises_lookup_error(verify_request: VerifyRequest) -> None:
    """A call past the last step raises LookupError naming the verifier and the fix."""
    verifier = ScriptedVerifier(None)
    await verifier.verify(verify_request)
    with pytest.raises(LookupError, match="ScriptedVerifier ran out of steps after 1 calls"):
        await verifier.verify(verify_request)


async def test_repeat_last_keeps_returning_the_last_step(verify_request: VerifyRequest) -> None:
    """With repeat_last, the last step answers every later call."""
    verifier = ScriptedVerifier("first", "again", repeat_last=True)
    answers = [await verifier.verify(verify_request) for _ in range(3)]
    assert answers == ["first", "again", "again"]


async def test_passing_passes_every_call(verify_request: VerifyRequest) -> None:
    """passing() answers Verdict.passed(contract) on every call, a valid verdict each time."""
    verifier = ScriptedVerifier.passing()
    for _ in range(3):
        verdict = await verifier.verify(verify_request)
        assert verdict == Verdict.passed(verify_request.contract)
    check = classify_verdict(
        verdict, contract=verify_request.contract, plan=verify_request.plan, known_refs=()
    )
    assert check.reliability is Reliability.OK


async def test_failing_blames_the_nodes_on_every_call(verify_request: VerifyRequest) -> None:
    """failing(*nodes, feedback=...) asks for a replan blaming those nodes, every call."""
    verifier = ScriptedVerifier.failing("move", feedback="the red cube fell off")
    for _ in range(2):
        verdict = await verifier.verify(verify_request)
        assert verdict.status is VerdictStatus.REPLAN_REQUIRED
        assert verdict.failed_nodes == frozenset({"move"})
        assert verdict.feedback == "the red cube fell off"
        assert {c.status for c in verdict.criteria} == {CriterionStatus.UNSATISFIED}
    check = classify_verdict(
        verdict, contract=verify_request.contract, plan=verify_request.plan, known_refs=()
    )
    assert check.reliability is Reliability.OK


def test_is_a_verifier() -> None:
    """It satisfies the engine's Verifier protocol."""
    assert isinstance(ScriptedVerifier(), Verifier)
