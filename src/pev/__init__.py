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

The most used names are re-exported here.
"""

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from pev._lazy import lazy_names
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
from pev.stores import MemoryStore, SQLiteStore, Store, open_store

if TYPE_CHECKING:
    from pev.stores import PostgresStore

try:
    __version__ = version("pev-agent")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

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


# Served on first use, so that ``import pev`` needs no psycopg (see pev.stores).
__getattr__ = lazy_names(__name__, {"PostgresStore": "pev.stores._postgres"})
