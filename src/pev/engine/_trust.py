"""Trusting a stored task: its chain is verified before it is shown, folded or driven.

``resume``, workers and ``pev show`` read a task's whole history and act on it; a history whose
hash chain is broken (an edited, dropped or reordered event, an index that disagrees with the
events) may say anything, so it is refused with its first bad event instead of being folded
(docs/security.md).
"""

from __future__ import annotations

from pev.errors import LedgerCorruptError
from pev.ledger import ChainReport, Ledger

__all__ = ["check_chain", "refusal", "verified"]


async def check_chain(ledger: Ledger, task_id: str) -> None:
    """Verify the task's stored chain; refuse a broken one.

    Raises:
        LedgerCorruptError: The chain fails verification; ``seq`` is its first bad event (0
            when the fault is not one event's, an index row without events say).
        UnknownTaskError: No task has that id.
    """
    report = await verified(ledger, task_id)
    if not report.ok:
        raise refusal(report)


async def verified(ledger: Ledger, task_id: str) -> ChainReport:
    """The task's chain report (an append racing the check is told from damage by the ledger).

    Raises:
        UnknownTaskError: No task has that id.
    """
    return await ledger.verify(task_id)


def refusal(report: ChainReport) -> LedgerCorruptError:
    """The error that refuses a task whose chain failed verification, naming the first bad event."""
    where = f" at event {report.first_bad_seq}" if report.first_bad_seq is not None else ""
    if report.needs_key:  # not damage: this process cannot check the seal
        way_out = "set PEV_LEDGER_KEY to the key the ledger was written with"
    else:
        way_out = (
            "`pev ledger verify` reports the damage, and a copy from before it (a backup) is "
            "the way back"
        )
    return LedgerCorruptError(
        f"task {report.task_id}: its ledger fails verification{where} ({report.problem}); "
        f"it was not used: {way_out}",
        task_id=report.task_id,
        seq=report.first_bad_seq or 0,
    )
