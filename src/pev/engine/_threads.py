"""Where sync component code runs: one bounded thread pool for the whole process.

Sync planners, verifiers, observers, tools and their ``reconcile`` run in the process's pool of
at most :data:`MAX_THREADS` threads, started on the first sync call and shared by every drive:
a task starts no thread of its own, so thousands of tasks cost no thread start each. A drive
marks what it runs with :func:`run_threads` (a context variable every task it starts inherits),
and while a thread runs a drive's call it is named after the task (``pev-sync-<task id>``), so
a stack dump says whose call each thread is in. A sync call that timed out keeps running in its
thread (Python cannot stop a thread) and holds that thread until it returns: a sync tool should
honour its deadline itself. A child process made by ``os.fork`` starts a pool of its own.
Outside a drive, sync code runs in the event loop's default executor, as
:func:`asyncio.to_thread` would run it. See docs/engine.md, "Threads".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = [
    "MAX_THREADS",
    "THREAD_PREFIX",
    "current_pool",
    "run_threads",
    "submit",
    "sync_call",
]

T = TypeVar("T")

MAX_THREADS = 32
"""The most threads the process runs sync component code in at once."""

THREAD_PREFIX = "pev-sync"
"""The start of the pool's thread names: ``pev-sync-<task id>`` while running a task's call."""


class _ProcessPool:
    """The process's pool: started on first use, started again in a forked child."""

    __slots__ = ("_lock", "_pool")

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = ThreadPoolExecutor(
                        max_workers=MAX_THREADS, thread_name_prefix=THREAD_PREFIX
                    )
        return pool

    def forget(self) -> None:
        """In a forked child: the parent's threads are not there, so the next use starts anew."""
        self._pool = None
        self._lock = threading.Lock()


_POOL = _ProcessPool()
if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_POOL.forget)

# The task whose drive the running code belongs to; None outside a drive.
_DRIVE: contextvars.ContextVar[str | None] = contextvars.ContextVar("pev_drive", default=None)


@contextlib.contextmanager
def run_threads(task_id: str) -> Iterator[None]:
    """Mark the block (and the tasks it starts) as task ``task_id``'s drive.

    Its sync calls run in the process's pool, in threads named after the task while they run.
    """
    token = _DRIVE.set(task_id)
    try:
        yield
    finally:
        _DRIVE.reset(token)


def current_pool() -> ThreadPoolExecutor | None:
    """The process's pool inside a drive; ``None`` outside one (the loop's default)."""
    return None if _DRIVE.get() is None else _POOL.get()


def sync_call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, for a thread: a ``StopIteration`` it raises is a ``RuntimeError``.

    Inside a drive the thread is named ``pev-sync-<task id>`` while the call runs.

    A future cannot carry a ``StopIteration`` to the event loop (asyncio refuses to set it, and
    the task awaiting the future would wait for ever), so it is turned into a ``RuntimeError``
    with the same traceback, as Python does inside a coroutine (PEP 479).
    """
    task_id = _DRIVE.get()
    if task_id is None:
        return _stop_iteration_refused(fn, *args, **kwargs)
    # In the process's pool: while it runs the call, the thread says whose call it is.
    thread = threading.current_thread()
    idle_name, thread.name = thread.name, f"{THREAD_PREFIX}-{task_id}"
    try:
        return _stop_iteration_refused(fn, *args, **kwargs)
    finally:
        thread.name = idle_name


def _stop_iteration_refused(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        message = f"raised StopIteration: {exc}" if exc.args else "raised StopIteration"
        raise RuntimeError(message).with_traceback(exc.__traceback__) from exc


def submit(fn: Callable[[], T]) -> Future[T]:
    """Start ``fn`` in the process's pool inside a drive, else in the loop's default executor.

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
