"""Names served from modules that need an extra, imported when first asked for.

A package that re-exports a class from an optional module (``OpenAIChat`` behind the ``llm``
extra, ``PostgresStore`` behind ``postgres``) sets its module ``__getattr__`` to
:func:`lazy_names`, so importing the package needs no extra, and using the name without the
extra raises the optional module's own :class:`ImportError`, which names what to install.
"""

from __future__ import annotations

import importlib
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
        return getattr(importlib.import_module(module), name)

    return __getattr__
