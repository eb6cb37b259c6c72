"""pev.testing's public names are pinned and documented."""

from __future__ import annotations

import inspect

import pev.testing
from pev.stores import MemoryStore


def test_every_public_name_is_documented() -> None:
    """Every public class, method and function of pev.testing has a docstring."""
    undocumented = []
    for name in pev.testing.__all__:
        value = getattr(pev.testing, name)
        # The class's own members and those it inherits from pev's bases (not from object).
        classes = value.__mro__[:-1] if inspect.isclass(value) else ()
        members = [item for klass in classes for item in vars(klass).items()]
        for member_name, member in [(name, value), *members]:
            public = member_name == name or not member_name.startswith("_")
            documentable = inspect.isfunction(member) or inspect.isclass(member)
            documentable = documentable or isinstance(member, property)
            if public and documentable and not inspect.getdoc(member):
                undocumented.append(f"{name}.{member_name}")
    assert undocumented == []


def test_memory_store_is_the_stores_one() -> None:
    """pev.testing.MemoryStore is pev.stores.MemoryStore, not a copy."""
    assert pev.testing.MemoryStore is MemoryStore
