"""The layout keeps its promises: a pure kernel and fold; the library never imports the shell."""

from __future__ import annotations

import ast
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
    "pev.codec",
    "pev.policy",
    "pev.model",
    "pev.kernel",
)
FOLD_MODULES = (
    "pev.ledger._events",
    "pev.ledger._state",
    "pev.ledger._queries",
    "pev.ledger._machine",
    "pev.ledger._chain",
    "pev.ledger._summary",
)
# Experience's decisions: building episodes, classifying, drawing candidates, sanitising.
EXPERIENCE_PURE = (
    "pev.experience._episode",
    "pev.experience._classify",
    "pev.experience._lessons",
    "pev.experience._sanitize",
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
    """No library module imports the command line or the viewer."""
    shell = ("pev.cli", "pev.viewer")
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
