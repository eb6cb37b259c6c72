"""Task files for `pev run`: one task in TOML (input, contract, policy, components), checked.

Every problem is a :class:`TaskFileError` naming the field at fault and the fix, which the
command line prints as one line. Components are import paths ``module:attribute``; the task
file's own folder comes first on ``sys.path`` while they are imported, so ``agent:planner``
finds the ``agent.py`` next to the file. A class is instantiated with no arguments.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import importlib
import inspect
import re
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pev.engine import ToolRegistry
from pev.errors import ContractError, UsageError
from pev.model import JsonValue, VerificationContract, VerificationMode, freeze_json
from pev.policy import RecoveryPolicy

__all__ = ["TaskFile", "TaskFileError", "load_task_file"]

# The keys a task file may hold, table by table; anything else is a typo to point out.
_TOP_LEVEL = ("input", "contract", "policy", "components")
_CONTRACT = ("mode", "goal", "success_criteria", "constraints", "required_evidence")
_POLICY = tuple(f.name for f in dataclasses.fields(RecoveryPolicy))
_COMPONENTS = ("planner", "tools", "executor", "verifier", "observer")

# The method each component role is called through; a plain function (any callable) also does.
_METHOD_OF_ROLE = {
    "planner": "plan",
    "executor": "execute",
    "verifier": "verify",
    "observer": "observe",
}

_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_TOML_WHERE = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")
_POLICY_PROBLEM = re.compile(r"RecoveryPolicy\.(\w+) (.*)", re.DOTALL)

_EXAMPLE_COMPONENTS = (
    'planner = "agent:planner" and tools = ["agent:my_tool"] (or executor = "agent:executor")'
)


class TaskFileError(UsageError):
    """A task file that cannot be run, with the field at fault and the fix.

    ``str(error)`` is ``<file>: <field>: <message>`` (without the field for problems of the
    file as a whole), one line.

    Attributes:
        field: The field at fault (``contract.mode``, ``components.planner``, ``line 3`` for a
            syntax error), or ``""`` for the file as a whole.
        message: What is wrong, and how to fix it.
        path: The task file.
    """

    def __init__(self, field: str, message: str, *, path: Path | None = None) -> None:
        self.field = field
        self.message = " ".join(message.split())  # one line, whatever the cause said
        self.path = path
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [str(self.path)] if self.path is not None else []
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def __str__(self) -> str:
        return self._text()


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFile:
    """A checked task file, its components imported and ready for :func:`pev.run`.

    Attributes:
        path: The file.
        input: What the task is asked to do (frozen JSON).
        contract: The verification contract; ``None`` for pev's default.
        policy: The recovery policy (the defaults for fields not given).
        planner: The planner.
        tools: The tools, when given (else ``executor`` is).
        executor: The executor, when given (else ``tools`` are).
        verifier: The verifier, if any.
        observer: The observer, if any.
        components: Role → the import path the file gives (``tools`` joined by commas).
    """

    path: Path
    input: JsonValue
    contract: VerificationContract | None
    policy: RecoveryPolicy
    planner: object
    tools: tuple[object, ...] | None
    executor: object | None
    verifier: object | None
    observer: object | None
    components: Mapping[str, str]


def load_task_file(path: Path) -> TaskFile:
    """Read, check and import a task file.

    Raises:
        TaskFileError: Anything wrong with it, from a missing file to an attribute that its
            module lacks; the first problem found.
    """
    try:
        return _load(path)
    except TaskFileError as exc:
        exc.path = path
        exc.args = (str(exc),)
        raise


def _load(path: Path) -> TaskFile:
    document = _read(path)
    _check_keys(document, _TOP_LEVEL, "")
    if "input" not in document:
        raise TaskFileError(
            "input",
            'missing; add input = "..." (what the task is asked to do: text, a table or an array)',
        )
    try:
        task_input = freeze_json(document["input"], path="input")
    except (TypeError, ValueError) as exc:
        problem = str(exc).removeprefix("input: ")  # the path is "input" itself: said once
        raise TaskFileError(
            "input", f"{problem}; use text, numbers, booleans, arrays and tables (quote dates)"
        ) from None
    contract = _contract(document.get("contract"))
    policy = _policy(document.get("policy"))
    paths = _component_paths(document.get("components"), contract)
    with _importable_from(path.resolve().parent):
        loaded = {role: _component(role, text) for role, text in paths.items() if role != "tools"}
        tools = _tools(paths["tools"]) if "tools" in paths else None
    return TaskFile(
        path=path,
        input=task_input,
        contract=contract,
        policy=policy,
        planner=loaded["planner"],
        tools=tools,
        executor=loaded.get("executor"),
        verifier=loaded.get("verifier"),
        observer=loaded.get("observer"),
        components=MappingProxyType(
            {role: ",".join(t) if isinstance(t, tuple) else t for role, t in paths.items()}
        ),
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TaskFileError("", "no such file; check the path") from None
    except IsADirectoryError:
        raise TaskFileError("", "is a folder; give the path of a task file (.toml)") from None
    except OSError as exc:
        raise TaskFileError("", f"cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFileError("", "is not UTF-8 text; save it as UTF-8 TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        field = "TOML"
        if where is not None:
            field = f"line {where[1]}" if where[1] else "end of file"
            column = f" (column {where[2]})" if where[2] else ""
            message = message[: where.start()] + column
        raise TaskFileError(field, f"TOML syntax error: {message}; fix the syntax") from None


def _check_keys(table: Mapping[str, object], allowed: Sequence[str], where: str) -> None:
    for key in table:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(allowed)}"
        place = f"in [{where}]" if where else "at the top level"
        raise TaskFileError(f"{where}.{key}" if where else key, f"unknown key {place}; {hint}")


def _kind(value: object) -> str:
    """What a TOML value is, in TOML's words."""
    match value:
        case bool():
            return "a boolean"
        case int():
            return "an integer"
        case float():
            return "a float"
        case str():
            return "a string"
        case list():
            return "an array"
        case dict():
            return "a table"
        case dt.datetime() | dt.date() | dt.time():
            return "a date or time"
        case _:
            return f"a {type(value).__name__}"


def _table(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TaskFileError(field, f"must be a table ([{field}]), got {_kind(value)}")
    return value


def _strings(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TaskFileError(field, f'must be an array of strings (["..."]), got {_kind(value)}')
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise TaskFileError(
                field, f"must be an array of strings; item {index + 1} is {_kind(item)}"
            )
    return tuple(value)


def _contract(raw: object) -> VerificationContract | None:
    if raw is None:
        return None  # pev's default: off without a verifier, recovery with one
    table = _table(raw, "contract")
    _check_keys(table, _CONTRACT, "contract")
    modes = [str(mode) for mode in VerificationMode]
    mode = table.get("mode", str(VerificationMode.RECOVERY))
    if mode not in modes:
        close = difflib.get_close_matches(mode, modes, n=1) if isinstance(mode, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = repr(mode) if isinstance(mode, str) else _kind(mode)
        raise TaskFileError(
            "contract.mode", f"must be one of {', '.join(modes)}; got {shown}{hint}"
        )
    goal = table.get("goal", "")
    if not isinstance(goal, str):
        raise TaskFileError("contract.goal", f"must be a string, got {_kind(goal)}")
    lists = {
        name: _strings(table[name], f"contract.{name}") if name in table else ()
        for name in ("success_criteria", "constraints", "required_evidence")
    }
    try:
        return VerificationContract(
            VerificationMode(mode),
            goal,
            lists["success_criteria"],
            lists["constraints"],
            lists["required_evidence"],
        )
    except ContractError as exc:
        raise TaskFileError(f"contract.{exc.field}", str(exc)) from None


def _policy(raw: object) -> RecoveryPolicy:
    if raw is None:
        return RecoveryPolicy()
    table = _table(raw, "policy")
    _check_keys(table, _POLICY, "policy")
    try:
        return RecoveryPolicy(**table)
    except ValueError as exc:
        problem = _POLICY_PROBLEM.match(str(exc))
        if problem is None:
            raise TaskFileError("policy", str(exc)) from None
        raise TaskFileError(f"policy.{problem[1]}", problem[2]) from None


def _component_paths(raw: object, contract: VerificationContract | None) -> dict[str, Any]:
    """Role → import path (``tools`` → a tuple of them), checked before anything is imported."""
    if raw is None:
        raise TaskFileError(
            "components", f"missing; add a [components] table: {_EXAMPLE_COMPONENTS}"
        )
    table = _table(raw, "components")
    _check_keys(table, _COMPONENTS, "components")
    paths: dict[str, Any] = {}
    for role in ("planner", "executor", "verifier", "observer"):
        if role in table:
            paths[role] = _import_path(table[role], f"components.{role}")
    if "tools" in table:
        paths["tools"] = tuple(
            _import_path(item, "components.tools")
            for item in _strings(table["tools"], "components.tools")
        )
        if not paths["tools"]:
            raise TaskFileError("components.tools", 'is empty; list the tools: ["agent:my_tool"]')
    if "planner" not in paths:
        raise TaskFileError("components.planner", 'missing; name it: planner = "agent:planner"')
    if "tools" in paths and "executor" in paths:
        raise TaskFileError(
            "components", "give tools or executor, not both; keep the one that runs the plan"
        )
    if "tools" not in paths and "executor" not in paths:
        raise TaskFileError(
            "components",
            'give tools = ["agent:my_tool"] (functions decorated with @pev.tool) '
            'or executor = "agent:executor"',
        )
    mode = contract.mode if contract is not None else VerificationMode.OFF
    if mode is not VerificationMode.OFF and "verifier" not in paths:
        raise TaskFileError(
            "components.verifier",
            f"missing; contract mode {mode} calls a verifier: add "
            'verifier = "agent:verifier", or set contract.mode = "off"',
        )
    if contract is not None and contract.required_evidence and "observer" not in paths:
        raise TaskFileError(
            "components.observer",
            "missing; contract.required_evidence needs an observer to capture evidence: add "
            'observer = "agent:observer", or drop required_evidence',
        )
    return paths


def _import_path(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise TaskFileError(field, f'must be an import path "module:attribute", got {_kind(value)}')
    if not _IMPORT_PATH.fullmatch(value):
        raise TaskFileError(
            field,
            f'{value!r} is not an import path; write "module:attribute", such as "agent:planner"',
        )
    return value


@contextmanager
def _importable_from(folder: Path) -> Iterator[None]:
    """Put ``folder`` first on ``sys.path`` while the components are imported."""
    entry = str(folder)
    sys.path.insert(0, entry)
    importlib.invalidate_caches()  # modules written since the interpreter last looked
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(entry)


def _component(role: str, path: str) -> object:
    field = f"components.{role}"
    component = _resolve(path, field)
    method = _METHOD_OF_ROLE[role]
    if getattr(component, method, None) is None and not callable(component):
        raise TaskFileError(
            field,
            f"{path} is {_kind(component)} with no {method}() method and is not callable; "
            f"point at a function, or a class or object with a {method}() method",
        )
    return component


def _tools(paths: tuple[str, ...]) -> tuple[object, ...]:
    tools: list[Callable[..., object]] = []
    for path in paths:
        tool = _resolve(path, "components.tools")
        if not callable(tool):
            raise TaskFileError(
                "components.tools",
                f"{path} is {_kind(tool)}, not a tool; point at a function decorated with "
                "@pev.tool",
            )
        tools.append(tool)
    try:
        ToolRegistry.of(tools)
    except (TypeError, ValueError) as exc:
        raise TaskFileError("components.tools", str(exc)) from None
    return tuple(tools)


def _resolve(path: str, field: str) -> object:
    """Import ``module:attribute``; a class is instantiated with no arguments."""
    module_name, _, attribute = path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise TaskFileError(
                field,
                f"no module named {exc.name!r} next to the task file or on the Python path; "
                "check the name before the ':'",
            ) from None
        raise TaskFileError(
            field, f"importing {module_name!r} failed ({exc}); install what it needs"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any error in the user's module is a one-line report
        raise TaskFileError(
            field, f"importing {module_name!r} failed ({type(exc).__name__}: {exc}); fix the module"
        ) from None
    owner = module_name
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            names = [name for name in dir(target) if not name.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "check the name after the ':'"
            raise TaskFileError(field, f"{owner!r} has no attribute {part!r}; {hint}") from None
        owner = f"{owner}:{part}" if owner == module_name else f"{owner}.{part}"
    if inspect.isclass(target):
        try:
            target = target()
        except Exception as exc:  # noqa: BLE001 - the user's constructor; reported in one line
            raise TaskFileError(
                field,
                f"cannot build {path} with no arguments ({type(exc).__name__}: {exc}); give its "
                "parameters defaults, or point at an instance",
            ) from None
    return target
