"""The effects table of a task's page: what its actions did to the world, and what became of each.

Pure functions of the folded :class:`~pev.ledger.TaskState`, like the rest of the page's values
(``pev.web._views``); the words are those every surface uses (``pev.rails._effects``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pev.ledger import TaskEffect, TaskState, call_name
from pev.rails._effects import args_text, undoing

__all__ = ["EffectView", "effect_views"]

# An effect's status, and what became of its compensation, as the CSS classes that colour them.
_EFFECT_CLASS = {"succeeded": "ok", "done": "ok", "unknown": "warn", "not_done": "muted"}
_UNDOING_CLASS = {"compensated": "ok", "failed": "bad", "unknown": "warn", "compensating": "run"}


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectView:
    """One effect of the task, for the effects table: what it did, and what became of it.

    Attributes:
        record_id: Its record; ``anchor`` is the anchor of that record's row.
        node_id: The node that sent it.
        revision: The revision that sent it.
        tool: The tool called.
        args: Its args, cut short (``args_full`` whole, for the tooltip).
        args_full: Its args as canonical JSON.
        occurrence: Which occurrence of its call it is.
        key: Its idempotency key.
        status: ``succeeded``, ``unknown``, ``done`` or ``not_done``.
        css: The status's CSS class.
        superseded: The revision that replaced it, if one did.
        compensation: The state of its compensation (``compensated``, ``failed``, ``unknown``,
            ``compensating``), if one was dispatched.
        compensation_words: That state in words, with the error of one that failed.
        compensation_css: Its CSS class.
        left_in_place: Superseded, or its compensation failed, and it still stands.
    """

    record_id: str
    anchor: str
    node_id: str
    revision: int
    tool: str
    args: str
    args_full: str
    occurrence: int
    key: str
    status: str
    css: str
    superseded: int | None
    compensation: str | None
    compensation_words: str | None
    compensation_css: str
    left_in_place: bool


def effect_views(state: TaskState) -> tuple[EffectView, ...]:
    """The task's effects, in the order they came about."""
    return tuple(_effect(effect) for effect in state.effects.values())


def _effect(effect: TaskEffect) -> EffectView:
    undone = undoing(effect)
    return EffectView(
        record_id=str(effect.record_id),
        anchor=f"rec-{effect.record_id}",
        node_id=effect.node_id,
        revision=effect.revision,
        tool=call_name(effect.tool, effect.node_id),
        args=args_text(effect),
        args_full=args_text(effect, limit=None),
        occurrence=effect.occurrence,
        key=effect.key,
        status=str(effect.status),
        css=_EFFECT_CLASS.get(str(effect.status), "idle"),
        superseded=effect.superseded,
        compensation=None if undone is None else undone.state,
        compensation_words=None if undone is None else undone.words,
        compensation_css="idle" if undone is None else _UNDOING_CLASS.get(undone.state, "run"),
        left_in_place=effect.in_world
        and (effect.superseded is not None or (undone is not None and undone.error is not None)),
    )
