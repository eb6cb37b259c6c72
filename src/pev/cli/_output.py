"""Where `pev` writes: a console that never wraps or colours a pipe, and a pipe that may close.

On a terminal, `pev` prints with colour and fits its width. Anywhere else (a pipe, a file) it
prints plain text whose lines are never wrapped, so that ``grep``, ``cut`` and ``jq`` see one
record per line; ``NO_COLOR`` and ``FORCE_COLOR`` are honoured as rich honours them.

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

__all__ = ["PIPE_WIDTH", "PipeSafeStdout", "echo_json", "echo_line", "stdout_console"]

PIPE_WIDTH = 100_000
"""The width `pev` lays out tables for when its output is not a terminal: no line is wrapped."""


def stdout_console() -> Console:
    """A console on standard output: rich's own on a terminal, plain and unwrapped elsewhere."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(width=PIPE_WIDTH, soft_wrap=True, highlight=False)


def echo_line(text: str) -> None:
    """Write one line of text to standard output, flushed (followers see it at once)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def echo_json(document: object) -> None:
    """Write one JSON document to standard output, on one line, in UTF-8, flushed."""
    echo_line(json.dumps(document, ensure_ascii=False, separators=(",", ":")))


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

    def write(self, text: str) -> int:
        """Write ``text``; a closed pipe drops it."""
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        """Flush the stream; a closed pipe drops what was buffered."""
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

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

    def _reader_gone(self) -> None:
        self.closed_pipe = True
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
    def install(cls) -> None:
        """Put one in the place of ``sys.stdout`` (once; the `pev` command owns its process)."""
        if not isinstance(sys.stdout, cls) and sys.stdout is not None:
            sys.stdout = cast("IO[str]", cls(sys.stdout))
