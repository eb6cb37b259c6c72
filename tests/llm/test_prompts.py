"""What the planner and the verifier tell the model, and how a plan reply is read."""

from __future__ import annotations

import base64
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.ledger import EffectStatus, RevisionKind, TaskEffect
from pev.llm import LLMPlanner, LLMVerifier
from pev.llm._planner import parse_plan, plan_prompt
from pev.llm._verifier import verdict_schema
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    ExecutionRecord,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    Verdict,
    VerificationContract,
    digest,
    freeze_json,
)
from pev.testing import ScriptedChat

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IN_SINK = "the cup is in the sink"
CONTRACT = VerificationContract(
    "recovery", "put the cup in the sink", [IN_SINK], constraints=["never drop the cup"]
)
PLAN = Plan(
    "put the cup in the sink",
    (
        PlanNode("look", "find the cup", tool="camera", effect="query"),
        PlanNode("move", "carry it", tool="move", args={"x": 1, "y": 2}, after=("look",)),
    ),
)
PNG = b"\x89PNG\r\n\x1a\nnot-really-a-png"


@pev.tool(effect="action")
def move(x: float, y: float, speed: float | None = None) -> None:
    """Move the arm."""


@pev.tool(effect="query")
def camera() -> dict[str, str]:
    """Look at the table."""
    return {}


def record(node_id: str, status: RecordStatus, *, error: str | None = None) -> ExecutionRecord:
    args = {"x": 1, "y": 2} if node_id == "move" else {}
    return ExecutionRecord(
        id=RecordId(f"1:{node_id}"),
        task_id=TaskId("t1"),
        revision=1,
        node_id=node_id,
        tool=node_id if node_id != "look" else "camera",
        args_digest=digest(args),
        effect=Effect.ACTION if node_id == "move" else Effect.QUERY,
        idempotency_key=f"k-{node_id}",
        status=status,
        created_at=T0,
        updated_at=T0,
        error=error,
    )


def replan_request(kind: RevisionKind) -> PlanRequest:
    verdict = Verdict.failed(
        CONTRACT,
        failed_nodes=["move"],
        feedback="the cup slipped",
        guidance="grip the handle",
        evidence_refs=["record:1:move"],
    )
    return PlanRequest(
        kind=kind,
        attempt=3,
        task_id=TaskId("t1"),
        input={"cup": "red"},
        contract=CONTRACT,
        tools=(camera.spec, move.spec),
        lessons=("observe the object before grasping it again",),
        deadline=T0 + timedelta(minutes=2),
        previous_plan=PLAN,
        verdict=verdict,
        feedback="the cup slipped",
        unmet_criteria=(IN_SINK,),
        preserved_constraints=("never drop the cup",),
        guidance="grip the handle",
        evidence_refs=("record:1:move",),
        redo_nodes=frozenset({"move"}) if kind is RevisionKind.LOCAL else frozenset(),
        kept_results=MappingProxyType({"look": {"cup": "left"}}),
        rejections=("node 'move' repeats action 'move' ...; observe or reconcile it first",),
        unknown_records=(record("move", RecordStatus.UNKNOWN, error="timed out"),),
    )


def test_the_initial_prompt_lists_the_contract_tools_and_lessons() -> None:
    """Goal, criteria verbatim, constraints, tool signatures with effects, lessons as advice."""
    request = replan_request(RevisionKind.INITIAL)
    text = plan_prompt(request)
    assert json.dumps(IN_SINK) in text
    assert "- never drop the cup" in text
    assert "- move(x: number, y: number, speed?: null | number) [action]: Move the arm." in text
    assert "- camera() [query]: Look at the table." in text
    lessons = text.split("## Lessons from earlier tasks (advice only", 1)[1]
    assert "observe the object before grasping it again" in lessons
    assert "2026-01-01 00:02:00+00:00" in text
    assert "This is a" not in text  # no replan context for an initial plan
    assert text.rstrip().endswith("Write the plan.")


def test_a_global_replan_carries_the_context_of_spec_section_4() -> None:
    """Previous plan, feedback, unmet criteria, constraints, guidance, evidence, rejections."""
    text = plan_prompt(replan_request(RevisionKind.GLOBAL))
    assert "This is a global replan (planner call 3)" in text
    assert '"description": "carry it"' in text.split("## The previous plan", 1)[1]
    said = text.split("## What the verifier said", 1)[1].split("##", 1)[0]
    for expected in (
        "replan_required",
        "move",
        "the cup slipped",
        "grip the handle",
        "record:1:move",
    ):
        assert expected in said
    assert json.dumps(IN_SINK) in text.split("## Criteria still unmet", 1)[1]
    assert "never drop the cup" in text.split("## Constraints the new plan must keep", 1)[1]
    assert "observe or reconcile it first" in text.split("were rejected", 1)[1]
    assert "Nodes to redo" not in text
    assert "starts afresh" in text


def test_unknown_actions_come_with_the_observe_or_reconcile_rule() -> None:
    """Unknown records are listed with their planned args and the rule against blind repeats."""
    text = plan_prompt(replan_request(RevisionKind.GLOBAL))
    unknown = text.split("## Actions whose outcome is unknown", 1)[1]
    assert "record:1:move" in unknown
    assert "timed out" in unknown
    assert 'planned args {"x": 1, "y": 2}' in unknown
    assert "observe or reconcile first" in unknown


def test_the_tasks_effects_come_with_the_rule_that_they_are_not_sent_again() -> None:
    """Each effect with its args, occurrence, status and result; reuse, repeat and compensate."""
    paid = TaskEffect(
        record_id=RecordId("1:pay"),
        node_id="pay",
        revision=1,
        tool="pay",
        args=freeze_json({"amount": 500}),  # type: ignore[arg-type]
        args_digest=digest({"amount": 500}),
        occurrence=1,
        key="t1/pay/abc/1",
        status=EffectStatus.SUCCEEDED,
        result=Success("paid 500"),
        superseded=2,
    )
    request = dataclasses.replace(replan_request(RevisionKind.GLOBAL), effects=(paid,))
    effects = plan_prompt(request).split("## What this task already did to the world", 1)[1]
    assert '1:pay: pay({"amount":500}) occurrence 1, revision 1: succeeded' in effects
    assert "superseded in revision 2" in effects
    assert '-> "paid 500"' in effects
    assert '"repeat": true' in effects
    assert '"compensate"' in effects


def test_a_local_replan_names_the_redo_set_and_the_kept_results() -> None:
    """A local replan asks for replacements of the redo nodes, same ids, and shows kept outputs."""
    text = plan_prompt(replan_request(RevisionKind.LOCAL))
    assert "This is a local replan" in text
    assert "- move" in text.split("## Nodes to redo", 1)[1]
    assert '"cup": "left"' in text.split("## Results kept", 1)[1]
    assert "with the same ids" in text


def test_the_plan_schema_is_sent_with_the_request() -> None:
    """The planner's chat request carries its JSON schema, the system prompt and instructions."""
    planner = LLMPlanner(model=ScriptedChat(), instructions="Prefer one grasp.")
    chat = planner.chat_request(replan_request(RevisionKind.INITIAL))
    assert chat.schema is not None
    assert chat.schema_name == "pev_plan"
    assert chat.messages[0].role == "system"
    assert "Prefer one grasp." in chat.messages[0].text
    assert chat.temperature == 0.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("", "empty", id="empty"),
        pytest.param("```json\n{}\n```", "not JSON", id="fenced"),
        pytest.param("[1, 2]", "a JSON list", id="list"),
        pytest.param('{"goal": "g", "nodes": {}}', "$.nodes: expected an array", id="nodes-object"),
        pytest.param(
            '{"goal": "g", "nodes": [{"id": "a", "effect": "maybe"}]}', "effect", id="effect"
        ),
    ],
)
def test_parse_plan_names_what_is_wrong(text: str, problem: str) -> None:
    """A reply that is not a plan raises ValueError saying why, never a repaired plan."""
    with pytest.raises(ValueError, match="reply") as caught:
        parse_plan(text)
    assert problem in str(caught.value)


def test_parse_plan_reads_a_plan() -> None:
    """A reply that follows the schema becomes the Plan it describes."""
    a = {
        "id": "a",
        "description": "d",
        "tool": "camera",
        "args": {},
        "after": [],
        "effect": "query",
    }
    b = {**a, "id": "b", "tool": None, "args": {"v": {"$ref": "a.x"}}, "after": ["a"]}
    text = json.dumps({"goal": "g", "nodes": [a, {**b, "effect": "action"}]})
    plan = parse_plan(text)
    assert plan.node_ids == ("a", "b")
    assert plan.node("a").effect is Effect.QUERY
    assert plan.node("b").after == ("a",)


def verify_request(
    *, evidence: tuple[Evidence, ...] = (), lessons: tuple[str, ...] = ()
) -> VerifyRequest:
    return VerifyRequest(
        task_id=TaskId("t1"),
        input={"cup": "red"},
        contract=CONTRACT,
        plan=PLAN,
        revision=1,
        results={"look": Success({"cup": "left"}), "move": DeviceFailure("move", "gripper jammed")},
        records=(
            record("look", RecordStatus.SUCCEEDED),
            record("move", RecordStatus.FAILED, error="gripper jammed"),
        ),
        evidence=evidence,
        lessons=lessons,
    )


def observation(evidence_id: str, **fields: object) -> Evidence:
    return Evidence(
        id=EvidenceId(evidence_id),
        phase="after",
        kind=str(fields.pop("kind", "state")),
        source="camera",
        captured_at=T0,
        revision=1,
        **fields,  # type: ignore[arg-type]
    )


def test_the_verifier_prompt_holds_results_records_and_refs() -> None:
    """Criteria verbatim, node results, records, citable references, lessons as advice."""
    request = verify_request(lessons=("a cup that slipped once slips again",))
    chat = LLMVerifier(model=ScriptedChat()).chat_request(request)
    text = chat.messages[1].text
    assert json.dumps(IN_SINK) in text
    assert '"error": "gripper jammed"' in text  # the device failure, as a result
    assert "record:1:move (node 'move' of revision 1" in text
    refs = text.split("## References you may cite", 1)[1].split("##", 1)[0]
    assert refs.split() == ["-", "record:1:look", "-", "record:1:move"]
    lessons = text.split("## Lessons from earlier tasks (advice only", 1)[1]
    assert "slips again" in lessons
    assert "never evidence" in chat.messages[0].text
    assert chat.messages[1].images == ()


def test_a_reconciled_record_says_what_was_established() -> None:
    """A record of unknown outcome that a reconciliation settled is shown with the settlement."""
    request = dataclasses.replace(
        verify_request(),
        results={"look": Success({"cup": "left"}), "move": Success({"moved": True})},
        records=(
            record("look", RecordStatus.SUCCEEDED),
            record("move", RecordStatus.UNKNOWN, error="timed out"),
        ),
        reconciled={RecordId("1:move"): Success({"moved": True})},
    )
    text = LLMVerifier(model=ScriptedChat()).chat_request(request).messages[1].text
    assert "unknown, error: timed out; reconciled afterwards as succeeded" in text


def test_image_evidence_is_attached_as_an_image() -> None:
    """A PNG artifact becomes a data: URL image; other artifacts are only described."""
    evidence = (
        observation("e1", kind="image", artifact=PNG, media_type="image/png"),
        observation("e2", payload={"cup": "in sink"}),
        observation("e3", kind="log", artifact=b"raw", media_type="text/plain"),
    )
    chat = LLMVerifier(model=ScriptedChat()).chat_request(verify_request(evidence=evidence))
    user = chat.messages[1]
    assert user.images == (f"data:image/png;base64,{base64.b64encode(PNG).decode()}",)
    assert "evidence:e1 (image from camera" in user.text
    assert "attached image 1 (image/png)" in user.text
    assert '"cup": "in sink"' in user.text
    assert "3 bytes of text/plain" in user.text
    assert "evidence:e3" in user.text.split("## References you may cite", 1)[1]


def test_the_verdict_schema_is_strict_and_names_what_may_be_cited() -> None:
    """Criteria, node ids and references are enums; every field is required."""
    request = verify_request(evidence=(observation("e1", payload=1),))
    schema = verdict_schema(request)
    assert schema["required"] == list(schema["properties"])
    assert schema["additionalProperties"] is False
    criterion = schema["properties"]["criteria"]["items"]["properties"]
    assert criterion["criterion"]["enum"] == [IN_SINK]
    assert schema["properties"]["failed_nodes"]["items"]["enum"] == ["look", "move"]
    assert schema["properties"]["evidence_refs"]["items"]["enum"] == [
        "evidence:e1",
        "record:1:look",
        "record:1:move",
    ]
    chat = LLMVerifier(model=ScriptedChat()).chat_request(request)
    assert chat.strict
    assert chat.schema_name == "pev_verdict"


async def test_the_verifier_returns_the_reply_unchanged() -> None:
    """The verifier never repairs what the model said: the engine classifies the raw text."""
    odd = '  {"status": "success"}  trailing words'
    assert await LLMVerifier(ScriptedChat(odd)).verify(verify_request()) == odd
