"""Where `pev` writes: a console that never wraps or colours a pipe, and a pipe that may close.

On a terminal, `pev` prints with colour and fits its width. Anywhere else (a pipe, a file) it
prints plain text whose lines are never wrapped, so that ``grep``, ``cut`` and ``jq`` see one
record per line, and lays tables and rules out for :data:`PIPE_WIDTH` columns (``COLUMNS=N``
asks for another width); ``NO_COLOR`` and ``FORCE_COLOR`` are honoured as rich honours them.

A reader that stops early (``pev run task.toml | head -1``) closes the pipe. Python then raises
:class:`BrokenPipeError` from the next write, and that must not end the command: a task being
driven runs on to its end and is recorded, and the exit code is still its status.
:class:`PipeSafeStdout` takes the place of ``sys.stdout`` in :func:`pev.cli.main`: once the pipe
has closed, what is written goes to the null device.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, cast

from rich.console import Console

__all__ = [
    "PIPE_WIDTH",
    "PipeSafeStdout",
    "echo_bytes",
    "echo_json",
    "echo_line",
    "stdout_console",
]

PIPE_WIDTH = 200
"""The width `pev` lays tables and rules out for when its output is not a terminal, unless the
``COLUMNS`` environment variable asks for another; lines of text are never wrapped."""


def stdout_console() -> Console:
    """A console on standard output: rich's own on a terminal, plain and unwrapped elsewhere."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(width=_pipe_width(), soft_wrap=True, highlight=False)


def _pipe_width() -> int:
    """``COLUMNS`` when it is a width (a script that asks for one), else :data:`PIPE_WIDTH`."""
    asked = os.environ.get("COLUMNS", "")
    return int(asked) if asked.isdigit() and int(asked) > 0 else PIPE_WIDTH


def echo_line(text: str) -> None:
    """Write one line of text to standard output, flushed (followers see it at once)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def echo_json(document: object) -> None:
    """Write one JSON document to standard output, on one line, in UTF-8, flushed."""
    echo_line(json.dumps(document, ensure_ascii=False, separators=(",", ":")))


def echo_bytes(data: bytes) -> None:
    """Write ``data`` to standard output byte for byte, flushed (``pev ledger export``).

    What was written as text before goes first. Under :class:`PipeSafeStdout` a closed pipe
    drops the bytes, as it drops text.
    """
    out = sys.stdout
    if isinstance(out, PipeSafeStdout):
        out.write_bytes(data)
    else:
        _write_bytes(out, data)


def _write_bytes(stream: IO[str], data: bytes) -> None:
    """Write ``data`` to the binary stream behind ``stream``, after what ``stream`` holds."""
    stream.flush()
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text-only stream (a test's StringIO): the same bytes, as text
        stream.write(data.decode("utf-8", "surrogateescape"))
        stream.flush()
        return
    binary.write(data)
    binary.flush()


class PipeSafeStdout:
    """Standard output that survives its reader going away.

    Writes go to ``stream`` until one fails with :class:`BrokenPipeError`: from then on the
    file descriptor behind ``stream`` points at the null device (so that nothing left in a buffer,
    nor the interpreter's last flush, fails again), and every later write succeeds, unseen.
    Everything else (``isatty``, ``fileno``, ``encoding``) is ``stream``'s.

    Args:
        stream: The real standard output.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.closed_pipe = False
        """Whether the reader has gone (what is written since is dropped)."""
        self.failed: OSError | None = None
        """The error that stopped a write other than a closed pipe (a full disk), if one did.

        What is written since is dropped too, so that a task being driven runs on; the command
        says so at its end, and does not exit 0 (:func:`pev.cli.main`)."""

    def write(self, text: str) -> int:
        """Write ``text``; a closed pipe drops it."""
        try:
            return self.stream.write(text)
        except OSError as exc:
            self._lost(exc)
            return len(text)

    def flush(self) -> None:
        """Flush the stream; a closed pipe drops what was buffered."""
        try:
            self.stream.flush()
        except OSError as exc:
            self._lost(exc)

    def write_bytes(self, data: bytes) -> None:
        """Write ``data`` to the binary stream behind the text one; a closed pipe drops it.

        The binary stream is not offered as ``buffer``: click would write to it directly, past
        the guard. This is the one guarded way to it.
        """
        try:
            _write_bytes(self.stream, data)
        except OSError as exc:
            self._lost(exc)

    def isatty(self) -> bool:
        """Whether the stream is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The stream's file descriptor."""
        return self.stream.fileno()

    def __getattr__(self, name: str) -> Any:
        # No binary ``buffer``: click would write to it directly, past the guard.
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self.stream, name)

    def _lost(self, exc: OSError) -> None:
        """A write failed: the reader went away (a closed pipe), or the output cannot take more."""
        if isinstance(exc, BrokenPipeError):
            self.closed_pipe = True
        elif self.failed is None:
            self.failed = exc
        self._reader_gone()

    def _reader_gone(self) -> None:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
            self.stream.flush()  # what was buffered for the pipe goes to the null device
        except (OSError, ValueError):  # no descriptor to redirect: keep dropping writes here
            pass

    @classmethod
    def install(cls) -> PipeSafeStdout | None:
        """Put one in the place of ``sys.stdout`` (once; the `pev` command owns its process).

        Returns:
            The one in place, or ``None`` when the process has no standard output.
        """
        if sys.stdout is None:
            return None
        if not isinstance(sys.stdout, cls):
            sys.stdout = cast("IO[str]", cls(sys.stdout))
        return cast("PipeSafeStdout", sys.stdout)
