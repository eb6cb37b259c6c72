"""Import paths: the one format in which pev names a component that another process rebuilds.

An import path is ``module:attribute``, where ``attribute`` may be dotted
(``myapp.agents:booking``, ``myapp.tools:Payments.refund``). Task files, the ledger (which records
the path of each component a task was given, so that ``resume`` rebuilds it, in this process or
another) and the command line all use this format, and all resolve it here: the module is
imported, then each attribute read in turn, with a did-you-mean hint when a name is misspelt.

What a path names is used as it is, with one exception: a class is instantiated with no
arguments, since a component is an object, never a class. Ledgers written before this rule spelt
that ``module:Class()``; the trailing ``()`` is still read.

Importing runs the module's code: an import path is trusted input (docs/design.md §5.4).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re

from pev.errors import UsageError

__all__ = ["ImportPathError", "check_import_path", "resolve"]

_FORMAT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_LEGACY_CALL = "()"


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
    target = _lookup(check_import_path(path).removesuffix(_LEGACY_CALL), path)
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
