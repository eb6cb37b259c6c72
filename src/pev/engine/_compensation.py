"""Compensation: undoing effects a replan replaces, and a failing task's effects (a saga).

See docs/engine.md, "Compensation". An effect is compensated through its tool's ``compensate``
(the executor's ``compensate(effect)``), and the compensation is itself an action: a ``pending``
record first (``compensation_dispatched``), then ``effect_compensated`` or
``compensation_failed``; at most one per effect, never repeated, and one a crash leaves
unfinished is settled ``unknown``. Three moments call for it:

* before a revision dispatches anything, for the effects it replaces: a local replan's redo
  nodes that now make another call, the effects a global plan names (``Plan.compensate``), and
  those of the nodes the verdict blamed that the global plan does not reuse;
* when a redo node whose args come from ``$ref``s turns out, at dispatch, to make another call
  than the effect it had: its old effect is undone before the new call goes out;
* when a task with ``compensate_on_failure`` ends ``failed``, ``partial`` or ``cancelled``: it
  unwinds (``compensating``), undoing every effect that stands, newest first.

An effect whose tool has no ``compensate`` is not undone: it stays in the world, listed as
superseded. A compensation that fails, or ends unknown, ends the task ``partial`` naming the
effect left in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from pev.engine._calls import BUGS
from pev.engine._effects import EffectMatcher
from pev.engine._failures import noted
from pev.engine._host import TaskHost, current
from pev.engine._protocols import _NODE_CONTEXT, NodeContext
from pev.engine._recordable import recordable_result
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    CompensationDispatched,
    CompensationFailed,
    EffectCompensated,
    EffectStatus,
    EffectSuperseded,
    Event,
    Reuse,
    RevisionKind,
    TaskEffect,
    TaskFinished,
    TaskState,
    UnwindStarted,
    effects_before,
    finish,
    to_undo,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    RecordId,
    RecordStatus,
    Success,
    ToolSpec,
    VerifierFailure,
    iter_refs,
    record_status_for,
)
from pev.model._results import as_node_result

__all__ = [
    "Compensations",
    "compensation_problems",
    "left_in_place",
    "replaced_by",
    "replaced_effects",
]


class Compensations:
    """Supersedes and undoes effects, for whatever drives the task (a :class:`TaskHost`)."""

    __slots__ = ("_compensate", "_compensates", "_host", "_tools")

    def __init__(
        self,
        host: TaskHost,
        compensate: Callable[..., Awaitable[Any]] | None,
        compensates: Callable[[str | None], bool],
        *,
        tools: Mapping[str, ToolSpec] | None,
    ) -> None:
        self._host = host
        self._compensate = compensate
        self._compensates = compensates
        self._tools = tools

    def can_undo(self, effect: TaskEffect) -> bool:
        """Whether the effect took effect, stands, and its tool can undo it."""
        return (
            self._compensate is not None
            and effect.happened
            and effect.in_world
            and effect.compensation is None
            and self._compensates(effect.tool)
        )

    async def before_revision(self) -> None:
        """Supersede what the current revision replaces, undoing what can be, in order.

        Stops at the first compensation that does not undo its effect: the driver then ends
        the task (see :func:`left_in_place`).
        """
        state = self._host.state
        for effect, reason in replaced_effects(state, self._tools):
            if not await self.supersede(effect, reason):
                return

    async def supersede(self, effect: TaskEffect, reason: str) -> bool:
        """Mark ``effect`` superseded by the current revision, and undo it if its tool can.

        Returns:
            False when its compensation failed or ended unknown: the effect is left in place.
        """
        number = current(self._host.state).number
        superseded = EffectSuperseded(record_id=effect.record_id, revision=number, reason=reason)
        if not self.can_undo(effect):
            await self._host.write([superseded])
            return True
        return await self._undo(effect, first=superseded)

    async def unwind(self) -> None:
        """Undo every effect that stands, newest first, then end the task as it was to end."""
        for effect in to_undo(self._host.state):
            if self.can_undo(effect):
                await self._undo(effect)
        await self._host.write([unwound(self._host.state)])

    async def unfinished(self) -> None:
        """Settle compensations a crash left unfinished: ``unknown``, never made again."""
        state = self._host.state
        events: list[Event] = [
            CompensationFailed(
                effect=effect.record_id,
                record_id=effect.compensation.id,
                status=RecordStatus.UNKNOWN,
                result=DeviceFailure(
                    effect.node_id,
                    "the process compensating this effect stopped; whether it was undone is "
                    "unknown",
                    outcome_unknown=True,
                ),
                at=self._host.deadline.now(),
                settled_on_resume=True,
            )
            for effect in state.effects.values()
            if effect.compensation is not None and not effect.compensation.terminal
        ]
        await self._host.write(events)

    async def _undo(self, effect: TaskEffect, *, first: Event | None = None) -> bool:
        """Dispatch the compensation of ``effect``, make it, and record how it ended."""
        host = self._host
        state = host.state
        now = host.deadline.now()
        record = ExecutionRecord.pending(
            id=RecordId(f"undo:{effect.record_id}"),
            task_id=state.task_id,
            revision=current(state).number,
            node_id=effect.node_id,
            tool=effect.tool,
            args_digest=effect.args_digest,
            effect=Effect.ACTION,
            idempotency_key=f"{effect.key}/compensate",
            at=now,
        )
        dispatched = CompensationDispatched(effect=effect.record_id, record=record)
        await host.write([first, dispatched] if first is not None else [dispatched])
        result = await self._call(effect, record)
        at = host.deadline.now()
        if isinstance(result, Success):
            await host.write(
                [
                    EffectCompensated(
                        effect=effect.record_id, record_id=record.id, result=result, at=at
                    )
                ]
            )
            return True
        await host.write(
            [
                CompensationFailed(
                    effect=effect.record_id,
                    record_id=record.id,
                    status=record_status_for(result),
                    result=result,
                    at=at,
                )
            ]
        )
        return False

    async def _call(self, effect: TaskEffect, record: ExecutionRecord) -> NodeResult:
        """The executor's ``compensate(effect)``, in the compensation's own node context.

        A compensation runs even while the task is being cancelled: its cancel signal is its
        own, and only its tool's timeout bounds it.
        """
        compensate = self._compensate
        assert compensate is not None  # noqa: S101 - can_undo checked it
        state = self._host.state
        context = NodeContext(
            task_id=state.task_id,
            node_id=effect.node_id,
            revision=record.revision,
            record_id=record.id,
            idempotency_key=record.idempotency_key,
            deadline=None,
            cancelled=asyncio.Event(),
            dependencies={},
            report=_no_progress,
        )
        token = _NODE_CONTEXT.set(context)
        try:
            answer = await compensate(effect)
        except BUGS:
            raise
        except Exception as exc:  # noqa: BLE001 - a compensation that raises did not undo it
            who = f"the compensation of record {effect.record_id}"
            answer = DeviceFailure(effect.node_id, noted(exc, task_id=state.task_id, who=who))
        finally:
            _NODE_CONTEXT.reset(token)
        # Returning (None, or anything) means undone; a failure means not; a value JSON cannot
        # hold is unknown.
        undone = as_node_result(effect.node_id, answer, source="a compensation", action=True)
        return recordable_result(
            undone,
            node_id=effect.node_id,
            action=True,
            limits=state.policy.value_limits,
            source=f"the compensation of record {effect.record_id}",
        )


async def _no_progress(status: RecordStatus) -> None:
    """A compensation reports no progress: its record goes from pending to its end."""


def replaced_effects(
    state: TaskState, tools: Mapping[str, ToolSpec] | None
) -> Iterator[tuple[TaskEffect, str]]:
    """The effects the current revision replaces, known before it dispatches, with why.

    A local revision replaces the effect of each redo node that now makes another call (or is
    no longer an action); the same call again, reused or repeated on purpose, leaves it be. A
    node whose args come from ``$ref``s is decided at dispatch. A global
    revision replaces the effects its plan names (``Plan.compensate``), and those of the nodes
    the verdict blamed that its plan does not reuse; an effect it merely leaves out stands.
    Effects already superseded by this revision are left out (a resumed revision).
    """
    revision = current(state)
    number = revision.number
    earlier = effects_before(state, number)
    matcher = EffectMatcher(revision.plan, tools)
    nodes = {node.id: node for node in revision.plan.nodes}

    def reused(node_id: str) -> str | None:
        """The record id of the effect a static action node reuses, if it reuses one."""
        node = nodes.get(node_id)
        if node is None or not matcher.is_action(node_id) or next(iter_refs(node.args), None):
            return None
        intent = matcher.intent(node_id, matcher.planned_digest(node_id), effects=earlier)
        return intent.effect.record_id if isinstance(intent, Reuse) else None

    if revision.kind is RevisionKind.LOCAL:
        for node in revision.plan.nodes:
            if node.id not in revision.redo:
                continue
            action = matcher.is_action(node.id)
            if action and next(iter_refs(node.args), None) is not None:
                continue  # decided at dispatch, once its args are known
            call = (node.tool, matcher.planned_digest(node.id)) if action else None
            old = replaced_by(state, node.id, call)
            if old is not None:
                yield old, f"revision {number} redoes node {node.id!r} with another call"
        return
    if revision.kind is not RevisionKind.GLOBAL:
        return
    named = set(revision.plan.compensate)
    for effect in earlier:
        if effect.record_id in named and _stands(effect, number):
            yield effect, f"revision {number}'s plan asks to compensate it"
    verdicts = [recorded.verdict for recorded in state.verdicts if recorded.verdict is not None]
    blamed = verdicts[-1].failed_nodes if verdicts else frozenset()
    kept = {reused(node_id) for node_id in nodes} - {None}
    previous = state.revisions[-2] if len(state.revisions) > 1 else None
    for effect in earlier:
        if (
            previous is not None
            and effect.revision >= previous.lineage
            and effect.node_id in blamed
            and effect.record_id not in named
            and effect.record_id not in kept
            and _stands(effect, number)
        ):
            yield (
                effect,
                f"the verdict blamed node {effect.node_id!r}; revision {number} does not reuse it",
            )


def _stands(effect: TaskEffect, revision: int) -> bool:
    """Whether ``effect`` is in the world, undone by nothing, and not replaced by ``revision``."""
    return effect.in_world and effect.compensation is None and effect.superseded != revision


def replaced_by(
    state: TaskState, node_id: str, call: tuple[str | None, str] | None
) -> TaskEffect | None:
    """The effect a redo of node ``node_id`` making ``call`` (tool, args digest) replaces.

    That is the latest effect the node had in the current lineage before this revision, while
    it stands and ``call`` is another (``None``: the node is no longer an action): the same call
    again, reused or repeated on purpose, leaves it be.
    """
    revision = current(state)
    found = None
    for effect in state.effects.values():
        if effect.node_id == node_id and revision.lineage <= effect.revision < revision.number:
            found = effect
    if (
        found is None
        or not _stands(found, revision.number)
        or (found.tool, found.args_digest) == call
    ):
        return None
    return found


def left_in_place(state: TaskState) -> TaskEffect | None:
    """An effect the current revision superseded whose compensation failed or ended unknown."""
    revision = state.revision
    if revision is None or state.unwinding is not None:
        return None
    for effect in state.effects.values():
        undo = effect.compensation
        if (
            undo is not None
            and undo.revision == revision.number
            and undo.status in (RecordStatus.FAILED, RecordStatus.UNKNOWN)
        ):
            return effect
    return None


def not_undone(state: TaskState, effect: TaskEffect) -> TaskFinished | UnwindStarted:
    """How a task ends when a compensation left ``effect`` in place: ``partial``."""
    return finish(
        state,
        TaskStatus.PARTIAL,
        TerminalReason.DEVICE_FAILURE,
        detail=f"the effect of record {effect.record_id} ({effect.tool}) is left in place: "
        f"{_undo_error(effect)}",
    )


def unwound(state: TaskState) -> TaskFinished | UnwindStarted:
    """The end of an unwound task: as it was to end, or ``partial`` with an effect left in place."""
    unwinding = state.unwinding
    assert unwinding is not None  # noqa: S101 - only a task that unwinds is unwound
    undone = [e.record_id for e in state.effects.values() if e.compensated]
    failed = [e for e in state.effects.values() if e.compensation is not None and not e.compensated]
    standing = [
        e
        for e in state.effects.values()
        if e.status is not EffectStatus.NOT_DONE and e.compensation is None
    ]
    parts = [unwinding.detail] if unwinding.detail else []
    if undone:
        parts.append(f"compensated: {', '.join(undone)}")
    parts.extend(
        f"the effect of record {e.record_id} ({e.tool}) is left in place: {_undo_error(e)}"
        for e in failed
    )
    if standing:
        left = ", ".join(f"{e.record_id} ({e.tool}, {e.status})" for e in standing)
        parts.append(f"left as they are (no compensation): {left}")
    detail = "; ".join(parts)
    if failed:
        return finish(state, TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE, detail=detail)
    return finish(state, unwinding.status, unwinding.reason, detail=detail)


def _undo_error(effect: TaskEffect) -> str:
    match effect.compensation_result:
        case DeviceFailure(error=error) | VerifierFailure(reason=error):
            return f"its compensation failed ({error})"
        case _:
            return "its compensation did not undo it"


def compensation_problems(
    state: TaskState,
    named: tuple[str, ...],
    *,
    kind: RevisionKind,
    compensates: Callable[[str | None], bool],
) -> list[str]:
    """Why a plan's ``compensate`` cannot be carried out, one problem per record named."""
    if not named:
        return []
    if kind is not RevisionKind.GLOBAL:
        local = (
            "only a global replan names effects to compensate (a local replan compensates the "
            "effects of the nodes it redoes with another call); leave compensate empty"
        )
        return [local]
    problems = []
    for record_id in named:
        effect = state.effects.get(RecordId(record_id))
        if effect is None:
            known = ", ".join(state.effects) or "none"
            problems.append(
                f"compensate names {record_id!r}, which is no effect of this task ({known})"
            )
        elif not (effect.happened and effect.in_world and effect.compensation is None):
            problems.append(
                f"compensate names {record_id!r}, whose effect is {effect.status}"
                f"{', compensated already' if effect.compensation is not None else ''}: there is "
                "nothing to undo"
            )
        elif not compensates(effect.tool):
            problems.append(
                f"compensate names {record_id!r}, but tool {effect.tool!r} declares no compensate"
            )
    return problems
