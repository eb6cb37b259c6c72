"""Components that answer as scripted, and running a task made of them under the fuzz's checks.

- :class:`Answer`: one scripted answer (a value to return, or an exception to raise), made each
  time it is given; :func:`returning`, :func:`raising` and :func:`later` draw them, and
  :func:`in_turn` makes a planner or verifier function that gives them in turn.
- :func:`run_and_check`: ``pev.run`` on a memory store or an SQLite file, bounded in time, then
  the checks every case must pass: the task ended, its ledger verifies, pev's log formats.
- :data:`LOG`: the handler pev's log goes to while the fuzz runs (see :func:`pev_log_formatted`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from tests.support.hostile import exceptions

import pev
from pev.ledger import Ledger
from pev.stores import MemoryStore, SQLiteStore

CASE_S = 30.0  # a case takes milliseconds; a run still going after this has hung
_files = itertools.count()


class Formatting(logging.Handler):
    """Formats every record pev logs, as an application's handler would; keeps what failed.

    Then it cuts the record down to its first line: pev's warnings about hostile values carry
    tracebacks and megabytes of text, which pytest's own handlers (called after this one) would
    otherwise print in full in the report of a failing case.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        record.msg, record.args = text.split("\n", 1)[0][:300], None
        record.exc_info = record.exc_text = None

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self.failures.append(
            f"{record.msg!r} at {record.pathname}:{record.lineno}: {sys.exc_info()[1]!r}"
        )


LOG = Formatting()


@contextmanager
def pev_log_formatted() -> Iterator[None]:
    """While entered, pev's log goes to :data:`LOG` only (not to pytest's report)."""
    logger = logging.getLogger("pev")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(LOG)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(LOG)
        logger.setLevel(level)
        logger.propagate = propagate


@dataclass(frozen=True, slots=True, eq=False)
class Answer:
    """One scripted answer of a component, made each time it is given: ``make(*parts)``.

    The value is returned, or raised if it is an exception; a ``make`` that raises makes the
    component raise.
    """

    make: Callable[..., object]
    parts: tuple[object, ...]

    def give(self) -> Any:
        value = self.make(*self.parts)
        if isinstance(value, BaseException):
            raise value
        return value


def same(value: object) -> object:
    """The value itself: an answer that returns (or raises) what was drawn."""
    return value


def answers(answer: st.SearchStrategy[Answer]) -> st.SearchStrategy[list[Answer]]:
    """One to three answers, given in turn, the last one repeated."""
    return st.lists(answer, min_size=1, max_size=3)


def in_turn(given: Sequence[Answer], *, is_async: bool) -> Callable[[object], Any]:
    """A component function answering with ``given`` in turn, sync or async."""
    calls = itertools.count()

    def answer(request: object) -> Any:
        return given[min(next(calls), len(given) - 1)].give()

    async def answer_later(request: object) -> Any:
        await asyncio.sleep(0)
        return answer(request)

    return answer_later if is_async else answer


def raising(bugs_propagate: bool) -> st.SearchStrategy[Answer]:
    """An answer that raises an exception of any kind."""
    return exceptions(bugs_propagate=bugs_propagate).map(lambda exc: Answer(same, (exc,)))


def returning(value: st.SearchStrategy[object]) -> st.SearchStrategy[Answer]:
    """An answer that returns a drawn value (an exception drawn as a value is raised)."""
    return value.map(lambda v: Answer(same, (v,)))


def later(make: Callable[..., object], *parts: st.SearchStrategy[Any]) -> st.SearchStrategy[Answer]:
    """An answer built when given: ``make(*parts)``."""
    return st.tuples(*parts).map(lambda drawn: Answer(make, drawn))


async def run_and_check(on_sqlite: bool, folder: Path, **options: Any) -> pev.RunResult:
    """Run the task on a memory store (or an SQLite file), then check it.

    The task must have ended and its ledger must verify; an SQLite ledger is read back by a
    fresh store too.
    """
    LOG.failures.clear()
    path = folder / f"fuzz-{next(_files)}.db"
    store: pev.Store = SQLiteStore(path) if on_sqlite else MemoryStore()
    try:
        try:
            async with asyncio.timeout(CASE_S) as limit:
                result = await pev.run("water the plants", store=store, **options)
        except TimeoutError:
            if limit.expired():
                pytest.fail(f"the run was still going after {CASE_S:g} s: it hangs")
            raise
        await _check(store, result.task_id)
        assert not LOG.failures, f"pev logged what cannot be formatted: {LOG.failures}"
    finally:
        await store.close()
    if on_sqlite:
        reopened = SQLiteStore(path)
        try:
            await _check(reopened, result.task_id)
        finally:
            await reopened.close()
    return result


async def _check(store: pev.Store, task_id: str) -> None:
    ledger = Ledger(store)
    state = await ledger.state(task_id)
    assert state.terminal, f"task left in {state.phase}"
    report = await ledger.verify(task_id)
    assert report.ok, report.problem
