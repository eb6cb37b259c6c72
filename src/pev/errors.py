"""Every exception pev raises, under one root.

Failures of a task (a broken tool, a failed check, an untrustworthy verdict) are *values* that the
kernel decides on; the exceptions here are for misuse, invalid input and broken infrastructure::

    PevError
    ├── ContractError        a verification contract that cannot be honoured
    ├── PlanError            a plan that must not run (carries every problem found)
    ├── StateError           an operation the task's current state does not allow
    ├── CodecError           a value that cannot be encoded, or stored data that cannot be decoded
    ├── UsageError           pev was called in a way it cannot serve (a bug in the caller)
    │   ├── ComponentError   a planner, executor, tools, verifier or observer that will not do
    │   └── PolicyError      a RecoveryPolicy field out of range (also a ValueError)
    ├── NotSent              raised by a tool: this call reached nothing outside (safe to retry)
    ├── LeaseError           who drives a task: a lease that cannot be had or was lost
    │   ├── LeaseHeld        another live driver holds the task's lease
    │   └── LeaseLost        this driver's lease was taken over; it must write nothing more
    └── StoreError           the ledger store failed or holds something it should not
        ├── StoreUnavailable the store could not be reached or did not answer: try again
        ├── ConflictError    another writer appended the same sequence number first
        ├── LedgerCorruptError  a stored ledger fails its hash chain or its fold
        ├── SchemaVersionError  the database was written by another schema version
        └── UnknownTaskError    no task has that id

Adapters add their own leaves under ``PevError``: ``pev.llm.LLMError`` (a model endpoint failed
after its retries) carries the model and status code, never the credentials;
``pev.ray.RayUnavailable`` (the Ray cluster cannot be joined) carries the address tried.

Each error carries the ids and values it is about, so callers can act on them without parsing
the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

__all__ = [
    "CodecError",
    "ComponentError",
    "ConflictError",
    "ContractError",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LedgerCorruptError",
    "NotSent",
    "PevError",
    "PlanError",
    "PlannerUnavailable",
    "PolicyError",
    "SchemaVersionError",
    "StateError",
    "StoreError",
    "StoreUnavailable",
    "UnknownTaskError",
    "UsageError",
]


class PevError(Exception):
    """The root of every exception pev raises on purpose."""


class ContractError(PevError):
    """A verification contract is incomplete or cannot be honoured.

    Attributes:
        field: The contract field at fault (``goal``, ``success_criteria``, ...).
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class PlannerUnavailable(PevError):  # noqa: N818 - the documented public name
    """The planner's model or service could not be reached, after its own retries.

    Raised by the LLM planners (a connection that failed, a timeout, an HTTP 5xx, 429 or 408
    once the SDK's retries are spent), and by any planner of your own for the same reason. An
    outage is not a bad plan: the task ends ``failed``/``planner_unavailable`` at once, without
    spending a replan, and can be run again once the service is back.
    """


class PlanError(PevError):
    """A plan failed validation; ``problems`` lists every problem found, not just the first.

    Attributes:
        problems: One human-readable sentence per problem, in a stable order.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        count = len(self.problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid plan ({count} problem{'s' if count != 1 else ''}):\n{lines}")


class StateError(PevError):
    """The operation is not allowed in the task's current state; nothing was written.

    Attributes:
        task_id: The task concerned.
        state: The task's current phase.
    """

    def __init__(self, message: str, *, task_id: str, state: str) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.state = state


class CodecError(PevError):
    """A value could not be encoded, or stored data could not be decoded into its type.

    Attributes:
        path: Where in the value the problem is, as a dotted path (``event.plan.nodes[2]``).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class UsageError(PevError):
    """pev was called in a way it cannot serve; a bug in the calling code, never a task outcome.

    Misuse errors propagate out of ``pev.run`` in every verification mode.
    """


class ComponentError(UsageError):
    """A component is missing, of the wrong shape, or cannot be rebuilt from its import path.

    Attributes:
        role: ``planner``, ``executor``, ``tools``, ``verifier`` or ``observer``.
    """

    def __init__(self, message: str, *, role: str) -> None:
        super().__init__(message)
        self.role = role


class PolicyError(UsageError, ValueError):
    """A ``RecoveryPolicy`` field holds a value no task can run with; nothing was built.

    It is a ``ValueError`` too, as a bad argument value is in Python.

    Attributes:
        field: The field at fault (``replan_timeout_s``, ``max_nodes``, ...).
        value: The value it was given.
    """

    def __init__(self, message: str, *, field: str, value: object) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class NotSent(PevError):  # noqa: N818 - the documented public name
    """Raised by a tool that knows its call reached nothing outside: nothing was sent.

    A tool raises it when it failed *before* anything left the process (the connection was
    refused, a rate limiter said no, a precondition failed), so calling it again cannot do a
    thing twice. It is the only exception an action tool's :class:`~pev.Retry` retries on
    (docs/tools.md, "Retries"); when it is not retried (no retry policy, or the last attempt),
    the node fails with an outcome that is known: nothing was sent, so the record is
    ``failed``, never ``unknown``.

    Args:
        message: What stopped the call (default: ``"nothing was sent"``).
        cause: The exception that stopped it, kept as ``__cause__``, as ``raise NotSent(...)
            from exc`` does.
    """

    # No attribute named `cause`: Ray's RayTaskError has one, and a tool's NotSent raised on a
    # Ray worker comes back as a class made of both.
    def __init__(
        self, message: str = "nothing was sent", *, cause: BaseException | None = None
    ) -> None:
        super().__init__(message)
        if cause is not None:
            self.__cause__ = cause


class LeaseError(PevError):
    """Who drives a task: its lease could not be taken, or was lost (see docs/workers.md).

    Attributes:
        task_id: The task concerned.
    """

    def __init__(self, message: str, *, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class LeaseHeld(LeaseError):  # noqa: N818 - the documented public name
    """Another driver holds a live lease on the task: wait for it to end or expire.

    Attributes:
        task_id: The task concerned.
        owner: Who holds the lease.
        expires_at: When it expires unless renewed.
    """

    def __init__(self, task_id: str, *, owner: str, expires_at: datetime) -> None:
        super().__init__(
            f"task {task_id} is being driven by {owner} (lease until "
            f"{expires_at.isoformat(timespec='seconds')}); wait for it to end, or for its lease "
            "to expire if that driver is gone",
            task_id=task_id,
        )
        self.owner = owner
        self.expires_at = expires_at


class LeaseLost(LeaseError):  # noqa: N818 - the documented public name
    """This driver's lease on the task was taken over (a newer epoch); it writes nothing more.

    Attributes:
        task_id: The task concerned.
        owner: The driver that lost it.
        epoch: The epoch it held.
    """

    def __init__(self, task_id: str, *, owner: str, epoch: int) -> None:
        super().__init__(
            f"task {task_id}: {owner} lost its lease (epoch {epoch}) to another driver; it "
            "stopped dispatching, and the new driver continues the task",
            task_id=task_id,
        )
        self.owner = owner
        self.epoch = epoch


class StoreError(PevError):
    """The ledger store failed, or refused a write that would have corrupted it."""


class StoreUnavailable(StoreError):  # noqa: N818 - the documented public name
    """The store could not be reached, or did not answer in time: a transient fault, not damage.

    A lost connection, a server restarting, a lock or statement timeout, an SQLite file busy
    past its timeout. Nothing is known to be wrong with what is stored: the same call may be
    tried again. For a write, whether it landed is unknown; :meth:`pev.ledger.Ledger.append`
    finds out on its next attempt (a write that landed is recognised by its hashes, never
    written twice), so callers retry through it.

    Attributes:
        location: Where the store is (without any password).
        operation: What failed (``"read"``, ``"write"``, ``"connect"``, ``"lease"``).
    """

    def __init__(self, message: str, *, location: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.location = location
        self.operation = operation


class ConflictError(StoreError):
    """Another writer appended this sequence number to the task first; nothing was written.

    Attributes:
        task_id: The task concerned.
        seq: The sequence number both writers wanted.
    """

    def __init__(self, task_id: str, seq: int) -> None:
        if seq == 1:
            text = f"a task with id {task_id} exists already: give the new task another id"
        else:
            text = (
                f"task {task_id}: sequence number {seq} was appended by another writer first; "
                "re-read the task and decide again"
            )
        super().__init__(text)
        self.task_id = task_id
        self.seq = seq


class LedgerCorruptError(StoreError):
    """A stored ledger fails its hash chain or cannot be folded.

    Attributes:
        task_id: The task concerned.
        seq: The sequence number of the first bad event (or where one is missing).
    """

    def __init__(self, message: str, *, task_id: str, seq: int) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.seq = seq


class SchemaVersionError(StoreError):
    """The database was written by a schema version this pev does not read.

    Attributes:
        found: The version recorded in the database.
        expected: The version this pev reads and writes.
    """

    def __init__(self, *, location: str, found: int, expected: int) -> None:
        if found > expected:
            hint = "upgrade pev to read it, or point pev at another database"
        else:
            hint = "open it with the pev release that wrote it, or point pev at a new database"
        super().__init__(
            f"{location}: ledger schema version {found}, but this pev uses version {expected}; "
            f"{hint}"
        )
        self.found = found
        self.expected = expected


class UnknownTaskError(StoreError):
    """No task with this id exists in the store.

    Attributes:
        task_id: The id that was asked for.
    """

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r} in this store; list tasks with `pev tasks`")
        self.task_id = task_id
