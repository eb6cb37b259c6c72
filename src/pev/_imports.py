"""Import paths: the one format in which pev names a component that another process rebuilds.

An import path is ``module:attribute``, where ``attribute`` may be dotted
(``myapp.agents:booking``, ``myapp.tools:Payments.refund``). Task files, the ledger (which records
the path of each component a task was given, so that ``resume`` rebuilds it, in this process or
another) and the command line all use this format, and all resolve it here: the module is
imported, then each attribute read in turn, with a did-you-mean hint when a name is misspelt.

What a path names is used as it is, with one exception: a class is instantiated with no
arguments, since a component is an object, never a class. Ledgers written before this rule spelt
that ``module:Class()``; the trailing ``()`` is still read.

Importing runs the module's code: an import path is trusted input (docs/security.md). With
``PEV_TRUSTED_MODULES`` set (module prefixes, comma-separated), nothing outside those prefixes is
imported: a path naming another module is refused before its module is looked for, naming the
path and the variable. A prefix matches whole module names: ``myapp`` trusts ``myapp`` and
``myapp.tools``, never ``myappevil``. Set and empty, it trusts no module at all.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re

from pev.errors import UsageError

__all__ = [
    "TRUSTED_MODULES_VARIABLE",
    "ImportPathError",
    "UntrustedImportError",
    "check_import_path",
    "check_trusted",
    "resolve",
    "trusted_modules",
]

_MODULE = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
_FORMAT = re.compile(rf"{_MODULE}:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_MODULE_NAME = re.compile(_MODULE)
_LEGACY_CALL = "()"

TRUSTED_MODULES_VARIABLE = "PEV_TRUSTED_MODULES"
"""The environment variable that limits which modules import paths may name."""


class ImportPathError(UsageError):
    """An import path that does not name an object pev can use.

    Attributes:
        path: The import path, as given.
        problem: What is wrong and how to fix it, in one line (``str(error)`` is the same).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem


class UntrustedImportError(ImportPathError):
    """An import path outside ``PEV_TRUSTED_MODULES``: refused, its module never imported."""


def check_import_path(path: str) -> str:
    """Return ``path`` if it has the ``module:attribute`` form (legacy ``()`` accepted).

    Raises:
        ImportPathError: It does not.
    """
    if not isinstance(path, str) or not _FORMAT.fullmatch(path.removesuffix(_LEGACY_CALL)):
        raise ImportPathError(
            str(path),
            f'{path!r} is not an import path; write "module:attribute", such as "agent:planner"',
        )
    return path


def resolve(path: str) -> object:
    """The object ``path`` names; a class there is instantiated with no arguments.

    Raises:
        ImportPathError: The path is malformed, its module cannot be imported, an attribute is
            missing (with the closest name, when one is close), or the class cannot be built
            without arguments.
    """
    check_trusted(check_import_path(path))
    target = _lookup(path.removesuffix(_LEGACY_CALL), path)
    if inspect.isclass(target):
        try:
            return target()
        except Exception as exc:  # noqa: BLE001 - the user's constructor, reported in one line
            raise ImportPathError(
                path,
                f"cannot build {path} with no arguments ({type(exc).__name__}: {exc}); give "
                "its parameters defaults, or point at an instance",
            ) from None
    return target


def trusted_modules() -> tuple[str, ...] | None:
    """The module prefixes ``PEV_TRUSTED_MODULES`` names, or ``None`` when it is not set.

    Raises:
        UsageError: An entry is not a module name (``myapp``, ``myapp.tools``).
    """
    value = os.environ.get(TRUSTED_MODULES_VARIABLE)
    if value is None:
        return None
    prefixes = tuple(entry.strip() for entry in value.split(",") if entry.strip())
    for prefix in prefixes:
        if not _MODULE_NAME.fullmatch(prefix):
            raise UsageError(
                f"{TRUSTED_MODULES_VARIABLE}: {prefix!r} is not a module name; list module "
                "prefixes separated by commas, such as 'myapp,shared.tools'"
            )
    return prefixes


def check_trusted(path: str) -> None:
    """Refuse ``path`` when ``PEV_TRUSTED_MODULES`` is set and its module is outside it.

    Raises:
        UntrustedImportError: The module is not under any trusted prefix (nothing imported).
        ImportPathError: ``PEV_TRUSTED_MODULES`` holds an entry that is not a module name.
    """
    try:
        prefixes = trusted_modules()
    except UsageError as exc:
        raise ImportPathError(path, str(exc)) from None
    if prefixes is None:
        return
    module = path.partition(":")[0]
    if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
        return
    listed = ", ".join(prefixes) if prefixes else "nothing: it is empty"
    raise UntrustedImportError(
        path,
        f"{path} is outside {TRUSTED_MODULES_VARIABLE} ({listed}), so its module {module!r} "
        f"was not imported; if you trust that code, add {module!r} to "
        f"{TRUSTED_MODULES_VARIABLE}",
    )


def _lookup(name: str, path: str) -> object:
    """Import the module, then read each attribute; every problem is one line naming the fix."""
    module_name, _, attribute = name.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ImportPathError(
                path,
                f"no module named {exc.name!r} on the Python path; check the name before the ':'",
            ) from None
        raise ImportPathError(
            path, f"importing {module_name!r} failed ({exc}); install what it needs"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any error in the user's module is a one-line report
        raise _failed(module_name, exc, path) from None
    owner = module_name
    for part in attribute.split("."):
        try:
            found = getattr(target, part)
        except AttributeError:
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "check the name after the ':'"
            raise ImportPathError(path, f"{owner!r} has no attribute {part!r}; {hint}") from None
        except Exception as exc:  # noqa: BLE001 - a lazy attribute whose import fails, say
            raise _failed(module_name, exc, path) from None
        target = found
        owner = f"{owner}:{part}" if owner == module_name else f"{owner}.{part}"
    return target


def _failed(module_name: str, exc: Exception, path: str) -> ImportPathError:
    """Importing the module (or one of its lazy attributes) raised ``exc``."""
    fix = "install what it needs" if isinstance(exc, ImportError) else "fix the module"
    return ImportPathError(
        path, f"importing {module_name!r} failed ({type(exc).__name__}: {exc}); {fix}"
    )
