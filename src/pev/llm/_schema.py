"""The JSON schema of a plan reply: one node shape per tool, its args held to the tool's schema.

Each node of the plan is one branch of an ``anyOf``, one per registered tool: its ``tool`` is a
``const`` and its ``args`` are that tool's own JSON schema (``ToolSpec.schema``, as pydantic
writes it; for a spec built by hand, one built from the parameters' ``json_types``). Any
argument may instead be a reference to another step's output (``{"$ref": "look.summary"}``), so
each parameter's schema becomes ``anyOf: [its schema, a reference]``. Each tool's ``$defs`` are
hoisted into the plan schema's own ``$defs`` under names of their own (``<tool>__<Name>``), and
every ``$ref`` that pointed at them is rewritten, so two tools that both define ``Point`` do not
collide. List lengths are capped (``maxItems``) so that a model whose output a grammar constrains
cannot loop inside a list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pev._json import thaw_json
from pev.model import Effect, ToolSpec

__all__ = ["DEFAULT_MAX_PLAN_NODES", "REF_DEF", "args_schema", "plan_schema", "shown_schema"]

DEFAULT_MAX_PLAN_NODES = 20
"""The most nodes the plan schema lets a model write (``LLMPlanner(max_nodes=...)``)."""

REF_DEF = "pev_ref"
"""The name, in the plan schema's ``$defs``, of the shape of a reference to a step's output."""

# A reference is an object with one key, "$ref", whose value is a string. It is written with
# additionalProperties rather than as `properties: {"$ref": ...}`: llama.cpp's and
# llama-cpp-python's grammar builders walk every object of a schema and take any "$ref" key for
# a schema reference, and a property named "$ref" makes them fail. The one-key rule is checked
# by plan validation; the prompt says how a reference is written.
_REF_SHAPE: dict[str, Any] = {
    "type": "object",
    "description": 'another step\'s output: {"$ref": "<id>"} or {"$ref": "<id>.<key>"}',
    "additionalProperties": {"type": "string"},
    "minProperties": 1,
    "maxProperties": 1,
}
_A_REF = {"$ref": f"#/$defs/{REF_DEF}"}

# Keywords whose value is one schema, a list of schemas, or a map of name → schema: the walk
# below rewrites references inside them and nowhere else (a property may be named "$ref").
_ONE_SCHEMA = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"}
)
_DEFS = ("$defs", "definitions")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def plan_schema(
    tools: Iterable[ToolSpec] = (), *, max_nodes: int = DEFAULT_MAX_PLAN_NODES
) -> dict[str, Any]:
    """The JSON schema of a plan reply.

    With a catalogue, each node is one of the tools' branches (``tool`` a ``const``, ``args``
    that tool's schema, ``effect`` the effects the tool allows); without one, ``tool`` is any
    string and ``args`` any object.

    Args:
        tools: The tool catalogue.
        max_nodes: The most nodes a plan may have (``maxItems``; ``after`` lists one fewer).
    """
    specs = sorted(tools, key=lambda spec: spec.name)
    after = {"type": "array", "items": {"type": "string"}, "maxItems": max(max_nodes - 1, 0)}
    defs: dict[str, Any] = {}
    if specs:
        defs[REF_DEF] = _REF_SHAPE
        branches = [_node(spec, args_schema(spec, defs), after) for spec in specs]
        node: dict[str, Any] = branches[0] if len(branches) == 1 else {"anyOf": branches}
    else:
        node = _node(None, {"type": "object"}, after)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "goal": {"type": "string"},
            "nodes": {"type": "array", "items": node, "maxItems": max_nodes},
            # Optional: in a global replan, record ids of the task's effects to undo first.
            "compensate": {"type": "array", "items": {"type": "string"}, "maxItems": max_nodes},
        },
        "required": ["goal", "nodes"],
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


def _node(spec: ToolSpec | None, args: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    if spec is None:
        tool: dict[str, Any] = {"type": ["string", "null"]}
        effects = [effect.value for effect in Effect]
    else:
        tool = {"type": "string", "const": spec.name}
        # A node may make a query tool an action, never an action tool a query.
        effects = [spec.effect.value] if spec.effect is Effect.ACTION else ["query", "action"]
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "description": {"type": "string"},
            "tool": tool,
            "args": args,
            "after": after,
            "effect": {"type": "string", "enum": effects},
            # Optional: true only to do an action the task already did once more, on purpose.
            "repeat": {"type": "boolean"},
        },
        "required": ["id", "description", "tool", "args", "after", "effect"],
        "additionalProperties": False,
    }


def args_schema(spec: ToolSpec, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one tool's args in a plan, each argument also allowed to be a reference.

    The tool's own ``$defs`` are added to ``defs`` under fresh names, and its references are
    rewritten to match; ``defs`` must hold :data:`REF_DEF` for the references to resolve.
    Secret parameters, which a plan never passes, are left out.
    """
    secret = {name for name, _ in spec.secrets}
    if spec.schema is None:
        properties: dict[str, Any] = {}
        for param in spec.parameters:
            if param.name in secret:
                continue
            types = sorted(param.json_types)
            if not types:
                properties[param.name] = {}  # any value, a reference included
                continue
            typed = {"type": types[0] if len(types) == 1 else types}
            properties[param.name] = {"anyOf": [typed, _A_REF]}
        required = [p.name for p in spec.parameters if p.required and p.name not in secret]
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
    original = thaw_json(spec.schema)
    if not isinstance(original, dict):  # pragma: no cover - ToolSpec holds a JSON object
        return {"type": "object"}
    itself = _fresh(f"{spec.name}__args", defs)
    defs[itself] = None  # reserved while the tool's own definitions are named
    used_root = [False]
    renames = _hoist(spec.name, original, defs, itself, used_root)
    body = {key: value for key, value in original.items() if key not in _DEFS}
    rewritten: dict[str, Any] = _walk(body, renames, itself, used_root)
    if used_root[0]:  # the schema refers to itself ("#", "#/properties/..."): keep a copy
        defs[itself] = rewritten
    else:
        del defs[itself]
    args = dict(rewritten)  # the copy kept in defs, if any, stays as the tool wrote it
    props = args.get("properties")
    if not isinstance(props, dict):
        return args
    args["properties"] = {
        name: prop if prop in ({}, True) else {"anyOf": [prop, _A_REF]}
        for name, prop in props.items()
        if name not in secret
    }
    if isinstance(args.get("required"), list):
        args["required"] = [name for name in args["required"] if name not in secret]
    args.setdefault("type", "object")
    return args


def shown_schema(spec: ToolSpec) -> Any:
    """A tool's args schema as the prompt shows it.

    As written, less pydantic's ``title`` noise and any secret parameter (which a plan never
    passes).
    """
    shown = _walk(thaw_json(spec.schema), {}, "", [False])
    secret = {name for name, _ in spec.secrets}
    if secret and isinstance(shown, dict):
        if isinstance(shown.get("properties"), dict):
            shown["properties"] = {
                name: prop for name, prop in shown["properties"].items() if name not in secret
            }
        if isinstance(shown.get("required"), list):
            shown["required"] = [name for name in shown["required"] if name not in secret]
    return shown


def _hoist(
    tool: str, schema: Mapping[str, Any], defs: dict[str, Any], itself: str, used_root: list[bool]
) -> dict[str, str]:
    """Move the tool's definitions into ``defs`` under fresh names; return old path → new name."""
    renames: dict[str, str] = {}
    found: list[tuple[str, Any]] = []
    for keyword in _DEFS:
        local = schema.get(keyword)
        if isinstance(local, dict):
            for name, definition in local.items():
                new = _fresh(f"{tool}__{name}", defs)
                defs[new] = None  # reserved, filled below once every name is known
                renames[f"#/{keyword}/{_escape(name)}"] = new
                found.append((new, definition))
    for new, definition in found:
        defs[new] = _walk(definition, renames, itself, used_root)
    return renames


def _fresh(wanted: str, taken: Mapping[str, Any]) -> str:
    base = _UNSAFE.sub("_", wanted)
    name, number = base, 2
    while name in taken:
        name, number = f"{base}_{number}", number + 1
    return name


def _escape(name: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")


def _walk(schema: Any, renames: Mapping[str, str], itself: str, used_root: list[bool]) -> Any:
    """A copy of ``schema`` with its local references rewritten and pydantic's titles dropped."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _rewrite(value, renames, itself, used_root)
        elif key == "title":
            continue  # pydantic's "Speed" for `speed`: tokens that tell the model nothing
        elif key in _ONE_SCHEMA:
            out[key] = _walk(value, renames, itself, used_root)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_walk(item, renames, itself, used_root) for item in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {
                name: _walk(item, renames, itself, used_root) for name, item in value.items()
            }
        else:
            out[key] = value
    return out


def _rewrite(ref: str, renames: Mapping[str, str], itself: str, used_root: list[bool]) -> str:
    for old, new in renames.items():
        if ref == old or ref.startswith(f"{old}/"):
            return f"#/$defs/{new}{ref[len(old) :]}"
    if ref.startswith("#") and itself:
        used_root[0] = True
        return f"#/$defs/{itself}{ref[1:]}"
    return ref  # a remote reference, left to the server
