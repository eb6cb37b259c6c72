"""The rail bus's lanes: each rail's bounded queue, and what feeds the rail from it.

An async rail's lane (:class:`Lane`) is fed by a task of its own on the engine's event loop, one
lane per loop. A sync rail's lane (:class:`Worker`) is fed by a daemon thread of its own, so that
however long the rail takes, it never holds the event loop, and a rail still busy when the
process ends never keeps it alive. Both are containers with a little mechanics: the bus
(:mod:`pev.rails._bus`) decides what goes in, what is dropped and what is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from pev.rails._copy import Frame, View
from pev.rails._event import Rail, RailEvent, RailPhase

__all__ = ["Item", "Lane", "Queue", "RailLike", "Slot", "Worker", "serial_lock"]

RailLike: TypeAlias = Rail | Callable[[RailEvent], object]
"""A rail object (sync or async ``on_event``), or any callable taking a :class:`RailEvent`."""

Item: TypeAlias = tuple[RailPhase, Frame]


@dataclass(slots=True)
class Slot:
    """A rail as the bus calls it, and its copies of the plans and contracts of its tasks."""

    rail: RailLike
    name: str
    call: Callable[[RailEvent], object]
    is_async: bool
    # Held while a sync rail is called: one rail object shared by the buses of runs going on at
    # once (a worker's tasks) still sees one event at a time, as it did on one event loop.
    serial: threading.Lock = field(default_factory=threading.Lock)
    views: dict[str, View] = field(default_factory=dict)


# The lock of each rail object, for as long as the object lives.
_SERIAL: weakref.WeakKeyDictionary[object, threading.Lock] = weakref.WeakKeyDictionary()
_SERIAL_GUARD = threading.Lock()


def serial_lock(rail: object) -> threading.Lock:
    """The one lock of ``rail`` that every bus calling it holds while it runs.

    A rail that cannot be weakly referenced or hashed (a slotted or mutable dataclass) gets a
    lock of its own per bus instead: its calls from one bus are still one at a time.
    """
    with _SERIAL_GUARD:
        try:
            lock = _SERIAL.get(rail)
            if lock is None:
                lock = _SERIAL[rail] = threading.Lock()
        except TypeError:
            return threading.Lock()
        return lock


class Queue:
    """One rail's queue of events it has not seen, and what the bus knows of the rail's pace.

    ``lock`` guards every field: a worker's thread reads and writes them too.
    """

    __slots__ = ("busy", "forget", "items", "lock", "slot", "warned")

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        self.lock = threading.Condition(threading.Lock())
        self.items: deque[Item] = deque()
        self.busy = False  # an event is with the rail now
        self.warned = False  # the overflow warning was logged, this drive
        # Tasks that ended, dropped while the rail was busy: their views go once it is done.
        self.forget: list[str] = []

    @property
    def left(self) -> int:
        """How many events the rail has not finished with."""
        return len(self.items) + self.busy

    def forget_views(self) -> None:
        """Drop the views of tasks that ended while the rail was busy (lock held, rail idle)."""
        for task_id in self.forget:
            self.slot.views.pop(task_id, None)
        self.forget.clear()


class Lane(Queue):
    """An async rail's queue in one event loop, and the task that feeds the rail from it.

    Plain futures rather than ``asyncio.Event``: waking the consumer is the one cost per emit.
    """

    __slots__ = ("consumer", "settled", "wake")

    def __init__(self, slot: Slot) -> None:
        super().__init__(slot)
        # What the consumer waits on once its queue is empty; None while it has work.
        self.wake: asyncio.Future[None] | None = None
        # What drain waits on until the consumer has emptied its queue (or ended).
        self.settled: asyncio.Future[None] | None = None
        self.consumer: asyncio.Task[None] | None = None

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


class Worker(Queue):
    """A sync rail's queue, and the daemon thread that feeds the rail from it.

    One thread at a time per rail, so the rail sees one event at a time, in order. The thread
    ends once its queue is empty after a drain (:attr:`stopping`); a rail still busy then keeps
    its thread until it returns, and a new drive meanwhile is served by that same thread.
    """

    __slots__ = ("context", "dead", "loop", "stopping", "thread", "waiters")

    def __init__(self, slot: Slot) -> None:
        super().__init__(slot)
        # The context variables of the drive that emits (as a task would inherit them), and
        # its event loop, where a coroutine the rail returns is awaited.
        self.context: contextvars.Context | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False  # end the thread once the queue is empty
        self.dead = False  # the rail raised what is not an Exception: it hears no more
        self.waiters: list[asyncio.Future[None]] = []  # drains waiting for the queue to empty

    def begin(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve a new drive, run by ``loop``, in the context of the task that emits now."""
        with self.lock:
            self.loop = loop
            self.context = contextvars.copy_context()
            self.stopping = False

    def poke(self, serve: Callable[[Worker], None]) -> None:
        """Wake the thread, starting it (to run ``serve(self)``) if there is none."""
        with self.lock:
            if self.thread is None and not self.dead and self.items:
                self.thread = threading.Thread(
                    target=serve, args=(self,), name=f"pev-rail-{self.slot.name}", daemon=True
                )
                self.thread.start()
            self.lock.notify()

    def waiter(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None] | None:
        """A future set once the queue is empty; None when it is already, or nobody serves it."""
        with self.lock:
            if self.dead or self.thread is None or not (self.items or self.busy):
                return None
            waiter = loop.create_future()
            self.waiters.append(waiter)
            return waiter

    def settle(self) -> None:
        """Tell the drains waiting that the queue is empty (lock held, from any thread)."""
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            # A RuntimeError: its event loop has closed, so nobody waits any more.
            with contextlib.suppress(RuntimeError):
                waiter.get_loop().call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
