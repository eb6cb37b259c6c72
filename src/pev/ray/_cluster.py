"""Joining a Ray cluster, and whether any of its nodes could ever run a call.

pev follows Ray's conventions: a process that already called ``ray.init`` is used as it is;
otherwise pev calls ``ray.init(address=...)`` on first use, where ``None`` means Ray's own
default (``RAY_ADDRESS``, else a cluster started on this machine with ``ray start``, else a new
local one) and ``"auto"`` means a running cluster on this machine, as in ``ray.init``.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Mapping
from typing import Any

import ray

from pev.engine._tools import PLACEMENT_RESOURCES
from pev.errors import PevError

__all__ = [
    "RAY_NAMES",
    "NodeView",
    "RayUnavailable",
    "connect",
    "holding",
    "live_nodes",
    "no_room",
    "ray_options",
]


class RayUnavailable(PevError):  # noqa: N818 - the documented public name
    """The Ray cluster cannot be joined.

    Attributes:
        address: The address tried (``None``: Ray's default).
    """

    def __init__(self, message: str, *, address: str | None) -> None:
        super().__init__(message)
        self.address = address


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at ``address``, unless this process already has.

    Raises:
        RayUnavailable: No cluster answers there; the message says how to start one.
    """
    if ray.is_initialized():
        return
    try:
        _reachable(address)
        # Ray's own state is process-wide: a second caller that raced this one finds it joined.
        ray.init(address=address, ignore_reinit_error=True)
    except (OSError, RuntimeError, ValueError) as exc:  # ConnectionError is an OSError
        where = "Ray's default address" if address is None else repr(address)
        raise RayUnavailable(
            f"cannot join the Ray cluster at {where} ({' '.join(str(exc).split())[:300]}); "
            "start one with `ray start --head`, or give the address of a running one",
            address=address,
        ) from exc


_REACH_TIMEOUT_S = 5.0


def _reachable(address: str | None) -> None:
    """Fail fast when ``host:port`` does not answer: ``ray.init`` would retry for minutes.

    Raises:
        OSError: Nothing accepts a connection there.
    """
    if address is None or address == "auto" or "://" in address:
        return  # Ray's own lookups, which fail at once
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not a Ray address (host:port, 'auto' or ray://...)")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=_REACH_TIMEOUT_S):
        pass


def ray_options(placement: Mapping[str, float]) -> dict[str, object]:
    """Ray's ``.options()`` for a call with ``placement``: never retried, placed by resources.

    ``max_retries=0`` and ``retry_exceptions=False``: a call Ray re-ran after a lost worker
    would send an action twice; pev records it as unknown instead (docs/ray.md).
    """
    options: dict[str, object] = {"max_retries": 0, "retry_exceptions": False}
    custom = {}
    for key, amount in placement.items():
        if key in PLACEMENT_RESOURCES:
            options[key] = int(amount) if key == "memory" else amount
        else:
            custom[key] = amount
    if custom:
        options["resources"] = custom
    return options


RAY_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU"}
"""A placement key → Ray's name for the resource (the others are the same in both)."""


def live_nodes() -> list[dict[str, float]]:
    """The resources of each live node of the cluster (Ray's names: ``CPU``, ``GPU``, ...)."""
    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [node["Resources"] for node in listed if node.get("Alive")]


def holding(nodes: list[dict[str, float]], needed: Mapping[str, float]) -> int:
    """How many of ``nodes`` could hold ``needed`` (Ray's resource names) at once."""
    return sum(all(node.get(key, 0) >= amount for key, amount in needed.items()) for node in nodes)


def no_room(nodes: list[dict[str, float]], needed: Mapping[str, float]) -> str:
    """``no live node of the Ray cluster has arm9=1 (its 2 live node(s) offer CPU, ...)``."""
    wanted = ", ".join(f"{key}={amount:g}" for key, amount in needed.items())
    held = sorted({key for node in nodes for key in node if not key.startswith("node:")})
    return (
        f"no live node of the Ray cluster has {wanted} (its {len(nodes)} live node(s) offer "
        f"{', '.join(held) or 'nothing'})"
    )


class NodeView:
    """A look at the cluster's live nodes, taken again when older than ``kept_s``.

    Asked for every call, so that a call no live node could ever hold (it would wait in Ray's
    queue for ever) is refused before it is sent; one Ray call a few seconds, not one a call.
    """

    __slots__ = ("_kept_s", "_nodes", "_seen_at")

    def __init__(self, kept_s: float = 5.0) -> None:
        self._kept_s = kept_s
        self._seen_at = -math.inf
        self._nodes: list[dict[str, float]] = []

    def unplaceable(self, placement: Mapping[str, float]) -> str | None:
        """Why no live node could ever run a call with ``placement``, or ``None``.

        Only the nodes alive now count (an autoscaler's future nodes do not). A look that finds
        a node is trusted a while; one that finds none is taken again before it is believed.
        """
        if not placement:
            return None
        needed = {RAY_NAMES.get(key, key): amount for key, amount in placement.items()}
        for fresh in (False, True):
            if fresh or time.monotonic() - self._seen_at > self._kept_s:
                self._nodes = live_nodes()
                self._seen_at = time.monotonic()
            if holding(self._nodes, needed):
                return None
        return no_room(self._nodes, placement)
