"""Where sync component code runs: a bounded thread pool that belongs to one drive.

The driver opens :func:`run_threads` around its drive (and around settling on resume): a pool of
at most :data:`MAX_THREADS` threads, started on the first sync call and reachable through a
context variable, so every task the drive starts (nodes, planner and verifier calls) finds it.
When the drive ends the pool is shut down without waiting: a sync call that timed out keeps
running in its thread (Python cannot stop a thread) and the thread ends when the call returns.
Outside a drive, sync code runs in the event loop's default executor, as
:func:`asyncio.to_thread` would run it. See docs/engine.md, "Threads".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = [
    "MAX_THREADS",
    "THREAD_PREFIX",
    "RunThreads",
    "current_pool",
    "run_threads",
    "submit",
    "sync_call",
]

T = TypeVar("T")

MAX_THREADS = 32
"""The most threads one drive runs sync component code in at once."""

THREAD_PREFIX = "pev-sync"
"""The start of the names of a drive's threads: ``pev-sync-<task id>_<n>``."""


class RunThreads:
    """One drive's thread pool: started on its first use, refused once shut down."""

    __slots__ = ("_closed", "_lock", "_name", "_pool")

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        """The pool, started now if this is the first sync call.

        Raises:
            RuntimeError: The drive has ended and shut the pool down.
        """
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"the thread pool {self._name!r} was shut down")
                pool = self._pool
                if pool is None:
                    pool = self._pool = ThreadPoolExecutor(
                        max_workers=MAX_THREADS, thread_name_prefix=self._name
                    )
        return pool

    def shutdown(self) -> None:
        """Refuse new calls; calls still running finish in their threads (no waiting)."""
        with self._lock:
            self._closed = True
            pool = self._pool
        if pool is not None:
            pool.shutdown(wait=False)


_RUN_THREADS: contextvars.ContextVar[RunThreads | None] = contextvars.ContextVar(
    "pev_run_threads", default=None
)


@contextlib.contextmanager
def run_threads(task_id: str) -> Iterator[RunThreads]:
    """A fresh pool for the block's sync calls (and its tasks'); shut down when it ends."""
    threads = RunThreads(f"{THREAD_PREFIX}-{task_id}")
    token = _RUN_THREADS.set(threads)
    try:
        yield threads
    finally:
        _RUN_THREADS.reset(token)
        threads.shutdown()


def current_pool() -> ThreadPoolExecutor | None:
    """The pool of the drive in progress; ``None`` outside a drive (the loop's default)."""
    threads = _RUN_THREADS.get()
    return None if threads is None else threads.pool()


def sync_call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, for a thread: a ``StopIteration`` it raises is a ``RuntimeError``.

    A future cannot carry a ``StopIteration`` to the event loop (asyncio refuses to set it, and
    the task awaiting the future would wait for ever), so it is turned into a ``RuntimeError``
    with the same traceback, as Python does inside a coroutine (PEP 479).
    """
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        message = f"raised StopIteration: {exc}" if exc.args else "raised StopIteration"
        raise RuntimeError(message).with_traceback(exc.__traceback__) from exc


def submit(fn: Callable[[], T]) -> Future[T]:
    """Start ``fn`` in the drive's pool, else in the running loop's default executor.

    The future can be cancelled while ``fn`` waits for a thread, and then ``fn`` never runs.
    """
    pool = current_pool()
    if pool is not None:
        return pool.submit(fn)
    future: Future[T] = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return  # withdrawn while it waited for a thread
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
            future.set_exception(exc)
        else:
            future.set_result(result)

    asyncio.get_running_loop().run_in_executor(None, work)
    return future
