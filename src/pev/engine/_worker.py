"""Tasks that outlive the process that started them: ``submit`` writes one, a worker drives it.

``pev.submit`` writes a task, with the import paths of its agent, without running it. A worker
(``pev.worker``, ``pev worker``) claims runnable tasks from the store (new ones, and ones whose
driver's lease expired), drives each as ``pev.resume`` would (an unknown action is never re-sent),
at most ``concurrency`` at a time, and on ``stop`` claims nothing more, lets in-flight nodes reach
their terminal records, and releases its leases. See docs/workers.md.

A drive that cannot start (the task's agent does not rebuild, an MCP server will not start) is
a ``start_failed`` event, its lease let go at once, and the task tried again by this worker only
after a pause that doubles each time (:mod:`pev.engine._start_failures`). A task whose lease is
held by a process of this host that no longer exists is freed for a claim at once, instead of
when the lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from pev._logs import log_failure
from pev.engine._agent import (
    Agent,
    ExecutorLike,
    ObserverLike,
    PlannerLike,
    ToolsLike,
    VerifierLike,
)
from pev.engine._api import driver_for, learn_from, new_task_of
from pev.engine._components import agent_paths, has_recorded_tools, rebuild, use_import_roots
from pev.engine._start_failures import Backoff, NotStarted, let_go, record_not_started
from pev.engine._tenure import free_if_owner_gone, new_owner
from pev.engine._trust import check_chain
from pev.engine._typed import In
from pev.errors import (
    ComponentError,
    LeaseError,
    LedgerCorruptError,
    PevError,
    StateError,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from pev.experience import LessonBook
from pev.ledger import (
    TERMINAL_PHASES,
    Lease,
    Ledger,
    Store,
    TaskPhase,
    TaskState,
    Wakeups,
    utc_now,
)
from pev.model import JsonValue, VerificationContract
from pev.policy import RecoveryPolicy
from pev.rails import RailLike

__all__ = ["WorkerReport", "submit", "worker"]

log = logging.getLogger("pev.worker")

DEFAULT_LEASE_S = RecoveryPolicy().lease_s

AgentOpener: TypeAlias = Callable[[TaskState], contextlib.AbstractAsyncContextManager[Agent]]
"""Gives a claimed task's agent for the length of its drive (see :func:`worker`)."""


async def submit(
    input: In | JsonValue,  # noqa: A002 - the documented name for what the task is asked to do
    *,
    store: Store,
    agent: Agent[In, Any] | None = None,
    planner: PlannerLike | None = None,
    verifier: VerifierLike | None = None,
    tools: ToolsLike | None = None,
    executor: ExecutorLike | None = None,
    observer: ObserverLike | None = None,
    contract: VerificationContract | None = None,
    policy: RecoveryPolicy | None = None,
    task_id: str | None = None,
    clock: Callable[[], datetime] | None = None,
) -> str:
    """Write a task for a worker to run, and return its id; nothing runs here.

    The task records the import paths of its agent (see :func:`pev.run`), so a worker in any
    process rebuilds it: the agent, or each of its parts, must be reachable by a module-level
    name.

    Raises:
        ComponentError: A part has no import path a worker could rebuild it from (or an agent
            was given with parts of one, or a typed agent has no module-level name).
        ContractError: The contract cannot be honoured by this agent.
        UsageError: The input does not fit the agent's input type (docs/engine.md, "Typed
            agents"), or cannot be recorded.
    """
    task = new_task_of(
        input,
        agent,
        {
            "planner": planner,
            "verifier": verifier,
            "tools": tools,
            "executor": executor,
            "observer": observer,
        },
        contract=contract,
        policy=policy,
    )
    paths = agent_paths(task.agent)
    _check_rebuildable(task.agent, paths)
    ledger = Ledger(store, clock=clock or utc_now)
    state = await ledger.create(
        task.input, contract=task.contract, policy=task.policy, components=paths, task_id=task_id
    )
    log.info("submitted task %s", state.task_id)
    return state.task_id


def _check_rebuildable(agent: Agent[Any, Any], paths: dict[str, str]) -> None:
    """Refuse a part a worker could not rebuild from the recorded paths."""
    if "agent" in paths:
        return
    if agent.types.typed:
        # Parts recorded one by one would come back as an untyped agent: its planner would get
        # JSON where it expects its input type.
        raise ComponentError(
            "an agent with input_type= or output= is rebuilt by a worker only whole, from its "
            "module-level name; bind it to one (booking = pev.Agent(...) in a module)",
            role="agent",
        )
    given = {
        "planner": agent.planner,
        "verifier": agent.verifier,
        "observer": agent.observer,
        "tools": agent.tools or None,
        "executor": agent.executor,
    }
    for role, part in given.items():
        recorded = has_recorded_tools(paths) if role == "tools" else role in paths
        if part is not None and not recorded:
            raise ComponentError(
                f"the {role} has no import path a worker could rebuild it from (a lambda, a "
                "closure, a configured object or tool without a module-level name); bind the "
                "agent, or that part, to a module-level name",
                role=role,
            )


@dataclass(slots=True, kw_only=True)
class WorkerReport:
    """What a worker did before it stopped.

    Attributes:
        owner: Its lease owner id.
        claimed: Tasks it claimed.
        ended: Claimed tasks that it drove to their end.
        drained: Claimed tasks it stopped driving when told to stop (left for another driver).
        awaiting_approval: Claimed tasks it left awaiting a person's approval (a worker
            claims each again once it is decided).
        not_started: Claimed tasks whose drive could not start (components not rebuildable or
            outside ``PEV_TRUSTED_MODULES``, an MCP server that would not start): each is a
            ``start_failed`` event in the task's ledger, its lease released at once (counted
            once per attempt; the task may end ``failed``/``agent_unavailable``, counted in
            ``ended`` too).
        failed: Claimed tasks whose drive raised once started, or whose chain fails
            verification: logged; the task stays in its store, its lease held until it
            expires, so it is not claimed again at once.
        freed: Leases it freed because their owner was a process of this host that no longer
            exists.
        taken_over: Claimed tasks another driver took over while this one drove them (its
            lease expired meanwhile: a long pause, a store away for longer than the lease);
            the other driver goes on with them.
        unavailable: Claimed tasks whose drive stopped because the store did not answer (its
            lease is held until it expires; then any worker goes on with the task).
    """

    owner: str
    claimed: int = 0
    ended: int = 0
    drained: int = 0
    awaiting_approval: int = 0
    not_started: int = 0
    failed: int = 0
    freed: int = 0
    taken_over: int = 0
    unavailable: int = 0


async def worker(
    store: Store,
    *,
    agent: Agent | None = None,
    concurrency: int = 4,
    lease_s: float | None = None,
    poll_s: float = 1.0,
    stop: asyncio.Event | None = None,
    owner: str | None = None,
    rails: Iterable[RailLike] = (),
    experience: LessonBook | None = None,
    clock: Callable[[], datetime] | None = None,
    agent_for: AgentOpener | None = None,
) -> WorkerReport:
    """Claim runnable tasks from ``store`` and drive them until ``stop`` is set.

    Args:
        store: Where the tasks are (several workers, in several processes, may share it).
        agent: Drives every task it claims; by default each task's agent is rebuilt from the
            import paths it recorded.
        concurrency: The most tasks driven at once.
        lease_s: The lease of the tasks this worker drives; default: each task's policy's.
        poll_s: The longest an idle worker waits before it looks for tasks again (for tasks
            whose driver died); the store wakes it sooner for a new or released task.
        stop: Set it to stop: no more claims; running nodes reach their terminal records
            (within their timeouts), each task is left in its phase, and its lease released.
        owner: The lease owner id; a fresh ``host:pid:space.nonce`` by default.
        rails: Observers of every task driven.
        experience: As in :func:`pev.run`: lessons for planning, and ended tasks recorded.
        clock: Returns the current UTC time; for tests.
        agent_for: ``agent_for(state)``, an async context manager that gives the agent of a
            claimed task and is left when its drive ends: for agents whose tools need a session
            kept open for the task's life (``pev worker`` opens the MCP servers a task
            recorded). Default: ``agent``, else the agent rebuilt from the task's import paths.

    Returns:
        What the worker did.

    Raises:
        ValueError: ``concurrency`` is below 1, or ``poll_s`` or ``lease_s`` is not positive.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if not poll_s > 0 or (lease_s is not None and not lease_s > 0):
        raise ValueError("poll_s and lease_s must be positive numbers of seconds")
    stop = stop or asyncio.Event()
    clock = clock or utc_now
    report = WorkerReport(owner=owner or new_owner())
    drain = asyncio.Event()
    active: dict[str, asyncio.Task[None]] = {}
    backoff = Backoff(first_s=poll_s, most_s=lease_s or DEFAULT_LEASE_S)
    shared = _Shared(
        store, agent, tuple(rails), experience, clock, report, lease_s, drain, agent_for, backoff
    )
    stopping = asyncio.ensure_future(stop.wait())
    try:
        async with _wakeups(store) as woken:
            log.info(
                "worker %s started (concurrency %d, %s)",
                report.owner,
                concurrency,
                "woken by the store" if woken is not None else "polling",
            )
            idle = _Idle(poll_s, woken)
            while not stop.is_set():
                await shared.expire()
                room = concurrency - len(active)
                if room > 0:
                    await shared.free_dead_owners()
                claimed, skipped = await shared.claim(room) if room > 0 else ((), 0)
                for lease in claimed:
                    report.claimed += 1
                    log.info("claimed task %s (lease epoch %d)", lease.task_id, lease.epoch)
                    active[lease.task_id] = asyncio.create_task(
                        shared.drive(lease), name=f"pev-worker-{lease.task_id}"
                    )
                if claimed and len(active) < concurrency:
                    idle.reset()
                    continue  # there may be more waiting
                busy: set[asyncio.Future[Any]] = {stopping, *active.values()}
                if skipped:
                    # Only tasks this worker failed to start came back (their release woke it):
                    # wait for the first of them to be due, not for the store's wake-ups.
                    await idle.pause(busy, backoff.next_due_s())
                else:
                    await idle.wait(busy, looking=room > len(claimed))
                for task_id, task in list(active.items()):
                    if task.done():
                        del active[task_id]
    finally:
        stopping.cancel()
        drain.set()
        if active:
            log.info("worker %s stopping: draining %d task(s)", report.owner, len(active))
            await asyncio.gather(*active.values(), return_exceptions=True)
    log.info(
        "worker %s stopped: %d claimed, %d ended, %d drained, %d awaiting approval, "
        "%d failed, %d not started, %d leases of dead local owners freed, %d taken over by "
        "another driver, %d stopped by a store that did not answer",
        report.owner,
        report.claimed,
        report.ended,
        report.drained,
        report.awaiting_approval,
        report.failed,
        report.not_started,
        report.freed,
        report.taken_over,
        report.unavailable,
    )
    return report


# How often a worker looks for overdue tasks, at most (a look is one indexed query).
_EXPIRE_EVERY_S = 5.0

# How many tasks not ended a worker looks at, newest first, for leases of dead local owners.
_DEAD_OWNER_SCAN = 200

# How many tasks backing off (their drive could not start lately) a claim takes beyond its room,
# to let them go at once: past them, the claim reaches the tasks it may drive.
_BACKING_OFF_CLAIMED = 200

# The phases of tasks a driver may hold (one awaiting approval holds no lease).
_DRIVEN = frozenset(TaskPhase) - TERMINAL_PHASES - {TaskPhase.AWAITING_APPROVAL}

# An idle worker of a store that cannot wake it polls, waiting this long at first, then twice
# as long after each look that finds nothing, up to ``poll_s``.
_FIRST_POLL_S = 0.05


def _end(state: TaskState) -> str:
    """``status/reason`` of an ended task, for the log."""
    finished = state.finished
    return f"{finished.status}/{finished.reason}" if finished is not None else "?/?"


def _wakeups(store: Store) -> contextlib.AbstractAsyncContextManager[asyncio.Event | None]:
    """The store's wake-up event while a worker runs, or ``None`` for a store to poll."""
    if isinstance(store, Wakeups):
        return store.wakeups()
    return contextlib.nullcontext(None)


class _Idle:
    """How an idle worker waits before it looks for tasks again.

    Woken by the store (every pev store has wake-ups), it waits up to ``poll_s`` (the longest a
    task whose lease expired waits for a look); polling a store without them, it waits
    ``_FIRST_POLL_S`` at first and twice as long after each look that finds nothing, up to
    ``poll_s``.
    """

    def __init__(self, poll_s: float, woken: asyncio.Event | None) -> None:
        self._poll_s = poll_s
        self._woken = woken
        self._first = min(_FIRST_POLL_S, poll_s)
        self._next = self._first

    def reset(self) -> None:
        """A look found tasks: poll soon again."""
        self._next = self._first

    async def pause(self, waiting: set[asyncio.Future[Any]], seconds: float) -> None:
        """Until one of ``waiting`` is done or ``seconds`` (at most ``poll_s``) pass, unwoken."""
        timeout = min(max(seconds, self._first), self._poll_s)
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self._woken is not None:
            self._woken.clear()

    async def wait(self, waiting: set[asyncio.Future[Any]], *, looking: bool) -> None:
        """Until one of ``waiting`` is done, or (when ``looking`` for tasks) it is time to look.

        Not looking (every slot busy), it waits for a drive to end or ``poll_s``.
        """
        woken, timeout = self._woken, self._poll_s
        wake: asyncio.Task[bool] | None = None
        if looking and woken is not None:
            wake = asyncio.create_task(woken.wait())
            waiting = {*waiting, wake}
        elif looking:
            timeout, self._next = self._next, min(self._next * 2, self._poll_s)
        try:
            await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if wake is not None:
                wake.cancel()
        if woken is not None:
            woken.clear()  # before the next look: a signal during it sets it again


@dataclass(slots=True)
class _Shared:
    """What every task a worker drives shares: the store, the agent, rails, time, the drain."""

    store: Store
    agent: Agent | None
    rails: tuple[RailLike, ...]
    experience: LessonBook | None
    clock: Callable[[], datetime]
    report: WorkerReport
    lease_s: float | None
    drain: asyncio.Event
    agent_for: AgentOpener | None
    backoff: Backoff
    expired_at: float = float("-inf")  # loop time of the last look for overdue tasks
    scanned_at: float = float("-inf")  # loop time of the last look for dead local owners

    async def expire(self) -> None:
        """End overdue tasks (replans, approvals nobody waits for), every few seconds at most.

        Nobody drives a task awaiting approval, so the workers of its store end it once its
        deadline passes; a store failure is logged, and tried again at a later look.
        """
        now = asyncio.get_running_loop().time()
        if now - self.expired_at < _EXPIRE_EVERY_S:
            return
        self.expired_at = now
        try:
            await Ledger(self.store, clock=self.clock).expire_overdue()
        except PevError:
            log_failure(log, "worker %s: expiring overdue tasks failed", self.report.owner)

    async def free_dead_owners(self) -> None:
        """Free the leases held by processes of this host that are gone, every lease_s/3 at most.

        It looks at the newest tasks not ended (a bounded number) and frees each live lease
        whose owner was a process of this host that no longer exists; the next claim takes the
        task. A store failure is logged, and tried again at a later look.
        """
        now = asyncio.get_running_loop().time()
        if now - self.scanned_at < (self.lease_s or DEFAULT_LEASE_S) / 3:
            return
        self.scanned_at = now
        ledger = Ledger(self.store, clock=self.clock)
        try:
            tasks = await self.store.list_tasks(phases=_DRIVEN, limit=_DEAD_OWNER_SCAN)
            for summary in tasks:
                lease = await self.store.lease(summary.task_id)
                if await free_if_owner_gone(ledger, lease, now=self.clock()):
                    self.report.freed += 1
        except PevError:
            log_failure(
                log, "worker %s: looking for leases of dead owners failed", self.report.owner
            )

    async def claim(self, room: int) -> tuple[tuple[Lease, ...], int]:
        """Take the leases of up to ``room`` runnable tasks; none when the store fails.

        Tasks whose drive this worker could not start lately are claimed too (a claim takes
        the oldest first, so they would stand in the way of the others) and let go at once.
        Returns the leases to drive, and how many such tasks came back.
        """
        waiting = self.backoff.waiting()
        try:
            leases = await self.store.claim(
                self.report.owner,
                now=self.clock(),
                lease_s=self.lease_s or DEFAULT_LEASE_S,
                limit=room + min(len(waiting), _BACKING_OFF_CLAIMED),
            )
        except PevError:
            log_failure(log, "worker %s: claiming tasks failed", self.report.owner)
            return (), 0
        kept: list[Lease] = []
        put_back: list[Lease] = []
        for lease in leases:
            (put_back if lease.task_id in waiting or len(kept) >= room else kept).append(lease)
        ledger = Ledger(self.store, clock=self.clock)
        for lease in put_back:
            await let_go(ledger, lease)
        return tuple(kept), sum(lease.task_id in waiting for lease in put_back)

    async def drive(self, claimed: Lease) -> None:
        """Drive one claimed task as resume would; its failures are logged, never raised."""
        report, task_id = self.report, claimed.task_id
        try:
            state = await self._drive(claimed)
        except NotStarted as not_started:
            report.not_started += 1
            if not_started.state.terminal:  # ended agent_unavailable: learnt from like any end
                report.ended += 1
                await learn_from(self.experience, not_started.state)
            return
        except LeaseError as exc:
            # Another driver holds the task now: it goes on with it. Not this task's fault.
            report.taken_over += 1
            log.warning("task %s: another driver took it over (%s); it goes on there", task_id, exc)
            return
        except StoreUnavailable as exc:
            report.unavailable += 1
            log.warning(
                "task %s: the store did not answer (%s); its lease is held until it expires, "
                "then any worker goes on with it",
                task_id,
                exc,
            )
            return
        except StateError:
            # Another writer ended the task under this drive (an expiry, say): it is over.
            ended = await self._ended_meanwhile(task_id)
            if ended is None:
                self._failed(task_id)
                return
            report.ended += 1
            await learn_from(self.experience, ended)  # recording an end twice changes nothing
            log.info("task %s was ended by another writer meanwhile: %s", task_id, _end(ended))
            return
        except (LedgerCorruptError, UsageError) as exc:
            # A broken chain, or a misuse the drive ran into: the task's own fault, told in
            # one line. Its lease stays taken until it expires, as below.
            report.failed += 1
            log.error(  # noqa: TRY400 - the message is the whole story; no traceback to add
                "task %s refused: %s; it stays in the store, its lease held until it expires",
                task_id,
                exc,
            )
            return
        except Exception:  # noqa: BLE001 - any failure: a worker outlives the tasks it cannot drive
            self._failed(task_id)
            return
        if state.terminal:
            report.ended += 1
            log.info("task %s ended %s; lease released", task_id, _end(state))
        elif state.awaiting is not None:
            report.awaiting_approval += 1
            log.info(
                "task %s awaits approval of revision %d; lease released (a worker goes on once "
                "it is approved or rejected)",
                task_id,
                state.awaiting.revision,
            )
        else:
            report.drained += 1
            log.info("task %s left %s for another driver; lease released", task_id, state.phase)

    def _failed(self, task_id: str) -> None:
        """Count and log (with its traceback) the failure being handled of a task's drive.

        The lease stays taken until it expires (the driver holds it on an error; a task that
        failed before its driver took it keeps the claim's), so that no worker claims the task
        straight back, to fail again in a hot loop.
        """
        self.report.failed += 1
        log.exception(
            "task %s: driving it failed; it stays in the store, its lease held until it expires",
            task_id,
        )

    async def _ended_meanwhile(self, task_id: str) -> TaskState | None:
        """The task's state if it has ended (another writer ended it), else ``None``."""
        try:
            state = await Ledger(self.store, clock=self.clock).state(task_id)
        except PevError:
            return None
        return state if state.terminal else None

    async def _drive(self, claimed: Lease) -> TaskState:
        ledger = Ledger(self.store, clock=self.clock)
        await check_chain(ledger, claimed.task_id)
        state = await ledger.state(claimed.task_id)
        if state.terminal:
            return state
        async with contextlib.AsyncExitStack() as stack:
            try:
                agent = await stack.enter_async_context(self._agent_of(state))
                driver = await driver_for(
                    ledger,
                    state,
                    agent,
                    rails=self.rails,
                    clock=self.clock,
                    experience=self.experience,
                    owner=self.report.owner,
                    lease_s=self.lease_s,
                    lease=claimed,
                    drain=self.drain,
                    hold_on_error=True,
                    waits=False,
                )
            except (StoreError, LeaseError):
                raise  # the store's trouble, not the task's: handled as any failed drive
            except Exception as exc:
                state = await record_not_started(ledger, state, claimed, exc, backoff=self.backoff)
                raise NotStarted(state) from exc
            final = await driver.steps()
        await learn_from(self.experience, final)
        return final

    def _agent_of(self, state: TaskState) -> contextlib.AbstractAsyncContextManager[Agent]:
        """The claimed task's agent, for its drive: the worker's, opened, or rebuilt."""
        if self.agent is not None and self.agent_for is None:
            return contextlib.nullcontext(self.agent)
        use_import_roots(state.created.components)
        if self.agent_for is not None:
            return self.agent_for(state)
        return contextlib.nullcontext(rebuild(state.created.components, {}))
