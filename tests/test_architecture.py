"""The layout keeps its promises: a pure kernel and fold; the library never imports the shell."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "pev"

# pev's own modules that hold only pure values and functions (the data model and friends).
# The walk follows import statements as written; a package's __init__ counts only where a
# module imports the package itself (as the kernel imports pev.model).
PURE_PREFIXES = (
    "pev.errors",
    "pev._json",
    "pev._jcs",
    "pev._canonical",
    "pev._native",
    "pev.codec",
    "pev.policy",
    "pev.model",
    "pev.kernel",
)
FOLD_MODULES = (
    "pev.ledger._effects",
    "pev.ledger._events",
    "pev.ledger._phases",
    "pev.ledger._state",
    "pev.ledger._queries",
    "pev.ledger._machine",
    "pev.ledger._chain",
    "pev.ledger._checks",
    "pev.ledger._summary",
)
# Experience's decisions: building episodes, classifying, drawing candidates, sanitising.
EXPERIENCE_PURE = (
    "pev.experience._episode",
    "pev.experience._classify",
    "pev.experience._lessons",
    "pev.experience._sanitize",
    "pev.experience._vocabulary",
)
# Standard-library modules that read clocks, draw randomness, log or do I/O.
IMPURE_STDLIB = frozenset(
    {
        "asyncio",
        "concurrent",
        "http",
        "io",
        "logging",
        "os",
        "pathlib",
        "random",
        "secrets",
        "shutil",
        "socket",
        "sqlite3",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "urllib",
        "uuid",
    }
)
# The pure core, walked from each of its roots.
PURE_CORES = [
    pytest.param(("pev.kernel",), id="kernel"),
    pytest.param(FOLD_MODULES, id="ledger-fold"),
    pytest.param(EXPERIENCE_PURE, id="experience"),
]
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "monotonic", "perf_counter"})


def _module_path(name: str) -> Path:
    relative = Path(*name.split("."))
    package = SRC / relative / "__init__.py"
    return package if package.exists() else SRC / relative.with_suffix(".py")


def _imports(name: str) -> Iterator[str]:
    path = _module_path(name)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from pev import codec` imports the module pev.codec, not all of pev's names.
            submodules = [
                f"{module}.{alias.name}"
                for alias in node.names
                if module.startswith("pev") and _module_path(f"{module}.{alias.name}").exists()
            ]
            yield from submodules
            if len(submodules) < len(node.names):
                yield module


def _closure(roots: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(imported for imported in _imports(name) if imported.startswith("pev"))
    return seen


def _all_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _stdlib_imports(modules: set[str]) -> set[str]:
    tops = {imported.split(".")[0] for name in modules for imported in _imports(name)}
    return tops & set(sys.stdlib_module_names)


@pytest.mark.parametrize("roots", PURE_CORES)
def test_pure_core_imports_only_pure_modules(roots: tuple[str, ...]) -> None:
    """The kernel, the ledger fold and experience's decisions reach only pure pev modules.

    None of them reaches a store, the engine or the shell.
    """
    allowed = (*PURE_PREFIXES, *FOLD_MODULES, *EXPERIENCE_PURE)
    closure = _closure(roots)
    impure = sorted(
        name
        for name in closure
        if name != "pev" and not any(name == p or name.startswith(p + ".") for p in allowed)
    )
    assert impure == []
    if roots == FOLD_MODULES:
        assert "pev.ledger._ledger" not in closure
        assert "pev.ledger._store" not in closure


@pytest.mark.parametrize("roots", PURE_CORES)
def test_pure_core_uses_no_io_clock_or_randomness(roots: tuple[str, ...]) -> None:
    """No module the pure core imports pulls in I/O, clocks, randomness or logging."""
    closure = _closure(roots)
    assert _stdlib_imports(closure) & IMPURE_STDLIB == set()


def test_pure_core_reads_no_clock() -> None:
    """Kernel and fold code never calls now(), time() or the like: time is an input."""
    offenders = [
        f"{name}:{node.lineno}"
        for name in _closure(("pev.kernel", *FOLD_MODULES))
        for node in ast.walk(ast.parse(_module_path(name).read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCK_CALLS
    ]
    assert offenders == []


def test_library_never_imports_the_shell() -> None:
    """No library module imports the command line or the viewer (``python -m pev`` is the CLI)."""
    shell = ("pev.cli", "pev.web", "pev.__main__")
    offenders = [
        f"{name} imports {imported}"
        for name in _all_modules()
        if not name.startswith(shell)
        for imported in _imports(name)
        if imported.startswith(shell)
    ]
    assert offenders == []


def test_closure_walker_sees_nested_imports() -> None:
    """The import walker follows pev's own imports (so the checks above are not vacuous)."""
    closure = _closure(("pev.kernel",))
    assert {"pev.kernel._decide", "pev.model", "pev.model._verdict", "pev.errors"} <= closure


# -- the layers ----------------------------------------------------------------------------

# pev's layers, lowest first. A module may import from its own layer and the layers below it,
# never from one above; and no import cycle may join any two of pev's modules. Type-checking-only
# imports and imports inside functions count too: the walk reads every import statement.
# docs/architecture.md draws the same picture.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "pev.errors",
            "pev._json",
            "pev._jcs",
            "pev._canonical",
            "pev._native",
            "pev._imports",
            "pev._lazy",
            "pev._logs",
            "pev._signals",
            "pev.codec",
            "pev.policy",
            "pev.chat",
        ),
    ),
    ("model", ("pev.model",)),
    ("kernel", ("pev.kernel",)),
    ("ledger", ("pev.ledger",)),
    ("rails", ("pev.rails",)),
    ("experience", ("pev.experience",)),
    ("stores", ("pev.stores",)),
    ("engine", ("pev.engine",)),
    ("adapters", ("pev.llm", "pev.testing", "pev.sim", "pev.ray", "pev.mcp", "pev.otel")),
    ("shell", ("pev.cli", "pev.web")),
    ("package", ("pev",)),
)


def _layer_of(name: str) -> int:
    """The index of the layer a module belongs to (its longest matching prefix)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[1]
            ):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{name} belongs to no layer: add it to LAYERS")
    return best[0]


def _graph() -> dict[str, set[str]]:
    """Module → the pev modules it imports (itself excluded)."""
    return {
        name: {imported for imported in _imports(name) if imported.startswith("pev")} - {name}
        for name in _all_modules()
    }


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above its own, as 'a (layer) imports b (layer)'."""
    found = []
    for name, imported in graph.items():
        for target in sorted(imported):
            if _layer_of(target) > _layer_of(name):
                below, above = LAYERS[_layer_of(name)][0], LAYERS[_layer_of(target)][0]
                found.append(f"{name} ({below}) imports {target} ({above})")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_module_has_a_layer() -> None:
    """Each of pev's modules falls in one of the layers (a new package must be placed)."""
    for name in _all_modules():
        _layer_of(name)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    """foundation → model → kernel → ledger → rails → experience → stores → engine → the rest."""
    assert upward_imports(_graph()) == []


def test_no_import_cycle_joins_two_modules() -> None:
    """No two of pev's modules import each other, directly or through others."""
    assert import_cycles(_graph()) == []


def test_the_layer_checks_can_fail() -> None:
    """An upward import and a cycle, planted in a copy of the graph, are both found."""
    graph = _graph()
    graph["pev.kernel._decide"] = {*graph["pev.kernel._decide"], "pev.engine._driver"}
    assert upward_imports(graph) == [
        "pev.kernel._decide (kernel) imports pev.engine._driver (engine)"
    ]
    assert ["pev.engine._driver", "pev.kernel._decide"] in [
        [m for m in group if m in ("pev.engine._driver", "pev.kernel._decide")]
        for group in import_cycles(graph)
    ]
    with pytest.raises(AssertionError, match="no layer"):
        _layer_of("numpy")


# -- module-level state --------------------------------------------------------------------

_MUTATING_METHODS = frozenset(
    {"append", "add", "clear", "discard", "extend", "insert", "pop", "popitem", "remove"}
    | {"setdefault", "update", "submit", "__setitem__", "__delitem__"}
)


def _module_state_writes(name: str) -> list[str]:
    """Places where a function writes to a name bound at its module's top level.

    A module-level table that is only read is a constant; one that a function fills, empties or
    rebinds (`global`) is state that outlives every object, which pev does not keep.
    """
    tree = ast.parse(_module_path(name).read_text(encoding="utf-8"))
    top = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found += [f"{name}:{node.lineno} global {n}" for n in node.names]
            written = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                written = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATING_METHODS
            ):
                written = node.func.value
            if isinstance(written, ast.Name) and written.id in top:
                found.append(f"{name}:{node.lineno} writes {written.id}")
    return found


# The codec's dispatch table: the encoder of each class, filled the first time a value of that
# class is met. It is keyed by class, so it holds one entry per class of the program (derived
# constants of its types, as its functools.cache'd field tables are), and an entry never changes
# once written. (The canonical text writers of pev._canonical and pev._native keep such tables
# per form, in the writer object.)
# The same holds for the rails' table of one lock per rail object (pev.rails._lanes): a weak
# table, an entry written once and living as long as its rail object, so that one rail shared by
# the runs of a worker is called one event at a time from their threads.
PER_CLASS_TABLES = frozenset({"pev.codec:_ENCODERS", "pev.rails._lanes:_SERIAL"})


def test_no_module_keeps_mutable_state() -> None:
    """Caches, pools and locks belong to objects (the Ledger, the run), never to a module."""
    writes = [place for name in _all_modules() for place in _module_state_writes(name)]
    per_class = {f"{w.split(':')[0]}:{w.split()[-1]}" for w in writes} & PER_CLASS_TABLES
    assert per_class == PER_CLASS_TABLES  # the exceptions still exist (else drop them here)
    assert [w for w in writes if f"{w.split(':')[0]}:{w.split()[-1]}" not in per_class] == []


def test_the_module_state_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module-level cache that a function fills is found."""
    package = tmp_path / "pev"
    package.mkdir()
    (package / "cache.py").write_text(
        "_SEEN: dict[str, int] = {}\n\n\ndef see(key: str) -> None:\n    _SEEN[key] = 1\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert _module_state_writes("pev.cache") == ["pev.cache:5 writes _SEEN"]


def test_the_project_cites_only_its_own_docs() -> None:
    """Code, tests and docs cite the project's docs, never a specification file outside it."""
    root = SRC.parent
    outside = "SP" + "EC"  # spelt apart, so that this test does not find itself
    pattern = re.compile(rf"\b{outside}\b")
    assert all(pattern.search(f"see {outside}{cite}") for cite in (".md", "'s rule", " §3"))
    places = [
        path
        for folder in ("src", "docs", "tests", "bench", "examples")
        for path in sorted((root / folder).rglob("*"))
        if path.suffix in {".py", ".md", ".toml"}
    ] + [root / "README.md"]
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in places
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []
