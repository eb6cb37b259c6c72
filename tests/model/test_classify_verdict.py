"""classify_verdict (docs/design.md §2.5): the engine, not the verifier, decides reliability."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pev import codec
from pev.model import (
    CriterionResult,
    CriterionStatus,
    JsonObject,
    Plan,
    PlanNode,
    Reliability,
    Verdict,
    VerdictCheck,
    VerdictStatus,
    VerificationContract,
    VerificationMode,
    classify_verdict,
    freeze_json,
    raw_digest,
)

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, "stack the cubes", ("red on blue", "blue on table")
)
PLAN = Plan("stack the cubes", (PlanNode("pick"), PlanNode("place", after=("pick",))))
KNOWN_REFS = frozenset({"evidence:e1", "record:r1"})

SATISFIED = (
    CriterionResult("red on blue", CriterionStatus.SATISFIED, ("evidence:e1",)),
    CriterionResult("blue on table", CriterionStatus.SATISFIED),
)
GOOD = Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED, evidence_refs=("record:r1",))


def _check(raw: object) -> VerdictCheck:
    return classify_verdict(raw, contract=CONTRACT, plan=PLAN, known_refs=KNOWN_REFS)


def _results(*pairs: tuple[str, str]) -> tuple[CriterionResult, ...]:
    return tuple(CriterionResult(criterion, CriterionStatus(status)) for criterion, status in pairs)


# Every malformed return of docs/design.md §2.5, with the exact problems the engine records.
MALFORMED = [
    pytest.param(None, ("the verifier returned nothing",), id="nothing"),
    pytest.param(
        "the cubes look stacked to me",
        (
            (
                "the verifier's output is not a verdict: unparsable output "
                "(Expecting value: line 1 column 1 (char 0))"
            ),
        ),
        id="unparsable-text",
    ),
    pytest.param(
        b"yes",
        (
            (
                "the verifier's output is not a verdict: unparsable output "
                "(Expecting value: line 1 column 1 (char 0))"
            ),
        ),
        id="unparsable-bytes",
    ),
    pytest.param(
        '{"verdict": "yes"}',
        ("the verifier's output is not a verdict: $: Verdict has no field 'verdict'",),
        id="json-object-not-a-verdict",
    ),
    pytest.param(
        {"status": "success", "criteria": [{"criterion": "red on blue"}]},
        (
            (
                "the verifier's output is not a verdict: $.criteria[0]: "
                "CriterionResult is missing the required field 'status'"
            ),
        ),
        id="dict-with-incomplete-criterion",
    ),
    pytest.param(
        "[1, 2]",
        ("the verifier's output is not a verdict: $: expected an object, got list [1, 2]",),
        id="json-array",
    ),
    pytest.param(42, ("the verifier returned a int, not a Verdict",), id="an-int"),
    pytest.param(True, ("the verifier returned a bool, not a Verdict",), id="a-bool"),
    pytest.param(["success"], ("the verifier returned a list, not a Verdict",), id="a-python-list"),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED[:1]),
        ("no result for contract criteria ['blue on table'] (quote each verbatim)",),
        id="criterion-missing",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.SUCCESS,
            criteria=(*SATISFIED, CriterionResult("green on red", CriterionStatus.SATISFIED)),
        ),
        ("results for criteria that are not in the contract: ['green on red']",),
        id="extra-criterion",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=(*SATISFIED, SATISFIED[1])),
        ("more than one result for criteria ['blue on table']",),
        id="duplicate-criterion",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.SUCCESS,
            criteria=_results(("red on blue", "satisfied"), ("Blue is on the table.", "satisfied")),
        ),
        (
            "no result for contract criteria ['blue on table'] (quote each verbatim)",
            "results for criteria that are not in the contract: ['Blue is on the table.']",
        ),
        id="paraphrased-criterion",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.SUCCESS,
            criteria=_results(("red on blue", "unsatisfied"), ("blue on table", "satisfied")),
        ),
        ("status success with criteria not satisfied: ['red on blue']",),
        id="success-with-unsatisfied-criterion",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.SUCCESS,
            criteria=_results(("red on blue", "satisfied"), ("blue on table", "unknown")),
        ),
        ("status success with criteria not satisfied: ['blue on table']",),
        id="success-with-unknown-criterion",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, failed_nodes=frozenset({"place"}), criteria=SATISFIED),
        ("status success while blaming nodes: ['place']",),
        id="success-with-failed-nodes",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.REPLAN_REQUIRED,
            failed_nodes=frozenset({"place", "fly", "dig"}),
            criteria=SATISFIED,
        ),
        ("failed_nodes names ids that are not in the plan: ['dig', 'fly']",),
        id="failed-nodes-not-in-plan",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED, evidence_refs=("evidence:e9",)),
        ("cites evidence references that do not exist in this task: ['evidence:e9']",),
        id="unknown-top-level-ref",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.SUCCESS,
            criteria=(
                SATISFIED[0],
                CriterionResult("blue on table", CriterionStatus.SATISFIED, ("record:r7",)),
            ),
        ),
        ("cites evidence references that do not exist in this task: ['record:r7']",),
        id="unknown-ref-inside-criterion",
    ),
    pytest.param(
        Verdict("done", criteria=SATISFIED),  # type: ignore[arg-type]
        ("status 'done' is not one of success, failure, replan_required, inconclusive",),
        id="unknown-status",
    ),
    pytest.param(
        Verdict(
            VerdictStatus.REPLAN_REQUIRED,
            criteria=(
                CriterionResult("red on blue", "mostly"),  # type: ignore[arg-type]
                SATISFIED[1],
            ),
        ),
        ("criterion 'red on blue' has status 'mostly'; use satisfied, unsatisfied or unknown",),
        id="unknown-criterion-status",
    ),
    pytest.param(
        Verdict(VerdictStatus.REPLAN_REQUIRED, criteria="red on blue"),  # type: ignore[arg-type]
        (
            "criteria must be a list of CriterionResult",
            (
                "no result for contract criteria ['red on blue', 'blue on table'] "
                "(quote each verbatim)"
            ),
        ),
        id="criteria-not-a-list",
    ),
    pytest.param(
        Verdict(VerdictStatus.REPLAN_REQUIRED, failed_nodes="place", criteria=SATISFIED),  # type: ignore[arg-type]
        ("failed_nodes must be a set of node ids",),
        id="failed-nodes-a-string",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED, evidence_refs="evidence:e1"),  # type: ignore[arg-type]
        ("the verdict: evidence_refs must be a list of references",),
        id="refs-a-string",
    ),
    pytest.param(
        Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED, evidence_refs=(["evidence:e1"],)),  # type: ignore[arg-type]
        ("cites evidence references that do not exist in this task: [\"['evidence:e1']\"]",),
        id="unhashable-ref",
    ),
]


@pytest.mark.parametrize(("raw", "problems"), MALFORMED)
def test_malformed_return_is_classified_malformed(raw: object, problems: tuple[str, ...]) -> None:
    """Each malformed return is MALFORMED and lists exactly what is wrong with it."""
    check = _check(raw)

    assert check.reliability is Reliability.MALFORMED
    assert check.problems == problems


def test_malformed_verdict_that_parsed_is_kept() -> None:
    """A verdict that was read but is invalid is kept, so the ledger shows what was said."""
    bad = Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED[:1])

    assert _check(bad).verdict == bad


def test_unreadable_return_has_no_verdict() -> None:
    """When nothing could be read, the check carries no verdict."""
    assert _check("nonsense").verdict is None


def test_every_problem_of_a_bad_verdict_is_listed() -> None:
    """A verdict wrong in several ways lists each problem, not just the first."""
    bad = Verdict(
        VerdictStatus.SUCCESS,
        failed_nodes=frozenset({"ghost"}),
        criteria=_results(("red on blue", "unknown"), ("blue is on table", "satisfied")),
        evidence_refs=("evidence:nope",),
    )

    assert _check(bad).problems == (
        "no result for contract criteria ['blue on table'] (quote each verbatim)",
        "results for criteria that are not in the contract: ['blue is on table']",
        "failed_nodes names ids that are not in the plan: ['ghost']",
        "status success with criteria not satisfied: ['red on blue']",
        "status success while blaming nodes: ['ghost']",
        "cites evidence references that do not exist in this task: ['evidence:nope']",
    )


def test_bytes_that_are_not_utf8_are_malformed() -> None:
    """Undecodable bytes are malformed output, not an exception."""
    check = _check(b"\xc3\x28\xff\xfe{")

    assert check.reliability is Reliability.MALFORMED
    assert check.problems[0].startswith("the verifier's output is not a verdict: unparsable")


def test_deeply_nested_text_is_malformed_not_a_crash() -> None:
    """JSON text nested past the recursion limit is malformed output, not an exception."""
    check = _check("[" * 100_000)

    assert check.reliability is Reliability.MALFORMED
    assert check.verdict is None


def test_valid_verdict_is_ok() -> None:
    """A verdict that fits the contract, plan and evidence is OK with no problems."""
    check = _check(GOOD)

    assert check.reliability is Reliability.OK
    assert check.verdict == GOOD
    assert check.problems == ()


def test_criteria_may_come_in_any_order() -> None:
    """The criteria list must match the contract as a set, not in order."""
    assert _check(Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED[::-1])).reliability is (
        Reliability.OK
    )


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(VerdictStatus.REPLAN_REQUIRED, id="replan-required"),
        pytest.param(VerdictStatus.FAILURE, id="failure"),
    ],
)
def test_valid_failing_verdict_is_ok(status: VerdictStatus) -> None:
    """A well-formed verdict that blames plan nodes and leaves criteria unmet is still OK."""
    verdict = Verdict(
        status,
        failed_nodes=frozenset({"place"}),
        criteria=_results(("red on blue", "unsatisfied"), ("blue on table", "unknown")),
    )

    assert _check(verdict).reliability is Reliability.OK


def test_inconclusive_status_is_inconclusive() -> None:
    """A valid verdict with status inconclusive gets reliability INCONCLUSIVE."""
    verdict = Verdict(
        VerdictStatus.INCONCLUSIVE,
        criteria=_results(("red on blue", "unknown"), ("blue on table", "unknown")),
    )

    check = _check(verdict)

    assert check.reliability is Reliability.INCONCLUSIVE
    assert check.problems == ()


def test_malformed_inconclusive_verdict_is_malformed() -> None:
    """Status inconclusive does not hide a malformed verdict."""
    verdict = Verdict(VerdictStatus.INCONCLUSIVE, criteria=())

    assert _check(verdict).reliability is Reliability.MALFORMED


def test_constructors_give_ok_verdicts() -> None:
    """Verdict.passed and Verdict.failed build verdicts the engine accepts."""
    passed = Verdict.passed(CONTRACT, evidence_refs=["evidence:e1"])
    failed = Verdict.failed(CONTRACT, failed_nodes=["pick"], unmet=["red on blue"])

    assert _check(passed).reliability is Reliability.OK
    assert _check(failed).reliability is Reliability.OK


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(codec.dumps(GOOD), id="json-text"),
        pytest.param(codec.dumps(GOOD).encode(), id="json-bytes"),
        pytest.param(codec.encode(GOOD), id="dict"),
        pytest.param(freeze_json(codec.encode(GOOD)), id="json-object"),
        pytest.param(
            {
                "status": "success",
                "criteria": [
                    {"criterion": "blue on table", "status": "satisfied"},
                    {"criterion": "red on blue", "status": "satisfied"},
                ],
            },
            id="minimal-dict",
        ),
    ],
)
def test_json_forms_of_a_valid_verdict_are_ok(raw: object) -> None:
    """JSON text, bytes and mappings that spell a valid verdict are read and are OK."""
    check = _check(raw)

    assert check.reliability is Reliability.OK
    assert check.verdict is not None
    assert check.verdict.status is VerdictStatus.SUCCESS


def test_json_object_is_read_like_a_dict() -> None:
    """A JsonObject verdict decodes to the same verdict as its dict."""
    as_dict = codec.encode(GOOD)

    assert _check(JsonObject(freeze_json(as_dict))).verdict == _check(as_dict).verdict  # type: ignore[arg-type]


def test_raw_digest_is_recorded() -> None:
    """The check carries the digest of what came back."""
    text = codec.dumps(GOOD)

    assert _check(text).raw_digest == hashlib.sha256(text.encode()).hexdigest()


def test_raw_digest_of_bytes_is_their_sha256() -> None:
    """Bytes are hashed as they are."""
    assert raw_digest(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_raw_digest_of_a_value_is_stable() -> None:
    """Equal verdicts, and dicts in another key order, have the same digest."""
    copy = Verdict(VerdictStatus.SUCCESS, criteria=SATISFIED, evidence_refs=("record:r1",))

    assert raw_digest(GOOD) == raw_digest(copy)
    assert raw_digest({"a": 1, "b": 2}) == raw_digest({"b": 2, "a": 1})


def test_raw_digest_tells_different_returns_apart() -> None:
    """Different verdicts have different digests."""
    assert raw_digest(GOOD) != raw_digest(Verdict.failed(CONTRACT))


def test_raw_digest_of_a_lone_surrogate_does_not_fail() -> None:
    """Text holding a lone surrogate (from a JSON escape) still gets a digest."""
    assert len(raw_digest("\ud800")) == 64


def test_raw_digest_of_something_unencodable_does_not_fail() -> None:
    """An object the codec cannot encode still gets a digest."""
    assert len(raw_digest(object())) == 64


JUNK = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=10),
        st.binary(max_size=10),
        st.sampled_from(["success", "red on blue", "pick", "evidence:e1", "{", "[]"]),
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["status", "criteria", "criterion", "failed_nodes", "evidence_refs", "x"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(JUNK)
def test_classify_is_total(raw: object) -> None:
    """Whatever comes back, classify_verdict returns a check and raises nothing."""
    check = _check(raw)

    assert check.reliability in {Reliability.OK, Reliability.MALFORMED, Reliability.INCONCLUSIVE}
    assert (check.reliability is Reliability.MALFORMED) == bool(check.problems)
