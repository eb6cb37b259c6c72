"""Matching a revision's action nodes onto the task's effects.

See docs/engine.md, "Effects happen once".
The rules are the ledger's (:func:`pev.ledger.intent_of`); this module gathers what they need
from a plan: which nodes are actions, the order occurrences count in, and each node's call (its
tool and canonical args: resolved once the node was dispatched, as planned before that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from pev.ledger import (
    Call,
    EffectStatus,
    Intent,
    Refuse,
    TaskEffect,
    TaskState,
    effect_order,
    intent_of,
)
from pev.model import Effect, Plan, PlanNode, ToolSpec, digest, iter_refs

__all__ = ["EffectMatcher", "effect_problems", "effective_effect", "refusal"]


def effective_effect(node: PlanNode, tools: Mapping[str, ToolSpec] | None) -> Effect:
    """The node's effect: its own, else its tool's, else ``action``; ``action`` always wins.

    A node that leaves its effect ``None`` takes its registered tool's; without one (a plain
    executor), it is an action, the safe assumption. A node's own ``action`` makes a query
    tool stricter; its own ``query`` cannot make an action tool safe (plan validation refuses
    that plan, and here the stricter of the two stands).
    """
    spec = tools.get(node.tool) if tools and node.tool else None
    if node.effect is None:
        return spec.effect if spec is not None else Effect.ACTION
    if node.effect is Effect.ACTION or (spec is not None and spec.effect is Effect.ACTION):
        return Effect.ACTION
    return Effect.QUERY


class EffectMatcher:
    """The action nodes of one plan, in the order their occurrences are counted.

    A call is a tool and canonical args; a node without a tool (run by a plain executor, which
    acts on the node itself) is a call of its own: its node id and args.

    Args:
        plan: The revision's plan.
        tools: The registered tools' specs (a node's effect defaults to its tool's).
    """

    __slots__ = ("_actions", "_by_tool", "_planned")

    def __init__(self, plan: Plan, tools: Mapping[str, ToolSpec] | None) -> None:
        nodes = {node.id: node for node in plan.nodes}
        self._actions: dict[str, PlanNode] = {
            node_id: nodes[node_id]
            for node_id in effect_order(plan)
            if effective_effect(nodes[node_id], tools) is Effect.ACTION
        }
        # The action nodes of each tool, in order: only they can make the same call.
        by_tool: dict[str | None, list[str]] = {}
        for node_id, node in self._actions.items():
            by_tool.setdefault(node.tool, []).append(node_id)
        self._by_tool = by_tool
        self._planned: dict[str, str] = {}

    def is_action(self, node_id: str) -> bool:
        """Whether the node is an action of the plan."""
        return node_id in self._actions

    def planned_digest(self, node_id: str) -> str:
        """The digest of the node's args as planned (``$ref`` objects as they are)."""
        found = self._planned.get(node_id)
        if found is None:
            found = self._planned[node_id] = digest(self._actions[node_id].args)
        return found

    def intent(
        self,
        node_id: str,
        args_digest: str,
        *,
        effects: Iterable[TaskEffect],
        resolved: Callable[[str], str | None] = lambda node_id: None,
    ) -> Intent:
        """What the action node ``node_id``, called with args of ``args_digest``, intends.

        Args:
            node_id: An action node of the plan.
            args_digest: Its args' digest (resolved, when they held a ``$ref``).
            effects: The task's effects from before the revision.
            resolved: The digest of another node's resolved args, when they are known (it was
                dispatched in this revision); ``None``: its args as planned count.
        """
        node = self._actions[node_id]
        calls: list[Call] = []
        position = 0
        # Without a tool, the executor acts on the node itself: its id names the call.
        others = self._by_tool[node.tool] if node.tool is not None else (node_id,)
        for other_id in others:
            other = self._actions[other_id]
            if other_id == node_id:
                position = len(calls)
                calls.append(Call(node_id, node.tool, args_digest, node.repeat))
                continue
            other_digest = resolved(other_id) or self.planned_digest(other_id)
            if other_digest == args_digest:
                calls.append(Call(other_id, other.tool, other_digest, other.repeat))
        same = [
            effect
            for effect in effects
            if effect.tool == node.tool
            and effect.args_digest == args_digest
            and (node.tool is not None or effect.node_id == node_id)
        ]
        return intent_of(position, calls, same)


def refusal(node: PlanNode, effect: TaskEffect) -> str:
    """Why a node that would send again an intended effect of unknown outcome is refused."""
    return (
        f"node {node.id!r} would send action {node.tool!r} again with the same args as record "
        f"{effect.record_id} (occurrence {effect.occurrence}), whose outcome is unknown; "
        "observe or reconcile it first, or change the action"
    )


def effect_problems(
    state: TaskState,
    plan: Plan,
    dispatched: Iterable[PlanNode],
    tools: Mapping[str, ToolSpec] | None,
) -> list[str]:
    """Why a new revision of ``plan`` would send an intended effect of unknown outcome again.

    Only the ``dispatched`` nodes whose args are known before they run (no ``$ref``) are
    checked here; the others are checked when they are dispatched.
    """
    unknown = [effect for effect in state.effects.values() if effect.status is EffectStatus.UNKNOWN]
    if not unknown:
        return []
    matcher = EffectMatcher(plan, tools)
    problems: list[str] = []
    for node in dispatched:
        if not matcher.is_action(node.id) or next(iter_refs(node.args), None) is not None:
            continue
        intent = matcher.intent(
            node.id, matcher.planned_digest(node.id), effects=state.effects.values()
        )
        if isinstance(intent, Refuse):
            problems.append(refusal(node, intent.effect))
    return problems
