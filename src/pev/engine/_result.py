"""What a run returns: the task's outcome, rebuilt from the ledger alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pev.kernel import Diagnosis, TaskStatus, TerminalReason
from pev.ledger import TaskState, lineage_results
from pev.model import JsonValue, Success, TaskId

__all__ = ["RunResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """The outcome of a task. A partial or failed run never looks like a success.

    Attributes:
        task_id: The task's id (read its ledger with ``pev show``).
        status: ``succeeded``, ``partial``, ``failed`` or ``cancelled``.
        reason: Why it ended.
        outputs: Node id → value of every succeeded node of the final plan.
        failed_nodes: Nodes of the final plan without a success, plus those the verdict blames.
        diagnosis: The last diagnosis, if a verdict did not pass.
        revisions: How many revisions the task went through.
        detail: The diagnosis or valve detail behind the reason.
    """

    task_id: TaskId
    status: TaskStatus
    reason: TerminalReason
    outputs: Mapping[str, JsonValue] = field(default_factory=lambda: MappingProxyType({}))
    failed_nodes: frozenset[str] = frozenset()
    diagnosis: Diagnosis | None = None
    revisions: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True only for ``succeeded``."""
        return self.status is TaskStatus.SUCCEEDED

    @classmethod
    def from_state(cls, state: TaskState) -> RunResult:
        """The result of a task that has ended, from its folded ledger.

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
        return cls(
            task_id=state.task_id,
            status=finished.status,
            reason=finished.reason,
            outputs=finished.outputs,
            failed_nodes=frozenset(failed),
            diagnosis=state.diagnoses[-1].diagnosis if state.diagnoses else None,
            revisions=len(state.revisions),
            detail=finished.detail,
        )
