"""Tests that need something from outside (a server, an extra): skipped without it, except in CI.

Under ``CI=true`` a missing PostgreSQL server or Ray fails the test instead: CI must never pass
by skipping what it is there to run.
"""

from __future__ import annotations

import os

import pytest


def needed(what: str, reason: str | None, *, whole_module: bool = False) -> None:
    """Skip (the whole module, at its top) when ``reason`` says ``what`` is missing; CI fails."""
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the {what} tests to run: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=whole_module)
