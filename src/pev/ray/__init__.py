"""Scale-out on Ray (extra ``ray``: ``pip install 'pev-agent[ray]'``); see docs/ray.md.

* :class:`RayExecutor` runs each node's tool as a Ray task, placed by the tool's resources
  (``@pev.tool(placement={"arm0": 1})``), never retried by Ray: a lost worker or node is an
  unknown outcome for an action, never a silent re-run.
* :func:`drivers_on_ray` runs task drivers (:func:`pev.worker`) as Ray actors over one
  PostgreSQL ledger, with the leases of docs/workers.md: a driver whose node dies is replaced,
  and its tasks are taken over by another once their leases expire (``pev worker --ray``).
* :class:`RayUnavailable`: the cluster cannot be joined.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401 - only to say what is missing
except ImportError as exc:  # pragma: no cover - the suite installs every extra
    raise ImportError(
        f"pev.ray needs Ray ({exc}): pip install 'pev-agent[ray]'", name=exc.name
    ) from exc

from pev.ray._cluster import RayUnavailable, connect
from pev.ray._drivers import DriverReport, DriversReport, LostDriver, drivers_on_ray
from pev.ray._executor import RayExecutor

__all__ = [
    "DriverReport",
    "DriversReport",
    "LostDriver",
    "RayExecutor",
    "RayUnavailable",
    "connect",
    "drivers_on_ray",
]
