"""A task's components: how the engine holds them, records where they came from, and rebuilds them.

So that another process can resume a task, its creation event records import paths
(``module:attribute``, see :mod:`pev._imports`) naming the very objects the run was given:

* an :class:`~pev.engine.Agent` bound to a module-level name is recorded as one path (role
  ``agent``), and a resume rebuilds that agent whole;
* otherwise each part that has a path is recorded by role: a module-level function; an object
  bound to a module-level name in its class's module; an instance of a module-level class whose
  constructor takes no arguments at all (recorded as the class, built again with no arguments);
  a tool by the module-level name of the decorated :class:`~pev.engine.Tool` itself, so that its
  effect, resource, timeout and ``reconcile`` come back with it.

Lambdas, closures, bound methods, configured instances without a module-level name, and tools
whose options no path can carry have no path: pass them again to :func:`pev.resume`, or give
them a module-level name. A tool path that resolves to the bare function behind a decorated tool
is refused rather than run with default options.

A module imported from a folder that is no longer on ``sys.path`` (``pev run`` puts a task
file's folder there only while it imports the file's components) could not be found again by
another process: that folder is recorded too (key :data:`IMPORT_ROOTS_KEY`), and ``resume`` and
workers put it first on ``sys.path`` before they rebuild (:func:`use_import_roots`), unless
``PEV_TRUSTED_MODULES`` is set: then a ledger may not choose where trusted names are found.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pev._imports import ImportPathError, UntrustedImportError, resolve, trusted_modules
from pev.engine._agent import Agent
from pev.engine._protocols import adapt
from pev.engine._tool_executor import ToolExecutor
from pev.engine._tools import Tool, tool
from pev.engine._typed import UNTYPED, AgentTypes
from pev.errors import ComponentError
from pev.model import ToolSpec
from pev.policy import RecoveryPolicy

__all__ = [
    "IMPORT_ROOTS_KEY",
    "Components",
    "agent_paths",
    "build_components",
    "has_recorded_tools",
    "import_path",
    "load",
    "rebuild",
    "recorded_tools",
    "tool_source",
    "use_import_roots",
]

_log = logging.getLogger("pev.engine")

IMPORT_ROOTS_KEY = "sys_path"
"""The components key of the folders (``os.pathsep``-separated) the recorded modules came from.

Recorded only for folders that were not on ``sys.path`` when the task was written.
"""

# The roles whose recorded values are import paths (``tools``: several, comma-separated).
_PATH_ROLES = ("agent", "planner", "verifier", "observer", "executor", "tools")


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
    compensate: Callable[..., Awaitable[Any]] | None = None
    compensates: Callable[[str | None], bool] = lambda tool: False
    types: AgentTypes = UNTYPED  # the agent's input type and output (pev.engine._typed)


def build_components(agent: Agent, *, policy: RecoveryPolicy) -> Components:
    """Adapt an agent's parts for the engine: async callables, the tools' specs and timeouts.

    Built once for each node timeout a policy gives and kept by the agent: its parts are fixed,
    and what is built from them holds nothing of a run, so a task does not build them again.
    """
    return agent.derived(
        f"components {policy.node_timeout_s!r}", lambda: _build_components(agent, policy)
    )


def _build_components(agent: Agent, policy: RecoveryPolicy) -> Components:
    specs: Mapping[str, ToolSpec] | None = None
    timeouts: dict[str, float] = {}
    executor: object = agent.executor
    if agent.tools:
        specs = agent.tools.specs
        timeouts = {n: t.timeout_s for n, t in agent.tools.items() if t.timeout_s is not None}
        executor = ToolExecutor(
            agent.tools, node_timeout_s=policy.node_timeout_s, resources=agent.resources
        )
    reconcile = getattr(executor, "reconcile", None)
    compensate = getattr(executor, "compensate", None)
    compensates = getattr(executor, "compensates", None)
    if not callable(compensates):
        # An executor of its own that can compensate says which tools it can undo, else all.
        compensates = (lambda tool: True) if callable(compensate) else (lambda tool: False)
    return Components(
        plan=adapt(agent.planner, "plan"),
        execute=adapt(executor, "execute"),
        reconcile=adapt(executor, "reconcile") if callable(reconcile) else None,
        verify=adapt(agent.verifier, "verify") if agent.verifier is not None else None,
        observe=adapt(agent.observer, "observe") if agent.observer is not None else None,
        tools=specs,
        tool_timeouts=timeouts,
        compensate=adapt(executor, "compensate") if callable(compensate) else None,
        compensates=compensates,
        types=agent.types,
    )


# -- recording -----------------------------------------------------------------------------


def agent_paths(agent: Agent) -> dict[str, str]:
    """Role → import path of what another process needs to rebuild ``agent``.

    With the folders the modules came from (:data:`IMPORT_ROOTS_KEY`) when they are no longer
    on ``sys.path``.
    """
    # Found on the agent's first run and kept by the agent: its parts are fixed, and their
    # module-level names are bound by the time it runs. The folders depend on sys.path.
    parts: dict[str, str] = agent.derived("paths", lambda: _part_paths(agent))
    by_path: dict[tuple[str, ...], list[str]] = agent.derived("roots", dict)
    on_path = tuple(sys.path)
    roots = by_path.get(on_path)
    if roots is None:  # the first run, or sys.path changed since: the last one is kept
        by_path.clear()
        roots = by_path[on_path] = _roots_off_the_path(parts)
    paths = dict(parts)
    if roots:
        paths[IMPORT_ROOTS_KEY] = os.pathsep.join(roots)
    return paths


def _part_paths(agent: Agent) -> dict[str, str]:
    """The agent's own import path, else its parts' by role."""
    path = _bound_path(agent.defined_in, agent)
    if path is not None:
        return {"agent": path}
    paths: dict[str, str] = {}
    for role in ("planner", "verifier", "observer"):
        path = import_path(getattr(agent, role))
        if path:
            paths[role] = path
    if agent.tools:
        sources = [tool_source(item) for item in agent.tools.values()]
        tool_paths = [
            import_path(item)
            for item, source in zip(agent.tools.values(), sources, strict=True)
            if source is None
        ]
        if all(tool_paths):
            if tool_paths:
                paths["tools"] = ",".join(p for p in tool_paths if p)
            paths.update(source for source in sources if source is not None)
    else:
        path = import_path(agent.executor)
        if path:
            paths["executor"] = path
    return paths


def _roots_off_the_path(paths: Mapping[str, str]) -> list[str]:
    """The folders the recorded modules were imported from that are not on ``sys.path`` now."""
    on_path = {_real(entry or os.getcwd()) for entry in sys.path}
    roots: list[str] = []
    for role in _PATH_ROLES:
        for path in paths.get(role, "").split(","):
            root = _root_of(path.partition(":")[0])
            if root is not None and _real(root) not in on_path and root not in roots:
                roots.append(root)
    return roots


def _root_of(module_name: str) -> str | None:
    """The folder on whose ``sys.path`` entry the loaded module ``module_name`` was found."""
    if not module_name:
        return None
    top = sys.modules.get(module_name.split(".", maxsplit=1)[0])
    where = getattr(top, "__file__", None)
    if not isinstance(where, str):
        return None  # built in, or a namespace package: nothing to record
    folder = os.path.dirname(os.path.abspath(where))
    # A package's __file__ is its __init__.py: the root is the folder above the package's.
    return os.path.dirname(folder) if hasattr(top, "__path__") else folder


def _real(path: str) -> str:
    return os.path.realpath(path)


def use_import_roots(paths: Mapping[str, str]) -> tuple[str, ...]:
    """Put the folders a task recorded (:data:`IMPORT_ROOTS_KEY`) first on ``sys.path``.

    As ``pev run`` had its task file's folder there when it imported the components, so that a
    worker or ``resume`` started in another folder finds them. Nothing is added while
    ``PEV_TRUSTED_MODULES`` is set (a ledger may not choose where trusted names are found), nor
    a folder that is not there or is on the path already. Returns the folders added.
    """
    recorded = paths.get(IMPORT_ROOTS_KEY, "")
    if not recorded or trusted_modules() is not None:
        return ()
    on_path = {_real(entry or os.getcwd()) for entry in sys.path}
    added: list[str] = []
    for root in reversed(recorded.split(os.pathsep)):
        if root and os.path.isdir(root) and _real(root) not in on_path:
            sys.path.insert(0, root)
            on_path.add(_real(root))
            added.append(root)
    if added:
        _log.info("pev: the recorded folders %s are on sys.path now", ", ".join(added))
    return tuple(added)


def tool_source(item: Tool[..., Any]) -> tuple[str, str] | None:
    """How a tool that a session made (an MCP server's) is made again, or ``None``.

    Such a tool's function carries ``recorded_source``: a components key with a ``:`` (never a
    role's name) and the text that opens the session again (``mcp:rooms`` and the server's
    configuration). The task records the key and text instead of a path; who resumes it opens
    the session and passes its tools (``pev resume`` and ``pev worker`` do, see docs/mcp.md).
    """
    source = getattr(item.fn, "recorded_source", None)
    if (
        isinstance(source, tuple)
        and len(source) == 2
        and all(isinstance(part, str) for part in source)
        and ":" in source[0]
    ):
        return source
    return None


def has_recorded_tools(paths: Mapping[str, str]) -> bool:
    """Whether a task's components record its tools: by path, or by the sessions that made them."""
    return "tools" in paths or any(":" in key for key in paths)


def recorded_tools(paths: Mapping[str, str]) -> list[object]:
    """The tools a task recorded by import path (not those that sessions made), rebuilt.

    Raises:
        ComponentError: As :func:`rebuild` does for a tool path.
    """
    return [_load_tool(path) for path in paths["tools"].split(",")] if "tools" in paths else []


def import_path(component: object) -> str | None:
    """The path another process can rebuild ``component`` from, or ``None`` if it has none."""
    if component is None or inspect.isclass(component):
        return None
    if isinstance(component, Tool):
        return _tool_path(component)
    if inspect.ismethod(component) and not inspect.isclass(component.__self__):
        return None  # bound to an instance, which the path would lose: passed again on resume
    if inspect.isfunction(component) or inspect.ismethod(component):
        return _own_path(component)
    cls = type(component)
    bound = _bound_path(cls.__module__, component)
    if bound is not None:
        return bound
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    if parameters:
        # Even optional parameters may have configured this instance (a FunctionExecutor given
        # its functions), and building the class again would give a blank one: passed again.
        return None
    return _own_path(cls)


def _tool_path(item: Tool[..., Any]) -> str | None:
    """The decorated tool's own module-level name; a tool with default options, its function's."""
    bound = _bound_path(
        getattr(item.fn, "__module__", None), item, guess=getattr(item.fn, "__name__", None)
    )
    if bound is not None:
        return bound
    # Equality leaves out the options that are not plain values: none of them may be set.
    others = (item.reconcile, item.input_schema, item.check, item.retry, item.compensate)
    if all(option is None for option in others) and not item.placement and item == tool(item.fn):
        return import_path(item.fn)  # rebuilt as tool(fn): the very same options
    return None


def _own_path(target: Any) -> str | None:
    """``module:qualname`` of a function or class, if that path leads back to it."""
    module = _module(getattr(target, "__module__", None))
    qualname = getattr(target, "__qualname__", None)
    if module is None or not isinstance(qualname, str) or "<" in qualname:
        return None
    found: object = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    # A name rebound since (a decorator that replaced the function) leads elsewhere.
    if found is not target and getattr(found, "__func__", None) is not getattr(
        target, "__func__", target
    ):
        return None
    return f"{module.__name__}:{qualname}"


def _module(name: str | None) -> ModuleType | None:
    """The loaded module of that name, unless it is ``__main__`` (no other process imports it)."""
    if not name or name == "__main__":
        return None
    return sys.modules.get(name)


def _bound_path(module_name: str | None, target: object, *, guess: str | None = None) -> str | None:
    """``module:name`` of a name in that module bound to ``target`` itself (``guess`` first)."""
    module = _module(module_name)
    if module is None:
        return None
    namespace = vars(module)
    if guess is not None and namespace.get(guess) is target:
        return f"{module.__name__}:{guess}"
    name = next(
        (n for n, value in namespace.items() if value is target and not n.startswith("_")), None
    )
    return None if name is None else f"{module.__name__}:{name}"


# -- rebuilding ----------------------------------------------------------------------------


def load(path: str, *, role: str) -> object:
    """Rebuild a component from its recorded import path.

    Raises:
        ComponentError: The path cannot be resolved, naming the role and the path, or (its
            cause an :class:`~pev._imports.UntrustedImportError`) lies outside
            ``PEV_TRUSTED_MODULES``.
    """
    try:
        return resolve(path)
    except UntrustedImportError as exc:
        # The way out is to trust the module, not to pass the part: say only that.
        raise ComponentError(f"cannot rebuild the {role}: {exc.problem}", role=role) from exc
    except ImportPathError as exc:
        raise ComponentError(
            f"cannot rebuild the {role} from {path!r} ({exc.problem}); pass {role}=... to resume",
            role=role,
        ) from None


def rebuild(paths: Mapping[str, str], given: Mapping[str, Any]) -> Agent:
    """The agent of a resumed task: the parts given, else the recorded agent's, else each part's.

    Tools given take the place of a recorded executor, and an executor given that of recorded
    tools; a part given is never loaded from its path.

    Raises:
        ComponentError: A part neither given nor rebuildable, a recorded agent path that names
            something else, or a tool path that names a decorated tool's bare function.
    """
    _check_homes(paths)
    recorded = _load_agent(paths["agent"]) if "agent" in paths else None

    def part(role: str) -> Any:
        if given.get(role) is not None:
            return given[role]
        if recorded is not None:
            return getattr(recorded, role)
        return load(paths[role], role=role) if role in paths else None

    planner = part("planner")
    if planner is None:
        raise ComponentError(
            "the planner was neither given nor recorded with an import path; pass planner=... "
            "to resume",
            role="planner",
        )
    verifier, observer = part("verifier"), part("observer")
    if given.get("tools") is not None or given.get("executor") is not None:
        tools, executor = given.get("tools"), given.get("executor")
    elif recorded is not None:
        tools, executor = recorded.tools, recorded.executor
    else:
        executor = part("executor")
        tools = None
        if executor is None and "tools" in paths:
            tools = [_load_tool(path) for path in paths["tools"].split(",")]
        sessions = sorted(key for key in paths if ":" in key)
        if executor is None and sessions:
            raise ComponentError(
                f"the tools came from {', '.join(sessions)}, which must be opened again: open "
                "them and pass all the tools to resume (tools=...), or use `pev resume`, which "
                "does",
                role="tools",
            )
    return Agent(
        planner,
        verifier=verifier,
        tools=tools or (),
        executor=executor,
        observer=observer,
        rails=recorded.rails if recorded is not None else (),
        resources=recorded.resources if recorded is not None else None,
        defined_in="",
    )


def _check_homes(paths: Mapping[str, str]) -> None:
    """Refuse a recorded module that this process holds from another folder than the task's.

    ``sys.modules`` keeps one module of a name: a worker that drove a task whose agent is
    ``agent.py`` of one folder holds that module, and a second task's ``agent.py`` of another
    folder would get the first one's planner and tools without a word. A part is checked when
    its top-level module is loaded and a module of that name is in one of the task's recorded
    folders (:data:`IMPORT_ROOTS_KEY`).

    Raises:
        ComponentError: The loaded module comes from another folder, naming both.
    """
    roots = [root for root in paths.get(IMPORT_ROOTS_KEY, "").split(os.pathsep) if root]
    for role in _PATH_ROLES if roots else ():
        for path in paths.get(role, "").split(","):
            top = path.partition(":")[0].split(".", maxsplit=1)[0]
            home = next((root for root in roots if _holds_module(root, top)), None)
            loaded_from = _root_of(top) if top in sys.modules else None
            if home is None or loaded_from is None or _real(loaded_from) == _real(home):
                continue
            raise ComponentError(
                f"cannot rebuild the {role}: the task's module {top!r} is in {home}, but this "
                f"process already holds a module {top!r} from {loaded_from} (one process holds "
                "one module of a name); give each agent's module a name of its own, or drive "
                "this task from another process",
                role=role,
            )


def _holds_module(folder: str, name: str) -> bool:
    """Whether ``folder`` holds a module or package ``name`` (as an import would find it)."""
    return bool(name) and (
        os.path.isfile(os.path.join(folder, f"{name}.py"))
        or os.path.isdir(os.path.join(folder, name))
    )


def _load_agent(path: str) -> Agent:
    """A recorded agent; refused when the path names something else."""
    agent = load(path, role="agent")
    if not isinstance(agent, Agent):
        raise ComponentError(
            f"cannot rebuild the agent from {path!r}: it names a {type(agent).__name__}, not a "
            "pev.Agent; pass agent=... to resume",
            role="agent",
        )
    return agent


def _load_tool(path: str) -> object:
    """A recorded tool; refused when it names the bare function behind a decorated tool."""
    found = load(path, role="tools")
    if isinstance(found, Tool) or not callable(found):
        return found
    module = _module(getattr(found, "__module__", None))
    namespace = vars(module) if module is not None else {}
    decorated = next(
        (
            f"{found.__module__}:{name}"
            for name, value in namespace.items()
            if isinstance(value, Tool) and value.fn is found
        ),
        None,
    )
    if decorated is not None:
        raise ComponentError(
            f"cannot rebuild the tools from {path!r}: it names the bare function behind the "
            f"decorated tool {decorated}, so its effect, timeout and reconcile would be lost; "
            "pass tools=... to resume",
            role="tools",
        )
    return found
