"""Public entry points: ``run``, ``run_sync``, ``resume`` and ``cancel`` (docs/engine.md)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypedDict, TypeVar

from typing_extensions import Unpack

from pev._json import value_problem
from pev._logs import log_failure
from pev.engine._agent import (
    Agent,
    ExecutorLike,
    ObserverLike,
    PlannerLike,
    ToolsLike,
    VerifierLike,
    check_verifier,
)
from pev.engine._components import (
    Components,
    agent_paths,
    build_components,
    rebuild,
    use_import_roots,
)
from pev.engine._driver import Driver
from pev.engine._result import RunResult
from pev.engine._tenure import driver_started, free_if_owner_gone, new_owner
from pev.engine._trust import check_chain
from pev.engine._typed import In, Out
from pev.errors import ComponentError, LeaseHeld, StateError, StoreError, UsageError
from pev.experience import LessonBook
from pev.ledger import Lease, Ledger, Store, TaskState, acquired, new_task_id, utc_now
from pev.model import (
    JsonValue,
    TaskId,
    VerificationContract,
    VerificationMode,
    canonical_json,
    check_contract,
)
from pev.policy import RecoveryPolicy
from pev.rails import RailBus, RailLike
from pev.stores import MemoryStore

__all__ = ["DEFAULT_CRITERION", "cancel", "default_contract", "resume", "run", "run_sync"]

_log = logging.getLogger("pev.engine")

P = ParamSpec("P")

DEFAULT_CRITERION = "the task's goal is achieved"
"""The one criterion of the contract a run gets when it has a verifier but no contract."""


def default_contract(input: JsonValue, verifier: VerifierLike | None) -> VerificationContract:  # noqa: A002
    """The contract of a run given none: ``off`` without a verifier, else ``recovery``.

    With a verifier, the goal is the input (its text, or its JSON) and the one criterion is
    :data:`DEFAULT_CRITERION`.
    """
    if verifier is None:
        return VerificationContract(VerificationMode.OFF)
    return VerificationContract(VerificationMode.RECOVERY, input_text(input), (DEFAULT_CRITERION,))


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch(Generic[Out]):
    """A new task, checked and named, to write and drive (what ``run`` and ``start`` share).

    Attributes:
        task_id: The task's id, chosen before anything is written.
        store: Where it is written.
        written: Set once the task is in the store (or its writing failed).
    """

    task_id: TaskId
    store: Store
    input: JsonValue
    task: NewTask
    components: Components
    rails: tuple[RailLike, ...]
    clock: Callable[[], datetime]
    lessons: tuple[str, ...]
    experience: LessonBook | None
    written: asyncio.Event = field(default_factory=asyncio.Event)

    async def drive(self) -> RunResult[Out]:
        """Write the task under its driver's lease, drive it to its end, record it.

        Raises:
            StoreError: The store cannot be written; no task was written.
        """
        try:
            driver = await self._write()
        finally:
            self.written.set()
        result = await driver.drive()
        await learn_from(self.experience, driver.state)
        return result

    async def _write(self) -> Driver:
        agent, contract, policy = self.task.agent, self.task.contract, self.task.policy
        # Chosen before the task exists: a store that cannot answer leaves no task behind.
        goal = contract.goal or input_text(self.input)
        advice = await advice_for(self.lessons, self.experience, self.components, goal=goal)
        ledger = Ledger(self.store, clock=self.clock)
        await ledger.expire_overdue()
        # The task is written with its driver's lease: no worker of the store can claim it first.
        lease = acquired(None, self.task_id, new_owner(), now=self.clock(), lease_s=policy.lease_s)
        state = await ledger.create(
            self.input,
            contract=contract,
            policy=policy,
            components=agent_paths(agent),
            lease=lease,
            then=(driver_started(lease),),  # the driver's first event, in the same write
        )
        bus = RailBus((*agent.rails, *self.rails))
        return Driver(
            ledger,
            state,
            self.components,
            rails=bus,
            clock=self.clock,
            lessons=advice,
            lease=lease,
            # The creation's entries, read back only for rails to see: without rails, no read.
            announce=await ledger.entries(state.task_id) if bus.rails else (),
        )


def launch(
    input: In | JsonValue,  # noqa: A002 - the name users know for what the task is asked to do
    *,
    agent: Agent[In, Out] | None = None,
    planner: PlannerLike | None = None,
    verifier: VerifierLike | None = None,
    tools: ToolsLike | None = None,
    executor: ExecutorLike | None = None,
    contract: VerificationContract | None = None,
    policy: RecoveryPolicy | None = None,
    observer: ObserverLike | None = None,
    store: Store | None = None,
    rails: Iterable[RailLike] = (),
    task_id: str | None = None,
    clock: Callable[[], datetime] | None = None,
    lessons: Iterable[str] = (),
    experience: LessonBook | None = None,
) -> Launch[Out]:
    """Check a new task and name it, writing nothing yet (``run`` and ``start``).

    Takes the arguments of :func:`run`, and raises what it raises before anything is written.
    """
    parts = {
        "planner": planner,
        "verifier": verifier,
        "tools": tools,
        "executor": executor,
        "observer": observer,
    }
    task = new_task_of(input, agent, parts, contract=contract, policy=policy)
    return Launch(
        task_id=TaskId(task_id) if task_id is not None else new_task_id(),
        store=store or MemoryStore(),
        input=task.input,
        task=task,
        components=build_components(task.agent, policy=task.policy),
        rails=tuple(rails),
        clock=clock or utc_now,
        lessons=tuple(lessons),
        experience=experience,
    )


def _driven(launching: Callable[..., Launch[Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """An entry point that launches a task with ``launching`` and drives it to its end."""

    async def run(*args: Any, **kwargs: Any) -> RunResult[Any]:
        return await launching(*args, **kwargs).drive()

    return presented(run, "run", RUN_DOC, parameters_of=launching, returns="RunResult")


F = TypeVar("F", bound=Callable[..., Any])


def presented(
    function: F, name: str, doc: str, *, parameters_of: Callable[..., Any], returns: str
) -> F:
    """``function`` as ``name``, with ``doc``, and the parameters of ``parameters_of``.

    For an entry point made around another (``run`` and ``start`` around ``launch``): editors
    and ``help()`` show the launcher's parameters, and the entry point's own result.
    """
    signature = inspect.signature(parameters_of).replace(return_annotation=returns)
    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


RUN_DOC = """\
Run a task to its end: plan, execute, verify, diagnose, dispatch, within its budget.

Give the agent (``agent=``), or its parts as keywords (``planner=``, ``tools=``...), which
is a shortcut for ``agent=pev.Agent(planner, tools=...)``.

Args:
    input: What the task is asked to do (JSON).
    agent: The :class:`~pev.engine.Agent` that runs it. Bound to a module-level name, it is
        recorded by that name, so ``resume`` and other processes rebuild exactly this agent.
    planner: Instead of ``agent``: an object with an async or sync ``plan(request)``, or
        such a function.
    verifier: An object with ``verify(request)``, or such a function; needed by every
        verification mode but ``off``.
    tools: Functions decorated with ``@pev.tool`` (a list, mapping or registry).
    executor: Instead of ``tools``: an object with ``execute(node, context)`` and,
        optionally, ``reconcile(record)``.
    contract: The verification contract; by default the agent's, else ``off`` without a
        verifier and ``recovery`` (goal: the input) with one.
    policy: Budgets, deadlines and limits; by default the agent's, else the defaults.
    observer: An object with ``observe(phase, context)``, capturing evidence.
    store: Where the ledger is kept; in memory by default.
    rails: Observers of the loop (``pev.rails``), added to the agent's; they never change
        the outcome.
    task_id: The task's id; a fresh UUID by default.
    clock: Returns the current UTC time; for tests.
    lessons: Advice handed to the planner and the verifier (never evidence).
    experience: A :class:`~pev.experience.LessonBook`: its active lessons that apply to
        this task's tools and goal are added to ``lessons``, and the ended task is recorded
        in it (a store failure there is logged; the run's result stands).

With a policy that asks for approval (docs/control.md), ``run`` waits, holding no lease, while
a revision awaits a person's decision, and returns when the task ends; ``pev.start`` returns a
handle at once instead.

Returns:
    The task's result; ``result.ok`` only for ``succeeded``.

Raises:
    ContractError: The contract cannot be honoured (no verifier, no observer for required
        evidence).
    ComponentError: Missing or conflicting components (an agent and parts of one, say).
    AssertionError: A verifier's or planner's programming error, in every mode.
"""


class LaunchOptions(TypedDict, total=False):
    """The keywords ``run``, ``run_sync`` and ``start`` take besides ``input`` and ``agent``.

    What :func:`launch` takes, for the entry points' types (a test keeps the two the same).
    """

    planner: PlannerLike | None
    verifier: VerifierLike | None
    tools: ToolsLike | None
    executor: ExecutorLike | None
    contract: VerificationContract | None
    policy: RecoveryPolicy | None
    observer: ObserverLike | None
    store: Store | None
    rails: Iterable[RailLike]
    task_id: str | None
    clock: Callable[[], datetime] | None
    lessons: Iterable[str]
    experience: LessonBook | None


if TYPE_CHECKING:
    # What mypy and editors see: typed by the agent, ``pev.Agent[In, Out]`` giving a
    # ``RunResult[Out]``. At run time, the same function made around ``launch``, which shows
    # every parameter to ``help()`` and ``inspect``.

    async def run(
        input: In | JsonValue,  # noqa: A002
        *,
        agent: Agent[In, Out] | None = None,
        **options: Unpack[LaunchOptions],
    ) -> RunResult[Out]:
        """See RUN_DOC."""
        ...

else:
    run = _driven(launch)


@dataclass(frozen=True, slots=True)
class NewTask:
    """What a new task runs with: its agent, contract, policy and input, checked together.

    The input is as the ledger records it: checked against the agent's input type, as its JSON.
    """

    agent: Agent[Any, Any]
    contract: VerificationContract
    policy: RecoveryPolicy
    input: JsonValue


def new_task_of(
    input: object,  # noqa: A002
    agent: Agent[Any, Any] | None,
    parts: Mapping[str, Any],
    *,
    contract: VerificationContract | None,
    policy: RecoveryPolicy | None,
) -> NewTask:
    """The agent given (or built from its parts), and the contract and policy a new task uses.

    The contract and policy given win over the agent's; without either, the agent's, else the
    defaults (see :func:`default_contract`).

    Raises:
        ComponentError: An agent and parts of one, or no planner.
        ContractError: The contract cannot be honoured by this agent.
        UsageError: The input does not fit the agent's input type, or is not a JSON value the
            ledger can record within the policy's value limits.
    """
    agent = _agent_of(agent, parts)
    policy = policy or agent.policy or RecoveryPolicy()
    input = agent.types.recorded_input(input)  # noqa: A001 - as the ledger records it
    problem = value_problem(input, policy.value_limits, path="input")
    if problem is not None:
        raise UsageError(f"the task's input cannot be recorded: {problem}")
    contract = contract or agent.contract or default_contract(input, agent.verifier)
    check_contract(contract, has_observer=agent.observer is not None)
    check_verifier(contract, agent.verifier)
    return NewTask(agent, contract, policy, input)


def _agent_of(
    agent: Agent[Any, Any] | None,
    parts: Mapping[str, Any],
    *,
    recorded: Mapping[str, str] | None = None,
) -> Agent:
    """The agent given, else one of the parts given as keywords (never both).

    On resume (``recorded``: the task's import paths), the parts not given are rebuilt.

    Raises:
        ComponentError: An agent and parts of one, no planner, or a part neither given nor
            rebuildable.
    """
    given = [role for role, part in parts.items() if part is not None]
    if agent is not None:
        if given:
            raise ComponentError(
                f"pass agent=... or its parts ({given[0]}=...), not both; to change a part "
                f"of an agent, build another: dataclasses.replace(agent, {given[0]}=...)",
                role=given[0],
            )
        return agent
    if recorded is not None:
        return rebuild(recorded, parts)
    if parts["planner"] is None:
        raise ComponentError(
            "a run needs an agent or a planner: pass agent=... or planner=...", role="planner"
        )
    if parts["tools"] is not None and parts["executor"] is not None:
        # Only here is an empty tools=[] told apart from none given: refused with an executor.
        raise ComponentError(
            "pass exactly one of tools=[...] (functions decorated with @pev.tool) or executor=...",
            role="tools",
        )
    return Agent(
        parts["planner"],
        verifier=parts["verifier"],
        tools=parts["tools"] if parts["tools"] is not None else (),
        executor=parts["executor"],
        observer=parts["observer"],
        defined_in="",
    )


async def advice_for(
    lessons: Iterable[str], experience: LessonBook | None, components: Components, *, goal: str
) -> tuple[str, ...]:
    """The lessons given, then the experience's active lessons for these tools and goal."""
    given = tuple(lessons)
    if experience is None:
        return given
    learned = await experience.advice(tools=tuple(components.tools or ()), goal=goal)
    return tuple(dict.fromkeys((*given, *learned)))


def input_text(input: JsonValue) -> str:  # noqa: A002
    """The input as text: a string as it is, anything else as canonical JSON."""
    return input if isinstance(input, str) else canonical_json(input)


async def learn_from(experience: LessonBook | None, state: TaskState) -> None:
    """Record an ended task in ``experience``; the task's result never depends on it."""
    if experience is None or not state.terminal:
        return
    try:
        await experience.record(state)
    except StoreError:
        log_failure(
            _log,
            "task %s: recording its episode failed",
            state.task_id,
            level=logging.WARNING,
            then="no lesson is drawn from it",
        )


def _blocking(
    coroutine_function: Callable[P, Coroutine[Any, Any, RunResult[Any]]], *, name: str, doc: str
) -> Callable[P, RunResult[Any]]:
    """A synchronous facade of an async entry point, typed with the same parameters."""

    @functools.wraps(coroutine_function)
    def call(*args: P.args, **kwargs: P.kwargs) -> RunResult[Any]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine_function(*args, **kwargs))
        raise UsageError(
            f"pev.{name}() was called inside a running event loop, which it would block; "
            f"use `await pev.{coroutine_function.__name__}(...)` there"
        )

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return call


async def resume(
    task_id: str,
    *,
    store: Store,
    agent: Agent[Any, Out] | None = None,
    planner: PlannerLike | None = None,
    verifier: VerifierLike | None = None,
    tools: ToolsLike | None = None,
    executor: ExecutorLike | None = None,
    observer: ObserverLike | None = None,
    rails: Iterable[RailLike] = (),
    clock: Callable[[], datetime] | None = None,
    lessons: Iterable[str] = (),
    experience: LessonBook | None = None,
) -> RunResult[Out]:
    """Continue a task from its ledger after a crash (see docs/engine.md, "Crash and resume").

    The agent is the one given, else the one rebuilt from the import paths recorded when the
    task was created: the recorded agent, or each recorded part, where parts given as keywords
    take the place of the recorded ones. A tool comes back as the decorated tool it was, with
    its options; a path that finds only the bare function behind a decorated tool is refused.
    Records a crash left ``pending``, ``accepted`` or ``running`` are settled through the
    executor's ``reconcile(record)`` when it has one, else marked ``unknown``; no unfinished node
    is dispatched again, so an action is never re-sent. A crash while planning or verifying
    repeats that call without consuming budget. A task that has ended is returned unchanged,
    also when another driver ended it while this call was starting (it returns that end).
    A task whose lease is held by a process of this host that no longer exists (a crashed
    ``pev run``, say) is taken over at once, without waiting for the lease to expire; an owner
    on another host is trusted until its lease expires (docs/workers.md).
    ``experience`` works as in :func:`run`: its lessons join ``lessons`` for the planning
    still to come, and the task is recorded once it ends (an ended task is recorded at once).

    Raises:
        UnknownTaskError: No task has that id in ``store``.
        LedgerCorruptError: The task's chain fails verification (``seq``: its first bad
            event); nothing was done.
        ComponentError: A component was neither given nor rebuildable, or an agent was given
            with parts of one.
        LeaseHeld: Another live driver holds the task; nothing was written.
    """
    clock = clock or utc_now
    ledger = Ledger(store, clock=clock)
    await check_chain(ledger, task_id)
    await ledger.expire_overdue()
    state = await ledger.state(task_id)
    if state.terminal:
        return await _ended(state, experience, agent)
    await free_if_owner_gone(ledger, await store.lease(state.task_id), now=clock())
    use_import_roots(state.created.components)
    parts = {
        "planner": planner,
        "verifier": verifier,
        "tools": tools,
        "executor": executor,
        "observer": observer,
    }
    driver = await driver_for(
        ledger,
        state,
        _agent_of(agent, parts, recorded=state.created.components),
        rails=rails,
        clock=clock,
        lessons=lessons,
        experience=experience,
    )
    try:
        result = await driver.drive()
    except (LeaseHeld, StateError):
        # Another driver may have ended the task since it was read: then that end is the
        # answer (an ended task is returned unchanged); otherwise the refusal stands.
        ledger.forget(state.task_id)
        now = await ledger.state(state.task_id)
        if not now.terminal:
            raise
        return await _ended(now, experience, agent)
    await learn_from(experience, driver.state)
    return result


async def _ended(
    state: TaskState, experience: LessonBook | None, agent: Agent[Any, Any] | None
) -> RunResult[Any]:
    """An ended task's result, as resume returns it unchanged (its output typed by ``agent``)."""
    # Recorded again (a no-op when it was): a crash may have come between end and record.
    await learn_from(experience, state)
    result = RunResult.from_state(state)
    return result if agent is None else result.typed(agent.types)


async def driver_for(
    ledger: Ledger,
    state: TaskState,
    agent: Agent[Any, Any],
    *,
    rails: Iterable[RailLike],
    clock: Callable[[], datetime],
    lessons: Iterable[str] = (),
    experience: LessonBook | None = None,
    owner: str | None = None,
    lease_s: float | None = None,
    lease: Lease | None = None,
    drain: asyncio.Event | None = None,
    hold_on_error: bool = False,
    waits: bool = True,
) -> Driver:
    """A driver for a task that exists: ``agent`` checked against its contract, advice chosen.

    What ``resume`` and workers share; the driver takes the task's lease when it drives, unless
    it holds it already (``lease``: a worker's claim), and with ``hold_on_error`` keeps it until
    it expires if the drive raises. With ``waits`` it waits for a person's decision on a task
    awaiting approval (``resume``); without, it leaves the task there (a worker).

    Raises:
        ContractError: The task's contract calls a verifier the agent does not have.
    """
    check_verifier(state.contract, agent.verifier)
    components = build_components(agent, policy=state.policy)
    goal = state.contract.goal or input_text(state.created.input)
    advice = await advice_for(lessons, experience, components, goal=goal)
    return Driver(
        ledger,
        state,
        components,
        rails=RailBus((*agent.rails, *rails)),
        clock=clock,
        lessons=advice,
        owner=owner,
        lease_s=lease_s,
        lease=lease,
        drain=drain,
        hold_on_error=hold_on_error,
        waits=waits,
    )


async def cancel(task_id: str, *, store: Store, reason: str = "") -> TaskState:
    """Ask a task to stop, from any process; a task that has ended is returned unchanged.

    The engine driving the task stops dispatching, lets running nodes reach a terminal record,
    and ends it ``cancelled`` (or ``failed``/``cancelled`` if an action's outcome is unknown).
    """
    return await Ledger(store).cancel(task_id, reason=reason)


if TYPE_CHECKING:

    def run_sync(
        input: In | JsonValue,  # noqa: A002
        *,
        agent: Agent[In, Out] | None = None,
        **options: Unpack[LaunchOptions],
    ) -> RunResult[Out]:
        """See the runtime definition below."""
        ...

else:
    run_sync = _blocking(
        run,
        name="run_sync",
        doc="""\
:func:`run` for synchronous callers (same arguments, same result).

Raises:
    UsageError: Called inside a running event loop; use ``await pev.run(...)`` there.
""",
    )
