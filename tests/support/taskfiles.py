"""Task files, ledgers and command lines for fuzzing `pev` (docs/cli.md), good and bad.

- :data:`AGENT`: the source of a module of components task files name, good and misbehaving.
- :func:`documents`: Hypothesis strategy of task files: TOML text built from tables of drawn
  values (wrong types, huge numbers, NaN and infinities, deep nesting, surrogate escapes, unknown
  and missing keys, bad import paths and stores), sometimes mangled after it is written.
- :func:`toml`: a value as TOML text; :class:`Raw` is a literal written as it is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import strategies as st

from pev.policy import RecoveryPolicy

T = TypeVar("T")

AGENT_MODULE = "pev_fuzz_agent"

AGENT = textwrap.dedent(
    '''
    """Components for the task-file fuzz: good ones, and ones that misbehave."""

    import pev
    from pev.model import Plan, PlanNode, Verdict


    @pev.tool(effect="query")
    def look(city: str = "Lisbon") -> dict:
        """Look at the sky."""
        return {"city": city, "sky": "sunny"}


    @pev.tool
    def post(text: str = "sunny") -> str:
        """Post the forecast."""
        return f"posted {text}"


    @pev.tool(effect="query")
    def explode() -> str:
        """Fail."""
        raise KeyError("boom")


    def planner(request):
        return Plan(
            "forecast",
            (
                PlanNode("look", "look", tool="look", args={"city": "Lisbon"}, effect="query"),
                PlanNode("post", "post", tool="post", args={"text": "sunny"}, after=("look",)),
            ),
        )


    def echo_planner(request):
        """A plan that passes the task's input on, whatever it is."""
        return Plan("echo", (PlanNode("look", "look", tool="look", args={"city": request.input}),))


    def exploding_planner(request):
        return Plan("boom", (PlanNode("boom", "fail", tool="explode", effect="query"),))


    def raising_planner(request):
        raise ValueError("no plan today")


    def verifier(request):
        return Verdict.passed(request.contract)


    def blame(request):
        return Verdict.failed(request.contract, failed_nodes=["post"], feedback="again")


    class Planner:
        def plan(self, request):
            return planner(request)


    class NeedsArguments:
        def __init__(self, model):
            self.model = model


    NUMBER = 7
    bare_look = look.fn  # the function behind the tool, without its options
    agent = pev.Agent(planner, tools=[look, post], verifier=verifier)
    '''
)
BROKEN_MODULE = "pev_fuzz_broken"
BROKEN = "raise RuntimeError('no API key')\n"

GOOD_TOOLS = [f"{AGENT_MODULE}:look", f"{AGENT_MODULE}:post"]
IMPORT_PATHS = [
    f"{AGENT_MODULE}:planner",
    f"{AGENT_MODULE}:echo_planner",
    f"{AGENT_MODULE}:exploding_planner",
    f"{AGENT_MODULE}:raising_planner",
    f"{AGENT_MODULE}:Planner",
    f"{AGENT_MODULE}:NeedsArguments",
    f"{AGENT_MODULE}:verifier",
    f"{AGENT_MODULE}:blame",
    f"{AGENT_MODULE}:look",
    f"{AGENT_MODULE}:post",
    f"{AGENT_MODULE}:explode",
    f"{AGENT_MODULE}:bare_look",
    f"{AGENT_MODULE}:NUMBER",
    f"{AGENT_MODULE}:agent",
    f"{AGENT_MODULE}:nothing",
    f"{AGENT_MODULE}.sub:planner",
    f"{BROKEN_MODULE}:planner",
    "no_such_module:planner",
    "pev.testing:StaticObserver",
    "pev:run",
    "os:system",
    "builtins:print",
    "this:s",
    ":planner",
    "planner",
    "a..b:c",
    f"{AGENT_MODULE}:planner:extra",
    f"{AGENT_MODULE}:look.__globals__",
    "",
    " ",
]


@dataclass(frozen=True, slots=True)
class Raw:
    """A TOML value written exactly as given (a literal no Python value turns into)."""

    text: str


def deep_array(depth: int) -> Raw:
    """An array nested ``depth`` deep."""
    return Raw("[" * depth + "1" + "]" * depth)


def deep_table(depth: int) -> Raw:
    """An inline table nested ``depth`` deep."""
    return Raw("{ a = " * depth + "1" + " }" * depth)


RAW = st.sampled_from(
    [
        Raw("nan"),
        Raw("+nan"),
        Raw("-nan"),
        Raw("inf"),
        Raw("-inf"),
        Raw("1e300"),
        Raw("1e400"),
        Raw("-1e400"),
        Raw("5e-324"),
        Raw("-0.0"),
        Raw("0"),
        Raw("-1"),
        Raw("9" * 400),
        Raw("1" + "0" * 5000),
        Raw("0x7FFFFFFFFFFFFFFFFFFFFFFF"),
        Raw("0b" + "1" * 300),
        Raw('"\\uD800"'),
        Raw('"\\uDFFF tail"'),
        Raw('"\\U0010FFFF"'),
        Raw('"\\U00110000"'),
        Raw('"\\u0000"'),
        Raw("1979-05-27T07:32:00Z"),
        Raw("1979-05-27"),
        Raw("07:32:00"),
        Raw("1979-05-27T07:32:00"),
        Raw('"' + "x" * 200_000 + '"'),
        Raw("[" + ", ".join(["1"] * 20_000) + "]"),
        deep_array(50),
        deep_array(900),
        deep_array(2_000),
        deep_table(50),
        deep_table(900),
        deep_table(2_000),
        Raw("[1, 'a', 2.5, true, [], {}]"),
        Raw("{}"),
        Raw("[]"),
    ]
)


def scalars() -> st.SearchStrategy[object]:
    """TOML values of every type, ordinary and extreme."""
    return st.one_of(
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(),
        st.text(max_size=20),
        st.text(st.characters(codec="utf-8"), max_size=5),
        st.integers(0xD800, 0xDFFF).map(chr),
        st.datetimes(timezones=st.none() | st.just(dt.UTC)),
        RAW,
    )


def toml_values() -> st.SearchStrategy[object]:
    """Scalars, and arrays and inline tables of them."""
    return st.recursive(
        scalars(),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=6,
    )


def toml(value: object) -> str:
    """``value`` as a TOML value; a string holding a surrogate gets an escape TOML refuses."""
    match value:
        case Raw(text):
            return text
        case bool():
            return "true" if value else "false"
        case int():
            return str(value)
        case float():
            if math.isnan(value):
                return "nan"
            if math.isinf(value):
                return "inf" if value > 0 else "-inf"
            return repr(value)
        case str():
            return _string(value)
        case dt.datetime() | dt.date() | dt.time():
            return value.isoformat()
        case list() | tuple():
            return "[" + ", ".join(toml(item) for item in value) + "]"
        case Mapping():
            return "{ " + ", ".join(f"{_string(k)} = {toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def _string(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\' or code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def document(tables: Mapping[str, object]) -> str:
    """A task file: top-level keys first, then each table (a dict) under its header."""
    lines: list[str] = []
    for key, value in tables.items():
        if not isinstance(value, dict):
            lines.append(f"{_key(key)} = {toml(value)}")
    for key, value in tables.items():
        if isinstance(value, dict):
            lines.append(f"\n[{_key(key)}]")
            lines.extend(f"{_key(k)} = {toml(v)}" for k, v in value.items())
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if bare else _string(key)


# Every field of the policy, whole numbers told from seconds by their type.
POLICY_FIELDS = tuple(f.name for f in dataclasses.fields(RecoveryPolicy))
INTEGER_FIELDS = tuple(
    f.name for f in dataclasses.fields(RecoveryPolicy) if str(f.type).startswith("int")
)
GOOD_POLICY: dict[str, object] = {"max_replans": 1, "node_timeout_s": 30.0}


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of the strategies, each drawn as often as its weight says.

    (``st.one_of(a, a, b)`` draws ``a`` no more often than ``b``: it treats repeats as one.)
    """
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def _maybe(
    good: st.SearchStrategy[object], bad: st.SearchStrategy[object]
) -> st.SearchStrategy[object]:
    """Mostly ``good``, sometimes ``bad``: files get far enough to fail somewhere interesting."""
    return weighted((5, good), (1, bad))


def _table(fields: Mapping[str, st.SearchStrategy[object]]) -> st.SearchStrategy[dict[str, object]]:
    """Some of ``fields``, each drawn."""
    return st.fixed_dictionaries({}, optional=dict(fields))


def _now_and_then(
    table: st.SearchStrategy[dict[str, object]], *, typo: str
) -> st.SearchStrategy[dict[str, object]]:
    """``table``, now and then with a key nobody knows: ``typo``, a misspelling of a real one."""
    with_typo = st.tuples(table, toml_values()).map(lambda drawn: {**drawn[0], typo: drawn[1]})
    return weighted((5, table), (1, with_typo))


def _components() -> st.SearchStrategy[dict[str, object]]:
    paths = st.sampled_from(IMPORT_PATHS)
    good: st.SearchStrategy[dict[str, object]] = st.fixed_dictionaries(
        {
            "planner": st.sampled_from(IMPORT_PATHS[:4]),
            "tools": st.just(GOOD_TOOLS) | st.lists(paths, max_size=3),
            "verifier": st.sampled_from([f"{AGENT_MODULE}:verifier", f"{AGENT_MODULE}:blame"]),
        }
    )
    whole: st.SearchStrategy[dict[str, object]] = st.fixed_dictionaries(
        {"agent": _maybe(st.just(f"{AGENT_MODULE}:agent"), paths)}
    )
    parts = _table(
        {
            role: _maybe(paths, toml_values())
            for role in ("agent", "planner", "executor", "verifier", "observer")
        }
        | {"tools": _maybe(st.lists(paths, max_size=3), toml_values())}
    )
    return _now_and_then(weighted((3, good), (1, whole), (1, parts)), typo="planer")


def _good_number(field: str) -> st.SearchStrategy[object]:
    """Values a policy field takes that let a task run: a few, small limits, seconds."""
    if field.startswith("max_value"):
        return st.integers(16, 1 << 20)
    return st.integers(1, 3) if field in INTEGER_FIELDS else st.floats(0.5, 60)


def documents(store: st.SearchStrategy[object]) -> st.SearchStrategy[str]:
    """Task files, mostly well formed, with bad values where a user or an attacker puts them.

    ``store`` draws the ``store`` key's value (where the task file says its ledger is).
    """
    text = st.text(min_size=1, max_size=20).filter(str.strip)
    good_contract: st.SearchStrategy[dict[str, object]] = st.fixed_dictionaries(
        {
            "mode": st.sampled_from(["recovery", "audit", "enforce", "off"]),
            "goal": text,
            "success_criteria": st.lists(text, min_size=1, max_size=2),
        },
        optional={"constraints": st.lists(text, max_size=2)},
    )
    bad_contract = _table(
        {
            "mode": _maybe(st.sampled_from(["recovery", "audit", "enforce", "off"]), toml_values()),
            "goal": _maybe(text, toml_values()),
            "success_criteria": _maybe(st.lists(text, max_size=2), toml_values()),
            "constraints": _maybe(st.lists(text, max_size=2), toml_values()),
            "required_evidence": st.one_of(st.just([]), toml_values()),
        }
    )
    contract = _maybe(_now_and_then(good_contract, typo="succes_criteria"), bad_contract)
    good_numbers = {name: _good_number(name) for name in POLICY_FIELDS}
    good_policy = st.just(GOOD_POLICY) | _table(good_numbers)
    bad_policy = _table({name: _maybe(good, toml_values()) for name, good in good_numbers.items()})
    policy = _maybe(_now_and_then(good_policy, typo="max_replan"), bad_policy)
    tables = st.fixed_dictionaries(
        {
            "input": _maybe(text | st.dictionaries(text, text, max_size=2), toml_values()),
            "components": _components(),
        },
        optional={
            "store": store,
            "contract": _maybe(contract, toml_values()),
            "policy": _maybe(policy, toml_values()),
        },
    )
    # Now and then the input is missing, or misspelled.
    tables = weighted(
        (18, tables),
        (1, tables.map(lambda t: {k: v for k, v in t.items() if k != "input"})),
        (1, tables.map(lambda t: {("inptu" if k == "input" else k): v for k, v in t.items()})),
    )
    written = tables.map(document)
    return weighted((4, written), (1, written.flatmap(_mangled)))


def _mangled(text: str) -> st.SearchStrategy[str]:
    """``text`` cut short, with a line repeated, a character dropped in, or a BOM before it."""
    cut = st.integers(0, len(text)).map(lambda at: text[:at])
    repeated = st.just(text + text.splitlines()[0] + "\n") if text.strip() else st.just(text)
    inserted = st.tuples(
        st.integers(0, len(text)), st.sampled_from(list("=[]{}\"'\\\n#\t\x00"))
    ).map(lambda drawn: text[: drawn[0]] + drawn[1] + text[drawn[0] :])
    return st.one_of(cut, repeated, inserted, st.just("\ufeff" + text))
