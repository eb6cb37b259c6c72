"""Checking one task's stored ledger from its events: the chain, the index, the fold.

The check behind :meth:`pev.ledger.Ledger.verify` and ``pev ledger verify``. It trusts nothing
the store decoded: the chain is computed again from the stored texts, the index row is compared
with what the events say, and only then is each event decoded and folded. Whatever is damaged is
reported at the first bad event; nothing here raises for damage.
"""

from __future__ import annotations

from dataclasses import replace

from pev.errors import StateError, StoreError, StoreUnavailable, UnknownTaskError
from pev.ledger._checks import ChainReport, verify_raw
from pev.ledger._events import RawEntry
from pev.ledger._state import TaskState, apply
from pev.ledger._store import Store, decode_entry
from pev.ledger._summary import TaskSummary

__all__ = ["verify_task"]


async def verify_task(
    store: Store, task_id: str, *, key: bytes | None, require_key: bool = False
) -> ChainReport:
    """Check task ``task_id``'s ledger in ``store`` (see :meth:`pev.ledger.Ledger.verify`).

    Raises:
        UnknownTaskError: Neither the task index nor the events know the task.
        StoreUnavailable: The store did not answer (a transient fault, not damage).
    """
    read = await _read(store, task_id)
    if isinstance(read, ChainReport):
        return read
    summary, entries = read
    for _ in range(_SETTLE_READS):
        if summary is None or summary.event_count == len(entries):
            break
        # The index row was read before the events: an append committed in between (the task's
        # driver, a cancel from another process) makes the two disagree for that one reading.
        # Read both again; damage stays, such a race does not.
        read = await _read(store, task_id)
        if isinstance(read, ChainReport):
            return read
        summary, entries = read
    if not entries:
        if summary is None:
            raise UnknownTaskError(task_id)
        return _bad(
            task_id,
            0,
            1,
            f"the task index lists task {task_id} with {summary.event_count} events, but the log "
            "holds none of them",
        )
    report = verify_raw(
        task_id,
        entries,
        head_count=summary.event_count if summary else None,
        head_hash=summary.head_hash if summary else None,
        key=key,
        require_key=require_key,
    )
    if not report.ok:
        return report
    problem = _fold_problem(entries, store)
    if problem is not None:
        seq, why = problem
        return replace(report, ok=False, first_bad_seq=seq, problem=why)
    if summary is None:
        return replace(
            report,
            ok=False,
            problem=f"task {task_id} has {len(entries)} events but no row in the task index",
        )
    return report


# How often the index row and the events are read again while they disagree.
_SETTLE_READS = 3


async def _read(
    store: Store, task_id: str
) -> tuple[TaskSummary | None, tuple[RawEntry, ...]] | ChainReport:
    """The task's index row, then its stored events; a report if either cannot be decoded.

    Raises:
        StoreUnavailable: The store did not answer: nothing is known of the chain, so this is
            raised, never reported as damage.
    """
    try:
        summary = await store.summary(task_id)
    except StoreUnavailable:
        raise
    except (StoreError, ValueError) as exc:
        return _bad(task_id, 0, None, f"the task index row of task {task_id} cannot be read: {exc}")
    try:
        entries = await store.read_raw(task_id)
    except UnknownTaskError:
        entries = ()
    except StoreUnavailable:
        raise
    except StoreError as exc:
        return _bad(task_id, 0, None, f"the events of task {task_id} cannot be read: {exc}")
    return summary, entries


def _fold_problem(entries: tuple[RawEntry, ...], store: Store) -> tuple[int, str] | None:
    """The first event that does not decode or fold, and why; ``None`` if all of them do."""
    location = str(getattr(store, "location", type(store).__name__))
    state: TaskState | None = None
    for raw in entries:
        try:
            entry = decode_entry(raw, location=location)
        except StoreError as exc:
            return raw.seq, f"event {raw.seq} cannot be read: {exc}"
        try:
            state = apply(state, entry.event, at=entry.at)
        except StateError as exc:
            return raw.seq, f"event {raw.seq} does not fit the task's history: {exc}"
    return None


def _bad(task_id: str, events: int, seq: int | None, problem: str) -> ChainReport:
    return ChainReport(task_id=task_id, ok=False, events=events, first_bad_seq=seq, problem=problem)
