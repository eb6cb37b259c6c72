"""Leases: who drives a task, with a fencing epoch, as a value and the rules every store applies.

A lease names the driver of a task (``owner``), a fencing ``epoch`` that grows by one on every
takeover, and when it expires unless renewed. A lease is free once it has expired or been
released (a release sets its expiry to the moment of release). Stores keep one lease per task and
apply the rules below inside their own transactions, so the rules live here once:

* :func:`acquired`: the lease a driver gets, or :class:`~pev.errors.LeaseHeld`;
* :func:`renewed`: a heartbeat's longer lease, or :class:`~pev.errors.LeaseLost`;
* :func:`is_free`: whether a task's lease may be claimed (see ``Store.claim``);
* :func:`check_fence`: an append carrying a lease is refused unless that lease is the task's
  current one (same owner, same epoch), so a driver that was paused past its lease and taken
  over can write nothing more, and, since the pending record is written before a tool is called,
  dispatch nothing more;
* :func:`fenced`: the same check for any append, where an append that creates its task under a
  lease takes that lease with the task, in the same transaction (``pev.run``: no worker can
  claim the new task before its driver holds it).

Nothing here reads a clock: ``now`` is an input (see docs/workers.md on clocks and ``lease_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from pev.errors import LeaseHeld, LeaseLost
from pev.model import TaskId

__all__ = ["Lease", "acquired", "check_fence", "fenced", "is_free", "released", "renewed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """Who drives a task, under which fencing epoch, until when.

    Attributes:
        task_id: The task.
        owner: The driver holding it (``host:pid:space.nonce`` for pev's own drivers).
        epoch: Grows by one on every takeover; every append of this driver carries it.
        expires_at: When the lease is free unless renewed first.
    """

    task_id: TaskId
    owner: str
    epoch: int
    expires_at: datetime

    def live(self, now: datetime) -> bool:
        """Whether the lease still holds at ``now``."""
        return now < self.expires_at


def acquired(
    current: Lease | None, task_id: str, owner: str, *, now: datetime, lease_s: float
) -> Lease:
    """The lease ``owner`` gets on ``task_id``, given the task's ``current`` one.

    A free lease (none yet, expired or released) is taken under the next epoch; a live lease of
    the same owner is renewed under its own epoch.

    Raises:
        LeaseHeld: Another owner holds a live lease.
    """
    until = now + timedelta(seconds=lease_s)
    if current is None:
        return Lease(task_id=TaskId(task_id), owner=owner, epoch=1, expires_at=until)
    if current.live(now):
        if current.owner != owner:
            raise LeaseHeld(task_id, owner=current.owner, expires_at=current.expires_at)
        return replace(current, expires_at=until)
    return Lease(task_id=TaskId(task_id), owner=owner, epoch=current.epoch + 1, expires_at=until)


def is_free(current: Lease | None, now: datetime) -> bool:
    """Whether a task whose lease is ``current`` may be claimed at ``now``.

    Free: no lease yet, or one expired or released (:meth:`Lease.live` is false). A live lease
    is not free, not even to its own owner: a claim takes only tasks nobody drives.
    """
    return current is None or not current.live(now)


def renewed(current: Lease | None, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
    """``lease``, extended to ``now + lease_s``, if it is still the task's current lease.

    A lease that expired but was not taken over (same owner and epoch) is renewed: nobody else
    has written under a newer epoch.

    Raises:
        LeaseLost: The task's lease has another owner or epoch.
    """
    check_fence(current, lease)
    return replace(lease, expires_at=now + timedelta(seconds=lease_s))


def released(current: Lease | None, lease: Lease, *, now: datetime) -> Lease | None:
    """The task's lease after ``lease`` is released: free from ``now``; ``None``: unchanged.

    Releasing a lease that was taken over changes nothing (it is not this driver's to free).
    """
    if current is None or (current.owner, current.epoch) != (lease.owner, lease.epoch):
        return None
    return replace(current, expires_at=min(now, current.expires_at))


def check_fence(current: Lease | None, fence: Lease) -> None:
    """Refuse a write under ``fence`` unless it is the task's current lease.

    Raises:
        LeaseLost: The task's lease has another owner or a newer epoch (or none at all).
    """
    if current is None or (current.owner, current.epoch) != (fence.owner, fence.epoch):
        raise LeaseLost(fence.task_id, owner=fence.owner, epoch=fence.epoch)


def fenced(current: Lease | None, fence: Lease, *, new_task: bool) -> Lease | None:
    """Check the fence of an append; the lease to store with it, if the append takes one.

    An append that creates its task (``new_task``) under a fence takes that lease, epoch 1, as
    the task's first: the task never exists without its driver's lease. Any other append must
    carry the task's current lease (:func:`check_fence`).

    Raises:
        LeaseLost: The fence is not the task's current lease, or a new task's fence is not a
            first lease.
    """
    if not new_task:
        check_fence(current, fence)
        return None
    if current is not None or fence.epoch != 1:
        raise LeaseLost(fence.task_id, owner=fence.owner, epoch=fence.epoch)
    return fence
