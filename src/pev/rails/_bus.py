"""The rail bus: hands freshly written ledger entries to rails, off the engine's critical path.

Rails observe; they never decide. The bus gives every rail its own copy of every event, ignores
what rails return, and logs and counts what they raise, so nothing a rail does can reach the
engine or another rail. Nor can a rail's pace: each rail has a bounded queue and is fed from it,
one event at a time, by a task of its own on the event loop (an async rail) or by a thread of
its own (a sync rail, which so never holds the event loop). :meth:`RailBus.emit` only fills the
queues; a rail that falls behind loses its oldest events (counted), and :meth:`RailBus.drain`
waits a bounded time at the end of a drive for the queues to empty.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from pev.ledger import LedgerEntry, TaskFinished, TaskState
from pev.model._exceptions import describe_exception
from pev.rails._copy import Frame, frame_of, private_copy, written
from pev.rails._event import RailEvent, RailPhase
from pev.rails._lanes import Item, Lane, Queue, RailLike, Slot, Worker, serial_lock

if TYPE_CHECKING:
    import contextvars

__all__ = ["RailBus", "RailLike"]

_LOG = logging.getLogger("pev.rails")

# How long drain waits for the rails' tasks to end once cancelled: long enough for a rail's own
# clean-up, short enough that a rail which ignores cancellation cannot hold the run.
_STOP_GRACE_S = 1.0


class _TimedOut(Exception):  # noqa: N818 - a signal between the bus's parts, never raised out
    """An async rail's call ran past the bus's ``timeout_s``."""


class RailBus:
    """Delivers the loop's phase boundaries to rails; rails observe, they never decide.

    The engine calls :meth:`emit` after every successful append, and :meth:`drain` once at the
    end of a drive. Each rail has its own bounded queue, fed to it one event at a time, in
    ledger order, so that a rail that is slow delays neither the engine nor another rail. An
    async rail is fed by a task of its own on the engine's event loop, and given ``timeout_s``
    per event. A sync rail is fed by a daemon thread of its own, so it never holds the event
    loop, however long it takes (a thread cannot be interrupted: no per-event bound); it runs
    with the context variables of the drive that emitted. When a rail's queue is full, its
    oldest event is dropped and counted in :attr:`dropped`.

    Args:
        rails: Objects with a sync or async ``on_event(event)`` method, or callables taking
            the event.
        timeout_s: How long each call of an async rail may take; a call that runs past it is
            cancelled and counted as a failure.
        queue_size: How many events each rail's queue holds before its oldest are dropped.
        drain_s: How long :meth:`drain` waits, by default, for the rails to catch up.

    Raises:
        TypeError: A rail has no ``on_event`` method and is not callable.
        ValueError: ``timeout_s`` is not a positive number, ``queue_size`` not a positive
            integer, or ``drain_s`` not a number of seconds (zero or more).
    """

    def __init__(
        self,
        rails: Iterable[RailLike],
        *,
        timeout_s: float = 1.0,
        queue_size: int = 1000,
        drain_s: float = 2.0,
    ) -> None:
        if not (_is_seconds(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size must be a positive number of events, got {queue_size!r}")
        if not _is_seconds(drain_s):
            raise ValueError(f"drain_s must be a number of seconds (0 or more), got {drain_s!r}")
        self._slots = tuple(_slot(rail) for rail in rails)
        self._timeout_s = float(timeout_s)
        self._queue_size = queue_size
        self._drain_s = float(drain_s)
        self.failures: Counter[str] = Counter()
        """How many times each rail (by name) raised or timed out."""
        self.dropped: Counter[str] = Counter()
        """How many events each rail (by name) never saw: its queue was full, or the drive ended."""
        self.unfinished: Counter[str] = Counter()
        """How many events each sync rail (by name) was still on when a drain gave up waiting:
        each is left to finish in the rail's thread, in the background."""
        # The async lanes serve one event loop at a time: a bus may serve several asyncio.run
        # calls in turn, and a task or a future belongs to the loop it was made in. The sync
        # rails' workers outlive loops: their threads need none.
        self._lanes: tuple[Lane, ...] = ()
        self._workers = tuple(Worker(slot) for slot in self._slots if not slot.is_async)
        self._queues: tuple[Queue, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = False  # something was emitted since the last drain
        # Guards what the workers' threads change besides their own lanes: the failure count,
        # and what a rail raised that the engine's task raises again.
        self._guard = threading.Lock()
        self._error: BaseException | None = None

    @property
    def rails(self) -> tuple[RailLike, ...]:
        """The rails, in the order they were given."""
        return tuple(slot.rail for slot in self._slots)

    @property
    def timeout_s(self) -> float:
        """How long each call of an async rail may take."""
        return self._timeout_s

    @property
    def queue_size(self) -> int:
        """How many events each rail's queue holds before its oldest are dropped."""
        return self._queue_size

    @property
    def drain_s(self) -> float:
        """How long :meth:`drain` waits, by default, for the rails to catch up."""
        return self._drain_s

    @property
    def failure_count(self) -> int:
        """How many rail calls raised or timed out, all rails together."""
        return self.failures.total()

    @property
    def dropped_count(self) -> int:
        """How many events rails never saw, all rails together."""
        return self.dropped.total()

    async def emit(self, entries: Sequence[LedgerEntry], state: TaskState) -> None:
        """Queue the phase boundaries among ``entries`` for every rail; wait for none of them.

        Args:
            entries: The entries one append just wrote, in sequence order.
            state: The task's state after them.

        Raises:
            BaseException: What a rail raised that is not an :class:`Exception` (a
                ``KeyboardInterrupt``, say), if one did since the last emit; that rail gets no
                more events this drive. A rail's exception is logged and counted, never raised.
        """
        if not self._slots:
            return
        self._raise_error()
        queues: tuple[Queue, ...] = ()
        for entry in written(entries, state):
            try:
                frame = frame_of(entry, state.contract)
            except Exception:  # noqa: BLE001 - a value the codec cannot copy: rails miss it
                _LOG.exception(
                    "rails missed task %s seq %d: its entry could not be copied",
                    entry.entry.task_id,
                    entry.entry.seq,
                )
                with self._guard:
                    for slot in self._slots:
                        self.failures[slot.name] += len(entry.phases)
                continue
            queues = queues or self._queues_here()
            for phase in entry.phases:
                item = (phase, frame)
                for queue in queues:
                    self._put(queue, item)
        for lane in self._lanes if queues else ():
            lane.poke()
        for worker in self._workers if queues else ():
            worker.poke(self._serve)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait, at most ``timeout_s``, for every rail to see what was queued; drop the rest.

        Called once at the end of a drive. What a rail has not been given by then is dropped
        and counted in :attr:`dropped`. An async rail's task is stopped, even when the call is
        cancelled (the event it is on counts as dropped); a sync rail cannot be stopped, so the
        event it is on is left to finish in its thread (counted in :attr:`unfinished`), which
        ends after it and never keeps the process alive. Draining a bus that has nothing
        queued returns at once; the bus can be used again afterwards.

        Args:
            timeout_s: How long to wait; :attr:`drain_s` when not given.

        Raises:
            ValueError: ``timeout_s`` is not a number of seconds (zero or more).
            BaseException: What a rail raised that is not an :class:`Exception`, if one did.
        """
        if timeout_s is not None and not _is_seconds(timeout_s):
            raise ValueError(f"timeout_s must be a number of seconds (0 or more): {timeout_s!r}")
        if not self._active:  # nothing emitted since the last drain (no rails, say): no waiting
            self._raise_error()
            return
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            self._abandon()
        try:
            async with asyncio.timeout(self._drain_s if timeout_s is None else timeout_s):
                for lane in self._lanes:
                    if not lane.idle:
                        if lane.settled is None:
                            lane.settled = loop.create_future()
                        # Shielded: one drain cancelled must not cancel another's wait.
                        await asyncio.shield(lane.settled)
                for worker in self._workers:
                    waiter = worker.waiter(loop)
                    if waiter is not None:
                        await waiter
        except TimeoutError:
            pass  # what is left is dropped below
        finally:
            await self._stop()
        self._raise_error()

    # -- the queues -----------------------------------------------------------------------

    def _queues_here(self) -> tuple[Queue, ...]:
        """The queues of this drive, its async rails' tasks started if it has just begun."""
        loop = asyncio.get_running_loop()
        self._active = True
        if self._loop is loop:
            return self._queues
        self._abandon()
        self._loop = loop
        self._lanes = tuple(Lane(slot) for slot in self._slots if slot.is_async)
        for lane in self._lanes:
            lane.consumer = loop.create_task(self._consume(lane), name=f"pev-rail-{lane.slot.name}")
            lane.consumer.add_done_callback(functools.partial(self._ended, lane))
        for worker in self._workers:
            worker.begin(loop)
        self._queues = (*self._lanes, *self._workers)
        return self._queues

    def _put(self, queue: Queue, item: Item) -> None:
        with queue.lock:
            if len(queue.items) >= self._queue_size:
                self._drop(queue, queue.items.popleft())
                if not queue.warned:
                    queue.warned = True
                    _LOG.warning(
                        "rail %s is falling behind: its queue of %d events is full, so its "
                        "oldest events are dropped (counted in RailBus.dropped)",
                        queue.slot.name,
                        self._queue_size,
                        extra={"pev": {"rail": queue.slot.name, "queue_size": self._queue_size}},
                    )
            queue.items.append(item)

    def _drop(self, queue: Queue, item: Item) -> None:
        """Count an event the rail will not see (its queue's lock held)."""
        self.dropped[queue.slot.name] += 1
        entry = item[1].written.entry
        if isinstance(entry.event, TaskFinished):
            if queue.busy:  # the rail may be reading its views: they go once it is done
                queue.forget.append(entry.task_id)
            else:
                queue.slot.views.pop(entry.task_id, None)

    def _finished(self, queue: Queue, item: Item) -> None:
        """The rail is done with ``item``: its task's views go if the task has ended."""
        with queue.lock:
            queue.busy = False
            entry = item[1].written.entry
            if isinstance(entry.event, TaskFinished):
                queue.slot.views.pop(entry.task_id, None)
            queue.forget_views()

    def _give_up(self, queue: Queue, why: str, *, busy_too: bool) -> None:
        """Drop what the rail has not seen, and count it (its queue's lock held).

        ``busy_too``: the event the rail is on counts as dropped too (its task is stopped).
        """
        left = len(queue.items)
        if busy_too and queue.busy:
            self.dropped[queue.slot.name] += 1
            queue.busy = False
            left += 1
        while queue.items:
            self._drop(queue, queue.items.popleft())
        if left:
            _LOG.warning(
                "rail %s missed %d events: %s (counted in RailBus.dropped)",
                queue.slot.name,
                left,
                why,
                extra={"pev": {"rail": queue.slot.name, "dropped": left}},
            )

    def _carry(self, error: BaseException) -> None:
        """Keep what a rail raised that is not an Exception, for the engine's task to raise."""
        with self._guard:
            if self._error is None:
                self._error = error

    def _raise_error(self) -> None:
        with self._guard:
            error, self._error = self._error, None
        if error is not None:
            raise error

    async def _stop(self) -> None:
        """Drop what the rails have not seen, stop the async rails' tasks, release the threads."""
        lanes, self._lanes, self._queues = self._lanes, (), ()
        self._loop, self._active = None, False
        for worker in self._workers:
            self._release(worker)
        consumers = []
        for lane in lanes:
            with lane.lock:
                self._give_up(lane, "the drive ended before the rail saw them", busy_too=True)
            if lane.consumer is not None and not lane.consumer.done():
                lane.consumer.cancel()
                consumers.append(lane.consumer)
        if consumers:
            _, stuck = await asyncio.wait(consumers, timeout=_STOP_GRACE_S)
            for consumer in stuck:
                _LOG.warning("rail task %s ignored its cancellation", consumer.get_name())

    def _abandon(self) -> None:
        """Forget the async lanes of an event loop that is no longer the running one.

        The sync rails' workers go on: their queues are served by threads, whatever the loop.
        """
        lanes, self._lanes, self._queues, self._loop = self._lanes, (), (), None
        with self._guard:
            self._error = None
        for lane in lanes:
            with lane.lock:
                why = "their event loop ended before the rail saw them"
                self._give_up(lane, why, busy_too=True)
            consumer = lane.consumer
            if consumer is not None and not consumer.done():
                loop = consumer.get_loop()
                if not loop.is_closed():
                    loop.call_soon_threadsafe(consumer.cancel)

    # -- async rails: a task each ---------------------------------------------------------

    async def _consume(self, lane: Lane) -> None:
        """Feed one async rail from its queue, one event at a time, until cancelled."""
        items, slot = lane.items, lane.slot
        loop = asyncio.get_running_loop()
        while True:
            while items:
                item = items.popleft()
                lane.busy = True
                try:
                    await self._call(slot, *item)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # noqa: BLE001 - carried to the engine's task
                    # A KeyboardInterrupt or SystemExit escaping this task would stop the event
                    # loop under the engine; it is raised again from the engine's next emit or
                    # from drain, and this rail hears no more.
                    lane.busy = False
                    if lane in self._lanes:
                        self._carry(exc)
                    return
                self._finished(lane, item)
            lane.settle()
            lane.wake = wake = loop.create_future()
            await wake

    def _ended(self, lane: Lane, consumer: asyncio.Task[None]) -> None:
        lane.settle()  # nobody waits on a rail that is gone
        if not consumer.cancelled():
            error = consumer.exception()  # read, so that asyncio does not report it as unread
            if error is not None and lane in self._lanes:
                self._carry(error)

    async def _call(self, slot: Slot, phase: RailPhase, frame: Frame) -> None:
        scope: asyncio.Timeout | None = None
        try:
            event = private_copy(slot.views, phase, frame)
            result = slot.call(event)
            if inspect.isawaitable(result):
                scope = asyncio.timeout(self._timeout_s)
                async with scope:
                    await result
        except Exception as exc:  # noqa: BLE001 - rails never decide: whatever they raise stops here
            expired = isinstance(exc, TimeoutError) and scope is not None and scope.expired()
            self._failed(slot, phase, frame, exc, timed_out=expired)

    # -- sync rails: a thread each --------------------------------------------------------

    def _serve(self, worker: Worker) -> None:
        """Feed one sync rail from its queue, in the worker's thread, until released."""
        lock, items = worker.lock, worker.items
        while True:
            with lock:
                while not items:
                    worker.settle()
                    if worker.stopping:
                        worker.thread = None
                        return
                    lock.wait()
                item = items.popleft()
                worker.busy = True
                context, loop = worker.context, worker.loop
            try:
                self._call_here(worker.slot, item, context, loop)
            except BaseException as exc:  # noqa: BLE001 - carried to the engine's task
                # What is not an Exception (KeyboardInterrupt, SystemExit) ends the thread, and
                # the rail hears no more this drive; the engine's task raises it again.
                with lock:
                    worker.busy = False
                    worker.dead = True
                    worker.thread = None
                    worker.settle()
                self._carry(exc)
                return
            self._finished(worker, item)

    def _call_here(
        self,
        slot: Slot,
        item: Item,
        context: contextvars.Context | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        """Give a sync rail one event, in the calling thread (the rail's own)."""
        phase, frame = item
        try:
            event = private_copy(slot.views, phase, frame)
            with slot.serial:
                result = slot.call(event) if context is None else context.run(slot.call, event)
            if inspect.isawaitable(result):
                # A callable that looked sync returned a coroutine: it is awaited on the
                # drive's event loop, bounded like an async rail's call.
                self._await_on(loop, result)
        except _TimedOut as exc:
            self._failed(slot, phase, frame, exc, timed_out=True)
        except Exception as exc:  # noqa: BLE001 - rails never decide: whatever they raise stops here
            self._failed(slot, phase, frame, exc, timed_out=False)

    def _await_on(
        self, loop: asyncio.AbstractEventLoop | None, awaitable: Awaitable[object]
    ) -> None:
        """Await ``awaitable`` on ``loop`` from another thread, for ``timeout_s`` at most.

        Raises:
            _TimedOut: It ran past ``timeout_s``.
            RuntimeError: The loop has ended.
        """

        async def bounded() -> None:
            scope = asyncio.timeout(self._timeout_s)
            try:
                async with scope:
                    await awaitable
            except TimeoutError:
                if scope.expired():
                    raise _TimedOut from None
                raise

        coroutine = bounded()
        try:
            if loop is None:
                raise RuntimeError("the drive's event loop is gone")  # noqa: TRY301 - closed below
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError:
            coroutine.close()
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError(
                "the rail returned a coroutine, but the event loop to await it on has ended; "
                "make on_event async, or return nothing"
            ) from None
        try:
            future.result(timeout=self._timeout_s + _STOP_GRACE_S)
        except TimeoutError:
            future.cancel()
            raise _TimedOut from None

    def _release(self, worker: Worker) -> None:
        """End a drive for a sync rail: drop what it was not given, let its thread end."""
        with worker.lock:
            self._give_up(worker, "the drive ended before the rail saw them", busy_too=False)
            busy = worker.busy and not worker.dead
            worker.stopping = True
            worker.dead = False
            worker.warned = False
            worker.context = None
            worker.waiters.clear()
            worker.lock.notify()
        if busy:
            self.unfinished[worker.slot.name] += 1
            _LOG.warning(
                "rail %s was still busy with an event when the drive ended: it is left to "
                "finish in the rail's thread, in the background (counted in RailBus.unfinished)",
                worker.slot.name,
                extra={"pev": {"rail": worker.slot.name, "unfinished": 1}},
            )

    # -- failures -------------------------------------------------------------------------

    def _failed(
        self, slot: Slot, phase: RailPhase, frame: Frame, exc: Exception, *, timed_out: bool
    ) -> None:
        """Count and log what one call of a rail raised (from the rail's task or thread)."""
        entry = frame.written.entry
        with self._guard:
            self.failures[slot.name] += 1
        extra = {"pev": {"rail": slot.name, "phase": str(phase), "task": entry.task_id}}
        if timed_out:
            _LOG.error(
                "rail %s timed out after %g s at phase %s (task %s, seq %d)",
                slot.name,
                self._timeout_s,
                phase,
                entry.task_id,
                entry.seq,
                extra=extra,
            )
            return
        # Logged at ERROR, with the traceback: a rail that raises is a bug in the rail.
        _LOG.error(
            "rail %s raised at phase %s (task %s, seq %d): %s",
            slot.name,
            phase,
            entry.task_id,
            entry.seq,
            describe_exception(exc),
            exc_info=exc,
            extra=extra,
        )


def _is_seconds(value: object) -> bool:
    """A finite, non-negative number of seconds (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _slot(rail: RailLike) -> Slot:
    call = getattr(rail, "on_event", None)
    if call is None:
        if not callable(rail):
            raise TypeError(
                f"{type(rail).__name__} is not a rail: pass an object with a sync or async "
                "on_event(event) method, or a function taking the event"
            )
        call = rail
    is_async = _is_async(call)
    serial = threading.Lock() if is_async else serial_lock(rail)
    return Slot(rail=rail, name=_name_of(rail), call=call, is_async=is_async, serial=serial)


def _is_async(call: Callable[[RailEvent], object]) -> bool:
    """Whether ``call`` is a coroutine function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 - a callable object's own method
    )


def _name_of(rail: object) -> str:
    """A rail's ``name`` attribute, else its function or class name."""
    name = getattr(rail, "name", None)
    if isinstance(name, str) and name:
        return name
    qualname = getattr(rail, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname
    return type(rail).__qualname__
