"""The engine: the Plan → Execute → Verify → Diagnose → Dispatch loop over the ledger.

See docs/design.md §4-§6.

Entry points: :func:`run` (async), :func:`run_sync`, :func:`start`, :func:`resume` and
:func:`cancel`, given an :class:`Agent` (or its parts as keywords); :func:`watch`, :func:`approve`
and :func:`reject` follow and steer a task from any process. The seams it calls are narrow protocols
(:class:`Planner`, :class:`Executor`, :class:`Verifier`, :class:`Observer`); functions decorated
with :func:`tool` become an executor.
"""

from pev.engine._agent import (
    Agent,
    ExecutorLike,
    ObserverLike,
    PlannerLike,
    ToolsLike,
    VerifierLike,
    VerifierReply,
)
from pev.engine._api import DEFAULT_CRITERION, cancel, default_contract, resume, run, run_sync
from pev.engine._control import EventStream, TaskHandle, approve, reject, start, watch
from pev.engine._protocols import (
    Executor,
    NodeContext,
    Observation,
    ObserveContext,
    Observer,
    Planner,
    PlanRequest,
    Verifier,
    VerifyRequest,
    adapt,
    current_node_context,
    report_usage,
)
from pev.engine._result import RunResult
from pev.engine._retry import Retry
from pev.engine._secret import Secret
from pev.engine._tool_executor import Resources, ToolExecutor
from pev.engine._tools import Compensator, Reconciler, Tool, ToolRegistry, tool
from pev.engine._worker import WorkerReport, submit, worker

__all__ = [
    "DEFAULT_CRITERION",
    "Agent",
    "Compensator",
    "EventStream",
    "Executor",
    "ExecutorLike",
    "NodeContext",
    "Observation",
    "ObserveContext",
    "Observer",
    "ObserverLike",
    "PlanRequest",
    "Planner",
    "PlannerLike",
    "Reconciler",
    "Resources",
    "Retry",
    "RunResult",
    "Secret",
    "TaskHandle",
    "Tool",
    "ToolExecutor",
    "ToolRegistry",
    "ToolsLike",
    "Verifier",
    "VerifierLike",
    "VerifierReply",
    "VerifyRequest",
    "WorkerReport",
    "adapt",
    "approve",
    "cancel",
    "current_node_context",
    "default_contract",
    "reject",
    "report_usage",
    "resume",
    "run",
    "run_sync",
    "start",
    "submit",
    "tool",
    "watch",
    "worker",
]
