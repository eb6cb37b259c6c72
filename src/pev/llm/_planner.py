"""A planner that asks a chat model for a plan, as JSON that follows a schema (docs/llm.md).

A reply that is not a plan is not repaired and not asked for again here: the planner raises a
``ValueError`` that says what was wrong, the engine records it as a rejected plan, and the
problem reaches the model in the next request's ``rejections``.
"""

from __future__ import annotations

import json

from pev.chat import ChatMessage, ChatModel, ChatRequest, LLMError
from pev.codec import decode, encode
from pev.engine import PlanRequest
from pev.errors import CodecError, PlannerUnavailable, UsageError
from pev.ledger import RevisionKind, TaskEffect, call_name
from pev.llm._prompt import (
    Prompted,
    as_json,
    bullets,
    contract_sections,
    lessons_section,
    one_line,
    records_text,
    section,
    tools_text,
)
from pev.llm._schema import DEFAULT_MAX_PLAN_NODES, plan_schema
from pev.model import ExecutionRecord, Plan

__all__ = ["PLANNER_SYSTEM_PROMPT", "LLMPlanner", "parse_plan", "plan_prompt", "plan_schema"]

PLANNER_SYSTEM_PROMPT = """\
You are the planner of an agent that plans, acts and checks its own work. You turn a task into \
a plan: a small graph of steps, each calling one of the tools listed. A verifier checks the \
result against the success criteria, so plan for every criterion.

Reply with one JSON object, and nothing else:
{"goal": "<the goal>", "nodes": [{"id": "<unique id>", "description": "<what the step does>", \
"tool": "<tool name>", "args": {<arguments>}, "after": ["<ids of steps it needs first>"], \
"effect": "query" or "action"}]}

Rules:
- Ids are short, unique and contain no ".".
- "tool" names one of the listed tools; "args" gives every required parameter and no other, \
with the types shown (a parameter marked ? may be left out); where a tool's "args schema" is \
shown, its args follow it.
- To pass a step's output on, write {"$ref": "<id>"} (the whole output) or \
{"$ref": "<id>.<key>"} (one field of it) as an argument's value, and list <id> in "after".
- Steps whose "after" steps are done run in parallel.
- "effect" is the tool's effect as listed: "query" for read-only tools, "action" for tools with \
side effects. Never label an action tool "query".
- Lessons from earlier tasks are advice, not facts about this task."""

_ASK = {
    RevisionKind.INITIAL: "Write the plan.",
    RevisionKind.GLOBAL: (
        "Write a whole new plan that meets every criterion. It starts afresh: no result of an "
        "earlier plan is carried over."
    ),
    RevisionKind.LOCAL: (
        "Write replacements for the nodes to redo, with the same ids, and only those: "
        '{"goal": "<the goal>", "nodes": [<the replacement nodes>]}.'
    ),
}


def parse_plan(text: str) -> Plan:
    """Read a model's reply as a plan, strictly (no repair).

    Raises:
        ValueError: The reply is empty, not JSON, or not a plan; the message says which and
            where, for the next request's ``rejections``.
    """
    if not text.strip():
        raise ValueError("the model's reply was empty; reply with one JSON object {goal, nodes}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"the model's reply is not JSON ({exc}); it began {text[:120]!r}. "
            "Reply with one JSON object {goal, nodes} and nothing else"
        ) from None
    if not isinstance(data, dict):
        # One error type for every way a reply fails to be a plan, as the docstring promises.
        raise ValueError(  # noqa: TRY004
            f"the model's reply is a JSON {type(data).__name__}, not an object {{goal, nodes}}"
        )
    try:
        return decode(data, Plan)
    except CodecError as exc:
        raise ValueError(f"the model's reply is not a plan: {exc}") from None


class LLMPlanner(Prompted):
    """Plans with a chat model: the initial plan, and local and global replans.

    The prompt carries the planning context described in ``docs/llm.md``: the input, contract,
    tool catalogue (signatures and effects) and lessons (as advice); for a replan also the
    previous plan, the verdict's feedback, unmet criteria, constraints, guidance and evidence,
    the nodes to redo and the results kept, earlier rejections, and the actions whose outcome
    is unknown (never to be repeated blindly). Token usage and the model's name go to the
    ledger through :func:`pev.engine.report_usage`.

    Args:
        model: The chat model, e.g. an :class:`OpenAIChat`.
        instructions: Extra guidance for this agent's domain, added to the system prompt.
        temperature: Sampling temperature (``None``: the server's default).
        max_nodes: The most nodes the plan schema lets the model write (its ``maxItems``), so
            that a model held to the schema by a grammar cannot go on adding nodes.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        instructions: str = "",
        temperature: float | None = 0.0,
        max_nodes: int = DEFAULT_MAX_PLAN_NODES,
    ) -> None:
        super().__init__(model, instructions=instructions, temperature=temperature)
        if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
            raise UsageError(f"max_nodes must be a whole number >= 1, got {max_nodes!r}")
        self.max_nodes = max_nodes

    def chat_request(self, request: PlanRequest) -> ChatRequest:
        """The chat request this planner sends for ``request`` (to inspect or log)."""
        system = self.system_prompt(PLANNER_SYSTEM_PROMPT)
        return ChatRequest(
            messages=(
                ChatMessage(role="system", text=system),
                ChatMessage(role="user", text=plan_prompt(request)),
            ),
            # Not strict: OpenAI's strict mode wants every property required, which would make
            # each optional argument a nullable one that the model must write (and the tool
            # would get None, not its default). Servers that constrain output by a grammar
            # (llama.cpp, vLLM, Ollama) enforce the schema whatever the flag says.
            schema=plan_schema(request.tools, max_nodes=self.max_nodes),
            schema_name="pev_plan",
            temperature=self.temperature,
        )

    async def plan(self, request: PlanRequest) -> Plan:
        """Ask the model for a plan.

        Raises:
            ValueError: The reply is not a plan (the engine rejects it and says why next time).
            PlannerUnavailable: The model could not be reached, after the chat model's own
                retries (the task ends ``failed``/``planner_unavailable``, no replan spent).
            LLMError: The model refused the request (a rejected plan for the engine).
        """
        try:
            text = await self._ask(self.chat_request(request))
        except LLMError as exc:
            if exc.unreachable:
                raise PlannerUnavailable(str(exc)) from exc
            raise
        return parse_plan(text)


def plan_prompt(request: PlanRequest) -> str:
    """The user message: the task, its contract, the tools, lessons, and any replan context."""
    parts = [section("Task input", as_json(request.input))]
    parts.extend(contract_sections(request.contract))
    parts.append(section("Tools", tools_text(request.tools) or "(no catalogue: any tool names)"))
    parts.extend(lessons_section(request.lessons))
    if request.deadline is not None:
        parts.append(section("Deadline", f"The plan must be ready by {request.deadline}."))
    if request.kind is not RevisionKind.INITIAL:
        parts.extend(_replan_sections(request))
    if request.rejections:
        parts.append(
            section(
                "Earlier plans of this task were rejected (fix every problem; do not resend them)",
                # One line each: a server's error text never fills the prompt.
                bullets(one_line(problem, 500) for problem in request.rejections),
            )
        )
    if request.effects:
        parts.append(_effects_section(request.effects))
    if request.unknown_records:
        parts.append(_unknown_section(request.unknown_records, request))
    parts.append(section("Your answer", _ASK[request.kind]))
    return "\n\n".join(parts)


def _replan_sections(request: PlanRequest) -> list[str]:
    parts = [
        section(
            f"This is a {request.kind.value} replan (planner call {request.attempt})",
            "The previous plan did not pass verification.",
        )
    ]
    if request.previous_plan is not None:
        parts.append(section("The previous plan", as_json(request.previous_plan)))
    said: list[str] = []
    if request.verdict is not None:
        said.append(f"status: {request.verdict.status}")
        if request.verdict.failed_nodes:
            said.append(f"nodes at fault: {', '.join(sorted(request.verdict.failed_nodes))}")
    if request.feedback:
        said.append(f"feedback: {request.feedback}")
    if request.guidance:
        said.append(f"guidance: {request.guidance}")
    if request.evidence_refs:
        said.append(f"evidence it rests on: {', '.join(request.evidence_refs)}")
    if said:
        parts.append(section("What the verifier said", "\n".join(said)))
    if request.unmet_criteria:
        parts.append(section("Criteria still unmet", bullets(request.unmet_criteria, quote=True)))
    if request.preserved_constraints:
        parts.append(
            section("Constraints the new plan must keep", bullets(request.preserved_constraints))
        )
    if request.kind is RevisionKind.LOCAL:
        parts.append(
            section(
                "Nodes to redo (the failed nodes and everything downstream of them)",
                bullets(sorted(request.redo_nodes)),
            )
        )
        kept = dict(request.kept_results)
        parts.append(
            section(
                "Results kept (these nodes stay as they are and are not run again; a "
                "replacement may depend on them and $ref their outputs)",
                as_json(kept) if kept else "(none)",
            )
        )
    return parts


# How many of the task's effects the prompt lists, newest last; older ones are counted.
_EFFECTS_SHOWN = 30


def _effects_section(effects: tuple[TaskEffect, ...]) -> str:
    """What the task's actions already did to the world, and how a plan is matched onto it."""
    shown = effects[-_EFFECTS_SHOWN:]
    lines = []
    if len(effects) > len(shown):
        lines.append(f"({len(effects) - len(shown)} earlier effects not shown)")
    for effect in shown:
        args = "?" if effect.args is None else one_line(_compact(effect.args), 300)
        notes = [str(effect.status)]
        if effect.superseded is not None:
            notes.append(f"superseded in revision {effect.superseded}")
        if effect.compensation is not None:
            notes.append(f"compensation {effect.compensation.status}")
        value = "" if effect.value is None else f" -> {one_line(_compact(effect.value), 200)}"
        lines.append(
            f"- {effect.record_id}: {call_name(effect.tool, effect.node_id)}({args}) occurrence "
            f"{effect.occurrence}, revision {effect.revision}: {', '.join(notes)}{value}"
        )
    lines.append(
        "An action node with the same tool and arguments as one of these that took effect is "
        'not sent again: it takes that effect\'s result. Set "repeat": true on a node only to '
        "do the same action once more on purpose. In a global replan, list record ids in the "
        'plan\'s "compensate" to undo those effects before the new plan runs.'
    )
    return section("What this task already did to the world (its effects)", "\n".join(lines))


def _compact(value: object) -> str:
    """A value as JSON on one line, without spaces."""
    return json.dumps(encode(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _unknown_section(records: tuple[ExecutionRecord, ...], request: PlanRequest) -> str:
    """Actions that may or may not have taken effect, with the args they were sent with."""
    lines = [records_text(records)]
    plan = request.previous_plan
    for record in records:
        if plan is not None and record.node_id in plan.node_ids:
            node = plan.node(record.node_id)
            if node.tool == record.tool:
                args = json.dumps(encode(node.args), ensure_ascii=False, sort_keys=True)
                lines.append(f"  {record.ref} came from node {node.id!r}, planned args {args}")
    lines.append(
        "Do not repeat any of these actions with the same arguments: observe or reconcile "
        "first (query the state to learn what happened), or change the action."
    )
    return section("Actions whose outcome is unknown", "\n".join(lines))
