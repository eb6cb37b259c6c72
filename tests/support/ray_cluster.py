"""A real Ray cluster of several nodes on this machine, for the Ray tests (docs/ray.md).

Ray's own ``ray.cluster_utils.Cluster`` starts a head node and worker nodes as real processes
(a raylet and its workers each), with small memory settings so that a 2-core CI machine holds
them. Tests add nodes with custom resources (``arm0``) and remove them while calls run on them.
Without Ray the Ray tests are skipped with the reason, except under ``CI=true``, where they fail.

Workers import the tools of a test by module name: ``tests.support...`` modules, found through
the ``PYTHONPATH`` this module gives the cluster (the repository's root).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.support.needs import needed

ROOT = Path(__file__).resolve().parents[2]
# Ray's smallest object store; nothing large travels in these tests.
OBJECT_STORE_BYTES = 80 * 1024 * 1024

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # the suite still runs, without its Ray tests
    ray = None  # type: ignore[assignment]
    Cluster = None  # type: ignore[assignment,misc]


@functools.cache
def unavailable() -> str | None:
    """Why the Ray tests cannot run here, or ``None`` when they can."""
    if ray is None:
        return "Ray is not installed: pip install 'pev-agent[ray]'"
    return None


def require() -> None:
    """Skip the calling test without Ray; under CI=true, fail it instead."""
    needed("Ray", unavailable())


def require_module() -> None:
    """At the top of a test module that imports pev.ray: skip it all without Ray (CI: fail)."""
    needed("Ray", unavailable(), whole_module=True)


def node_args(num_cpus: float = 1, resources: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The arguments of a small node: its CPUs and custom resources, a minimal object store."""
    return {
        "num_cpus": num_cpus,
        "resources": dict(resources or {}),
        "object_store_memory": OBJECT_STORE_BYTES,
    }


def started_cluster() -> Iterator[Any]:
    """A head node (2 CPUs, no custom resource) that this process has joined; shut down after.

    Used by the session fixture ``ray_cluster`` (tests/ray/conftest.py): one cluster for all
    the Ray tests, to which each test adds the nodes it needs and removes them after.
    """
    require()
    if ray.is_initialized():  # a Ray an earlier test started (a docs example): not this one
        ray.shutdown()
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), previous]))
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node_args(num_cpus=2), "include_dashboard": False},
    )
    try:
        ray.init(address=cluster.address, logging_level="warning", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
