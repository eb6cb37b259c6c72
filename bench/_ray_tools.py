"""The tools `bench_ray.py` runs on Ray: Ray workers import them by this module's name.

Each is a plain module-level function, so that cloudpickle sends it to a worker by reference
(its module and name) rather than by value, and a query tool built from it with
:func:`pev.tool` (the :class:`~pev.engine.Tool` is a separate name, so the function stays
importable under its own). The bench puts this folder on the workers' ``PYTHONPATH``.
"""

from __future__ import annotations

import ray

import pev


def ping() -> str:
    """Answer at once with a small value: the whole call is overhead."""
    return "pong"


def where() -> str:
    """The id of the Ray node this call runs on (a small value that shows the placement)."""
    return ray.get_runtime_context().get_node_id()


PING = pev.tool(ping, effect="query")
WHERE = pev.tool(where, effect="query")
