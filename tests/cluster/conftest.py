"""One real Ray cluster for every Ray test of the session (tests/support/ray_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import ray_cluster


@pytest.fixture(scope="session")
def ray_cluster_session() -> Iterator[Any]:
    """The session's cluster: a head node this test process has joined."""
    yield from ray_cluster.started_cluster()


@pytest.fixture
def cluster(ray_cluster_session: Any) -> Iterator[Any]:
    """The session's cluster; nodes a test adds are removed after it."""
    before = {node.unique_id for node in ray_cluster_session.worker_nodes}
    yield ray_cluster_session
    for node in list(ray_cluster_session.worker_nodes):
        if node.unique_id not in before:
            ray_cluster_session.remove_node(node)
