"""A verifier that asks a chat model to judge a round, one result per criterion (docs/llm.md).

The model's reply goes back to the engine *unchanged*: the engine, not this adapter, decides
how far it can be trusted (unparsable, the wrong criteria, a citation of evidence that does not
exist: ``malformed``). A transport failure raises, which the engine records as ``thrown``.
"""

from __future__ import annotations

import base64
from typing import Any

from pev.chat import ChatMessage, ChatRequest
from pev.engine import VerifyRequest
from pev.llm._prompt import (
    Prompted,
    as_json,
    bullets,
    contract_sections,
    lessons_section,
    records_text,
    section,
)
from pev.model import CriterionStatus, Evidence, VerdictStatus

__all__ = ["VERIFIER_SYSTEM_PROMPT", "LLMVerifier", "verdict_schema", "verify_prompt"]

VERIFIER_SYSTEM_PROMPT = """\
You are the verifier of an agent that plans, acts and checks its own work. You judge whether \
the round that just ran meets the task's success criteria, from the evidence alone: the node \
results, the execution records and the observations given. A plan's intent or a tool's name is \
never proof that something happened.

Reply with one JSON object, and nothing else, with these fields:
- "status": "success" only if every criterion is satisfied and no node is at fault; \
"replan_required" if a criterion is not met but the goal can still be reached; "failure" if \
it cannot be reached; "inconclusive" if the evidence cannot tell.
- "criteria": one entry per success criterion, quoting it verbatim: {"criterion": "...", \
"status": "satisfied" or "unsatisfied" or "unknown", "evidence_refs": [...]}.
- "failed_nodes": ids of the plan's nodes at fault (none on success).
- "feedback": for the planner: what went wrong and what to do differently.
- "unmet_criteria": the criteria not satisfied, verbatim.
- "preserved_constraints": constraints a new plan must keep.
- "guidance": advice for the planner.
- "evidence_refs": the references the verdict rests on.
Cite only the references listed under "References you may cite". Lessons from earlier tasks \
are advice, never evidence."""


# The most free-text entries (preserved constraints) a verdict may list.
_MAX_FREE_ITEMS = 16


def verdict_schema(request: VerifyRequest) -> dict[str, Any]:
    """The JSON schema of a verdict for this request: criteria, node ids and refs as enums.

    Every property is required and no object is free-form, so strict structured output can
    enforce it; what a server does not enforce, the engine's classification still checks. Every
    list is capped (``maxItems``: each criterion, node or reference at most once), so that a
    model held to the schema by a grammar cannot loop inside a list.
    """

    def among(values: tuple[str, ...]) -> dict[str, Any]:
        # No values: nothing may be listed (a reference that does not exist is malformed).
        items: dict[str, Any] = {"type": "string"}
        if values:
            items["enum"] = list(values)
        return {"type": "array", "items": items, "maxItems": len(values)}

    criteria = tuple(request.contract.success_criteria)
    refs = among(request.evidence_refs)
    criterion = {
        "type": "object",
        "properties": {
            "criterion": {"type": "string", "enum": list(criteria)},
            "status": {"type": "string", "enum": [status.value for status in CriterionStatus]},
            "evidence_refs": refs,
        },
        "required": ["criterion", "status", "evidence_refs"],
        "additionalProperties": False,
    }
    properties: dict[str, Any] = {
        "status": {"type": "string", "enum": [status.value for status in VerdictStatus]},
        "criteria": {"type": "array", "items": criterion, "maxItems": len(criteria)},
        "failed_nodes": among(request.plan.node_ids),
        "feedback": {"type": "string"},
        "unmet_criteria": among(criteria),
        "preserved_constraints": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": max(_MAX_FREE_ITEMS, len(request.contract.constraints)),
        },
        "guidance": {"type": "string"},
        "evidence_refs": refs,
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


class LLMVerifier(Prompted):
    """Verifies with a chat model; the engine classifies what it says.

    The prompt holds the contract's criteria (to answer each once, verbatim), the plan, the
    node results, the execution records and the evidence, each with the reference a verdict may
    cite; image evidence is sent as image parts. Lessons are shown as advice, never as
    evidence. Token usage and the model's name go to the ledger through
    :func:`pev.engine.report_usage`.

    Args:
        model: The chat model, e.g. an :class:`OpenAIChat`.
        instructions: Extra guidance for this agent's domain, added to the system prompt.
        temperature: Sampling temperature (``None``: the server's default).
    """

    def chat_request(self, request: VerifyRequest) -> ChatRequest:
        """The chat request this verifier sends for ``request`` (to inspect or log)."""
        system = self.system_prompt(VERIFIER_SYSTEM_PROMPT)
        text, images = verify_prompt(request)
        return ChatRequest(
            messages=(
                ChatMessage(role="system", text=system),
                ChatMessage(role="user", text=text, images=images),
            ),
            schema=verdict_schema(request),
            schema_name="pev_verdict",
            strict=True,
            temperature=self.temperature,
        )

    async def verify(self, request: VerifyRequest) -> str:
        """Ask the model for a verdict and return its reply's text, unchanged.

        Raises:
            LLMError: The model could not be reached or answered with an error (``thrown``).
        """
        return await self._ask(self.chat_request(request))


def verify_prompt(request: VerifyRequest) -> tuple[str, tuple[str, ...]]:
    """The user message's text, and its images as ``data:`` URLs."""
    parts = [section("Task input", as_json(request.input))]
    parts.extend(contract_sections(request.contract))
    parts.append(section(f"The plan that ran (revision {request.revision})", as_json(request.plan)))
    results = dict(request.results)  # as_json sorts the keys
    parts.append(section("Node results, by node id", as_json(results) if results else "(none)"))
    if request.records:
        parts.append(
            section("Execution records", records_text(request.records, request.reconciled))
        )
    evidence_text, images = _evidence(request.evidence)
    if evidence_text:
        parts.append(section("Observations", evidence_text))
    parts.append(
        section(
            "References you may cite",
            bullets(request.evidence_refs) or "(none: cite nothing)",
        )
    )
    parts.extend(lessons_section(request.lessons))
    parts.append(
        section("Your answer", "Judge this round: one result per success criterion, verbatim.")
    )
    return "\n\n".join(parts), images


def _evidence(evidence: tuple[Evidence, ...]) -> tuple[str, tuple[str, ...]]:
    """One entry per observation; image artifacts become attached images, numbered in order."""
    lines: list[str] = []
    images: list[str] = []
    for item in evidence:
        head = (
            f"- {item.ref} ({item.kind} from {item.source}, {item.phase.value} "
            f"revision {item.revision}, captured {item.captured_at.isoformat()})"
        )
        lines.append(head)
        if item.payload is not None:
            lines.append("  payload: " + as_json(item.payload).replace("\n", "\n  "))
        if item.artifact is not None:
            media_type = item.media_type or "application/octet-stream"
            if media_type.startswith("image/"):
                images.append(
                    f"data:{media_type};base64,{base64.b64encode(item.artifact).decode('ascii')}"
                )
                lines.append(f"  artifact: attached image {len(images)} ({media_type})")
            else:
                lines.append(
                    f"  artifact: {len(item.artifact)} bytes of {media_type} "
                    f"(sha256 {item.sha256}), not shown"
                )
    return "\n".join(lines), tuple(images)
