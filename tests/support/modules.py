"""User modules written by a test: importable by name here and in child processes.

Import paths name module-level objects, so tests of recording and rebuilding them need a real
module on the path; each gets a unique name, so that no test sees another's cached import.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest


@contextmanager
def user_module(
    folder: Path, monkeypatch: pytest.MonkeyPatch, source: str, *, prefix: str
) -> Iterator[ModuleType]:
    """Write ``source`` as ``<prefix>_<random>.py`` in ``folder``, put it on the path, import it.

    The module is forgotten afterwards (the path entry goes with ``monkeypatch``).
    """
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)


def log_lines(path: Path) -> list[str]:
    """The lines a tool appended to its own log file (none yet: an empty list)."""
    return path.read_text(encoding="utf-8").split() if path.exists() else []
