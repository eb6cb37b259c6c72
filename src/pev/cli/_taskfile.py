"""Task files for `pev run`: one task in TOML (input, contract, policy, components), checked.

Every problem is a :class:`TaskFileError` naming the field at fault and the fix, which the
command line prints as one line. Components are import paths ``module:attribute``, in the one
format the ledger records and resolved the same way (:mod:`pev._imports`): a class is
instantiated with no arguments. The task file's own folder comes first on ``sys.path`` while
they are imported, so ``agent:planner`` finds the ``agent.py`` next to the file. Either the
agent is named whole (``agent = "myapp.agents:booking"``, a :class:`pev.Agent`), or its parts.
``[[mcp]]`` tables name MCP servers whose tools join the agent's (docs/mcp.md): the command line
opens them for the task's life, so the agent of such a file is built once they are open.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import importlib
import json
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from pev._imports import ImportPathError, check_import_path, resolve
from pev.engine import Agent, ToolRegistry
from pev.engine._typed import InputMismatch
from pev.errors import ComponentError, ContractError, UsageError
from pev.model import JsonValue, VerificationContract, VerificationMode, freeze_json
from pev.policy import RecoveryPolicy
from pev.stores._open import is_url

if TYPE_CHECKING:
    from pev.mcp._config import ServerConfig

__all__ = [
    "MAX_TASK_FILE_BYTES",
    "GivenInput",
    "TaskFile",
    "TaskFileError",
    "given_input",
    "load_task_file",
]

# The keys a task file may hold, table by table; anything else is a typo to point out.
_TOP_LEVEL = ("input", "store", "contract", "policy", "components", "mcp")
_CONTRACT = ("mode", "goal", "success_criteria", "constraints", "required_evidence")
_POLICY = tuple(f.name for f in dataclasses.fields(RecoveryPolicy))
_COMPONENTS = ("agent", "planner", "tools", "executor", "verifier", "observer")
_MCP = (
    "name",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "prefix",
    "tools",
    "timeout_s",
    "connect_timeout_s",
    "compensate",
)
_TOML_WHERE = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")
_POLICY_PROBLEM = re.compile(r"RecoveryPolicy\.(\w+) (.*)", re.DOTALL)

MAX_TASK_FILE_BYTES = 16 * 2**20
"""The largest task file read (16 MiB): a bigger one is refused before it is parsed."""

_EXAMPLE_COMPONENTS = (
    'agent = "agent:my_agent" (a pev.Agent), or its parts: planner = "agent:planner" and '
    'tools = ["agent:my_tool"] (or executor = "agent:executor")'
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
    """A checked task file, its agent imported and ready for :func:`pev.run`.

    Attributes:
        path: The file.
        input: What the task is asked to do (frozen JSON).
        contract: The verification contract: the file's, else the agent's; ``None`` for pev's
            default (``off`` without a verifier, ``recovery`` with one).
        policy: The recovery policy: the file's, else the agent's, else the defaults.
        agent: The agent: the one the file names, or one built from the parts it names;
            ``None`` when the file names MCP servers, whose tools exist only once they are
            open (see :meth:`agent_with`).
        components: Role → the import path the file gives (``tools`` joined by commas).
        store: The store the file names for its task (a ``postgresql://`` URL, or an SQLite
            file's path, relative ones taken from the file's folder), or ``None``.
        mcp: The MCP servers its ``[[mcp]]`` tables name, in order.
        parts: Role → the component the file names (``agent``, or its parts), imported.
    """

    path: Path
    input: JsonValue
    contract: VerificationContract | None
    policy: RecoveryPolicy
    agent: Agent | None
    components: Mapping[str, str]
    store: str | None = None
    mcp: tuple[ServerConfig, ...] = ()
    parts: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def agent_with(self, tools: Sequence[object]) -> Agent:
        """The agent, its tools joined by ``tools`` (those of the file's open MCP servers).

        Raises:
            TaskFileError: Two tools share a name (the way out: a ``prefix``), or the parts
                cannot make an agent.
        """
        return _agent(self.parts, self.contract, extra_tools=tuple(tools))

    @property
    def tools(self) -> ToolRegistry | None:
        """The agent's tools, when it has tools (else it has an executor, or MCP servers)."""
        return self.agent.tools or None if self.agent is not None else None

    @property
    def executor(self) -> object | None:
        """The agent's executor, when it has one."""
        return self.agent.executor if self.agent is not None else None

    @property
    def observer(self) -> object | None:
        """The agent's observer, if any."""
        return self.agent.observer if self.agent is not None else self.parts.get("observer")


@dataclass(frozen=True, slots=True)
class GivenInput:
    """A task's input given on the command line, in place of its task file's.

    Attributes:
        value: The input, as frozen JSON.
        source: Where it came from, to name in errors: ``--input``, ``--input-file PATH``.
    """

    value: JsonValue
    source: str


def given_input(text: str | None, path: Path | None) -> GivenInput | None:
    """The input of ``--input JSON`` or ``--input-file PATH`` (``-``: standard input), if given.

    Raises:
        UsageError: Both are given, the file cannot be read, or the text is not JSON a ledger
            can hold; the message names the option and the way out.
    """
    if text is not None and path is not None:
        raise UsageError("give --input or --input-file, not both")
    if path is not None:
        source = f"--input-file {path}"
        text = _input_text(path, source)
    elif text is not None:
        source = "--input"
    else:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{source}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); give a "
            """JSON value: '{"city": "Oslo"}', or text in quotes: '"weather in Oslo"'"""
        ) from None
    except RecursionError:
        raise UsageError(f"{source}: nests too deeply; flatten it") from None
    try:
        return GivenInput(freeze_json(value, path="input"), source)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{source}: {exc}; give finite numbers and UTF-8 text") from None


def _input_text(path: Path, source: str) -> str:
    """The text of an input file (standard input for ``-``), within the task file's limit."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_TASK_FILE_BYTES + 1)
        else:
            with path.open("rb") as file:
                data = file.read(MAX_TASK_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"{source}: cannot be read ({exc.strerror or exc}); name a JSON file you can read"
        ) from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise UsageError(
            f"{source}: larger than {MAX_TASK_FILE_BYTES // 2**20} MiB; keep large data in files "
            "the tools read, and name them in the input"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not UTF-8 text; save it as UTF-8") from None


def load_task_file(path: Path, *, given: GivenInput | None = None) -> TaskFile:
    """Read, check and import a task file.

    Args:
        path: The task file.
        given: The input given on the command line, in place of the file's (which the file
            then need not have).

    Raises:
        TaskFileError: Anything wrong with it, from a missing file to an attribute that its
            module lacks, or an input given that its agent's input type does not accept; the
            first problem found.
    """
    try:
        return _load(path, given)
    except TaskFileError as exc:
        exc.path = path
        exc.args = (str(exc),)
        raise


def _load(path: Path, given: GivenInput | None) -> TaskFile:
    document = _read(path)
    _check_keys(document, _TOP_LEVEL, "")
    if given is not None:
        document["input"] = given.value
    if "input" not in document:
        raise TaskFileError(
            "input",
            'missing; add input = "..." (what the task is asked to do: text, a table or an '
            "array), or give it with --input",
        )
    try:
        task_input = freeze_json(document["input"], path="input")
    except RecursionError:
        raise TaskFileError("input", "nests too deeply; flatten it") from None
    except (TypeError, ValueError) as exc:
        problem = str(exc).removeprefix("input: ")  # the path is "input" itself: said once
        raise TaskFileError(
            "input", f"{problem}; use text, numbers, booleans, arrays and tables (quote dates)"
        ) from None
    store = _store(document.get("store"), path)
    contract = _contract(document.get("contract"))
    policy = _policy(document.get("policy"))
    servers = _mcp_servers(document.get("mcp"), path.resolve().parent)
    paths = _component_paths(document.get("components"), contract, servers=bool(servers))
    with _importable_from(path.resolve().parent):
        parts = _parts(paths)
    named = parts.get("agent")
    # With MCP servers the agent is built once they are open; the parts are checked now.
    agent = None if servers else _agent(parts, contract)
    base = agent if agent is not None else named if isinstance(named, Agent) else None
    if base is not None and base.input_type is not None:
        try:
            task_input = base.types.recorded_input(task_input)
        except InputMismatch as exc:
            if given is not None:
                raise TaskFileError(
                    given.source, f"{exc.problem}; give an object of its fields"
                ) from None
            raise TaskFileError(
                "input", f"{exc.problem}; write it as a table of that type's fields"
            ) from None
    return TaskFile(
        path=path,
        input=task_input,
        contract=contract or (base.contract if base is not None else None),
        policy=policy or (base.policy if base is not None else None) or RecoveryPolicy(),
        agent=agent,
        components=MappingProxyType(
            {role: ",".join(t) if isinstance(t, tuple) else t for role, t in paths.items()}
        ),
        store=store,
        mcp=servers,
        parts=MappingProxyType(parts),
    )


def _store(value: object, path: Path) -> str | None:
    """The store a task file names: a URL as written, a relative file path from its folder."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        what = "empty" if isinstance(value, str) else _kind(value)
        raise TaskFileError(
            "store",
            f"is {what}; name the ledger as a string: a postgresql:// URL or the path of an "
            "SQLite file",
        )
    if is_url(value):
        return value
    return str(path.parent / Path(value).expanduser())


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_TASK_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TaskFileError("", "no such file; check the path") from None
    except IsADirectoryError:
        raise TaskFileError("", "is a folder; give the path of a task file (.toml)") from None
    except OSError as exc:
        raise TaskFileError("", f"cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # a NUL in the path
        raise TaskFileError("", f"is not a path pev can open ({exc})") from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise TaskFileError(
            "",
            f"is larger than {MAX_TASK_FILE_BYTES // 2**20} MiB, the most a task file may hold; "
            "keep large data in files the tools read, and name them in the input",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFileError("", "is not UTF-8 text; save it as UTF-8 TOML") from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise TaskFileError(
            "TOML", "arrays or tables nest too deeply to be read; flatten the input"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        field = "TOML"
        if where is not None:
            field = f"line {where[1]}" if where[1] else "end of file"
            column = f" (column {where[2]})" if where[2] else ""
            message = message[: where.start()] + column
        raise TaskFileError(field, f"TOML syntax error: {message}; fix the syntax") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise TaskFileError(
            "TOML", f"a value cannot be read ({exc}); write a very long number as a string"
        ) from None


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


def _policy(raw: object) -> RecoveryPolicy | None:
    if raw is None:
        return None  # the agent's, else the defaults
    table = _table(raw, "policy")
    _check_keys(table, _POLICY, "policy")
    try:
        return RecoveryPolicy(**table)
    except (TypeError, ValueError, OverflowError) as exc:
        problem = _POLICY_PROBLEM.match(str(exc))
        if problem is None:
            raise TaskFileError("policy", str(exc)) from None
        raise TaskFileError(f"policy.{problem[1]}", problem[2]) from None


def _component_paths(
    raw: object, contract: VerificationContract | None, *, servers: bool = False
) -> dict[str, Any]:
    """Role → import path (``tools`` → a tuple of them), checked before anything is imported.

    With MCP ``servers``, the tools may all come from them.
    """
    if raw is None:
        raise TaskFileError(
            "components", f"missing; add a [components] table: {_EXAMPLE_COMPONENTS}"
        )
    table = _table(raw, "components")
    _check_keys(table, _COMPONENTS, "components")
    paths: dict[str, Any] = {}
    if "agent" in table:
        others = [role for role in table if role != "agent"]
        if others:
            raise TaskFileError(
                "components",
                f"give agent or its parts, not both; drop {others[0]} (the agent has its own)",
            )
        return {"agent": _import_path(table["agent"], "components.agent")}
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
        raise TaskFileError(
            "components.planner",
            'missing; name it, planner = "agent:planner", or name the whole agent instead, '
            'agent = "agent:my_agent"',
        )
    if "tools" in paths and "executor" in paths:
        raise TaskFileError(
            "components", "give tools or executor, not both; keep the one that runs the plan"
        )
    if servers and "executor" in paths:
        raise TaskFileError(
            "components.executor",
            "an executor runs every node itself, so the tools of the [[mcp]] servers would "
            'never be called; give tools = ["agent:my_tool"] (or none), or drop the [[mcp]] '
            "tables",
        )
    if "tools" not in paths and "executor" not in paths and not servers:
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


def _mcp_servers(raw: object, folder: Path) -> tuple[ServerConfig, ...]:
    """The ``[[mcp]]`` tables, checked: each one server, started in the file's folder."""
    if raw is None:
        return ()
    if isinstance(raw, dict):
        raise TaskFileError(
            "mcp", "must be an array of tables: write [[mcp]] (two brackets), one per server"
        )
    if not isinstance(raw, list) or not raw:
        raise TaskFileError("mcp", f"must be [[mcp]] tables, one per server; got {_kind(raw)}")
    try:
        from pev.mcp._config import default_name  # noqa: PLC0415 - the mcp extra
    except ImportError as exc:
        raise TaskFileError("mcp", str(exc)) from None
    servers: list[ServerConfig] = []
    for index, table in enumerate(raw, start=1):
        where = f"mcp[{index}]"
        if not isinstance(table, dict):
            raise TaskFileError(where, f"must be a table ([[mcp]]), got {_kind(table)}")
        label = (
            f"mcp[{index}]"
            if not isinstance(table.get("name"), str)
            else (f"mcp[{index}] ({table['name']})")
        )
        _check_keys(table, _MCP, label)
        config = _mcp_server(table, label, folder, default_name)
        if any(server.name == config.name for server in servers):
            raise TaskFileError(
                f"{label}.name",
                f"two [[mcp]] tables are named {config.name!r}; give each server its own name",
            )
        servers.append(config)
    return tuple(servers)


def _mcp_server(
    table: Mapping[str, Any], label: str, folder: Path, default_name: Any
) -> ServerConfig:
    from pev.mcp._config import ServerConfig  # noqa: PLC0415 - the mcp extra

    if ("command" in table) == ("url" in table):
        raise TaskFileError(
            label,
            'give command = "..." (a server pev starts, over stdio) or url = "http://..." '
            "(a streamable-HTTP server), exactly one",
        )
    fields: dict[str, Any] = {}
    for key in ("name", "command", "url", "prefix", "cwd"):
        if key in table and not isinstance(table[key], str):
            raise TaskFileError(f"{label}.{key}", f"must be a string, got {_kind(table[key])}")
    for key in ("args", "tools"):
        if key in table:
            fields[key] = _strings(table[key], f"{label}.{key}")
    for key in ("env", "headers", "compensate"):
        if key in table:
            value = _table(table[key], f"{label}.{key}")
            for name, item in value.items():
                if not isinstance(item, str):
                    raise TaskFileError(
                        f"{label}.{key}.{name}", f"must be a string, got {_kind(item)}"
                    )
            fields[key] = value
    for key in ("timeout_s", "connect_timeout_s"):
        if key in table:
            fields[key] = table[key]
    transport: Literal["stdio", "http"] = "stdio" if "command" in table else "http"
    name = table.get("name") or default_name(
        transport, table.get("command", ""), fields.get("args", ()), table.get("url", "")
    )
    if transport == "stdio":
        cwd = folder / Path(table["cwd"]).expanduser() if "cwd" in table else folder
        fields |= {"command": table["command"], "cwd": str(cwd)}
    else:
        fields["url"] = table["url"]
    try:
        return ServerConfig(name=name, transport=transport, prefix=table.get("prefix"), **fields)
    except UsageError as exc:
        problem = str(exc).removeprefix(f"MCP server {name!r}: ")
        field, _, rest = problem.partition(" ")
        if field in _MCP:
            raise TaskFileError(f"{label}.{field}", rest.lstrip(": ")) from None
        raise TaskFileError(label, problem) from None


def _import_path(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise TaskFileError(field, f'must be an import path "module:attribute", got {_kind(value)}')
    try:
        return check_import_path(value)
    except ImportPathError as exc:
        raise TaskFileError(field, exc.problem) from None


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


def _parts(paths: Mapping[str, Any]) -> dict[str, Any]:
    """Role → the component each path names, imported (``agent``: a checked pev.Agent)."""
    if "agent" in paths:
        agent = _resolve(paths["agent"], "components.agent")
        if not isinstance(agent, Agent):
            raise TaskFileError(
                "components.agent",
                f"{paths['agent']} is {_kind(agent)}, not a pev.Agent; point at a module-level "
                "agent = pev.Agent(...), or name its parts (planner, tools, ...) instead",
            )
        return {"agent": agent}
    parts = {
        role: _resolve(text, f"components.{role}")
        for role, text in paths.items()
        if role != "tools"
    }
    if "tools" in paths:
        parts["tools"] = tuple(_resolve(text, "components.tools") for text in paths["tools"])
    return parts


def _agent(
    parts: Mapping[str, Any],
    contract: VerificationContract | None,
    *,
    extra_tools: tuple[Any, ...] = (),
) -> Agent:
    """The agent the file names, or one built from the parts it names.

    ``extra_tools`` (those of the file's MCP servers) join its tools.
    """
    named = parts.get("agent")
    if isinstance(named, Agent):
        _check_agent_contract(named, contract)
        if not extra_tools:
            return named
        parts = {
            "planner": named.planner,
            "verifier": named.verifier,
            "tools": tuple(named.tools.values()),
            "executor": named.executor,
            "observer": named.observer,
        }
        options: dict[str, Any] = {
            "contract": named.contract,
            "policy": named.policy,
            "rails": named.rails,
            "resources": named.resources,
        }
    else:
        options = {}
    try:
        return Agent(
            parts["planner"],
            verifier=parts.get("verifier"),
            tools=(*parts.get("tools", ()), *extra_tools),
            executor=parts.get("executor"),
            observer=parts.get("observer"),
            defined_in="",
            **options,
        )
    except ComponentError as exc:
        message = str(exc)
        if extra_tools and "two tools are named" in message:
            message += "; or set a prefix in the [[mcp]] table of one of the servers"
        raise TaskFileError(f"components.{exc.role}", message) from None


def _check_agent_contract(agent: Agent, contract: VerificationContract | None) -> None:
    """A named agent must be able to honour the file's contract."""
    if contract is None:
        return
    if contract.mode is not VerificationMode.OFF and agent.verifier is None:
        raise TaskFileError(
            "contract.mode",
            f"mode {contract.mode} calls a verifier, but the agent has none; set "
            'contract.mode = "off", or give the agent a verifier',
        )
    if contract.required_evidence and agent.observer is None:
        raise TaskFileError(
            "contract.required_evidence",
            "needs an observer to capture evidence, but the agent has none; drop "
            "required_evidence, or give the agent an observer",
        )


def _resolve(path: str, field: str) -> Any:
    """Import what ``path`` names, as the ledger's paths are resolved; problems name ``field``."""
    try:
        return resolve(path)
    except ImportPathError as exc:
        raise TaskFileError(field, exc.problem) from None
