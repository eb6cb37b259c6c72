"""A task's components: how the engine holds them, records where they came from, and rebuilds them.

So that another process can resume a task, its creation event records the import path
(``module:qualname``) of each component that has one: a module-level function or class, or an
instance of a module-level class whose constructor takes no arguments at all (recorded as
``module:Class()``). Lambdas, closures, methods bound to an instance, and instances of classes
that take arguments (even optional ones, which may have configured them) have no such path:
pass them again to :func:`pev.resume`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pev.engine._protocols import adapt
from pev.engine._tool_executor import ToolExecutor
from pev.engine._tools import Tool, ToolRegistry
from pev.errors import ComponentError, ContractError
from pev.model import ToolSpec, VerificationContract, VerificationMode
from pev.policy import RecoveryPolicy

__all__ = ["Components", "build_components", "import_path", "load", "rebuild"]


@dataclass(frozen=True, slots=True)
class Components:
    """The async callables a run drives, plus what a planner and validation need to know."""

    plan: Callable[..., Awaitable[Any]]
    execute: Callable[..., Awaitable[Any]]
    reconcile: Callable[..., Awaitable[Any]] | None
    verify: Callable[..., Awaitable[Any]] | None
    observe: Callable[..., Awaitable[Any]] | None
    tools: Mapping[str, ToolSpec] | None
    tool_timeouts: Mapping[str, float]
    paths: Mapping[str, str]


def import_path(component: object) -> str | None:
    """The path another process can rebuild ``component`` from, or ``None`` if it has none."""
    target = component
    suffix = ""
    if inspect.ismethod(target) and not inspect.isclass(target.__self__):
        return None  # bound to an instance, which the path would lose: passed again on resume
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target)):
        target = type(component)
        suffix = "()"
        try:
            parameters = inspect.signature(target).parameters
        except (TypeError, ValueError):
            return None
        if parameters:
            # Even optional parameters may have configured this instance (a FunctionExecutor
            # given its functions), and `Class()` would rebuild a blank one: passed again.
            return None
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}{suffix}"


def load(path: str, *, role: str) -> object:
    """Rebuild a component from :func:`import_path`'s text.

    Raises:
        ComponentError: The module or attribute cannot be found, or the class cannot be built.
    """
    module_name, _, rest = path.partition(":")
    build = rest.endswith("()")
    qualname = rest.removesuffix("()")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        return target() if build else target
    except Exception as exc:
        raise ComponentError(
            f"cannot rebuild the {role} from {path!r} ({type(exc).__name__}: {exc}); "
            f"pass {role}=... to resume",
            role=role,
        ) from exc


def build_components(
    *,
    planner: object,
    executor: object | None,
    tools: object | None,
    verifier: object | None,
    observer: object | None,
    contract: VerificationContract,
    policy: RecoveryPolicy,
) -> Components:
    """Check the components a run was given and adapt them for the engine.

    Raises:
        ComponentError: Neither or both of ``tools`` and ``executor``; a missing planner.
        ContractError: A verification mode that needs a verifier, without one.
    """
    if planner is None:
        raise ComponentError("a run needs a planner: pass planner=...", role="planner")
    if (tools is None) == (executor is None):
        raise ComponentError(
            "pass exactly one of tools=[...] (functions decorated with @pev.tool) or executor=...",
            role="executor" if tools is None else "tools",
        )
    if verifier is None and contract.mode is not VerificationMode.OFF:
        raise ContractError(
            f"mode {contract.mode} calls a verifier, but none was given; pass verifier=... "
            "or use a contract with mode 'off'",
            field="mode",
        )
    paths: dict[str, str] = {}
    for role, component in (("planner", planner), ("verifier", verifier), ("observer", observer)):
        path = import_path(component) if component is not None else None
        if path:
            paths[role] = path
    specs: Mapping[str, ToolSpec] | None = None
    timeouts: dict[str, float] = {}
    if tools is not None:
        registry = ToolRegistry.of(tools)  # type: ignore[arg-type] # checked by of()
        specs = registry.specs
        timeouts = {name: t.timeout_s for name, t in registry.items() if t.timeout_s is not None}
        executor = ToolExecutor(registry, node_timeout_s=policy.node_timeout_s)
        tool_paths = [import_path(t.fn) if isinstance(t, Tool) else None for t in registry.values()]
        if tool_paths and all(tool_paths):
            paths["tools"] = ",".join(p for p in tool_paths if p)
    elif executor is not None:
        path = import_path(executor)
        if path:
            paths["executor"] = path
    reconcile = getattr(executor, "reconcile", None)
    return Components(
        plan=adapt(planner, "plan"),
        execute=adapt(executor, "execute"),
        reconcile=adapt(executor, "reconcile") if callable(reconcile) else None,
        verify=adapt(verifier, "verify") if verifier is not None else None,
        observe=adapt(observer, "observe") if observer is not None else None,
        tools=specs,
        tool_timeouts=timeouts,
        paths=paths,
    )


def rebuild(paths: Mapping[str, str], given: Mapping[str, object | None]) -> dict[str, object]:
    """Components for a resumed task: those given, else rebuilt from the recorded paths."""
    out: dict[str, object] = {}
    for role in ("planner", "verifier", "observer", "executor"):
        component = given.get(role)
        if component is None and role in paths:
            component = load(paths[role], role=role)
        if component is not None:
            out[role] = component
    tools = given.get("tools")
    if tools is None and "tools" in paths and "executor" not in out:
        tools = [load(path, role="tools") for path in paths["tools"].split(",")]
    if tools is not None:
        out["tools"] = tools
    return out
