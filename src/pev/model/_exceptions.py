"""How an exception a component raised is written down: type, message and where it happened.

A tool's, planner's, verifier's, observer's or rail's exception is recorded as one line, such as
``KeyError: 'room' at tools.py:12 in book_room`` (docs/engine.md, "Failures that speak"). The
place is the innermost frame of the component's own code, found in the exception's traceback:

1. a frame belongs to pev when its module is ``pev`` or inside it, and to the standard library
   when its top-level package is one of ``sys.stdlib_module_names`` (``asyncio``,
   ``concurrent.futures``, ``threading``, ...);
2. the component's package is the top-level package of the *outermost* frame that belongs to
   neither: the code pev called (``myapp`` for ``myapp.tools.book_room``);
3. the place is the *innermost* frame of that package, so a failure deep inside a library the
   component called (``httpx``, say) is shown where the component's own code called it;
4. when every frame is pev's or the standard library's (one of pev's own adapters raised), the
   place is the innermost frame outside the standard library; with none at all, there is no
   place, and the line ends after the message.

The file is shown by its name only (the full traceback goes to the ``pev`` logger).
"""

from __future__ import annotations

import sys
from types import TracebackType

__all__ = ["REMOTE_PLACE", "describe_exception", "raised_at"]

_MESSAGE_SHOWN = 1000  # characters of an exception's message kept in the ledger


def describe_exception(exc: BaseException) -> str:
    """One line for the ledger: ``Type: message at file.py:12 in function``.

    The message is cut to a thousand characters, and text UTF-8 cannot hold (a lone surrogate)
    is escaped, so the line can always be stored. An empty message leaves the type alone
    (``TimeoutError at tools.py:3 in wait``); a ``KeyError`` keeps its quoted key.
    """
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = f"{cls.__module__}.{name}"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails still has a type
        message = "<its message could not be read>"
    if len(message) > _MESSAGE_SHOWN:
        message = message[:_MESSAGE_SHOWN] + "…"
    text = f"{name}: {message}" if message else name
    place = raised_at(exc)
    if place:
        text = f"{text} at {place}"
    # One line: a multi-line message would break the line it is shown on.
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


REMOTE_PLACE = "__pev_raised_at__"
"""The attribute an exception raised in another process carries its place in.

A traceback does not cross processes: where a component ran elsewhere (a Ray task, say), the
place is found there, with :func:`raised_at`, and set on the exception under this name before it
is sent back; :func:`raised_at` returns it when the exception has no traceback of its own there.
"""


def raised_at(exc: BaseException) -> str:
    """``file.py:12 in function``: the innermost frame of the component's own code, or ``""``.

    See the module's docstring for how the frame is chosen; an exception that carries its place
    from another process (:data:`REMOTE_PLACE`) is placed there.
    """
    remote = getattr(exc, REMOTE_PLACE, None)
    if isinstance(remote, str):
        return remote
    frames = _frames(exc.__traceback__)
    outside = [frame for frame in frames if frame[0] == _OTHER]
    if outside:
        package = _top(outside[0][1])
        chosen = [frame for frame in outside if _top(frame[1]) == package][-1]
    else:
        not_stdlib = [frame for frame in frames if frame[0] != _STDLIB]
        if not not_stdlib:
            return ""
        chosen = not_stdlib[-1]
    _, _, filename, line, function = chosen
    return f"{_file_name(filename)}:{line} in {function}"


_PEV, _STDLIB, _OTHER = "pev", "stdlib", "other"
_Frame = tuple[str, str, str, int, str]  # owner, module, file, line, function


def _frames(tb: TracebackType | None) -> list[_Frame]:
    """The traceback's frames, outermost first, each with whose code it is."""
    frames: list[_Frame] = []
    while tb is not None:
        frame = tb.tb_frame
        module = frame.f_globals.get("__name__")
        module = module if isinstance(module, str) else ""
        frames.append(
            (_owner(module), module, frame.f_code.co_filename, tb.tb_lineno, frame.f_code.co_name)
        )
        tb = tb.tb_next
    return frames


def _owner(module: str) -> str:
    if module == "pev" or module.startswith("pev."):
        return _PEV
    if _top(module) in sys.stdlib_module_names:
        return _STDLIB
    return _OTHER


def _top(module: str) -> str:
    return module.partition(".")[0]


def _file_name(path: str) -> str:
    return path.replace("\\", "/").rpartition("/")[2] or path
