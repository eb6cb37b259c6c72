"""Building frozen values on the hot path without their ``__init__``.

A frozen dataclass sets each field through ``object.__setattr__`` in its generated ``__init__``,
which costs about twice what setting the same slots directly does. Where pev builds such a value
from fields it already holds (a record moving to its next status, a pending record of a node), a
builder made once per class sets the slots in order and skips the work ``__init__`` would repeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["slot_builder"]

T = TypeVar("T")


def slot_builder(cls: type[T]) -> Callable[..., T]:
    """A function building ``cls`` from the values of its slots, given positionally in order.

    ``cls`` must be a dataclass made with ``slots=True`` and without ``__post_init__``: the
    builder runs no ``__init__``, so it checks and converts nothing; the caller passes every
    field, in the order of ``cls.__slots__``.
    """
    names: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} checks its fields in __post_init__: build it normally")
    setters: tuple[Callable[[Any, Any], None], ...] = tuple(
        getattr(cls, name).__set__ for name in names
    )
    new = object.__new__
    count = len(names)

    def build(*values: Any) -> T:
        if len(values) != count:
            raise TypeError(f"{cls.__name__} has {count} fields, {len(values)} given")
        value = new(cls)
        for setter, item in zip(setters, values, strict=True):
            setter(value, item)
        return value

    build.__doc__ = f"A {cls.__name__} from its {count} fields in slot order, without __init__."
    return build
