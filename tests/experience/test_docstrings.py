"""pev.experience's public names are documented.

That its decisions (episodes, classification, candidates, the sanitiser) are pure is checked
with the kernel's and the fold's, in tests/test_architecture.py.
"""

from __future__ import annotations

import importlib
import inspect


def test_public_names_are_documented() -> None:
    """Every public class and function of pev.experience has a docstring."""
    module = importlib.import_module("pev.experience")
    undocumented = [
        name
        for name in module.__all__
        if (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not inspect.getdoc(getattr(module, name))
    ]
    assert undocumented == []
