"""Names a package re-exports, imported from their modules when first asked for.

A package that re-exports a class from an optional module (``OpenAIChat`` behind the ``llm``
extra, ``PostgresStore`` behind ``postgres``) sets its module ``__getattr__`` to
:func:`lazy_names`, so importing the package needs no extra, and using the name without the
extra raises the optional module's own :class:`ImportError`, which names what to install. The
``pev`` package serves all its names so: ``import pev`` loads none of the engine until a name is
used, which keeps a short command (``pev tasks``, a worker taking its signals) quick to start.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` serving ``names`` (name → module) on first use.

    Raises (from the returned function):
        ImportError: The module behind the name needs an extra that is not installed.
        AttributeError: ``name`` is not one of ``names``.
    """

    def __getattr__(name: str) -> object:  # noqa: N807 - installed as a module's __getattr__
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        # Bound on the package as an import binds a submodule on it: later uses find it there.
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
