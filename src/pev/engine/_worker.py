"""Tasks that outlive the process that started them: ``submit`` writes one, a worker drives it.

``pev.submit`` writes a task, with the import paths of its agent, without running it. A worker
(``pev.worker``, ``pev worker``) claims runnable tasks from the store (new ones, and ones whose
driver's lease expired), drives each as ``pev.resume`` would (an unknown action is never re-sent),
at most ``concurrency`` at a time, and on ``stop`` claims nothing more, lets in-flight nodes reach
their terminal records, and releases its leases. See docs/workers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from pev.engine._agent import (
    Agent,
    ExecutorLike,
    ObserverLike,
    PlannerLike,
    ToolsLike,
    VerifierLike,
)
from pev.engine._api import driver_for, learn_from, new_task_of
from pev.engine._components import agent_paths, has_recorded_tools, rebuild
from pev.engine._tenure import new_owner
from pev.engine._trust import check_chain
from pev.errors import ComponentError, LedgerCorruptError, PevError, UsageError
from pev.experience import LessonBook
from pev.ledger import Lease, Ledger, Store, TaskState, Wakeups, utc_now
from pev.model import JsonValue, VerificationContract
from pev.policy import RecoveryPolicy
from pev.rails import RailLike

__all__ = ["WorkerReport", "submit", "worker"]

log = logging.getLogger("pev.worker")

DEFAULT_LEASE_S = RecoveryPolicy().lease_s

AgentOpener: TypeAlias = Callable[[TaskState], contextlib.AbstractAsyncContextManager[Agent]]
"""Gives a claimed task's agent for the length of its drive (see :func:`worker`)."""


async def submit(
    input: JsonValue,  # noqa: A002 - the documented name for what the task is asked to do
    *,
    store: Store,
    agent: Agent | None = None,
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
            was given with parts of one).
        ContractError: The contract cannot be honoured by this agent.
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
        input, contract=task.contract, policy=task.policy, components=paths, task_id=task_id
    )
    log.info("submitted task %s", state.task_id)
    return state.task_id


def _check_rebuildable(agent: Agent, paths: dict[str, str]) -> None:
    """Refuse a part a worker could not rebuild from the recorded paths."""
    if "agent" in paths:
        return
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
        failed: Claimed tasks whose drive raised, or that were refused (a chain that fails
            verification, components outside ``PEV_TRUSTED_MODULES`` or not rebuildable):
            logged; the task stays in its store, its lease held until it expires, so it is not
            claimed again at once.
    """

    owner: str
    claimed: int = 0
    ended: int = 0
    drained: int = 0
    awaiting_approval: int = 0
    failed: int = 0


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
        owner: The lease owner id; a fresh ``host:pid:nonce`` by default.
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
    shared = _Shared(
        store, agent, tuple(rails), experience, clock, report, lease_s, drain, agent_for
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
                claimed = await shared.claim(room) if room > 0 else ()
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
        "worker %s stopped: %d claimed, %d ended, %d drained, %d awaiting approval, %d failed",
        report.owner,
        report.claimed,
        report.ended,
        report.drained,
        report.awaiting_approval,
        report.failed,
    )
    return report


# How often a worker looks for overdue tasks, at most (a look is one indexed query).
_EXPIRE_EVERY_S = 5.0

# An idle worker of a store that cannot wake it polls, waiting this long at first, then twice
# as long after each look that finds nothing, up to ``poll_s``.
_FIRST_POLL_S = 0.05


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
    expired_at: float = float("-inf")  # loop time of the last look for overdue tasks

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
            log.exception("worker %s: expiring overdue tasks failed", self.report.owner)

    async def claim(self, room: int) -> tuple[Lease, ...]:
        """Take the leases of up to ``room`` runnable tasks; none when the store fails."""
        try:
            return await self.store.claim(
                self.report.owner,
                now=self.clock(),
                lease_s=self.lease_s or DEFAULT_LEASE_S,
                limit=room,
            )
        except PevError:
            log.exception("worker %s: claiming tasks failed", self.report.owner)
            return ()

    async def drive(self, claimed: Lease) -> None:
        """Drive one claimed task as resume would; its failures are logged, never raised."""
        report, task_id = self.report, claimed.task_id
        try:
            state = await self._drive(claimed)
        except (LedgerCorruptError, UsageError) as exc:
            # A broken chain, or components this worker may not or cannot rebuild: the task's
            # own fault, told in one line. Its lease stays taken until it expires, as below.
            report.failed += 1
            log.error(  # noqa: TRY400 - the message is the whole story; no traceback to add
                "task %s refused: %s; it stays in the store, its lease held until it expires",
                task_id,
                exc,
            )
            return
        except Exception:  # any failure: a worker outlives the tasks it cannot drive
            # The lease stays taken until it expires (the driver holds it on an error; a task
            # that failed before its driver took it keeps the claim's), so that no worker
            # claims the task straight back, to fail again in a hot loop.
            report.failed += 1
            log.exception(
                "task %s: driving it failed; it stays in the store, its lease held until it "
                "expires",
                task_id,
            )
            return
        if state.terminal:
            report.ended += 1
            finished = state.finished
            log.info(
                "task %s ended %s/%s; lease released",
                task_id,
                finished.status if finished else "?",
                finished.reason if finished else "?",
            )
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

    async def _drive(self, claimed: Lease) -> TaskState:
        ledger = Ledger(self.store, clock=self.clock)
        await check_chain(ledger, claimed.task_id)
        state = await ledger.state(claimed.task_id)
        if state.terminal:
            return state
        opened = (
            self.agent_for(state)
            if self.agent_for is not None
            else contextlib.nullcontext(self.agent or rebuild(state.created.components, {}))
        )
        async with opened as agent:
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
            final = await driver.steps()
        await learn_from(self.experience, final)
        return final
