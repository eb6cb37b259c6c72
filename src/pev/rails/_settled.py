"""What a reconciliation established of a record of unknown outcome, in the words pev shows.

A record that ended ``unknown`` is never rewritten: a later ``record_reconciled`` event settles
it (docs/design.md §2.2). Every surface that shows a record (the console and logging rails,
``pev events``, ``pev show`` and its JSON, the viewer, the OpenTelemetry rail) shows the settled
outcome through :func:`settlement`, named as :func:`reconciled_words` names it, so none of them
shows a record settled as done as a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.ledger import RecordReconciled
from pev.model import DeviceFailure, RecordStatus, VerifierFailure, record_status_for

__all__ = ["Settlement", "reconciled_words", "result_error", "settlement"]


@dataclass(frozen=True, slots=True)
class Settlement:
    """A record of unknown outcome as a reconciliation settled it.

    Attributes:
        status: The settled status (``succeeded``, ``failed``): what the record counts as.
        words: The settled status as every surface names it (:func:`reconciled_words`).
        error: What went wrong, when it was settled as not done.
        note: The reconciliation's note (how it was established).
        evidence_refs: The evidence the reconciliation cites.
    """

    status: RecordStatus
    words: str
    error: str | None
    note: str
    evidence_refs: tuple[str, ...]


def reconciled_words(status: RecordStatus | str) -> str:
    """``unknown → reconciled: succeeded``: the record's own status, then the settled one."""
    return f"{RecordStatus.UNKNOWN} → reconciled: {status}"


def result_error(result: object) -> str | None:
    """The error of a failed node result, in words; ``None`` for a success or no result."""
    match result:
        case DeviceFailure(error=error) | VerifierFailure(reason=error):
            return error
        case _:
            return None


def settlement(settled: RecordReconciled) -> Settlement:
    """What ``settled`` established, as the surfaces show it."""
    status = record_status_for(settled.result)
    return Settlement(
        status=status,
        words=reconciled_words(status),
        error=result_error(settled.result),
        note=settled.note,
        evidence_refs=settled.evidence_refs,
    )
