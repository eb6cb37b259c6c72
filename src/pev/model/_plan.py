"""Plans, plan nodes, tool signatures, and plan validation (docs/design.md §2.1)."""

from __future__ import annotations

import contextlib
import difflib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from pev._canonical import ADDED
from pev._json import (
    JsonObject,
    JsonValue,
    ValueLimits,
    freeze_json,
    is_json_object,
    json_type_name,
    value_problem,
)
from pev.errors import PlanError

__all__ = [
    "DEFAULT_MAX_NODES",
    "ArgsCheck",
    "Effect",
    "Plan",
    "PlanNode",
    "ToolParameter",
    "ToolSpec",
    "downstream",
    "iter_refs",
    "plan_problems",
    "validate_plan",
]

DEFAULT_MAX_NODES = 64
REF_KEY = "$ref"


class Effect(StrEnum):
    """What running a node does to the world."""

    QUERY = "query"
    """Read-only, safe to repeat."""
    ACTION = "action"
    """Has side effects; the default, because it is the safe assumption."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolParameter:
    """One parameter of a registered tool, as plan validation sees it.

    Attributes:
        name: The parameter name, as it appears in a node's args.
        json_types: JSON Schema type names the value may have (``string``, ``integer``,
            ``number``, ``boolean``, ``array``, ``object``, ``null``); empty means any.
        required: Whether a node must supply it.
    """

    name: str
    json_types: frozenset[str] = frozenset()
    required: bool = True


ArgsCheck: TypeAlias = Callable[[Mapping[str, JsonValue], frozenset[str]], Sequence[str]]
"""Checks a node's args against a tool's schema: ``check(args, later)`` → one problem per error.

``args`` holds the arguments that name a parameter of the tool and are not ``$ref`` objects;
``later`` names the parameters that are filled at dispatch (by a ``$ref``) or are missing, which
plan validation reports itself: a check reports neither as missing. A problem reads
``"argument 'room': Input should be 'small' or 'large'"``.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A registered tool's name, declared effect and signature.

    Attributes:
        schema: The JSON Schema of the tool's args object (frozen; ``thaw_json`` gives plain
            dicts), for planners that constrain their output to it; ``None`` for a spec built
            by hand, which plan validation checks by ``parameters`` alone.
        check: Checks args against ``schema`` (see :data:`ArgsCheck`); ``None``: the
            ``json_types`` of ``parameters`` are checked instead.
        secrets: ``(parameter, source)`` for each secret parameter, which a plan never passes:
            it is filled when the tool is called, from ``source`` (``PAYMENTS_TOKEN``).
    """

    name: str
    effect: Effect = Effect.ACTION
    parameters: tuple[ToolParameter, ...] = ()
    description: str = ""
    secrets: tuple[tuple[str, str], ...] = ()
    schema: JsonObject | None = field(default=None, compare=False)
    check: ArgsCheck | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.schema is not None and not isinstance(self.schema, JsonObject):
            object.__setattr__(self, "schema", freeze_json(self.schema, path="schema"))


# PlanNode and Plan keep the documented positional signatures (`PlanNode(id, description, ...)`,
# `Plan(goal, nodes)`), which are public API; everything optional is keyword-friendly.
@dataclass(frozen=True, slots=True)
class PlanNode:
    """One step of a plan.

    Construction never fails on a malformed value: lists become tuples and args are frozen where
    they can be, and :func:`validate_plan` reports everything that is still wrong, all at once.

    Attributes:
        id: Stable and unique in the plan; the key used by verify, diagnose and replan.
        description: What the step does, in words (the planner's and the operator's view).
        tool: Name of a registered tool, or ``None`` for an executor that needs none.
        args: A JSON object; ``{"$ref": "n1"}`` or ``{"$ref": "n1.key"}`` is replaced at dispatch
            by the output of dependency ``n1``.
        after: Ids of the nodes this one depends on.
        effect: ``query`` (read-only) or ``action`` (side effects); ``None`` (the default) takes
            the tool's declared effect, and ``action`` without a registered tool (the safe
            assumption). A node may make a query tool an action, never an action a query.
        repeat: Doing this action again is the intent (a second reminder, a second cube): the
            node is a new occurrence of its call, after every effect of that call the task
            already has, instead of being satisfied by one (docs/engine.md, "Effects happen
            once"). It never makes a call of unknown outcome sendable.
    """

    id: str
    description: str = ""
    tool: str | None = None
    args: Mapping[str, JsonValue] = field(default_factory=JsonObject)
    after: tuple[str, ...] = ()
    # Once "action" by default, and always written then: left out of the JSON while None, so a
    # node of an older ledger encodes, and hashes, exactly as it did.
    effect: Effect | None = field(default=None, metadata=ADDED)
    repeat: bool = field(default=False, metadata=ADDED)

    def __post_init__(self) -> None:
        if isinstance(self.args, Mapping) and not isinstance(self.args, JsonObject):
            # A value JSON cannot hold is kept as given; validate_plan names it.
            with contextlib.suppress(TypeError, ValueError):
                object.__setattr__(self, "args", freeze_json(self.args))
        if isinstance(self.after, list):
            object.__setattr__(self, "after", tuple(self.after))
        if isinstance(self.effect, str) and self.effect in Effect.__members__.values():
            object.__setattr__(self, "effect", Effect(self.effect))


@dataclass(frozen=True, slots=True)
class Plan:
    """A goal and the nodes that reach it; immutable once built.

    Attributes:
        goal: What the plan achieves, in words.
        nodes: Its steps.
        compensate: For a global replan, record ids of the task's effects
            (``PlanRequest.effects``) to undo before the plan dispatches anything, each through
            its tool's ``compensate`` (docs/engine.md, "Compensation"). An effect a plan merely
            leaves out stays as it is.
    """

    goal: str
    nodes: tuple[PlanNode, ...] = ()
    compensate: tuple[str, ...] = field(default=(), metadata=ADDED)

    def __post_init__(self) -> None:
        if isinstance(self.nodes, list):
            object.__setattr__(self, "nodes", tuple(self.nodes))
        if isinstance(self.compensate, list):
            object.__setattr__(self, "compensate", tuple(self.compensate))

    @property
    def node_ids(self) -> tuple[str, ...]:
        """The node ids, in plan order."""
        return tuple(node.id for node in self.nodes)

    def node(self, node_id: str) -> PlanNode:
        """The node with this id.

        Raises:
            KeyError: No node has that id.
        """
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)


def iter_refs(value: object) -> Iterator[str]:
    """Yield every ``$ref`` target (``"n1"`` or ``"n1.key.sub"``) inside an args value."""
    if isinstance(value, Mapping):
        ref = value.get(REF_KEY)
        if isinstance(ref, str) and len(value) == 1:
            yield ref
            return
        for item in value.values():
            yield from iter_refs(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from iter_refs(item)


def downstream(plan: Plan, roots: Iterable[str]) -> frozenset[str]:
    """The ids in ``roots`` plus every node that depends on one of them, directly or not."""
    dependents: dict[str, list[str]] = {node.id: [] for node in plan.nodes}
    for node in plan.nodes:
        for dep in node.after:
            dependents.setdefault(dep, []).append(node.id)
    seen: set[str] = set()
    stack = [root for root in roots if root in dependents]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(dependents[current])
    return frozenset(seen)


def validate_plan(
    plan: Plan,
    *,
    tools: Mapping[str, ToolSpec] | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    limits: ValueLimits | None = None,
) -> None:
    """Check a plan before anything runs.

    Args:
        plan: The plan to check.
        tools: The registered tools by name; ``None`` skips the tool checks (no registry).
        max_nodes: The most nodes a plan may have.
        limits: How deep and large each node's args may be (the task policy's
            ``max_value_depth`` and ``max_value_bytes``); the defaults when ``None``.

    Raises:
        PlanError: Listing every problem found, in plan order.
    """
    problems = plan_problems(plan, tools=tools, max_nodes=max_nodes, limits=limits)
    if problems:
        raise PlanError(problems)


def plan_problems(
    plan: Plan,
    *,
    tools: Mapping[str, ToolSpec] | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    limits: ValueLimits | None = None,
) -> tuple[str, ...]:
    """Every problem that makes ``plan`` invalid, in a stable order; empty when it is valid.

    Besides the structure, every value must be one the ledger can record: text that is valid
    Unicode, and args that hold only JSON (no NaN or infinity, no object JSON cannot hold, no
    integer of more than ``MAX_INTEGER_DIGITS`` digits; integers are recorded exactly) within
    ``limits`` (see :func:`validate_plan`).
    """
    problems: list[str] = []
    if not isinstance(plan, Plan):
        return (f"expected a Plan, got a {type(plan).__name__}",)
    if not isinstance(plan.goal, str):
        problems.append(f"the plan's goal must be a string, got a {type(plan.goal).__name__}")
    elif (problem := value_problem(plan.goal, limits, path="goal")) is not None:
        problems.append(f"the plan's {problem}")
    if not isinstance(plan.nodes, tuple) or not all(isinstance(n, PlanNode) for n in plan.nodes):
        problems.append("the plan's nodes must be a sequence of PlanNode")
        return tuple(problems)
    if not plan.nodes:
        problems.append("the plan has no nodes; a plan needs at least one")
        return tuple(problems)
    if len(plan.nodes) > max_nodes:
        problems.append(
            f"the plan has {len(plan.nodes)} nodes, more than max_nodes={max_nodes}; "
            "split the work or raise RecoveryPolicy.max_nodes"
        )

    ids = [node.id for node in plan.nodes]
    # A non-string id (reported per node) may be unhashable; only strings can be referenced.
    known = {node_id for node_id in ids if isinstance(node_id, str)}
    # Counted once (not ids.count per id), so a plan of many nodes is checked in linear time.
    id_counts = Counter(node_id for node_id in ids if isinstance(node_id, str))
    problems.extend(
        f"node id {node_id!r} is used by {count} nodes; ids must be unique"
        for node_id, count in id_counts.items()
        if count > 1
    )
    for node in plan.nodes:
        problems.extend(_node_problems(node, known, tools, limits))
    problems.extend(_cycle_problems(plan.nodes, known))
    if not isinstance(plan.compensate, tuple) or not all(
        isinstance(record_id, str) and record_id for record_id in plan.compensate
    ):
        problems.append(
            f"the plan's compensate must be a list of record ids, got {plan.compensate!r}"
        )
    elif len(set(plan.compensate)) != len(plan.compensate):
        problems.append("the plan's compensate names the same record more than once")
    return tuple(problems)


def _node_problems(
    node: PlanNode,
    known: set[str],
    tools: Mapping[str, ToolSpec] | None,
    limits: ValueLimits | None,
) -> Iterator[str]:
    where = f"node {node.id!r}"
    if not isinstance(node.id, str) or not node.id.strip():
        yield f"node id {node.id!r} must be a non-empty string"
    elif "." in node.id:
        yield f"{where}: an id must not contain '.', which separates a $ref from its output path"
    if not isinstance(node.description, str):
        yield f"{where}: description must be a string"
    if node.tool is not None and not isinstance(node.tool, str):
        yield f"{where}: tool must be a tool name (a string) or None"
    for name in ("id", "description", "tool"):
        text = getattr(node, name)
        if isinstance(text, str) and (problem := value_problem(text, limits, path=name)):
            yield f"{where}: {problem}"

    after_ok = isinstance(node.after, tuple) and all(isinstance(dep, str) for dep in node.after)
    if not after_ok:
        yield f"{where}: after must be a list of node ids, got {node.after!r}"
    else:
        for dep in node.after:
            if dep not in known:
                yield f"{where}: depends on {dep!r}, which is not a node of this plan"
        if len(set(node.after)) != len(node.after):
            yield f"{where}: after lists the same id more than once"

    effect_ok = node.effect is None or isinstance(node.effect, Effect)
    if not effect_ok:
        yield f"{where}: effect must be 'query', 'action' or null (the tool's), got {node.effect!r}"
    if not isinstance(node.repeat, bool):
        yield f"{where}: repeat must be true or false, got {node.repeat!r}"

    spec: ToolSpec | None = None
    if tools is not None and isinstance(node.tool, str):
        spec = tools.get(node.tool)
        if spec is None:
            registered = ", ".join(sorted(tools)) or "none"
            close = difflib.get_close_matches(node.tool, list(tools), n=1)
            guess = f"; did you mean {close[0]!r}?" if close else ""
            yield (
                f"{where}: tool {node.tool!r} is not registered (registered: {registered}){guess}"
            )
    if (
        spec is not None
        and effect_ok
        and spec.effect is Effect.ACTION
        and node.effect is Effect.QUERY
    ):
        yield (
            f"{where}: tool {spec.name!r} is an action; a node cannot label it 'query' "
            "(a node may only make a tool's effect stricter)"
        )

    if not is_json_object(node.args):
        if isinstance(node.args, Mapping):
            keys = sorted(repr(key) for key in node.args if not isinstance(key, str))
            yield f"{where}: args keys must be strings, found {', '.join(keys)}"
        else:
            yield f"{where}: args must be a JSON object, got a {type(node.args).__name__}"
        return
    problem = value_problem(node.args, limits, path="args")
    if problem is not None:
        yield f"{where}: {problem}"
        return
    if node.args:  # empty args hold no $ref
        yield from _ref_problems(where, node, after_ok)
    if spec is not None:
        yield from _signature_problems(where, node.args, spec)


def _ref_problems(where: str, node: PlanNode, after_ok: bool) -> Iterator[str]:
    deps = set(node.after) if after_ok else set()
    for ref_object in _ref_objects(node.args):
        if len(ref_object) != 1:
            yield (
                f"{where}: a $ref object must hold only the '$ref' key, "
                f"found keys {sorted(ref_object)}"
            )
            continue
        ref = ref_object[REF_KEY]
        target = ref.split(".", 1)[0] if isinstance(ref, str) else ""
        if not target:
            yield f"{where}: a $ref must be a node id string, got {ref!r}"
            continue
        if target not in deps:
            yield (
                f"{where}: $ref {ref!r} points at {target!r}, which is not among its after ids; "
                f"add {target!r} to after"
            )


def _ref_objects(value: object) -> Iterator[Mapping[str, object]]:
    """Every object holding a ``$ref`` key, well-formed or not."""
    if isinstance(value, Mapping):
        if REF_KEY in value:
            yield value
            return
        for item in value.values():
            yield from _ref_objects(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _ref_objects(item)


def _signature_problems(where: str, args: Mapping[str, JsonValue], spec: ToolSpec) -> Iterator[str]:
    for param in spec.parameters:
        if param.required and param.name not in args:
            yield f"{where}: tool {spec.name!r} needs argument {param.name!r}, which is missing"
    params = {param.name: param for param in spec.parameters}
    checked: dict[str, JsonValue] = {}
    for name, value in args.items():
        found_param = params.get(name)
        source = dict(spec.secrets).get(name) if found_param is None else None
        if source is not None:
            yield (
                f"{where}: {name!r} is a secret of tool {spec.name!r}; it is filled from "
                f"{source} at call time, never planned: leave it out of args"
            )
            continue
        if found_param is None:
            accepted = ", ".join(sorted(params)) or "none"
            yield (
                f"{where}: tool {spec.name!r} has no parameter {name!r} (parameters: {accepted})"
            )
            continue
        if _is_ref(value):
            continue
        if spec.check is not None:
            checked[name] = value
            continue
        if not found_param.json_types:
            continue
        found = json_type_name(value)
        if found not in found_param.json_types and not (
            found == "integer" and "number" in found_param.json_types
        ):
            wanted = " or ".join(sorted(found_param.json_types))
            yield f"{where}: argument {name!r} of tool {spec.name!r} must be {wanted}, got {found}"
    if spec.check is not None and checked:
        later = frozenset(params) - checked.keys()
        try:
            problems = list(spec.check(checked, later))
        except Exception as exc:  # noqa: BLE001 - a broken check rejects the plan, it never crashes
            problems = [f"its args could not be checked ({type(exc).__name__}: {exc})"]
        for problem in problems:
            yield f"{where}: tool {spec.name!r}: {problem}"


def _is_ref(value: object) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and REF_KEY in value


def _cycle_problems(nodes: tuple[PlanNode, ...], known: set[str]) -> Iterator[str]:
    graph: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        if isinstance(node.id, str) and isinstance(node.after, tuple) and node.id not in graph:
            graph[node.id] = tuple(
                dep for dep in node.after if isinstance(dep, str) and dep in known
            )
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    reported: set[frozenset[str]] = set()
    for start, deps in graph.items():
        if color[start] != white:
            continue
        # Iterative DFS so a long chain cannot exhaust the recursion limit.
        path: list[str] = [start]
        stack: list[Iterator[str]] = [iter(deps)]
        color[start] = grey
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                color[path.pop()] = black
                stack.pop()
                continue
            if color.get(dep) == grey:
                cycle = [*path[path.index(dep) :], dep]
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    yield "dependency cycle: " + " runs after ".join(repr(n) for n in cycle)
            elif color.get(dep) == white:
                color[dep] = grey
                path.append(dep)
                stack.append(iter(graph[dep]))
