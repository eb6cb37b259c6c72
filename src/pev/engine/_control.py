"""Control from outside: task handles, live event streams, and people's decisions.

``pev.start`` writes a task and drives it in the background, returning a :class:`TaskHandle`;
``pev.watch`` follows any task of a store, from any process, as its ledger grows; and
``pev.approve`` / ``pev.reject`` record a person's decision on a revision awaiting approval.
Every one of them goes through the ledger: a stream is the task's entries read back in order (it
cannot miss one, however far behind it falls), and a decision is an event that the driver, a
worker, or ``resume`` in any process sees. See docs/control.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import Unpack

from pev.engine._agent import Agent
from pev.engine._api import Launch, LaunchOptions, launch, presented
from pev.engine._result import RunResult
from pev.engine._typed import In, Out
from pev.errors import UsageError
from pev.ledger import Ledger, Store, TaskState, follow
from pev.model import JsonValue, TaskId
from pev.rails import RailEvent, RailEvents

__all__ = ["EventStream", "TaskHandle", "approve", "reject", "start", "watch"]

_MAX_TEXT = 10_000  # the longest reviewer name, note or reason the ledger takes


def reviewer() -> str:
    """Who decides when nobody says: ``PEV_USER`` when set, else the user this process runs as.

    A server that decides for people (a console, a bot) runs as a service account: its
    operators set ``PEV_USER`` to the identity its decisions are recorded under.
    """
    configured = os.environ.get("PEV_USER", "").strip()
    if configured:
        return configured
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment, nor in the password file
        return "unknown"


def _checked_text(value: object, what: str, *, required: bool = False) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{what} must be text, got {type(value).__name__}")
    if required and not value.strip():
        raise UsageError(f"{what} must not be empty: it is what the planner is told")
    if len(value) > _MAX_TEXT:
        raise UsageError(f"{what} is {len(value)} characters long; at most {_MAX_TEXT} are kept")
    return value


async def approve(
    task_id: str,
    *,
    store: Store,
    by: str | None = None,
    note: str = "",
    revision: int | None = None,
) -> TaskState:
    """Approve the revision a task awaits approval for, from any process.

    The approval is an ``approved`` event in the ledger, with who approved and their note: the
    task's driver (``run`` waiting for it, or a worker claiming it once approved) dispatches the
    revision's plan as it is.

    Args:
        task_id: The task.
        store: Where it lives.
        by: Who approves; by default ``PEV_USER``, else the user this process runs as.
        note: What they add, if anything.
        revision: The revision they looked at: the approval is refused if the task awaits
            approval of another one (it was replanned meanwhile).

    Returns:
        The task's state after the approval.

    Raises:
        StateError: The task is not awaiting approval (of ``revision``, when given).
        UnknownTaskError: No task has that id.
        UsageError: ``by`` or ``note`` is not text, or too long.
    """
    who = _checked_text(by if by is not None else reviewer(), "by")
    said = _checked_text(note, "note")
    return await Ledger(store).approve(task_id, by=who, note=said, revision=revision)


async def reject(
    task_id: str,
    reason: str,
    *,
    store: Store,
    by: str | None = None,
    revision: int | None = None,
    stop: bool = False,
) -> TaskState:
    """Reject the revision a task awaits approval for, from any process; nothing of it runs.

    The reason is fed to the planner as a rejected plan's problems are: in recovery mode,
    while a replan is left, the task is planned again; otherwise it ends ``failed``/``rejected``.
    With ``stop=True`` it ends ``failed``/``rejected`` whatever budget is left: the reviewer
    wants no other plan.

    Args:
        task_id: The task.
        reason: Why, in words the planner can act on (required).
        store: Where it lives.
        by: Who rejects; by default ``PEV_USER``, else the user this process runs as.
        revision: The revision they looked at: refused if the task awaits another one.
        stop: End the task rather than plan again.

    Returns:
        The task's state after the rejection.

    Raises:
        StateError: The task is not awaiting approval (of ``revision``, when given).
        UnknownTaskError: No task has that id.
        UsageError: The reason is empty, or ``by`` or ``reason`` is not text or too long.
    """
    who = _checked_text(by if by is not None else reviewer(), "by")
    why = _checked_text(reason, "the reason", required=True)
    return await Ledger(store).reject(task_id, by=who, reason=why, revision=revision, stop=stop)


class EventStream:
    """A task's rail events as its ledger grows: an async iterator, and a context manager.

    Iterate it (``async for event in stream``) to get every :class:`~pev.rails.RailEvent` of the
    task, in order, from the first (or after ``after``), ending with ``task_finished``. Leaving
    the loop early is fine; use it as ``async with`` to stop listening at once when you do.

    Raises:
        UsageError: ``after`` is not a sequence number (0 or more).
    """

    def __init__(
        self,
        store: Store,
        task_id: str,
        *,
        after: int = 0,
        poll_s: float | None = None,
        _ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise UsageError(f"after must be a sequence number (0 or more), got {after!r}")
        self._batches = follow(store, task_id, after=0, poll_s=poll_s)
        self._after = after
        # Awaited before the first read: a handle's task may not be written yet.
        self._ready = _ready
        self._events = self._iterate()

    async def _iterate(self) -> AsyncGenerator[RailEvent, None]:
        if self._ready is not None:
            await self._ready()
        # Every entry is folded (the events carry the plan in force); those up to ``after``
        # only build the state.
        stream = RailEvents()
        async with contextlib.aclosing(self._batches) as batches:
            async for batch in batches:
                for event in stream.feed(batch):
                    if event.seq > self._after:
                        yield event

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> RailEvent:
        return await anext(self._events)

    async def aclose(self) -> None:
        """Stop following the task (what leaving ``async with`` does)."""
        await self._events.aclose()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def watch(
    task_id: str, *, store: Store, after: int = 0, poll_s: float | None = None
) -> EventStream:
    """Follow any task of ``store``, from any process, from its first event as it grows.

    The events are the frozen :class:`~pev.rails.RailEvent` values rails receive (docs/rails.md),
    read back from the ledger in order: a watcher never misses one and never sees one twice,
    however far behind it falls; two watchers see the same events. The stream ends with the
    task's ``task_finished``; for a task that has ended, at once, after its whole history.
    PostgreSQL tells watchers of each append (``LISTEN``/``NOTIFY``); an SQLite store looks at
    its file's version every 10 ms; a store in memory tells its own process.

    Args:
        task_id: The task.
        store: Where it lives.
        after: Only the events of entries after this sequence number.
        poll_s: How often to read even without a signal (by default, the store's own).

    Raises:
        UnknownTaskError: (on iterating) No task has that id.
        UsageError: ``after`` or ``poll_s`` is out of range.
    """
    return EventStream(store, task_id, after=after, poll_s=poll_s)


class TaskHandle(Generic[Out]):
    """One task, to follow and steer: its events, its result, cancel, approve and reject.

    ``TaskHandle[Out]``: the handle of a task of a ``pev.Agent[In, Out]`` (its result's output
    is an ``Out``).

    ``pev.start`` returns one for the task it starts (and drives in this process) at once, as
    the task is being written: ``await handle`` waits until it is, and every method waits for
    it too. Make one for any task of a store with ``TaskHandle(task_id, store=store)`` (one a
    worker drives, say). As an async context manager, the block waits for the task's end when
    it exits; if the block raised, the task is cancelled first.

    Args:
        task_id: The task.
        store: Where it lives.

    Attributes:
        task_id: The task's id.
        store: Where it lives.
    """

    def __init__(
        self,
        task_id: str,
        *,
        store: Store,
        _drive: asyncio.Task[RunResult[Out]] | None = None,
        _written: asyncio.Event | None = None,
    ) -> None:
        self.task_id = TaskId(task_id)
        self.store = store
        self._drive = _drive
        self._written = _written

    async def _ready(self) -> None:
        """Wait until ``pev.start`` has written the task; raise what its writing raised."""
        if self._written is None or self._drive is None:
            return
        await self._written.wait()
        if self._drive.done() and not self._drive.cancelled() and self._drive.exception():
            await self._drive  # raises why the task could not be written (or driven)

    def __await__(self) -> Generator[Any, None, TaskHandle[Out]]:
        """``await handle``: the handle, once ``pev.start`` has written its task."""

        async def ready() -> TaskHandle[Out]:
            await self._ready()
            return self

        return ready().__await__()

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r})"

    def events(self, *, after: int = 0) -> EventStream:
        """The task's rail events, live, from its first (or after ``after``) to its finish.

        Each call is a new stream read from the ledger (see :func:`watch`): a slow consumer
        never slows the task down, and never misses an event.
        """
        return EventStream(self.store, self.task_id, after=after, _ready=self._ready)

    async def state(self) -> TaskState:
        """The task's state now, read from its ledger."""
        await self._ready()
        return await Ledger(self.store).state(self.task_id)

    async def result(self) -> RunResult[Out]:
        """Wait for the task's end and return its result.

        Raises:
            LeaseLost: The drive started by ``pev.start`` lost the task to another driver (which
                goes on with it).
        """
        if self._drive is not None:
            return await asyncio.shield(self._drive)
        async with contextlib.aclosing(follow(self.store, self.task_id)) as batches:
            async for _ in batches:
                pass
        return RunResult.from_state(await self.state())

    async def cancel(self, reason: str = "") -> TaskState:
        """Ask the task to stop (see :func:`pev.cancel`); an ended task is left as it is."""
        await self._ready()
        return await Ledger(self.store).cancel(self.task_id, reason=reason)

    async def approve(
        self, *, by: str | None = None, note: str = "", revision: int | None = None
    ) -> TaskState:
        """Approve the revision the task awaits approval for (see :func:`pev.approve`)."""
        await self._ready()
        return await approve(self.task_id, store=self.store, by=by, note=note, revision=revision)

    async def reject(
        self,
        reason: str,
        *,
        by: str | None = None,
        revision: int | None = None,
        stop: bool = False,
    ) -> TaskState:
        """Reject the revision the task awaits approval for (see :func:`pev.reject`)."""
        await self._ready()
        return await reject(
            self.task_id, reason, store=self.store, by=by, revision=revision, stop=stop
        )

    async def __aenter__(self) -> TaskHandle[Out]:
        await self._ready()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None and not (await self.state()).terminal:
            await self.cancel(f"the block that started it raised {type(exc).__name__}")
        if self._drive is not None:
            # The drive's own failure (a lost lease) belongs to whoever asks for the result.
            await asyncio.gather(self._drive, return_exceptions=True)
        else:
            await self.result()


def _starting(launching: Callable[..., Launch[Any]]) -> Callable[..., TaskHandle[Any]]:
    """An entry point that launches a task with ``launching`` in the background: its handle."""

    def start(*args: Any, **kwargs: Any) -> TaskHandle[Any]:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "pev.start() drives its task on the running event loop, and none is running: "
                "call it from async code, or use pev.run_sync(...) to run a task to its end"
            ) from None
        launched = launching(*args, **kwargs)
        drive = loop.create_task(launched.drive(), name=f"pev-task-{launched.task_id}")
        return TaskHandle(
            launched.task_id, store=launched.store, _drive=drive, _written=launched.written
        )

    return presented(start, "start", START_DOC, parameters_of=launching, returns="TaskHandle")


START_DOC = """\
Start a task, driven in the background on the running event loop, and return its handle.

Takes the arguments of :func:`pev.run`; what ``run`` refuses (a bad agent, contract or input)
is refused here at once, before anything is written. The task is written and driven in the
background: ``await handle`` (or ``async with pev.start(...) as handle:``) waits until it is
written. Used as ``async with``, the block waits for the task's end when it exits, cancelling
it first if the block raised. The handle streams the task's events, waits for its result,
cancels it, and approves or rejects a revision awaiting approval (docs/control.md).

Raises:
    UsageError: No event loop is running (call it from async code), or what ``run`` refuses.
    ContractError, ComponentError: As :func:`pev.run` does, before anything is written.
"""

if TYPE_CHECKING:

    def start(
        input: In | JsonValue,  # noqa: A002
        *,
        agent: Agent[In, Out] | None = None,
        **options: Unpack[LaunchOptions],
    ) -> TaskHandle[Out]:
        """See START_DOC: what mypy and editors see (typed by the agent)."""
        ...

else:
    start = _starting(launch)
