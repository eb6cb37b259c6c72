"""A driver's tenure: the task's lease taken, renewed by heartbeat, and released (docs/workers.md).

Every drive holds its task's lease (:mod:`pev.ledger._lease`) for as long as it runs: it takes it
before its first write, renews it every third of ``lease_s``, and releases it when the drive
ends. Each of its writes carries the lease as a fence, so once another driver has taken the task
over (the lease expired while this one was paused or cut off), the store refuses this driver's
next write, and since the pending record of a node is written before its tool is called, it
dispatches nothing more. A heartbeat that finds the lease taken over tells the driver at once.

A lease whose owner is a process of this host that no longer exists is freed at once
(:func:`free_if_owner_gone`): owner ids are ``host:pid:space.nonce``, where ``space`` names the
process table the pid belongs to (the boot and the pid namespace), and that table says whether
the process is gone. An owner of another host, another pid namespace (a container sharing the
host name) or another boot is never judged from here (docs/workers.md).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from pev._logs import log_failure
from pev.errors import LeaseLost, PevError
from pev.ledger import DriverStarted, Lease, Ledger, utc_now

__all__ = [
    "Heartbeat",
    "Tenure",
    "cancel_requested",
    "driver_started",
    "free_if_owner_gone",
    "new_owner",
    "owner_gone",
]

log = logging.getLogger("pev.engine")


def cancel_requested() -> bool:
    """Whether the running task was asked to cancel, even if the cancel never reached it.

    On Python 3.11 ``asyncio.wait_for`` loses a cancel that lands as the awaited thing completes
    (CPython gh-86296, fixed in 3.12), and psycopg_pool waits for a pooled connection that way.
    A helper that runs until cancelled checks this as well, or a lost cancel leaves it running
    for ever, and the drive that waits for it with it.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def new_owner() -> str:
    """A fresh lease owner id for this process: ``host:pid:space.nonce``."""
    return f"{socket.gethostname()}:{os.getpid()}:{process_space()}.{uuid.uuid4().hex[:8]}"


@functools.cache
def process_space() -> str:
    """Which process table this process's pid is a number in, as 6 hex digits.

    A digest of the boot id and the inode of the pid namespace (Linux): two containers that
    share a host name have different ones, and so does the same host after a reboot. Where
    neither can be read, a digest of nothing: the host name alone tells processes apart.
    """
    parts: list[str] = []
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip())
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except (OSError, ValueError):
        pass  # not Linux, or /proc not mounted
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:6]


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:space.nonce``) names a gone process of this process table.

    False whenever that cannot be known for sure: another host or process table (its process
    ids say nothing here), an id of another form, this very process, or a process that exists
    but belongs to another user.
    """
    host, _, rest = owner.rpartition(":")  # space.nonce
    host, _, pid_text = host.rpartition(":")
    space, dot, nonce = rest.partition(".")
    if not host or host != socket.gethostname() or not pid_text.isdecimal():
        return False
    if not (dot and nonce) or space != process_space():
        return False  # another pid namespace or boot, or an id of another form
    pid = int(pid_text)
    if pid <= 0 or pid == os.getpid():
        return False  # 0 and negatives would name process groups, never one process
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False  # it exists (another user's), or the id is no process id at all
    return False


def driver_started(lease: Lease) -> DriverStarted:
    """The ``driver_started`` event of this process driving under ``lease``."""
    return DriverStarted(
        owner=lease.owner, epoch=lease.epoch, host=socket.gethostname(), process=os.getpid()
    )


async def free_if_owner_gone(ledger: Ledger, lease: Lease | None, *, now: datetime) -> bool:
    """Free ``lease`` if it is live and its owner is a process of this host that is gone.

    The release names the dead owner's own lease, so it changes nothing if another driver has
    taken the task meanwhile. Returns whether it freed it.
    """
    if lease is None or not lease.live(now) or not owner_gone(lease.owner):
        return False
    await ledger.release(lease)
    log.warning(
        "pev: task %s: its lease owner %s was a process of this host that no longer exists; "
        "its lease (epoch %d) is freed now instead of at %s",
        lease.task_id,
        lease.owner,
        lease.epoch,
        lease.expires_at.isoformat(timespec="seconds"),
    )
    return True


class Tenure:
    """One driver's hold on one task's lease.

    Args:
        ledger: The ledger the task lives in (its clock stamps lease times).
        task_id: The task.
        owner: Who drives (see :func:`new_owner`).
        lease_s: How long a lease lasts unless renewed; it is renewed every third of that.
        lease: A lease ``owner`` already holds (taken with the task when ``run`` created it,
            or by a worker's claim); if it runs out sooner than ``lease_s``, the first renewal
            comes a third of the way to its expiry.
        clock: Returns the current UTC time (the ledger's); for a lease already held.
    """

    def __init__(
        self,
        ledger: Ledger,
        task_id: str,
        *,
        owner: str,
        lease_s: float,
        lease: Lease | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if lease is not None and (lease.task_id, lease.owner) != (task_id, owner):
            raise ValueError(f"task {task_id}: the lease given is {owner}'s of another task")
        self._ledger = ledger
        self._task_id = task_id
        self.owner = owner
        self._lease_s = lease_s
        self._lease = lease
        self._clock = clock
        self.lost = False

    @property
    def task_id(self) -> str:
        """The task whose lease this is."""
        return self._task_id

    @property
    def lease(self) -> Lease:
        """The lease held now (the fence of every write)."""
        if self._lease is None:
            raise RuntimeError(f"task {self._task_id}: no lease has been taken yet")
        return self._lease

    async def take(self) -> DriverStarted:
        """Take the lease, unless held already; the ``driver_started`` event to write first.

        Raises:
            LeaseHeld: Another live driver holds it.
            UnknownTaskError: No such task.
        """
        if self._lease is None:
            self._lease = await self._ledger.acquire(
                self._task_id, self.owner, lease_s=self._lease_s
            )
        return driver_started(self._lease)

    def heartbeat(self, on_lost: Callable[[], object]) -> Heartbeat:
        """While the block it opens runs, renew the lease every third of ``lease_s``.

        The first renewal waits on a timer of the event loop (:meth:`first_beat_s`); the
        renewals run as a task from then on (:meth:`beat`). A drive that ends before its first
        renewal is due (most do, at a default lease of 30 s) never starts one: it costs one
        timer, no task to cancel and wait for.
        """
        return Heartbeat(self, on_lost)

    def first_beat_s(self) -> float:
        """When the first renewal is due: after a third of ``lease_s``.

        After a third of what is left of a lease held since before the drive, if it runs out
        sooner.
        """
        wait = self._lease_s / 3
        if self._lease is not None:
            left = (self._lease.expires_at - self._clock()).total_seconds()
            wait = max(0.0, min(wait, left / 3))
        return wait

    async def beat(self, on_lost: Callable[[], object]) -> None:
        """Renew the lease now, then every third of ``lease_s`` until cancelled.

        Started by :meth:`heartbeat` when the first renewal is due. ``on_lost`` is called if
        the lease was taken over. A store that fails to answer is logged and tried again at the
        next beat: the lease is lost only when another driver has taken it (then this driver's
        writes are refused too).
        """
        while not cancel_requested():
            try:
                self._lease = await self._ledger.renew(self.lease, lease_s=self._lease_s)
            except LeaseLost:
                self.taken_over(on_lost)
                return
            except PevError:
                log_failure(log, "pev: task %s: renewing the lease failed", self._task_id)
            await asyncio.sleep(self._lease_s / 3)

    def taken_over(self, on_lost: Callable[[], object]) -> None:
        """Note that another driver took the task over and call ``on_lost``, once."""
        if self.lost:
            return
        self.lost = True
        log.warning("pev: task %s: %s lost its lease", self._task_id, self.owner)
        on_lost()

    async def release(self) -> None:
        """Free the lease now, unless it was lost; a store failure here is logged."""
        if self._lease is None or self.lost:
            return
        try:
            await self._ledger.release(self._lease)
        except PevError:
            log_failure(
                log,
                "pev: task %s: releasing the lease failed",
                self._task_id,
                then="it expires by itself",
            )

    def lost_error(self) -> LeaseLost:
        """The error a drive that lost its lease ends with."""
        lease = self.lease
        return LeaseLost(self._task_id, owner=lease.owner, epoch=lease.epoch)


class Heartbeat:
    """The heartbeat of a :class:`Tenure` while its block runs (see :meth:`Tenure.heartbeat`).

    One small object for the whole drive, since a process may drive many thousands at once.
    """

    __slots__ = ("_beating", "_on_lost", "_tenure", "_timer")

    def __init__(self, tenure: Tenure, on_lost: Callable[[], object]) -> None:
        self._tenure = tenure
        self._on_lost = on_lost
        self._timer: asyncio.TimerHandle | None = None
        self._beating: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(
            self._tenure.first_beat_s(), self._begin
        )

    async def __aexit__(self, *exc_info: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        beating = self._beating
        if beating is not None:
            beating.cancel()
            await asyncio.wait((beating,))

    def _begin(self) -> None:
        """The first renewal is due: beat from now on, in a task."""
        tenure = self._tenure
        self._beating = asyncio.get_running_loop().create_task(
            tenure.beat(self._on_lost), name=f"pev-lease-{tenure.task_id}"
        )
