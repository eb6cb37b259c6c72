"""The viewer: web pages over any store (``pev serve``, docs/viewer.md).

The task list (filtered by status, searched by title or id), each task's revision timeline with
its plans drawn as graphs, records, verdicts with their citations, diagnoses and decisions,
evidence images and lessons; running tasks update live. Read-only unless built with
``operator=True``, which adds approve, reject and cancel buttons.

Needs the ``web`` extra (``pip install 'pev-agent[web]'``); importing this package without it
raises an :class:`ImportError` that says so. ``import pev`` never imports it.
"""

from __future__ import annotations

INSTALL_HINT = "the viewer needs the web extra: pip install 'pev-agent[web]'"

try:
    import jinja2  # noqa: F401 - checked here, used by pev.web._app
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - the tests run with the extra installed
    raise ImportError(f"{INSTALL_HINT} ({exc.name} is missing)") from exc

from pev.web._app import LOOPBACK_HOSTS, create_app  # noqa: E402 - after the extra check

__all__ = ["INSTALL_HINT", "LOOPBACK_HOSTS", "create_app"]
