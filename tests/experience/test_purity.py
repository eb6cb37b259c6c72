"""Experience's decisions are pure: episodes, classification, candidates and the sanitiser."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PURE = (
    "pev.experience._episode",
    "pev.experience._classify",
    "pev.experience._lessons",
    "pev.experience._sanitize",
)
# What the pure parts may reach: pev's value modules, the kernel, the ledger's fold, themselves.
ALLOWED = (
    "pev.errors",
    "pev._json",
    "pev.codec",
    "pev.policy",
    "pev.model",
    "pev.kernel",
    "pev.ledger._events",
    "pev.ledger._state",
    "pev.ledger._queries",
    "pev.ledger._machine",
    "pev.ledger._chain",
    "pev.ledger._summary",
    *PURE,
)
IMPURE_STDLIB = {
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


def _path(name: str) -> Path:
    relative = Path(*name.split("."))
    package = SRC / relative / "__init__.py"
    return package if package.exists() else SRC / relative.with_suffix(".py")


def _imports(name: str) -> set[str]:
    path = _path(name)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            subs = {s for s in subs if s.startswith("pev") and _path(s).exists()}
            found |= subs or {node.module}
    return found


def _closure() -> set[str]:
    seen: set[str] = set()
    stack = list(PURE)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(i for i in _imports(name) if i.startswith("pev"))
    return seen


def test_pure_parts_reach_only_pure_modules() -> None:
    """Building, classifying, drawing and sanitising reach no store, engine or shell."""
    outside = sorted(
        name
        for name in _closure()
        if not any(name == p or name.startswith(p + ".") for p in ALLOWED)
    )
    assert outside == []


def test_pure_parts_do_no_io() -> None:
    """No module they reach imports I/O, clocks, randomness or logging."""
    tops = {i.split(".")[0] for name in _closure() for i in _imports(name)}
    assert tops & set(sys.stdlib_module_names) & IMPURE_STDLIB == set()


def test_public_names_are_documented() -> None:
    """Every public class and function of pev.experience has a docstring."""
    import importlib
    import inspect

    module = importlib.import_module("pev.experience")
    undocumented = [
        name
        for name in module.__all__
        if (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not inspect.getdoc(getattr(module, name))
    ]
    assert undocumented == []
