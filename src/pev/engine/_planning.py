"""Planning and replanning: the planner's request, local merges, and plan checks.

See docs/design.md §4.

Pure functions of the task's state: the driver calls the planner and writes what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from pev.engine._compensation import compensation_problems
from pev.engine._effects import effect_problems, effective_effect
from pev.engine._protocols import PlanRequest
from pev.engine._typed import UNTYPED, AgentTypes
from pev.kernel import GlobalReplan, LocalReplan
from pev.ledger import (
    Rejected,
    RevisionKind,
    TaskState,
    outputs,
    unsettled_unknown_actions,
)
from pev.model import (
    Effect,
    Plan,
    PlanNode,
    ToolSpec,
    downstream,
    plan_problems,
)

__all__ = [
    "append_feedback",
    "dispatched_actions",
    "merge_local",
    "plan_request",
    "redo_set",
    "review_plan",
    "reviewer_rejections",
    "to_dispatch",
]


def redo_set(state: TaskState) -> frozenset[str]:
    """For a local replan: the failed nodes and every node downstream of them."""
    action = state.replan_action
    plan = state.plan
    if not isinstance(action, LocalReplan) or plan is None:
        return frozenset()
    return downstream(plan, action.nodes)


def plan_request(
    state: TaskState,
    *,
    tools: Mapping[str, ToolSpec] | None,
    lessons: tuple[str, ...] = (),
    types: AgentTypes = UNTYPED,
) -> PlanRequest[Any]:
    """The request for the planner call the task is waiting for.

    Its input is the recorded one as the agent's input type (``types``: docs/engine.md, "Typed
    agents"); an untyped agent's planner gets the JSON itself.
    """
    kind = state.planning or RevisionKind.INITIAL
    action = state.replan_action
    last = state.verdicts[-1].verdict if state.verdicts else None
    redo = redo_set(state) if kind is RevisionKind.LOCAL else frozenset()
    kept = outputs(state) if kind is RevisionKind.LOCAL else {}
    feedback = action.feedback if isinstance(action, LocalReplan | GlobalReplan) else ""
    rejections = (
        *(problem for rejected in state.rejections for problem in rejected.problems),
        *reviewer_rejections(state),
    )
    return PlanRequest(
        kind=kind,
        attempt=state.planner_calls,
        task_id=state.task_id,
        input=types.typed_input(state.created.input),
        contract=state.contract,
        tools=tuple(tools.values()) if tools else (),
        lessons=lessons,
        deadline=state.replan_deadline,
        previous_plan=state.plan,
        verdict=last if kind is not RevisionKind.INITIAL else None,
        feedback=feedback,
        unmet_criteria=last.unmet_criteria if last else (),
        preserved_constraints=(last.preserved_constraints if last else ())
        or state.contract.constraints,
        guidance=last.guidance if last else "",
        evidence_refs=last.evidence_refs if last else (),
        redo_nodes=redo,
        kept_results=MappingProxyType({k: v for k, v in kept.items() if k not in redo}),
        rejections=rejections,
        unknown_records=unsettled_unknown_actions(state),
        effects=tuple(state.effects.values()),
    )


def reviewer_rejections(state: TaskState) -> tuple[str, ...]:
    """Each reviewer's rejection of a revision (docs/control.md), as the planner is told it."""
    return tuple(
        f"a reviewer ({review.by}) rejected revision {review.revision}'s plan: {review.reason}"
        for review in state.reviews
        if isinstance(review, Rejected)
    )


def append_feedback(previous: Plan, redo: frozenset[str], feedback: str) -> Plan:
    """The local plan when the planner declines: the redo nodes carry the feedback."""
    note = feedback or "the previous attempt failed verification"
    return replace(
        previous,
        nodes=tuple(
            replace(node, description=f"{node.description}\n[retry after feedback] {note}")
            if node.id in redo
            else node
            for node in previous.nodes
        ),
    )


def merge_local(previous: Plan, returned: Plan, redo: frozenset[str]) -> tuple[Plan, list[str]]:
    """The full plan of a local revision: kept nodes plus the planner's replacements.

    The planner may return only the replacements or a whole plan; nodes outside the redo set
    must be unchanged. Returns the merged plan and the problems found.
    """
    problems: list[str] = []
    returned_nodes = {node.id: node for node in returned.nodes if isinstance(node, PlanNode)}
    missing = sorted(redo - set(returned_nodes))
    if missing:
        problems.append(f"a local replan must return replacements for {missing} (same ids)")
    previous_nodes = {node.id: node for node in previous.nodes}
    for node_id, node in returned_nodes.items():
        if node_id in redo:
            continue
        kept = previous_nodes.get(node_id)
        if kept is None:
            problems.append(
                f"a local replan may only replace {sorted(redo)}; node {node_id!r} is new"
            )
        elif kept != node:
            problems.append(
                f"a local replan may only replace {sorted(redo)}; node {node_id!r} is kept "
                "and must stay as it was"
            )
    merged = tuple(
        returned_nodes.get(node.id, node) if node.id in redo else node for node in previous.nodes
    )
    # A compensate list is kept so that review names it: a local replan cannot carry one.
    return Plan(previous.goal, merged, compensate=returned.compensate), problems


def to_dispatch(plan: Plan, redo: frozenset[str] | None) -> list[PlanNode]:
    """The nodes a new revision of ``plan`` dispatches: the redo set of a local one, else all.

    ``redo`` is ``None`` outside a local replan (an empty redo set also means every node).
    """
    return [node for node in plan.nodes if not redo or node.id in redo]


def dispatched_actions(
    plan: Plan, redo: frozenset[str], tools: Mapping[str, ToolSpec] | None
) -> list[str]:
    """The ids of the nodes a new revision of ``plan`` would dispatch that are actions."""
    nodes = to_dispatch(plan, redo)
    return [node.id for node in nodes if effective_effect(node, tools) is Effect.ACTION]


def review_plan(
    state: TaskState,
    plan: Plan,
    *,
    kind: RevisionKind,
    redo: frozenset[str],
    tools: Mapping[str, ToolSpec] | None,
    compensates: Callable[[str | None], bool] = lambda tool: False,
) -> list[str]:
    """Every reason to reject ``plan`` before anything runs (docs/design.md §2.1, §4, §4.1)."""
    policy = state.policy
    problems = list(
        plan_problems(plan, tools=tools, max_nodes=policy.max_nodes, limits=policy.value_limits)
    )
    if problems:
        return problems
    dispatched = to_dispatch(plan, redo if kind is RevisionKind.LOCAL else None)
    problems.extend(effect_problems(state, plan, dispatched, tools))
    problems.extend(
        compensation_problems(state, plan.compensate, kind=kind, compensates=compensates)
    )
    return problems
