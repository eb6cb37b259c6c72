"""pev: a runtime for agents that plan, act and check their own work.

pev diagnoses why something failed before deciding what to do next (Plan → Execute → Verify →
Diagnose → Dispatch), and keeps every plan of a task in an append-only, hash-chained ledger.

The packages (docs/design.md says what each promises, docs/architecture.md how they layer):

* :mod:`pev.engine`: :class:`Agent`, the loop (``run``, ``run_sync``, ``resume``, ``cancel``)
  and ``@tool`` (with its :class:`Retry` policy);
* :mod:`pev.model`: the data model (plans, node results, records, evidence, contracts, verdicts);
* :mod:`pev.kernel`: the pure decision functions (diagnose, to_replan_action, decide);
* :mod:`pev.ledger`: events, the fold, the task state machine and the hash chain;
* :mod:`pev.stores`: the ledger stores (in-memory, SQLite, PostgreSQL) and ``open_store``;
* :mod:`pev.rails`: observers of the loop; :mod:`pev.testing`: test doubles for your agents;
* :mod:`pev.experience`: episodes, and the lessons learned from them;
* :mod:`pev.chat`: the chat-model seam; :mod:`pev.llm`: LLM planners and verifiers over it;
* :mod:`pev.sim`: the simulator demo (the ``sim`` extra);
* :mod:`pev.codec`: the one JSON codec; :mod:`pev.errors`: every exception pev raises.

The most used names are re-exported here, each imported on first use.
"""

import logging
from typing import TYPE_CHECKING

from pev._lazy import lazy_names

if TYPE_CHECKING:
    __version__: str
    from pev.engine import (
        Agent,
        Retry,
        RunResult,
        Secret,
        TaskHandle,
        approve,
        cancel,
        reject,
        resume,
        run,
        run_sync,
        start,
        submit,
        tool,
        watch,
        worker,
    )
    from pev.errors import (
        CodecError,
        ComponentError,
        ConflictError,
        ContractError,
        LeaseError,
        LeaseHeld,
        LeaseLost,
        LedgerCorruptError,
        NotSent,
        PevError,
        PlanError,
        PlannerUnavailable,
        SchemaVersionError,
        StateError,
        StoreError,
        StoreUnavailable,
        UnknownTaskError,
        UsageError,
    )
    from pev.kernel import (
        AcceptPartial,
        Budget,
        Diagnosis,
        Finish,
        GlobalReplan,
        LocalReplan,
        RootCause,
        TaskStatus,
        TerminalReason,
        decide,
        diagnose,
        to_replan_action,
    )
    from pev.ledger import Ledger, TaskPhase, TaskState, replay
    from pev.model import (
        CriterionResult,
        CriterionStatus,
        DeviceFailure,
        Effect,
        Evidence,
        ExecutionRecord,
        Plan,
        PlanNode,
        RecordStatus,
        Reliability,
        Success,
        Verdict,
        VerdictStatus,
        VerificationContract,
        VerificationMode,
        VerifierFailure,
        validate_plan,
    )
    from pev.policy import Approval, RecoveryPolicy
    from pev.stores import MemoryStore, PostgresStore, SQLiteStore, Store, open_store

# Where each name lives: imported on first use, so that `import pev` costs next to nothing and
# the command line can take its signals before the engine is loaded (docs/cli.md).
_HOMES = {
    "Agent": "pev.engine",
    "Retry": "pev.engine",
    "RunResult": "pev.engine",
    "Secret": "pev.engine",
    "TaskHandle": "pev.engine",
    "approve": "pev.engine",
    "cancel": "pev.engine",
    "reject": "pev.engine",
    "resume": "pev.engine",
    "run": "pev.engine",
    "run_sync": "pev.engine",
    "start": "pev.engine",
    "submit": "pev.engine",
    "tool": "pev.engine",
    "watch": "pev.engine",
    "worker": "pev.engine",
    "CodecError": "pev.errors",
    "ComponentError": "pev.errors",
    "ConflictError": "pev.errors",
    "ContractError": "pev.errors",
    "LeaseError": "pev.errors",
    "LeaseHeld": "pev.errors",
    "LeaseLost": "pev.errors",
    "LedgerCorruptError": "pev.errors",
    "NotSent": "pev.errors",
    "PevError": "pev.errors",
    "PlanError": "pev.errors",
    "PlannerUnavailable": "pev.errors",
    "SchemaVersionError": "pev.errors",
    "StateError": "pev.errors",
    "StoreError": "pev.errors",
    "StoreUnavailable": "pev.errors",
    "UnknownTaskError": "pev.errors",
    "UsageError": "pev.errors",
    "AcceptPartial": "pev.kernel",
    "Budget": "pev.kernel",
    "Diagnosis": "pev.kernel",
    "Finish": "pev.kernel",
    "GlobalReplan": "pev.kernel",
    "LocalReplan": "pev.kernel",
    "RootCause": "pev.kernel",
    "TaskStatus": "pev.kernel",
    "TerminalReason": "pev.kernel",
    "decide": "pev.kernel",
    "diagnose": "pev.kernel",
    "to_replan_action": "pev.kernel",
    "Ledger": "pev.ledger",
    "TaskPhase": "pev.ledger",
    "TaskState": "pev.ledger",
    "replay": "pev.ledger",
    "CriterionResult": "pev.model",
    "CriterionStatus": "pev.model",
    "DeviceFailure": "pev.model",
    "Effect": "pev.model",
    "Evidence": "pev.model",
    "ExecutionRecord": "pev.model",
    "Plan": "pev.model",
    "PlanNode": "pev.model",
    "RecordStatus": "pev.model",
    "Reliability": "pev.model",
    "Success": "pev.model",
    "Verdict": "pev.model",
    "VerdictStatus": "pev.model",
    "VerificationContract": "pev.model",
    "VerificationMode": "pev.model",
    "VerifierFailure": "pev.model",
    "validate_plan": "pev.model",
    "Approval": "pev.policy",
    "RecoveryPolicy": "pev.policy",
    "MemoryStore": "pev.stores",
    "SQLiteStore": "pev.stores",
    "Store": "pev.stores",
    "open_store": "pev.stores",
    "PostgresStore": "pev.stores._postgres",
}

# pev logs through the "pev" logger and its children, and leaves where the lines go to the
# application: with no handler at all, warnings would reach stderr through logging's last resort.
logging.getLogger("pev").addHandler(logging.NullHandler())

__all__ = [
    "AcceptPartial",
    "Agent",
    "Approval",
    "Budget",
    "CodecError",
    "ComponentError",
    "ConflictError",
    "ContractError",
    "CriterionResult",
    "CriterionStatus",
    "DeviceFailure",
    "Diagnosis",
    "Effect",
    "Evidence",
    "ExecutionRecord",
    "Finish",
    "GlobalReplan",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "Ledger",
    "LedgerCorruptError",
    "LocalReplan",
    "MemoryStore",
    "NotSent",
    "PevError",
    "Plan",
    "PlanError",
    "PlanNode",
    "PlannerUnavailable",
    "PostgresStore",
    "RecordStatus",
    "RecoveryPolicy",
    "Reliability",
    "Retry",
    "RootCause",
    "RunResult",
    "SQLiteStore",
    "SchemaVersionError",
    "Secret",
    "StateError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Success",
    "TaskHandle",
    "TaskPhase",
    "TaskState",
    "TaskStatus",
    "TerminalReason",
    "UnknownTaskError",
    "UsageError",
    "Verdict",
    "VerdictStatus",
    "VerificationContract",
    "VerificationMode",
    "VerifierFailure",
    "__version__",
    "approve",
    "cancel",
    "decide",
    "diagnose",
    "open_store",
    "reject",
    "replay",
    "resume",
    "run",
    "run_sync",
    "start",
    "submit",
    "to_replan_action",
    "tool",
    "validate_plan",
    "watch",
    "worker",
]


# Served on first use (``PostgresStore`` needs the postgres extra: see pev.stores).
_served = lazy_names(__name__, _HOMES)


def __getattr__(name: str) -> object:
    if name != "__version__":
        return _served(name)
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:  # read from the installed metadata on first use: importlib.metadata is slow to load
        found = version("pev-agent")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        found = "0.0.0"
    globals()["__version__"] = found
    return found


def __dir__() -> list[str]:
    return sorted(__all__)
