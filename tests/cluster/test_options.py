"""What pev asks of Ray for each call: never retried, placed by the tool's resources."""

from __future__ import annotations

from tests.support import ray_cluster

ray_cluster.require_module()

from pev.ray._cluster import ray_options  # noqa: E402 - after the check that Ray is here


def test_every_call_is_never_retried_by_ray() -> None:
    """No placement: Ray's defaults, but no retries of any kind."""
    assert ray_options({}) == {"max_retries": 0, "retry_exceptions": False}


def test_cpus_gpus_memory_and_custom_resources_become_rays_options() -> None:
    """CPUs, GPUs and memory are Ray's own options; everything else is a custom resource."""
    options = ray_options({"num_cpus": 0.5, "num_gpus": 1, "memory": 2e9, "arm0": 1})
    assert options == {
        "max_retries": 0,
        "retry_exceptions": False,
        "num_cpus": 0.5,
        "num_gpus": 1,
        "memory": 2_000_000_000,
        "resources": {"arm0": 1},
    }
