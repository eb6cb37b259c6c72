"""The planning step: ask the planner for a revision, and record it or why it was rejected.

The step calls the planner under the engine's guard (the replan deadline and the task deadline,
whichever comes first; the task's cancel), shapes what it returned into a plan (a local replan
merges replacements into the previous plan), reviews it with :mod:`pev.engine._planning`, and
writes one event: ``revision_started``, the rejection, or the task's end when time ran out (see
docs/engine.md, "Replanning").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pev import codec
from pev._json import ValueLimits, value_problem
from pev.engine._calls import BUGS, CancelledMeanwhile, GuardedCall
from pev.engine._deadline import Deadline, earliest
from pev.engine._failures import noted
from pev.engine._host import TaskHost, task_deadline_finish
from pev.engine._planning import (
    append_feedback,
    dispatched_actions,
    merge_local,
    plan_request,
    redo_set,
    review_plan,
    reviewer_rejections,
)
from pev.engine._recordable import safe_text
from pev.engine._typed import UNTYPED, AgentTypes
from pev.errors import PlannerUnavailable
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    Event,
    Rejected,
    RevisionKind,
    RevisionStarted,
    TaskFinished,
    TaskState,
    UnwindStarted,
    approval_request,
    finish,
    reject_plan,
)
from pev.model import Plan, ToolSpec
from pev.model._exceptions import describe_exception

__all__ = ["PlanStep"]


class PlanStep:
    """Plans the task's next revision, for whatever drives it (a :class:`TaskHost`)."""

    __slots__ = ("_cancel", "_compensates", "_host", "_lessons", "_plan", "_tools", "_types")

    def __init__(
        self,
        host: TaskHost,
        plan: Callable[..., Awaitable[Any]],
        *,
        cancel: asyncio.Event,
        tools: Mapping[str, ToolSpec] | None,
        lessons: tuple[str, ...],
        compensates: Callable[[str | None], bool] = lambda tool: False,
        types: AgentTypes = UNTYPED,
    ) -> None:
        self._host = host
        self._plan = plan
        self._cancel = cancel
        self._tools = tools
        self._lessons = lessons
        self._compensates = compensates
        self._types = types

    async def run(self) -> None:
        """Call the planner once and write what came of it."""
        host = self._host
        state = host.state
        kind = state.planning or RevisionKind.INITIAL
        request = plan_request(state, tools=self._tools, lessons=self._lessons, types=self._types)
        replan_left = Deadline(state.replan_deadline, host.deadline.clock).remaining_s()
        remaining = host.deadline.remaining_s()
        call = GuardedCall()
        try:
            returned = await call.run(
                self._plan(request), timeout=earliest(replan_left, remaining), cancel=self._cancel
            )
        except CancelledMeanwhile:
            return  # the loop ends the task as cancelled
        except TimeoutError:
            await host.write([_late(host.state, replan_left=replan_left, remaining=remaining)])
            return
        except BUGS:
            raise
        except PlannerUnavailable as exc:
            # An outage is not a bad plan: the task ends at once, and no replan is spent on it.
            text = noted(exc, task_id=state.task_id, who="the planner")
            detail = f"the planner could not be reached: {text}"
            down = TerminalReason.PLANNER_UNAVAILABLE
            await host.write([finish(host.state, TaskStatus.FAILED, down, detail=detail)])
            return
        except Exception as exc:  # noqa: BLE001 - a planner that raises is a rejected plan
            text = noted(exc, task_id=state.task_id, who="the planner")
            returned = _PlannerFailed(f"the planner raised {text}")
        redo = redo_set(state) if kind is RevisionKind.LOCAL else frozenset()
        limits = state.policy.value_limits
        try:
            plan, problems = self._shape(returned, kind, redo)
            if plan is not None and not problems:
                problems = review_plan(
                    state,
                    plan,
                    kind=kind,
                    redo=redo,
                    tools=self._tools,
                    compensates=self._compensates,
                )
        except BUGS:
            raise
        except Exception as exc:  # noqa: BLE001 - what a planner returns never escapes run
            # Checking a plan reads the planner's own objects, which may raise on being read.
            plan, problems = None, [f"the plan could not be read: {describe_exception(exc)}"]
        if problems:
            await host.write(
                reject_plan(
                    host.state,
                    problems=_recordable_problems(problems),
                    plan=_recordable_plan(plan, limits),
                    now=host.deadline.now(),
                    usage=call.usage,
                )
            )
            return
        if plan is None:  # pragma: no cover - _shape returns a plan or problems
            raise AssertionError("a plan without problems must exist")
        feedback = getattr(state.replan_action, "feedback", "")
        reason = "initial plan" if kind is RevisionKind.INITIAL else feedback or f"{kind} replan"
        number = len(state.revisions) + 1
        review = state.reviews[-1] if state.reviews else None
        if isinstance(review, Rejected) and review.revision == number - 1:
            reason = f"revision {review.revision} rejected by {review.by}: {review.reason}"
        events: list[Event] = [
            RevisionStarted(
                number=number,
                revision_kind=kind,
                reason=reason,
                plan=plan,
                feedback=feedback,
                lessons=self._lessons,
                redo=redo,
                usage=call.usage,
            )
        ]
        # Written with the revision, in one append: nothing of it can be dispatched before.
        asked = approval_request(
            state.policy,
            revision=number,
            actions=dispatched_actions(plan, redo, self._tools),
            now=host.deadline.now(),
        )
        if asked is not None:
            events.append(asked)
        await host.write(events)

    def _shape(
        self, returned: object, kind: RevisionKind, redo: frozenset[str]
    ) -> tuple[Plan | None, list[str]]:
        if isinstance(returned, _PlannerFailed):
            return None, [returned.problem]
        previous = self._host.state.plan
        if kind is RevisionKind.LOCAL and previous is not None:
            if returned is None:
                state = self._host.state
                feedback = getattr(state.replan_action, "feedback", "")
                if state.reviews and isinstance(state.reviews[-1], Rejected):
                    # The planner declined to change a plan a reviewer rejected: say why.
                    feedback = "; ".join(filter(None, (feedback, reviewer_rejections(state)[-1])))
                return append_feedback(previous, redo, feedback), []
            if isinstance(returned, Plan):
                return merge_local(previous, returned, redo)
        if returned is None:
            return None, ["the planner returned no plan"]
        if not isinstance(returned, Plan):
            return None, [f"the planner returned a {type(returned).__name__}, not a Plan"]
        return returned, []


def _late(
    state: TaskState, *, replan_left: float | None, remaining: float | None
) -> TaskFinished | UnwindStarted:
    """How a planner call that ran out of time ends the task: by the deadline that came first."""
    if replan_left is not None and (remaining is None or replan_left <= remaining):
        detail = f"the planner was still working at the replan deadline {state.replan_deadline}"
        expired = TerminalReason.REPLAN_DEADLINE_EXPIRED
        return finish(state, TaskStatus.FAILED, expired, detail=detail)
    return task_deadline_finish(state)


class _PlannerFailed:
    """A planner call that produced no plan to look at (it raised)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


# A rejection lists at most this many problems, each cut to this many characters: a plan of
# 100,000 bad nodes, or a node id a megabyte long, still makes one readable event.
_PROBLEMS_KEPT = 50
_PROBLEM_CHARS = 2000


def _recordable_problems(problems: list[str]) -> list[str]:
    """The problems as the ledger can hold them: valid text, bounded in size and number."""
    kept = [safe_text(text, _PROBLEM_CHARS) for text in problems[:_PROBLEMS_KEPT]]
    if len(problems) > _PROBLEMS_KEPT:
        kept.append(f"... and {len(problems) - _PROBLEMS_KEPT} more problems")
    return kept


def _recordable_plan(plan: Plan | None, limits: ValueLimits) -> Plan | None:
    """The rejected plan, when the ledger can hold it and read it back as it is; else ``None``.

    A plan whose values cannot be encoded (a NaN, an object, a value past the limits) or whose
    fields are of the wrong type (an id that is a number) would break the ledger: its
    rejection then lists the problems without the plan.
    """
    if plan is None:
        return None
    try:
        pieces: list[object] = [plan.goal]
        for node in plan.nodes:
            pieces.extend((node.id, node.description, node.tool, node.args, node.after))
        if any(value_problem(piece, limits) for piece in pieces):
            return None
        return plan if codec.loads(codec.dumps(plan), Plan) == plan else None
    except Exception:  # noqa: BLE001 - anything that cannot be read back is not kept
        return None
