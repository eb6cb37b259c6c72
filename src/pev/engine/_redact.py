"""Keeping a call's secret values out of what the call leaves behind (docs/tools.md, "Secrets").

A tool handed a secret may put it into what it returns or raises: an exception message that
quotes a request, the error body of a server that echoes what it was sent. What a call leaves is
recorded in the ledger, logged, shown and given to planners, so before it leaves the tool call
every occurrence of each secret value is replaced by a marker naming the secret's source
(``[secret PAYMENTS_TOKEN]``). Only the values themselves are found (also as a ``repr`` or JSON
string would escape them), not encodings of them (base64, hashes, URL-quoting).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pev.model import DeviceFailure, Success, VerifierFailure

__all__ = ["RedactedError", "Redactor"]


class RedactedError(Exception):
    """Stands in for a tool's exception whose text held a secret that could not be removed.

    Its message is the original's type and message, with the secret replaced; it carries the
    original's traceback (so the frame where it was raised is kept), and nothing it chained to.
    """


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces known secret values with markers naming their sources, in one pass.

    Build it with :meth:`of`. A redactor of no values changes nothing.
    """

    markers: Mapping[str, str]
    pattern: re.Pattern[str] | None

    @classmethod
    def of(cls, sources: Mapping[str, str]) -> Redactor:
        """A redactor of ``sources``: secret value → the source it came from."""
        markers: dict[str, str] = {}
        for value, source in sources.items():
            for form in _forms(value):
                markers.setdefault(form, f"[secret {source}]")
        if not markers:
            return cls(markers={}, pattern=None)
        # Longest first, so that a value holding another is replaced whole.
        alternatives = sorted(markers, key=len, reverse=True)
        return cls(markers=markers, pattern=re.compile("|".join(map(re.escape, alternatives))))

    def leaks(self, text: str) -> bool:
        """Whether ``text`` holds one of the values."""
        return self.pattern is not None and self.pattern.search(text) is not None

    def text(self, text: str) -> str:
        """``text`` with every value replaced by its marker."""
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda found: self.markers[found.group(0)], text)

    def value(self, value: object) -> object:
        """``value`` with its strings redacted, at any depth: JSON values, keys, node results.

        Lists, tuples and mappings are rebuilt (a mapping as a ``dict``); a node result (a
        :class:`~pev.model.Success`, :class:`~pev.model.DeviceFailure` or
        :class:`~pev.model.VerifierFailure`) is rebuilt field by field; any other object is kept
        as it is (it is no JSON, and the executor refuses it).

        Raises:
            Exception: Only what a mapping of the tool's own raises when its items are read.
        """
        if self.pattern is None:
            return value
        if isinstance(value, Success | DeviceFailure | VerifierFailure):
            changes: dict[str, Any] = {
                item.name: _rewrite(getattr(value, item.name), self.text)
                for item in dataclasses.fields(value)
                if item.init
            }
            return dataclasses.replace(value, **changes)
        return _rewrite(value, self.text)

    def exception(self, exc: BaseException) -> BaseException:
        """``exc`` redacted: in place where its text can be, else a :class:`RedactedError`.

        Its arguments, attributes and notes are redacted, and so are those of the exceptions it
        chains to; a chained exception whose text still holds a value is cut off the chain.
        """
        if self.pattern is None:
            return exc
        links = list(_chain(exc))
        for link in links:
            self._scrub(link)
        for link in links:
            for attribute in ("__cause__", "__context__"):
                linked = getattr(link, attribute)
                if linked is not None and self._still_leaks(linked):
                    setattr(link, attribute, None)
                    link.__suppress_context__ = True
        if not self._still_leaks(exc):
            return exc
        replacement = RedactedError(f"{type(exc).__qualname__}: {self.text(_text_of(exc))}")
        replacement.__suppress_context__ = True
        return replacement.with_traceback(exc.__traceback__)

    def _scrub(self, exc: BaseException) -> None:
        exc.args = tuple(_rewrite(arg, self.text) for arg in exc.args)
        for name, attribute in list(getattr(exc, "__dict__", {}).items()):
            _try_set(exc, name, _rewrite(attribute, self.text))
        if isinstance(exc, OSError):  # attributes of the C type, outside __dict__
            for name in ("strerror", "filename", "filename2"):
                attribute = getattr(exc, name)
                if isinstance(attribute, str):
                    _try_set(exc, name, self.text(attribute))

    def _still_leaks(self, exc: BaseException) -> bool:
        return self.leaks(_text_of(exc)) or self.leaks(_text_of(exc, use_repr=True))


def _forms(value: str) -> Iterator[str]:
    """The value, and the value as a ``repr`` or a JSON string would escape it."""
    if not value:
        return
    yield value
    yield repr(value)[1:-1]
    yield json.dumps(value)[1:-1]
    yield json.dumps(value, ensure_ascii=False)[1:-1]


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it chains to (causes, contexts, group members), once each."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)


def _text_of(exc: BaseException, *, use_repr: bool = False) -> str:
    try:
        return repr(exc) if use_repr else str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ says nothing, and so leaks nothing
        return ""


def _try_set(target: object, name: str, value: object) -> None:
    # A read-only attribute stays as it is; the leak check after scrubbing catches what it holds.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(target, name, value)


_PENDING = object()  # a container whose children come first


@dataclass(slots=True)
class _Frame:
    """A container being rebuilt: its children still to visit, and those done."""

    children: Iterator[tuple[Any, Any]]
    is_mapping: bool
    kind: type
    done: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    key: Any = None

    def build(self) -> object:
        if self.is_mapping:
            return dict(self.done)
        return self.kind(value for _, value in self.done)


def _rewrite(value: object, fix: Callable[[str], str]) -> object:
    """``value`` with ``fix`` applied to every string in it, keys included.

    Walked with a stack of its own rather than by recursion, so that no depth of nesting makes
    it fail: a value too deep to store is the codec's to refuse, with an error that says so.
    """
    stack: list[_Frame] = []
    current: object = value
    while True:
        finished: object
        if isinstance(current, str):
            finished = fix(current)
        elif isinstance(current, Mapping):
            stack.append(_Frame(iter(list(current.items())), is_mapping=True, kind=dict))
            finished = _PENDING
        elif isinstance(current, list | tuple) and type(current) in (list, tuple):
            items: list[tuple[Any, Any]] = list(enumerate(current))
            stack.append(_Frame(iter(items), is_mapping=False, kind=type(current)))
            finished = _PENDING
        else:
            finished = current
        while True:
            if finished is not _PENDING:
                if not stack:
                    return finished
                stack[-1].done.append((stack[-1].key, finished))
            frame = stack[-1]
            child = next(frame.children, None)
            if child is None:
                stack.pop()
                finished = frame.build()
                continue
            key, current = child
            frame.key = fix(key) if isinstance(key, str) else key
            break
