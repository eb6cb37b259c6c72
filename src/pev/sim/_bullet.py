"""pybullet, imported quietly, or an ImportError that names the extra to install.

pybullet prints its build time when it is imported (on stderr in most builds, on stdout in some),
so the import runs with both descriptors pointed at the null device: `pev demo` output stays
clean.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

__all__ = ["INSTALL_HINT", "pb", "pybullet_data"]

INSTALL_HINT = "pip install 'pev-agent[sim]'"
"""How to install what :mod:`pev.sim` needs."""


def _flush_c_streams() -> None:
    # Text a C library printed may still sit in its stdio buffer; flush it while the descriptors
    # still point at the null device. Windows has no process-wide libc to ask: skip it there.
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _silenced(*fds: int) -> Iterator[None]:
    """Send whatever is written to ``fds`` while the block runs to the null device."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    saved: list[tuple[int, int]] = []
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            with contextlib.suppress(OSError):  # a closed descriptor has nothing to hide
                saved.append((fd, os.dup(fd)))
                os.dup2(null, fd)
        yield
    finally:
        _flush_c_streams()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


try:
    with _silenced(1, 2):
        import numpy  # noqa: F401 - checked here so the error names the extra
        import PIL  # noqa: F401
        import pybullet as pb
        import pybullet_data
except ImportError as exc:
    raise ImportError(
        f"pev.sim needs the simulator extra ({exc.name or exc} is missing); "
        f"install it with: {INSTALL_HINT}"
    ) from exc
