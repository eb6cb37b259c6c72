"""What befalls a task's effects, in the words pev shows (docs/engine.md, "Effects happen once").

An action that took effect belongs to the task: a later revision's node may be satisfied by it
(``node_reused``: the node is not sent again), a revision may replace it (``effect_superseded``)
and undo it (a compensation, ``undo:<record id>``, that ends ``effect_compensated`` or
``compensation_failed``), and a failing task may unwind its effects before it ends. Every surface
that shows these (the console and logging rails, ``pev events``, ``pev show`` and its JSON, the
viewer, the OpenTelemetry rail) names them through this module, so that they say them alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.ledger import TaskEffect, UnwindStarted
from pev.model import RecordStatus, canonical_json
from pev.rails._settled import result_error

__all__ = [
    "ARGS_CHARS",
    "Undoing",
    "args_text",
    "compensation_words",
    "reused_words",
    "undoing",
    "unwind_words",
]

ARGS_CHARS = 48
"""How many characters of an effect's args the short views show (the ledger keeps them all)."""

# A compensation's record status, as the state of the effect's undoing: what the surfaces name.
_UNDOING_STATE = {
    RecordStatus.SUCCEEDED: "compensated",
    RecordStatus.FAILED: "failed",
    RecordStatus.UNKNOWN: "unknown",
}


@dataclass(frozen=True, slots=True)
class Undoing:
    """An effect's compensation, as the surfaces show it.

    Attributes:
        record_id: The compensation's record (``undo:<effect>``).
        state: ``compensating`` (under way), ``compensated``, ``failed`` or ``unknown``.
        words: The state in words: ``compensated``, ``compensation failed: <error>; left in
            place``, ....
        error: What went wrong, for one that failed or whose outcome is unknown.
    """

    record_id: str
    state: str
    words: str
    error: str | None


def undoing(effect: TaskEffect) -> Undoing | None:
    """The compensation of ``effect``, if one was dispatched."""
    record = effect.compensation
    if record is None:
        return None
    state = (
        _UNDOING_STATE.get(record.status, str(record.status)) if record.terminal else "compensating"
    )
    error = result_error(effect.compensation_result) or record.error
    return Undoing(
        record_id=str(record.id),
        state=state,
        words=compensation_words(effect.record_id, record.status, error, brief=True),
        error=error,
    )


def compensation_words(
    effect: str, status: RecordStatus | str, error: str | None, *, brief: bool = False
) -> str:
    """How a compensation of the effect ``effect`` ended (or that it runs), in words.

    ``record 1:pay compensated``; ``compensation of 1:pay failed: <error>; left in place``, or
    ``ended unknown``. With ``brief``, without the effect: ``compensated``, ``compensation
    failed: <error>; left in place``.
    """
    status = RecordStatus(status)
    if status is RecordStatus.SUCCEEDED:
        return "compensated" if brief else f"record {effect} compensated"
    if status not in (RecordStatus.FAILED, RecordStatus.UNKNOWN):
        return "compensating" if brief else f"compensating record {effect}"
    ended = "failed" if status is RecordStatus.FAILED else "ended unknown"
    words = "compensation" if brief else f"compensation of {effect}"
    return f"{words} {ended}{f': {error}' if error else ''}; left in place"


def reused_words(record_id: str, revision: int | None) -> str:
    """``reused record 1:pay (sent in revision 1)``: a node satisfied by an effect it had."""
    sent = "" if revision is None else f" (sent in revision {revision})"
    return f"reused record {record_id}{sent}"


def unwind_words(unwind: UnwindStarted, *, ended: bool = False) -> str:
    """``undoing its effects before it ends failed/replan_budget_exhausted``.

    With ``ended`` (the task has ended since): ``it undid its effects, newest first, as it ended
    failed/replan_budget_exhausted`` (the ending it was headed for; a compensation that failed
    made it ``partial``).
    """
    ending = f"{unwind.status}/{unwind.reason}"
    if ended:
        return f"it undid its effects, newest first, as it ended {ending}"
    return f"undoing its effects before it ends {ending}"


def args_text(effect: TaskEffect, limit: int | None = ARGS_CHARS) -> str:
    """The effect's args as canonical JSON, cut to ``limit`` characters with ``…``.

    ``limit=None`` gives them whole. An older record whose args were never recorded (its node's
    held a ``$ref``) shows ``?``.
    """
    if effect.args is None:
        return "?"
    text = canonical_json(effect.args)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"
