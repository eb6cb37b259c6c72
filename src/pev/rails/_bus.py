"""The rail bus: hands freshly written ledger entries to rails, off the engine's critical path.

Rails observe; they never decide. The bus gives every rail its own copy of every event, ignores
what rails return, and logs and counts what they raise, so nothing a rail does can reach the
engine or another rail. Nor can a rail's pace: each rail has a bounded queue and a task of its
own that feeds it, one event at a time. :meth:`RailBus.emit` only fills the queues; a rail that
falls behind loses its oldest events (counted), and :meth:`RailBus.drain` waits a bounded time at
the end of a drive for the queues to empty.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from pev.ledger import LedgerEntry, TaskFinished, TaskState
from pev.model._exceptions import describe_exception
from pev.rails._copy import Frame, View, frame_of, private_copy, written
from pev.rails._event import Rail, RailEvent, RailPhase

__all__ = ["RailBus", "RailLike"]

_LOG = logging.getLogger("pev.rails")

RailLike: TypeAlias = Rail | Callable[[RailEvent], object]
"""A rail object (sync or async ``on_event``), or any callable taking a :class:`RailEvent`."""

_Item: TypeAlias = tuple[RailPhase, Frame]

# How long drain waits for the rails' tasks to end once cancelled: long enough for a rail's own
# clean-up, short enough that a rail which ignores cancellation cannot hold the run.
_STOP_GRACE_S = 1.0


@dataclass(slots=True)
class _Slot:
    """A rail as the bus calls it, and its copies of the plans and contracts of its tasks."""

    rail: RailLike
    name: str
    call: Callable[[RailEvent], object]
    views: dict[str, View] = field(default_factory=dict)


class _Lane:
    """One rail's queue in one event loop, and the task that feeds the rail from it.

    Plain futures rather than ``asyncio.Event``: waking the consumer is the one cost per emit.
    """

    __slots__ = ("busy", "consumer", "items", "settled", "slot", "wake", "warned")

    def __init__(self, slot: _Slot) -> None:
        self.slot = slot
        self.items: deque[_Item] = deque()
        # What the consumer waits on once its queue is empty; None while it has work.
        self.wake: asyncio.Future[None] | None = None
        # What drain waits on until the consumer has emptied its queue (or ended).
        self.settled: asyncio.Future[None] | None = None
        self.busy = False  # an event is with the rail now
        self.warned = False  # the overflow warning was logged
        self.consumer: asyncio.Task[None] | None = None

    @property
    def left(self) -> int:
        """How many events the rail has not finished with."""
        return len(self.items) + self.busy

    @property
    def idle(self) -> bool:
        """Nothing left for the rail: its consumer waits for events, or has ended."""
        return self.wake is not None or (self.consumer is not None and self.consumer.done())

    def poke(self) -> None:
        """Wake the consumer, if it waits for events."""
        wake, self.wake = self.wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    def settle(self) -> None:
        """Tell drain, if it waits, that the queue is empty."""
        settled, self.settled = self.settled, None
        if settled is not None and not settled.done():
            settled.set_result(None)


class RailBus:
    """Delivers the loop's phase boundaries to rails; rails observe, they never decide.

    The engine calls :meth:`emit` after every successful append, and :meth:`drain` once at the
    end of a drive. Each rail has its own bounded queue and its own task on the engine's event
    loop, started on the first emit: it sees one event at a time, in ledger order, and a rail
    that is slow delays neither the engine nor another rail. When a rail's queue is full, its
    oldest event is dropped and counted in :attr:`dropped`. A sync rail runs in its task too,
    but it holds the event loop while it runs (nothing can bound it): keep it quick, or make it
    async. An async rail is given ``timeout_s`` per event.

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
        # The lanes serve one event loop at a time: a bus may serve several asyncio.run calls in
        # turn, and a task or an asyncio.Event belongs to the loop it was made in.
        self._lanes: tuple[_Lane, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
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
                more events. A rail's exception is logged and counted, never raised.
        """
        if not self._slots:
            return
        self._raise_error()
        lanes: tuple[_Lane, ...] = ()
        for entry in written(entries, state):
            try:
                frame = frame_of(entry, state.contract)
            except Exception:  # noqa: BLE001 - a value the codec cannot copy: rails miss it
                _LOG.exception(
                    "rails missed task %s seq %d: its entry could not be copied",
                    entry.entry.task_id,
                    entry.entry.seq,
                )
                for slot in self._slots:
                    self.failures[slot.name] += len(entry.phases)
                continue
            lanes = lanes or self._lanes_here()
            for phase in entry.phases:
                item = (phase, frame)
                for lane in lanes:
                    self._put(lane, item)
        for lane in lanes:
            lane.poke()

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait, at most ``timeout_s``, for every rail to see what was queued; drop the rest.

        Called once at the end of a drive. What a rail has not seen by then (the event it is
        on included) is dropped and counted in :attr:`dropped`, and the rails' tasks are
        stopped, even when the call is cancelled. Draining a bus that has nothing queued
        returns at once; the bus can be used again afterwards.

        Args:
            timeout_s: How long to wait; :attr:`drain_s` when not given.

        Raises:
            ValueError: ``timeout_s`` is not a number of seconds (zero or more).
            BaseException: What a rail raised that is not an :class:`Exception`, if one did.
        """
        if timeout_s is not None and not _is_seconds(timeout_s):
            raise ValueError(f"timeout_s must be a number of seconds (0 or more): {timeout_s!r}")
        if not self._lanes:  # nothing emitted since the last drain (no rails, say): no waiting
            self._raise_error()
            return
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            self._abandon()
        try:
            async with asyncio.timeout(self._drain_s if timeout_s is None else timeout_s):
                for lane in self._lanes:
                    if not lane.idle:
                        if lane.settled is None:
                            lane.settled = asyncio.get_running_loop().create_future()
                        # Shielded: one drain cancelled must not cancel another's wait.
                        await asyncio.shield(lane.settled)
        except TimeoutError:
            pass  # what is left is dropped below
        finally:
            await self._stop()
        self._raise_error()

    # -- the lanes ------------------------------------------------------------------------

    def _lanes_here(self) -> tuple[_Lane, ...]:
        """The lanes of the running event loop, started now if this is its first event."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return self._lanes
        self._abandon()
        self._loop = loop
        self._lanes = tuple(_Lane(slot) for slot in self._slots)
        for lane in self._lanes:
            lane.consumer = loop.create_task(self._consume(lane), name=f"pev-rail-{lane.slot.name}")
            lane.consumer.add_done_callback(functools.partial(self._ended, lane))
        return self._lanes

    def _put(self, lane: _Lane, item: _Item) -> None:
        if len(lane.items) >= self._queue_size:
            self._drop(lane, lane.items.popleft())
            if not lane.warned:
                lane.warned = True
                _LOG.warning(
                    "rail %s is falling behind: its queue of %d events is full, so its oldest "
                    "events are dropped (counted in RailBus.dropped)",
                    lane.slot.name,
                    self._queue_size,
                    extra={"pev": {"rail": lane.slot.name, "queue_size": self._queue_size}},
                )
        lane.items.append(item)

    def _drop(self, lane: _Lane, item: _Item) -> None:
        self.dropped[lane.slot.name] += 1
        entry = item[1].written.entry
        if isinstance(entry.event, TaskFinished):
            lane.slot.views.pop(entry.task_id, None)

    async def _consume(self, lane: _Lane) -> None:
        """Feed one rail from its queue, one event at a time, until cancelled."""
        items, slot = lane.items, lane.slot
        loop = asyncio.get_running_loop()
        while True:
            while items:
                phase, frame = items.popleft()
                lane.busy = True
                try:
                    await self._call(slot, phase, frame)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # noqa: BLE001 - carried to the engine's task
                    # A KeyboardInterrupt or SystemExit escaping this task would stop the event
                    # loop under the engine; it is raised again from the engine's next emit or
                    # from drain, and this rail hears no more.
                    lane.busy = False
                    self._carry(lane, exc)
                    return
                lane.busy = False
                entry = frame.written.entry
                if isinstance(entry.event, TaskFinished):
                    slot.views.pop(entry.task_id, None)
            lane.settle()
            lane.wake = wake = loop.create_future()
            await wake

    def _ended(self, lane: _Lane, consumer: asyncio.Task[None]) -> None:
        lane.settle()  # nobody waits on a rail that is gone
        if not consumer.cancelled():
            error = consumer.exception()  # read, so that asyncio does not report it as unread
            if error is not None:
                self._carry(lane, error)

    def _carry(self, lane: _Lane, error: BaseException) -> None:
        """Keep what a rail raised that is not an Exception, for the engine's task to raise."""
        if lane in self._lanes and self._error is None:
            self._error = error

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    async def _stop(self) -> None:
        """Drop what the rails have not seen, and stop their tasks."""
        lanes, self._lanes, self._loop = self._lanes, (), None
        consumers = []
        for lane in lanes:
            self._give_up(lane, "the drive ended before the rail saw them")
            if lane.consumer is not None and not lane.consumer.done():
                lane.consumer.cancel()
                consumers.append(lane.consumer)
        if consumers:
            _, stuck = await asyncio.wait(consumers, timeout=_STOP_GRACE_S)
            for consumer in stuck:
                _LOG.warning("rail task %s ignored its cancellation", consumer.get_name())

    def _abandon(self) -> None:
        """Forget the lanes of an event loop that is no longer the running one."""
        lanes, self._lanes, self._loop, self._error = self._lanes, (), None, None
        for lane in lanes:
            self._give_up(lane, "their event loop ended before the rail saw them")
            consumer = lane.consumer
            if consumer is not None and not consumer.done():
                loop = consumer.get_loop()
                if not loop.is_closed():
                    loop.call_soon_threadsafe(consumer.cancel)

    def _give_up(self, lane: _Lane, why: str) -> None:
        left = lane.left
        if not left:
            return
        if lane.busy:
            self.dropped[lane.slot.name] += 1
        while lane.items:
            self._drop(lane, lane.items.popleft())
        lane.busy = False
        _LOG.warning(
            "rail %s missed %d events: %s (counted in RailBus.dropped)",
            lane.slot.name,
            left,
            why,
            extra={"pev": {"rail": lane.slot.name, "dropped": left}},
        )

    # -- one call -------------------------------------------------------------------------

    async def _call(self, slot: _Slot, phase: RailPhase, frame: Frame) -> None:
        entry = frame.written.entry
        scope: asyncio.Timeout | None = None
        try:
            event = private_copy(slot.views, phase, frame)
            result = slot.call(event)
            if inspect.isawaitable(result):
                scope = asyncio.timeout(self._timeout_s)
                async with scope:
                    await result
        except Exception as exc:  # noqa: BLE001 - rails never decide: whatever they raise stops here
            self.failures[slot.name] += 1
            extra = {"pev": {"rail": slot.name, "phase": str(phase), "task": entry.task_id}}
            if isinstance(exc, TimeoutError) and scope is not None and scope.expired():
                _LOG.error(
                    "rail %s timed out after %g s at phase %s (task %s, seq %d)",
                    slot.name,
                    self._timeout_s,
                    phase,
                    entry.task_id,
                    entry.seq,
                    extra=extra,
                )
            else:
                # Logged at ERROR, with the traceback: a rail that raises is a bug in the rail.
                _LOG.exception(
                    "rail %s raised at phase %s (task %s, seq %d): %s",
                    slot.name,
                    phase,
                    entry.task_id,
                    entry.seq,
                    describe_exception(exc),
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


def _slot(rail: RailLike) -> _Slot:
    call = getattr(rail, "on_event", None)
    if call is None:
        if not callable(rail):
            raise TypeError(
                f"{type(rail).__name__} is not a rail: pass an object with a sync or async "
                "on_event(event) method, or a function taking the event"
            )
        call = rail
    return _Slot(rail=rail, name=_name_of(rail), call=call)


def _name_of(rail: object) -> str:
    """A rail's ``name`` attribute, else its function or class name."""
    name = getattr(rail, "name", None)
    if isinstance(name, str) and name:
        return name
    qualname = getattr(rail, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname
    return type(rail).__qualname__
