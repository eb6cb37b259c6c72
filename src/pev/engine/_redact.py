"""Keeping a call's secret values out of what the call leaves behind (docs/tools.md, "Secrets").

A tool handed a secret may put it into what it returns or raises: an exception message that
quotes a request, the error body of a server that echoes what it was sent. What a call leaves is
recorded in the ledger, logged, shown and given to planners, so before it leaves the tool call
every occurrence of each secret value is replaced by a marker naming the secret's source
(``[secret PAYMENTS_TOKEN]``). Only the values themselves are found (also as a ``repr`` or JSON
string would escape them), not encodings of them (base64, hashes, URL-quoting).

What pev logs is redacted once more, as a whole, on its way out: a :class:`RedactingFilter` on
each of pev's loggers replaces every value it knows in the message and in the exception's
formatted traceback, the chained causes and contexts (``__cause__``, ``__context__``), their
notes and the members of exception groups included. It knows the values of every secret a tool
call has read in this process (:func:`remember`), and the LLM key of the environment
(``PEV_LLM_API_KEY``, ``OPENAI_API_KEY``), which a provider's error may echo. It never changes
the exception objects themselves: what the code that raised or caught them sees stays as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pev.model import DeviceFailure, Success, VerifierFailure

__all__ = [
    "KEY_VARIABLES",
    "LOGGERS",
    "RedactedError",
    "RedactingFilter",
    "Redactor",
    "known_redactor",
    "remember",
]

KEY_VARIABLES = ("PEV_LLM_API_KEY", "OPENAI_API_KEY")
"""Environment variables holding an LLM key: their values are redacted from every log record."""

LOGGERS = (
    "pev",
    "pev.engine",
    "pev.worker",
    "pev.ledger",
    "pev.stores",
    "pev.rails",
    "pev.rails.log",
    "pev.ray",
    "pev.testing",
    "pev.mcp",
    "pev.experience",
    "pev.llm.openai",
)
"""pev's loggers, each given a :class:`RedactingFilter` (a logger's filter sees only its own
records, not those its children pass up, so each one that logs needs it)."""

_REMEMBERED_AT_MOST = 4096  # forms of values; a provider that rotates its token keeps the latest


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
        return cls.of_markers(markers)

    @classmethod
    def of_markers(cls, markers: Mapping[str, str]) -> Redactor:
        """A redactor that replaces each key of ``markers`` (a value's form) by its marker."""
        markers = dict(markers)
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
        # A group's members cannot be cut off it: any of them still leaking replaces it whole.
        if not any(self._still_leaks(link) for link in _chain(exc)):
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


def remember(redactor: Redactor) -> None:
    """Have every log record of pev's loggers redact ``redactor``'s values from now on.

    The latest values are kept (a few thousand forms); a provider that hands out a new token for
    every call pushes the oldest out.
    """
    if redactor.markers:
        _installed().learn(redactor)


def known_redactor() -> Redactor:
    """A redactor of every value :func:`remember` was given and of the LLM key variables'."""
    return _installed().redactor()


class RedactingFilter(logging.Filter):
    """Redacts the values it knows from each record it sees; drops none.

    It knows the values it was taught (:meth:`learn`, through :func:`remember`) and those of
    :data:`KEY_VARIABLES`, read at each record. A message holding a value is replaced by its
    redacted text. A record whose exception (with everything it chains to, as a traceback
    prints it) holds a value gets the redacted traceback as its ``exc_text``, which
    :class:`logging.Formatter` prints as it is, and in its ``exc_info`` a :class:`RedactedError`
    with the redacted message and nothing chained, for handlers that read the exception itself.
    The exception objects are left untouched.

    One filter serves all of :data:`LOGGERS`: logging's loggers live as long as the process,
    and so does what it was taught.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._markers: dict[str, str] = {}
        self._built: tuple[tuple[str, ...], Redactor] | None = None

    def learn(self, redactor: Redactor) -> None:
        """Redact ``redactor``'s values too, from the next record on."""
        with self._lock:
            for form, marker in redactor.markers.items():
                self._markers.pop(form, None)  # moved to the end: the latest are kept longest
                self._markers[form] = marker
            while len(self._markers) > _REMEMBERED_AT_MOST:
                del self._markers[next(iter(self._markers))]
            self._built = None

    def redactor(self) -> Redactor:
        """A redactor of the values taught and of the key variables' values now."""
        # The key variables are read each time: a key set after import is known all the same.
        keys = tuple(os.environ.get(name) or "" for name in KEY_VARIABLES)
        with self._lock:
            if self._built is not None and self._built[0] == keys:
                return self._built[1]
            markers = dict(self._markers)
            for name, value in zip(KEY_VARIABLES, keys, strict=True):
                if value:
                    markers.update(Redactor.of({value: name}).markers)
            built = Redactor.of_markers(markers)
            self._built = (keys, built)
            return built

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always ``True``."""
        redactor = self.redactor()
        if redactor.pattern is not None:
            _redact_record(record, redactor)
        return True


def _installed() -> RedactingFilter:
    """The filter on pev's loggers (put back on each of them, should it have been removed)."""
    root = logging.getLogger(LOGGERS[0])
    found = next((f for f in root.filters if isinstance(f, RedactingFilter)), None)
    shared = found if found is not None else RedactingFilter()
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if shared not in logger.filters:
            logger.addFilter(shared)
    return shared


def _redact_record(record: logging.LogRecord, redactor: Redactor) -> None:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format: logging reports it, and must not show args
        message = f"{record.msg!s} {record.args!r}"
    if redactor.leaks(message):
        record.msg, record.args = redactor.text(message), None
    if record.exc_info is not None and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        shown = _formatted(exc)
        if redactor.leaks(shown) or any(
            redactor.leaks(_text_of(link, use_repr=True)) for link in _chain(exc)
        ):
            record.exc_text = redactor.text(shown)
            stand_in = RedactedError(f"{type(exc).__qualname__}: {redactor.text(_text_of(exc))}")
            stand_in.__suppress_context__ = True
            stand_in = stand_in.with_traceback(exc.__traceback__)
            record.exc_info = (RedactedError, stand_in, exc.__traceback__)
    elif record.exc_text is not None and redactor.leaks(record.exc_text):
        record.exc_text = redactor.text(record.exc_text)
    if record.stack_info is not None and redactor.leaks(record.stack_info):
        record.stack_info = redactor.text(record.stack_info)


def _formatted(exc: BaseException) -> str:
    """``exc`` as :meth:`logging.Formatter.formatException` prints it: chain, notes, groups."""
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001 - a broken __str__ somewhere in the chain
        text = f"{type(exc).__qualname__}: {_text_of(exc)}"
    return text.removesuffix("\n")


_installed()


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
