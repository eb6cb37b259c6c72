"""What a run returns: the task's outcome, rebuilt from the ledger alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic, cast

from pev.engine._typed import AgentTypes, Out
from pev.kernel import Diagnosis, TaskStatus, TerminalReason
from pev.ledger import TaskEffect, TaskState, lineage_records, lineage_results
from pev.model import DeviceFailure, JsonValue, NodeResult, Success, TaskId, VerifierFailure

__all__ = ["RunResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult(Generic[Out]):
    """The outcome of a task. A partial or failed run never looks like a success.

    ``RunResult[Out]`` is the result of a ``pev.Agent[In, Out]``: its ``output`` is the agent's
    output type.

    Attributes:
        task_id: The task's id (read its ledger with ``pev show``).
        status: ``succeeded``, ``partial``, ``failed`` or ``cancelled``.
        reason: Why it ended.
        outputs: Node id → value of every succeeded node of the final plan.
        failed_nodes: Nodes of the final plan without a success, plus those the verdict blames.
        diagnosis: The last diagnosis, if a verdict did not pass.
        revisions: How many revisions the task went through.
        detail: Why it ended, in words: the diagnosis or valve detail behind the reason, then
            each failed node of the final plan with its error (``n2 (book_room): KeyError:
            'room' at tools.py:12 in book_room``), and for an untrustworthy verdict, what was
            wrong with it; ``; `` between them. Empty for a success, unless its agent could
            not make the task's output: then it says why.
        effects: What the task did to the world: each action that took effect, or may have
            (``unknown``), or that a reconciliation settled, in the order they came about, with
            the revision that superseded it and its compensation, where one did (docs/engine.md,
            "Effects happen once"). Effects superseded and left in place are listed too.
        output: A succeeded task's output, made by its agent's ``output=`` (docs/engine.md,
            "Typed agents"), as the output function's return type; ``None`` for a task that
            did not succeed, an agent without ``output=``, or an output that could not be made
            (``detail`` says why). Read back without the agent, it is the recorded JSON.
    """

    task_id: TaskId
    status: TaskStatus
    reason: TerminalReason
    outputs: Mapping[str, JsonValue] = field(default_factory=lambda: MappingProxyType({}))
    failed_nodes: frozenset[str] = frozenset()
    diagnosis: Diagnosis | None = None
    revisions: int = 0
    detail: str = ""
    effects: tuple[TaskEffect, ...] = ()
    output: Out | None = None

    @property
    def ok(self) -> bool:
        """True only for ``succeeded``."""
        return self.status is TaskStatus.SUCCEEDED

    @classmethod
    def from_state(cls, state: TaskState) -> RunResult[Any]:
        """The result of a task that has ended, from its folded ledger (its output as JSON).

        Raises:
            ValueError: The task has not ended.
        """
        finished = state.finished
        if finished is None:
            raise ValueError(f"task {state.task_id} has not ended (phase {state.phase})")
        plan = state.plan
        results = lineage_results(state)
        failed = {
            node_id
            for node_id in (plan.node_ids if plan else ())
            if not isinstance(results.get(node_id), Success)
        }
        verdicts = [recorded.verdict for recorded in state.verdicts if recorded.verdict]
        if verdicts:
            failed |= set(verdicts[-1].failed_nodes)
        return RunResult(
            task_id=state.task_id,
            status=finished.status,
            reason=finished.reason,
            outputs=finished.outputs,
            failed_nodes=frozenset(failed),
            diagnosis=state.diagnoses[-1].diagnosis if state.diagnoses else None,
            revisions=len(state.revisions),
            detail=_detail(state, finished.detail, failed, results),
            effects=tuple(state.effects.values()),
            output=finished.output,
        )

    def typed(self, types: AgentTypes) -> RunResult[Any]:
        """This result with its output as the agent's output type (see :meth:`from_state`).

        Raises:
            UsageError: The recorded output no longer fits the agent's output type.
        """
        if self.output is None or not types.has_output:
            return self
        return replace(self, output=types.typed_output(cast("JsonValue", self.output)))


def _detail(
    state: TaskState, ended: str, failed: set[str], results: Mapping[str, NodeResult]
) -> str:
    """The task's detail, then each failed node of the final plan with why, in plan order."""
    parts = [ended] if ended else []
    if state.finished is not None and state.finished.reason is TerminalReason.VERIFIER_UNRELIABLE:
        last = state.verdicts[-1] if state.verdicts else None
        if last is not None and last.problems:
            parts.append("verifier: " + "; ".join(last.problems))
    plan = state.plan
    if plan is None or not failed:
        return "; ".join(parts)
    # A node with a terminal record but no result was cancelled before it produced one.
    recorded = {record.node_id for record in lineage_records(state) if record.terminal}
    blocked = {
        skipped.node_id: skipped.blocked_by
        for skipped in state.skipped
        if state.revision is not None and skipped.revision == state.revision.number
    }
    for node in plan.nodes:
        if node.id not in failed:
            continue
        why = _why(results.get(node.id), blocked.get(node.id), node.id in recorded)
        tool = f" ({node.tool})" if node.tool else ""
        parts.append(f"{node.id}{tool}: {why}")
    return "; ".join(parts)


def _why(result: NodeResult | None, blocked_by: tuple[str, ...] | None, recorded: bool) -> str:
    match result:
        case DeviceFailure(error=error):
            return error
        case VerifierFailure(reason=reason):
            return reason
        case Success():
            return "succeeded, but the verifier blames it"
    if blocked_by:
        return f"not run, as {', '.join(blocked_by)} did not succeed"
    return "cancelled" if recorded else "not run"
