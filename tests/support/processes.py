"""Facts about processes a test started."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process with this id exists (a zombie not yet reaped counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
