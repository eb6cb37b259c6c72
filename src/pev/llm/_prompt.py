"""Pieces the planner's and the verifier's prompts share: sections, lists, JSON, lessons."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from pev.chat import ChatModel, ChatRequest
from pev.codec import encode
from pev.engine import report_usage
from pev.llm._schema import shown_schema
from pev.model import (
    ExecutionRecord,
    NodeResult,
    RecordId,
    ToolSpec,
    VerificationContract,
    record_status_for,
)

__all__ = [
    "as_json",
    "bullets",
    "contract_sections",
    "lessons_section",
    "one_line",
    "records_text",
    "section",
    "tools_text",
]


def as_json(value: object) -> str:
    """A pev value (or plain JSON) as readable JSON text."""
    return json.dumps(encode(value), indent=2, ensure_ascii=False, sort_keys=True)


def bullets(items: Iterable[str], *, quote: bool = False) -> str:
    """One ``- item`` line per item; quoted (as JSON strings) where the exact text matters."""
    return "\n".join(
        f"- {json.dumps(item, ensure_ascii=False) if quote else item}" for item in items
    )


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"


def section(title: str, body: str) -> str:
    """A titled part of a prompt."""
    return f"## {title}\n{body.strip()}"


def contract_sections(contract: VerificationContract) -> list[str]:
    """The goal, the success criteria (quoted, as they must be answered) and the constraints."""
    parts = [
        section("Goal", contract.goal or "(no goal stated: the task input is the goal)"),
        section(
            "Success criteria (the verifier checks each one)",
            bullets(contract.success_criteria, quote=True) or "(none)",
        ),
    ]
    if contract.constraints:
        parts.append(section("Constraints (must hold throughout)", bullets(contract.constraints)))
    return parts


def lessons_section(lessons: Iterable[str]) -> list[str]:
    """Lessons from earlier tasks, labelled as advice (never evidence); nothing when none."""
    items = [lesson for lesson in lessons if lesson.strip()]
    if not items:
        return []
    return [
        section(
            "Lessons from earlier tasks (advice only: they are not facts about this task)",
            bullets(items),
        )
    ]


def tools_text(tools: Iterable[ToolSpec]) -> str:
    """Each tool: ``name(param: type, optional?: type) [effect]: description``, then its schema.

    A tool with a JSON schema (``ToolSpec.schema``) gets a second line, ``args schema: {...}``,
    the whole schema on one line: parameter descriptions, enums, nested objects and all.
    """
    lines = []
    for spec in tools:
        params = ", ".join(
            f"{param.name}{'' if param.required else '?'}: "
            f"{' | '.join(sorted(param.json_types)) or 'any'}"
            for param in spec.parameters
        )
        about = f": {spec.description}" if spec.description else ""
        lines.append(f"- {spec.name}({params}) [{spec.effect.value}]{about}")
        if spec.schema is not None:
            schema = json.dumps(shown_schema(spec), ensure_ascii=False)
            lines.append(f"  args schema: {schema}")
    return "\n".join(lines)


def records_text(
    records: Iterable[ExecutionRecord], reconciled: Mapping[RecordId, NodeResult] | None = None
) -> str:
    """One line per execution record: its reference, node, tool, effect, status and error.

    A record of unknown outcome that a reconciliation settled says what was established.
    """
    lines = []
    settled = reconciled or {}
    for record in records:
        error = f", error: {record.error}" if record.error else ""
        found = settled.get(record.id)
        if found is not None:
            error += f"; reconciled afterwards as {record_status_for(found).value}"
        lines.append(
            f"- {record.ref} (node {record.node_id!r} of revision {record.revision}, "
            f"tool {record.tool!r} [{record.effect.value}]): {record.status.value}{error}"
        )
    return "\n".join(lines)


class Prompted:
    """What the LLM planner and verifier share: a model, extra instructions, a temperature."""

    def __init__(
        self, model: ChatModel, *, instructions: str = "", temperature: float | None = 0.0
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.temperature = temperature

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    def system_prompt(self, base: str) -> str:
        """``base``, followed by this agent's own instructions when it has any."""
        if not self.instructions.strip():
            return base
        return f"{base}\n\n" + section("Instructions for this agent", self.instructions)

    async def _ask(self, request: ChatRequest) -> str:
        """Send ``request`` to the model, report its usage to the ledger, return its text."""
        reply = await self.model.complete(request)
        report_usage(
            reply.model, input_tokens=reply.input_tokens, output_tokens=reply.output_tokens
        )
        return reply.text
