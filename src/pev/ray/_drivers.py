"""Task drivers as Ray actors over one PostgreSQL ledger (docs/ray.md, "Drivers on Ray").

:func:`drivers_on_ray` is ``pev worker`` spread over a Ray cluster: each driver is a Ray actor
that runs :func:`pev.worker` against the ledger, so it claims runnable tasks and drives them
under the leases of docs/workers.md. The function itself is the drivers' supervisor, in the
calling process: it pins one driver to each live node (Ray's hard node affinity, so that no
node's loss takes every driver), starts one on a node that joins, and stops them all when told
to: by its ``stop`` event, SIGTERM or Ctrl-C, after which each drains as ``pev worker`` does.

What decides who drives a task is the ledger, never Ray:

* a driver whose node dies holds its tasks' leases until they expire; another driver then
  claims them and settles what the dead one left in flight as crash recovery does (an action of
  unknown outcome is never sent again);
* Ray's own recovery is off for drivers (``max_restarts=0``, ``max_task_retries=0``): a
  restarted actor would come back without its ``run`` call, and a retried ``run`` would be a
  second worker in the same process. The supervisor starts a new driver instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import signal
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions as rex
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from pev._signals import stop_on_signals
from pev.engine import WorkerReport, worker
from pev.engine._tenure import new_owner
from pev.engine._tools import PLACEMENT_RESOURCES
from pev.errors import UsageError
from pev.experience import LessonBook
from pev.ray._cluster import RAY_NAMES, connect, holding, live_nodes, no_room
from pev.stores import open_store
from pev.stores._open import _hidden, is_url

__all__ = ["DriverReport", "DriversReport", "LostDriver", "check_ledger", "drivers_on_ray"]

log = logging.getLogger("pev.ray")

_POSTGRES_SCHEMES = ("postgresql", "postgres")
# Ray options the supervisor decides: a lost driver is replaced by it, never restarted by Ray.
_FIXED_OPTIONS = {"max_restarts": 0, "max_task_retries": 0}
# Options that would make several drivers collide (one name) or outlive their supervisor
# (``scheduling_strategy`` is refused on its own: the supervisor pins each driver to its node).
_REFUSED_OPTIONS = ("name", "lifetime", "get_if_exists")
# How often the supervisor looks at the cluster's live nodes: a node that joined gets a driver.
_WATCH_NODES_S = 2.0
# What stops the drivers (they drain) instead of ending the process: `kill`, and Ctrl-C.
# How long a driver that has not started yet (waiting for room on its node) is given to start
# when the drivers stop; one still waiting then is removed: it has claimed nothing.
_START_GRACE_S = 2.0
# A driver lost before it started (no node could run it, its process failed to start) is
# replaced after a pause that doubles each time, from the first to the last of these.
_FIRST_BACKOFF_S = 0.5
_LAST_BACKOFF_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverReport:
    """What one driver on Ray did before it stopped.

    Attributes:
        node_id: The Ray node it ran on (hex).
        worker: Its :class:`~pev.engine.WorkerReport` (its lease owner id, claimed, ended...).
    """

    node_id: str
    worker: WorkerReport


@dataclass(frozen=True, slots=True, kw_only=True)
class LostDriver:
    """A driver that ended without being told to: its node or its process died.

    Its tasks stay leased to it until their leases expire; another driver then takes them over.

    Attributes:
        owner: Its lease owner id (``None``: it was lost before it started).
        node_id: The Ray node it was pinned to (hex).
        error: What Ray said, in one line.
    """

    owner: str | None
    node_id: str
    error: str


@dataclass(slots=True, kw_only=True)
class DriversReport:
    """What the drivers on Ray did, from start to stop.

    Attributes:
        drivers: The reports of the drivers that were running when told to stop.
        lost: The drivers lost on the way (a node or a process died).
        replaced: Drivers started after the first ones: in place of lost ones, and on
            nodes that joined the cluster later.
    """

    drivers: list[DriverReport] = field(default_factory=list)
    lost: list[LostDriver] = field(default_factory=list)
    replaced: int = 0


@dataclass(frozen=True, slots=True)
class _Settings:
    """What each driver is told: the ledger and how to run its worker."""

    db: str
    concurrency: int
    lease_s: float | None
    poll_s: float
    experience: bool
    log_level: int | None
    gc_threshold: tuple[int, int, int] | None


class _Driver:
    """One task driver in a Ray actor: :func:`pev.worker` over the ledger, until ``stop``."""

    def __init__(self, settings: _Settings) -> None:
        self._settings = settings
        self._owner = new_owner()
        self._stop = asyncio.Event()

    async def where(self) -> tuple[str, str]:
        """The Ray node this driver runs on, and its lease owner id."""
        return ray.get_runtime_context().get_node_id(), self._owner

    async def run(self) -> DriverReport:
        """Claim and drive tasks until :meth:`stop`; then drain, and say what was done."""
        settings = self._settings
        if settings.gc_threshold is not None:  # the actor's process is this driver's alone
            gc.set_threshold(*settings.gc_threshold)
        if settings.log_level is not None:
            # Ray sends a worker's stderr to the process that started the cluster's job.
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
            pev_log = logging.getLogger("pev")
            pev_log.addHandler(handler)
            pev_log.setLevel(settings.log_level)
        store = open_store(settings.db)
        try:
            report = await worker(
                store,
                concurrency=settings.concurrency,
                lease_s=settings.lease_s,
                poll_s=settings.poll_s,
                stop=self._stop,
                owner=self._owner,
                experience=LessonBook(store) if settings.experience else None,
            )
        finally:
            await store.close()
        return DriverReport(node_id=ray.get_runtime_context().get_node_id(), worker=report)

    async def stop(self) -> None:
        """Claim nothing more; :meth:`run` drains its tasks and returns."""
        self._stop.set()


_DriverActor = ray.remote(_Driver)


def check_ledger(db: str) -> None:
    """Refuse a ledger that drivers on many hosts could not share: only PostgreSQL will do.

    Raises:
        UsageError: ``db`` is not a ``postgresql://`` URL.
    """
    if is_url(db) and db.split("://", 1)[0].lower() in _POSTGRES_SCHEMES:
        return
    named = f"the URL {_hidden(db)}" if is_url(db) else f"the SQLite file {db!r}"
    raise UsageError(
        f"drivers on Ray need one ledger that every node reaches, a postgresql:// URL, not "
        f"{named}: an SQLite ledger lives on one machine; name a PostgreSQL database, or run "
        "`pev worker` without --ray on the ledger's machine"
    )


async def drivers_on_ray(
    db: str,
    *,
    address: str | None = None,
    drivers: int | None = None,
    concurrency: int = 4,
    lease_s: float | None = None,
    poll_s: float = 1.0,
    actor_options: Mapping[str, Any] | None = None,
    experience: bool = False,
    log_level: int | None = None,
    gc_threshold: tuple[int, int, int] | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
) -> DriversReport:
    """Run task drivers as Ray actors over the PostgreSQL ledger ``db`` until ``stop`` is set.

    Each driver is a Ray actor running :func:`pev.worker` on the ledger: it claims runnable
    tasks and drives them under their leases. This coroutine supervises them: each driver is
    pinned to one live node (by default one on every node that can hold one, a node that joins
    later included); a driver that is lost (its node or process died) is logged (logger
    ``pev.ray``) and, on a node still alive, replaced. Its tasks are taken over by another
    driver once their leases expire, and an action it left in flight is settled as crash
    recovery does, never sent again. Set ``stop``, or send the process SIGTERM or SIGINT, to
    end: every driver claims nothing more, lets its running nodes reach their terminal records
    within their timeouts, and releases its leases; then the report is returned.

    The agents' modules must import on every node that runs a driver (installed there, or on
    the same path as here: Ray puts this process's working directory on its workers' path).

    Args:
        db: The ledger: a ``postgresql://`` URL every node reaches.
        address: The Ray cluster to join unless this process has called ``ray.init``:
            ``"auto"``, ``host:port`` or ``ray://...``; ``None``: Ray's default.
        drivers: How many drivers to keep running, each started on the live node that has the
            fewest; default: one on each live node that can hold one (see ``actor_options``),
            the nodes that join later included.
        concurrency: The most tasks each driver drives at once.
        lease_s: The lease of the tasks the drivers drive; default: each task's policy's.
        poll_s: The longest an idle driver waits before it looks for tasks again.
        actor_options: Ray actor options for the drivers (``.options()``), over the defaults
            ``max_restarts=0`` and ``max_task_retries=0``; say which nodes may run drivers with
            resources, e.g. ``{"resources": {"pev_driver": 1}}``. ``scheduling_strategy`` is
            refused: each driver is pinned to its node.
        experience: Each driver plans with the lessons of the ledger's store and records the
            tasks it ends there (a :class:`~pev.experience.LessonBook`), as ``pev worker`` does.
        log_level: When set, each driver logs pev's messages at that level and above on its
            stderr, which Ray forwards to this process (``ray.init(log_to_driver=True)``).
        gc_threshold: When set, each driver's process runs CPython's garbage collector with
            these thresholds (``gc.set_threshold``), as ``pev worker`` does for its own
            (docs/performance.md); ``None`` leaves them as Python sets them.
        stop: Set it to stop every driver.
        handle_signals: While this runs in the main thread, SIGTERM and SIGINT set ``stop``
            (over Ray's own SIGTERM handler, which would exit at once with status 15, leaving
            the drivers' work in flight and no report); the previous handlers are put back
            after. ``False`` leaves signals to the caller, who must then install its handlers
            after joining Ray (``ray.init`` replaces the SIGTERM handler).

    Returns:
        What the drivers did.

    Raises:
        UsageError: ``db`` is not a PostgreSQL URL; an option (``gc_threshold`` too) is out of
            range; an actor option would let Ray restart or retry a driver, or place it
            otherwise; no live node could hold a driver.
        RayUnavailable: The Ray cluster cannot be joined.
        StoreError: The ledger cannot be used from here.
    """
    check_ledger(db)
    _check_numbers(drivers, concurrency, lease_s, poll_s)
    if gc_threshold is not None and not (
        len(gc_threshold) == 3
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in gc_threshold)
        and gc_threshold[0] >= 1
    ):
        raise UsageError(
            f"gc_threshold must be three whole numbers (G0, G1, G2) with G0 at least 1, "
            f"such as (100_000, 50, 100); got {gc_threshold!r}"
        )
    options = _actor_options(actor_options)
    store = open_store(db)  # fail here, once, rather than in every driver
    try:
        await store.list_tasks(limit=1)
    finally:
        await store.close()
    connect(address)
    placement = _placement(options)
    nodes = live_nodes()
    if holding(nodes, placement) == 0:
        raise UsageError(
            f"no driver can be placed: {no_room(nodes, placement)}; give the drivers' nodes "
            "those resources (`ray start --resources`), or place the drivers otherwise with "
            "actor_options"
        )
    settings = _Settings(db, concurrency, lease_s, poll_s, experience, log_level, gc_threshold)
    supervisor = _Supervisor(settings, options, placement, drivers)
    stop = stop or asyncio.Event()
    # After connect(): ray.init has installed its own SIGTERM handler, which this replaces.
    with _stopped_by_signals(stop, handle=handle_signals):
        return await supervisor.run(stop)


def _check_numbers(
    drivers: int | None, concurrency: int, lease_s: float | None, poll_s: float
) -> None:
    if drivers is not None and drivers < 1:
        raise UsageError(f"drivers must be at least 1, got {drivers}")
    if concurrency < 1:
        raise UsageError(f"concurrency must be at least 1, got {concurrency}")
    if not poll_s > 0 or (lease_s is not None and not lease_s > 0):
        raise UsageError("poll_s and lease_s must be positive numbers of seconds")


def _actor_options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The drivers' actor options: the defaults, with ``given`` over them (checked)."""
    options: dict[str, Any] = dict(_FIXED_OPTIONS)
    for key, value in (given or {}).items():
        if key in _FIXED_OPTIONS and value != _FIXED_OPTIONS[key]:
            raise UsageError(
                f"actor_options: {key}={value!r} is refused; drivers run with {key}=0: a lost "
                "driver is replaced by the supervisor, and its tasks are taken over by another "
                "driver under their leases, never re-run by Ray"
            )
        if key == "scheduling_strategy":
            raise UsageError(
                "actor_options: 'scheduling_strategy' is refused; the supervisor pins each "
                "driver to one live node, so that no node's loss takes every driver; say which "
                'nodes may run drivers with resources, e.g. {"resources": {"pev_driver": 1}}'
            )
        if key in _REFUSED_OPTIONS:
            raise UsageError(
                f"actor_options: {key!r} is refused; the supervisor creates and owns its drivers "
                "(several of them, living as long as it does)"
            )
        options[key] = value
    return options


def _placement(options: Mapping[str, Any]) -> dict[str, float]:
    """What one driver needs of a node to be placed there, by Ray's resource names.

    Ray places an actor only on a node with a CPU, even one that holds none while it runs (its
    default); one that names a custom resource holds that CPU for its lifetime.
    """
    needed = {
        RAY_NAMES.get(key, key): float(options[key])
        for key in PLACEMENT_RESOURCES
        if options.get(key) is not None
    }
    needed.update({key: float(amount) for key, amount in (options.get("resources") or {}).items()})
    needed.setdefault("CPU", 1.0)
    return {key: amount for key, amount in needed.items() if amount > 0}


def _driver_nodes(placement: Mapping[str, float]) -> list[str]:
    """The ids of the live nodes that could hold a driver, in a fixed order."""
    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return sorted(
        node["NodeID"]
        for node in listed
        if node.get("Alive") and holding([node["Resources"]], placement)
    )


@dataclass(eq=False, slots=True)
class _Slot:
    """One driver the supervisor runs: its actor, pinned to ``node_id``, and its calls."""

    handle: Any
    node_id: str
    where: asyncio.Future[Any]
    running: asyncio.Future[Any]
    owner: str | None = None  # known once it has started


class _Supervisor:
    """Keeps drivers running on the live nodes until ``stop``, each pinned to its node.

    ``count=None``: one driver on every live node that can hold one, a node that joins later
    included. ``count=N``: N drivers, each started on the live node that has the fewest. A
    driver whose node is lost is noted; a new one starts on a live node only if the count asks
    for it (never a second one on a node for the default count).
    """

    def __init__(
        self,
        settings: _Settings,
        options: Mapping[str, Any],
        placement: Mapping[str, float],
        count: int | None,
    ) -> None:
        self._settings = settings
        self._options = options
        self._placement = placement
        self._count = count
        self._report = DriversReport()
        self._slots: list[_Slot] = []
        self._started = 0
        self._first = 0  # drivers started by the first placement; the others are "replaced"
        self._not_before: dict[str, float] = {}  # a node whose driver failed to start: backoff
        self._backoff_s = _FIRST_BACKOFF_S
        self._waiting_for_nodes = False

    async def run(self, stop: asyncio.Event) -> DriversReport:
        log.info(
            "starting %s on Ray over %s (concurrency %d each)",
            "one driver per node" if self._count is None else f"{self._count} driver(s)",
            _hidden(self._settings.db),
            self._settings.concurrency,
        )
        try:
            await self._place()
            self._first = self._started
            await self._supervise(stop)
        finally:
            await self._stop_all()
        report = self._report
        report.replaced = self._started - self._first
        log.info(
            "drivers stopped: %d claimed, %d ended, %d drained, %d failed; %d lost, %d replaced",
            sum(driver.worker.claimed for driver in report.drivers),
            sum(driver.worker.ended for driver in report.drivers),
            sum(driver.worker.drained for driver in report.drivers),
            sum(driver.worker.failed for driver in report.drivers),
            len(report.lost),
            report.replaced,
        )
        return report

    async def _place(self) -> None:
        """Start a driver wherever the live nodes lack one (see the class)."""
        nodes = await asyncio.to_thread(_driver_nodes, self._placement)
        now = asyncio.get_running_loop().time()
        held = Counter(slot.node_id for slot in self._slots if slot.node_id in nodes)
        wanted = len(nodes) if self._count is None else self._count
        ready = [node for node in nodes if self._not_before.get(node, -math.inf) <= now]
        while sum(held.values()) < wanted and ready:
            node = min(ready, key=lambda node: (held[node], node))
            if self._count is None and held[node]:
                break  # every node that may start one now has one
            self._slots.append(self._start(node))
            held[node] += 1
        missing = wanted - sum(held.values())
        if missing > 0 and not self._waiting_for_nodes and not nodes:
            log.warning(
                "no live node of the Ray cluster can hold a driver now; %d driver(s) start "
                "when one joins",
                missing,
            )
        self._waiting_for_nodes = not nodes

    def _start(self, node_id: str) -> _Slot:
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        # Ray's types see the actor's methods as plain ones, without .remote().
        actor: Any = _DriverActor.options(**self._options, scheduling_strategy=strategy)
        handle = actor.remote(self._settings)
        where = asyncio.wrap_future(handle.where.remote().future())
        running = asyncio.wrap_future(handle.run.remote().future())
        for call in (where, running):  # what a call raised is read later, or not at all
            call.add_done_callback(_retrieved)
        self._started += 1
        return _Slot(handle, node_id, where, running)

    async def _supervise(self, stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                waiting: set[asyncio.Future[Any]] = {stopping}
                for slot in self._slots:
                    waiting.add(slot.running)
                    if slot.owner is None and not slot.where.done():
                        waiting.add(slot.where)
                await asyncio.wait(
                    waiting, timeout=_WATCH_NODES_S, return_when=asyncio.FIRST_COMPLETED
                )
                if stop.is_set():
                    return
                for slot in list(self._slots):
                    self._note_start(slot)
                    if slot.running.done():
                        self._slots.remove(slot)
                        self._ended(slot)
                await self._place()
        finally:
            stopping.cancel()

    def _note_start(self, slot: _Slot) -> None:
        """Note that a driver started, once it says so."""
        if slot.owner is not None or not slot.where.done() or slot.where.exception():
            return
        _, slot.owner = slot.where.result()
        self._not_before.pop(slot.node_id, None)
        self._backoff_s = _FIRST_BACKOFF_S
        log.info("driver %s started on Ray node %s", slot.owner, slot.node_id)

    def _ended(self, slot: _Slot) -> None:
        """A driver ended without being told to: note it as lost, or raise what it raised."""
        try:
            result = slot.running.result()
        except rex.RayActorError as exc:
            if exc.actor_init_failed:
                raise _driver_failed(slot, exc) from exc
            self._lost(slot, exc)
        except rex.RayTaskError as exc:  # run() itself raised: a fault that no node fixes
            raise _driver_failed(slot, exc) from exc
        except rex.RayError as exc:  # its result lost with its node, its node gone, say
            self._lost(slot, exc)
        else:  # a worker ends only when told to; note what it did
            log.warning("driver %s ended before it was told to stop", slot.owner)
            self._report.drivers.append(result)
        if slot.owner is None:  # it never started: a node that cannot start one, for now
            pause, self._backoff_s = self._backoff_s, min(self._backoff_s * 2, _LAST_BACKOFF_S)
            self._not_before[slot.node_id] = asyncio.get_running_loop().time() + pause

    def _lost(self, slot: _Slot, exc: BaseException, *, stopping: bool = False) -> None:
        lost = LostDriver(owner=slot.owner, node_id=slot.node_id, error=_line(exc))
        self._report.lost.append(lost)
        with contextlib.suppress(Exception):  # an actor that is only unreachable is ended too
            ray.kill(slot.handle, no_restart=True)
        if stopping:
            then = ""
        elif self._count is None:
            then = "; a driver starts on each live node that lacks one"
        else:
            then = "; another starts on the live node that has the fewest"
        log.warning(
            "driver %s on Ray node %s was lost (%s); its tasks go to another driver once their "
            "leases expire, and an action it left in flight is never re-sent%s",
            lost.owner or "(not started)",
            lost.node_id,
            lost.error,
            then,
        )

    async def _stop_all(self) -> None:
        """Tell every driver to stop, and wait for each to drain and report."""
        slots, self._slots = self._slots, []
        told: list[asyncio.Future[Any]] = []
        for slot in slots:
            with contextlib.suppress(Exception):
                told.append(asyncio.wrap_future(slot.handle.stop.remote().future()))
        unstarted = [slot.where for slot in slots if slot.owner is None]
        if unstarted:
            await asyncio.wait(unstarted, timeout=_START_GRACE_S)
        for slot in slots:
            self._note_start(slot)
            if slot.owner is None:  # still waiting for room on its node: it has claimed nothing
                with contextlib.suppress(Exception):
                    ray.kill(slot.handle, no_restart=True)
        ended = await asyncio.gather(*(slot.running for slot in slots), return_exceptions=True)
        # A driver already gone answers its stop with an error: read, so that Ray does not
        # report it as unhandled.
        await asyncio.gather(*told, return_exceptions=True)
        for slot, result in zip(slots, ended, strict=True):
            if isinstance(result, DriverReport):
                self._report.drivers.append(result)
            elif slot.owner is not None and isinstance(result, rex.RayError):
                self._lost(slot, result, stopping=True)  # its node died while it drained
            elif slot.owner is not None and isinstance(result, BaseException):
                log.error("driver %s failed while stopping: %s", slot.owner, _line(result))


@contextlib.contextmanager
def _stopped_by_signals(stop: asyncio.Event, *, handle: bool) -> Iterator[None]:
    """While the drivers run, SIGTERM and SIGINT set ``stop``; what was there is put back after.

    Ray's ``ray.init`` installs its own SIGTERM handler, which exits the process at once
    (status 15): the drivers would be ended with their tasks in flight and no report. With
    ``handle=False`` nothing changes (the caller handles the signals).
    """
    if not handle:
        yield
        return

    def told(signum: signal.Signals) -> None:
        if not stop.is_set():
            log.info("%s: the drivers claim nothing more and drain", signum.name)

    with stop_on_signals(stop, told=told):
        yield


def _retrieved(call: asyncio.Future[Any]) -> None:
    """Mark what ``call`` raised as seen: asyncio logs an exception nobody read."""
    if not call.cancelled():
        call.exception()


def _driver_failed(slot: _Slot, exc: rex.RayError) -> BaseException:
    """What to raise for a driver that failed by itself (not lost with its node)."""
    cause = exc.cause if isinstance(exc, rex.RayTaskError) else None
    if isinstance(cause, Exception):
        return cause
    return RuntimeError(
        f"a driver failed on Ray node {slot.node_id}: {_line(exc)}; pev (and the agents' "
        "modules) must import on every node that runs a driver"
    )


def _line(exc: BaseException) -> str:
    """``Type: the first line of its message``: Ray's messages run to many lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
