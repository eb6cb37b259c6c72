"""Resume after a crash, in one process (docs/design.md §5.4).

Each test writes a task's ledger as a crashed process would have left it (a record committed
``pending`` with no end, a planner or verifier call that never returned), then resumes it. The
multi-process versions, with a real SIGKILL, are in ``test_processes.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from pev.engine import PlanRequest, VerifyRequest, resume, run
from pev.errors import ComponentError
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import (
    Ledger,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    RevisionKind,
    RevisionStarted,
    Store,
    TaskPhase,
    TaskState,
    utc_now,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    JsonValue,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
    TaskId,
    Verdict,
    VerificationContract,
    digest,
)
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import FunctionExecutor, ScriptedPlanner, ScriptedVerifier

TASK = "t1"
CONTRACT = VerificationContract(goal="stack the cubes", success_criteria=("red on blue",))
PLAN = Plan(
    "stack the cubes",
    (
        PlanNode("look", tool="camera", effect="query"),
        PlanNode("move", tool="arm", args={"cube": "red"}, after=("look",)),
        PlanNode("report", tool="camera", effect="query", after=("move",)),
    ),
)
MOVED = Success({"moved": "red"})

Reconciler = Callable[[ExecutionRecord], NodeResult | None]


class Crash(BaseException):
    """Stands in for the process dying: no engine code catches a BaseException this far down."""


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    sqlite = SQLiteStore(tmp_path / "ledger.db")
    yield sqlite
    await sqlite.close()


def executor(*, reconcile: Reconciler | None = None) -> FunctionExecutor:
    """An executor for PLAN's tools; every call is counted in ``calls``."""
    return FunctionExecutor(
        {"camera": lambda: {"red": "table"}, "arm": lambda cube: {"moved": cube}},
        reconcile=reconcile,
    )


def record(node_id: str, effect: Effect, args: Mapping[str, JsonValue]) -> ExecutionRecord:
    record_id = RecordId(uuid.uuid4().hex)
    now = utc_now()
    return ExecutionRecord(
        id=record_id,
        task_id=TaskId(TASK),
        revision=1,
        node_id=node_id,
        tool=PLAN.node(node_id).tool,
        args_digest=digest(args),
        effect=effect,
        idempotency_key=f"{TASK}/{record_id}",
        created_at=now,
        updated_at=now,
    )


async def crashed_mid_node(store: Store, node_id: str) -> ExecutionRecord:
    """The ledger of a crash while ``node_id`` ran: every node before it succeeded.

    Returns:
        The record the crash left ``pending``.
    """
    ledger = Ledger(store)
    await ledger.create("stack red on blue", contract=CONTRACT, task_id=TASK)
    await ledger.append(
        TASK,
        [
            RevisionStarted(
                number=1, revision_kind=RevisionKind.INITIAL, reason="initial plan", plan=PLAN
            )
        ],
    )
    for node in PLAN.nodes:
        started = record(node.id, node.effect or Effect.ACTION, node.args)
        await ledger.append(TASK, [NodeDispatched(record=started)])
        if node.id == node_id:
            return started
        result = MOVED if node.tool == "arm" else Success({"red": "table"})
        await ledger.append(
            TASK,
            [
                NodeFinished(
                    record_id=started.id, status=RecordStatus.SUCCEEDED, result=result, at=utc_now()
                )
            ],
        )
    raise AssertionError(f"{node_id} is not in the plan")


async def history(store: Store) -> tuple[TaskState, tuple[LedgerEntry, ...]]:
    ledger = Ledger(store)
    report = await ledger.verify(TASK)
    assert report.ok, report.problem
    return await ledger.state(TASK), await ledger.entries(TASK)


def settled_on_resume(entries: tuple[LedgerEntry, ...]) -> list[NodeFinished]:
    return [
        e.event for e in entries if isinstance(e.event, NodeFinished) and e.event.settled_on_resume
    ]


def dispatched(entries: tuple[LedgerEntry, ...], node_id: str) -> int:
    return sum(
        1
        for e in entries
        if isinstance(e.event, NodeDispatched) and e.event.record.node_id == node_id
    )


def blame_unfinished(request: VerifyRequest) -> Verdict:
    """Blame every node of the plan without a success."""
    failed = [
        n.id for n in request.plan.nodes if not isinstance(request.results.get(n.id), Success)
    ]
    if failed:
        return Verdict.failed(request.contract, failed_nodes=failed, feedback="not done")
    return Verdict.passed(request.contract)


# -- unfinished records ----------------------------------------------------------------------


async def test_an_unfinished_action_is_settled_unknown_and_never_sent_again(store: Store) -> None:
    """Without reconcile, a pending action becomes unknown; nothing is dispatched again."""
    pending = await crashed_mid_node(store, "move")
    planner, runner = ScriptedPlanner(), executor()

    result = await resume(
        TASK,
        store=store,
        planner=planner,
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    state, entries = await history(store)
    [settled] = settled_on_resume(entries)
    assert settled.record_id == pending.id
    assert settled.status is RecordStatus.UNKNOWN
    assert isinstance(settled.result, DeviceFailure)
    assert settled.result.outcome_unknown
    assert (runner.calls, planner.calls, dispatched(entries, "move")) == ({}, 0, 1)
    assert [s.node_id for s in state.skipped] == ["report"]
    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)
    assert result.failed_nodes == {"move", "report"}


async def test_an_action_reconciled_as_done_lets_the_run_go_on(store: Store) -> None:
    """reconcile() returning Success settles the record succeeded; the round continues."""
    pending = await crashed_mid_node(store, "move")
    runner = executor(reconcile=lambda record: MOVED)

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    _, entries = await history(store)
    [settled] = settled_on_resume(entries)
    assert (settled.record_id, settled.status, settled.result) == (
        pending.id,
        RecordStatus.SUCCEEDED,
        MOVED,
    )
    assert [r.id for r in runner.reconciled] == [pending.id]
    assert runner.calls == {"report": 1}
    assert dispatched(entries, "move") == 1
    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert result.outputs["move"] == {"moved": "red"}


def _raise(record: ExecutionRecord) -> NodeResult | None:
    raise ConnectionError(f"the arm does not answer about {record.id}")


@pytest.mark.parametrize(
    "reconcile",
    [
        pytest.param(lambda record: None, id="reconcile-returns-none"),
        pytest.param(_raise, id="raises"),
    ],
)
async def test_an_action_reconcile_cannot_settle_is_unknown(
    store: Store, reconcile: Reconciler
) -> None:
    """reconcile() that returns None or raises leaves the action unknown, not re-sent."""
    await crashed_mid_node(store, "move")
    runner = executor(reconcile=reconcile)

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    _, entries = await history(store)
    [settled] = settled_on_resume(entries)
    assert settled.status is RecordStatus.UNKNOWN
    assert len(runner.reconciled) == 1
    assert runner.calls == {}
    assert (result.status, result.reason) == (TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE)


async def test_an_unfinished_query_without_reconcile_runs_again(store: Store) -> None:
    """A pending query is ended cancelled (it changed nothing) and dispatched again, anew."""
    pending = await crashed_mid_node(store, "look")
    runner = executor()

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    state, entries = await history(store)
    [settled] = settled_on_resume(entries)
    assert (settled.record_id, settled.status, settled.result) == (
        pending.id,
        RecordStatus.CANCELLED,
        None,
    )
    looks = [record for record in state.records.values() if record.node_id == "look"]
    assert [(r.id, r.status) for r in looks] == [
        (pending.id, RecordStatus.CANCELLED),
        (RecordId("1:look.2"), RecordStatus.SUCCEEDED),
    ]
    assert runner.calls == {"look": 1, "move": 1, "report": 1}
    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)


async def test_a_query_cut_short_too_often_fails_as_a_device_failure(store: Store) -> None:
    """A query a crash cut short three times in a revision is settled failed, not run a fourth."""
    pending = await crashed_mid_node(store, "look")
    ledger = Ledger(store)
    record = pending
    for again in (2, 3):
        previous = record
        await ledger.append(
            TASK,
            [
                NodeFinished(
                    record_id=previous.id,
                    status=RecordStatus.CANCELLED,
                    result=None,
                    at=utc_now(),
                    settled_on_resume=True,
                )
            ],
        )
        record = replace(previous, id=RecordId(f"{pending.id}.{again}"))
        await ledger.append(TASK, [NodeDispatched(record=record)])
    runner = executor()

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    _, entries = await history(store)
    settled = settled_on_resume(entries)[-1]
    assert (settled.record_id, settled.status) == (record.id, RecordStatus.FAILED)
    assert isinstance(settled.result, DeviceFailure)
    assert "3 times" in settled.result.error
    assert runner.calls == {}
    assert result.status is TaskStatus.PARTIAL
    assert result.diagnosis is not None
    assert result.diagnosis.cause is RootCause.DEVICE_FAILURE


async def test_a_running_record_is_settled_like_a_pending_one(store: Store) -> None:
    """A record the tool had reported running is settled too; reconcile sees it running."""
    pending = await crashed_mid_node(store, "move")
    await Ledger(store).append(
        TASK, [NodeProgressed(record_id=pending.id, status=RecordStatus.RUNNING, at=utc_now())]
    )
    runner = executor(reconcile=lambda record: None)

    await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(blame_unfinished),
    )

    _, entries = await history(store)
    [settled] = settled_on_resume(entries)
    assert (settled.record_id, settled.status) == (pending.id, RecordStatus.UNKNOWN)
    assert [r.status for r in runner.reconciled] == [RecordStatus.RUNNING]
    assert runner.calls == {}


async def test_a_crash_after_the_last_node_goes_straight_to_verification(store: Store) -> None:
    """Every record finished but the round was not recorded: nothing runs again."""
    await crashed_mid_node(store, "report")
    state, _ = await history(store)
    [report] = [r for r in state.records.values() if r.node_id == "report"]
    await Ledger(store).append(
        TASK,
        [
            NodeFinished(
                record_id=report.id,
                status=RecordStatus.SUCCEEDED,
                result=Success({"red": "blue"}),
                at=utc_now(),
            )
        ],
    )
    runner, verifier = executor(), ScriptedVerifier.passing()

    result = await resume(
        TASK, store=store, planner=ScriptedPlanner(), executor=runner, verifier=verifier
    )

    _, entries = await history(store)
    assert settled_on_resume(entries) == []
    assert (runner.calls, verifier.calls) == ({}, 1)
    assert result.ok


async def test_a_crash_while_cancelling_ends_failed_when_an_action_is_unknown(
    store: Store,
) -> None:
    """A cancel requested before the crash: the unknown action makes it failed/cancelled."""
    await crashed_mid_node(store, "move")
    await Ledger(store).cancel(TASK, reason="operator stop")
    runner = executor()

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=ScriptedVerifier(),
    )

    state, entries = await history(store)
    assert [e.status for e in settled_on_resume(entries)] == [RecordStatus.UNKNOWN]
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.CANCELLED)
    assert "unknown" in result.detail
    assert state.skipped == ()
    assert runner.calls == {}


async def test_a_crash_while_cancelling_a_query_ends_cancelled(store: Store) -> None:
    """A cancel requested before the crash, with only a query in flight: cancelled/cancelled."""
    await crashed_mid_node(store, "look")
    await Ledger(store).cancel(TASK)

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=executor(),
        verifier=ScriptedVerifier(),
    )

    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)
    await history(store)


# -- ended tasks ----------------------------------------------------------------------------


async def test_resuming_an_ended_task_returns_its_result_and_writes_nothing(store: Store) -> None:
    """A terminal task needs no components: resume returns its result unchanged."""
    finished = await run(
        "stack red on blue",
        planner=ScriptedPlanner(PLAN),
        executor=executor(),
        verifier=ScriptedVerifier.passing(),
        contract=CONTRACT,
        store=store,
        task_id=TASK,
    )
    before = len(await Ledger(store).entries(TASK))

    again = await resume(TASK, store=store)

    assert again == finished
    assert len(await Ledger(store).entries(TASK)) == before


# -- planning and verifying ----------------------------------------------------------------


async def test_a_crash_before_the_first_plan_plans_again_for_free(store: Store) -> None:
    """A ledger that ends at task_created: resume asks for the initial plan, no replan spent."""
    await Ledger(store).create("stack red on blue", contract=CONTRACT, task_id=TASK)
    planner = ScriptedPlanner(PLAN)

    result = await resume(
        TASK,
        store=store,
        planner=planner,
        executor=executor(),
        verifier=ScriptedVerifier.passing(),
    )

    state, _ = await history(store)
    assert [r.kind for r in planner.requests] == [RevisionKind.INITIAL]
    assert (state.replans_used, state.planner_calls) == (0, 1)
    assert result.ok


async def test_a_crash_while_replanning_asks_the_planner_again_for_free(store: Store) -> None:
    """A crash after replan_started: resume re-asks the planner; replans_used stays at 1."""
    crashing = ScriptedPlanner(PLAN, Crash)
    verifier = ScriptedVerifier(Verdict.failed(CONTRACT, failed_nodes=["move"]))
    with pytest.raises(Crash):
        await run(
            "stack red on blue",
            planner=crashing,
            executor=executor(),
            verifier=verifier,
            contract=CONTRACT,
            store=store,
            task_id=TASK,
        )
    crashed, _ = await history(store)
    assert (crashed.phase, crashed.planning, crashed.replans_used) == (
        TaskPhase.PLANNING,
        RevisionKind.LOCAL,
        1,
    )
    planner, runner = ScriptedPlanner(None), executor()

    result = await resume(
        TASK,
        store=store,
        planner=planner,
        executor=runner,
        verifier=ScriptedVerifier.passing(),
    )

    state, _ = await history(store)
    assert [r.kind for r in planner.requests] == [RevisionKind.LOCAL]
    assert planner.requests[0].redo_nodes == {"move", "report"}  # the blamed node, downstream
    assert state.replans_used == 1
    assert runner.calls == {"report": 1}  # the move took effect: reused, not sent again
    assert (result.ok, result.revisions) == (True, 2)


async def test_a_crash_while_verifying_verifies_again_for_free(store: Store) -> None:
    """A crash inside the verifier: resume calls it again and nothing is re-executed."""
    with pytest.raises(Crash):
        await run(
            "stack red on blue",
            planner=ScriptedPlanner(PLAN),
            executor=executor(),
            verifier=ScriptedVerifier(Crash),
            contract=CONTRACT,
            store=store,
            task_id=TASK,
        )
    crashed, _ = await history(store)
    assert (crashed.phase, crashed.replans_used) == (TaskPhase.VERIFYING, 0)
    verifier, runner = ScriptedVerifier.passing(), executor()

    result = await resume(
        TASK,
        store=store,
        planner=ScriptedPlanner(),
        executor=runner,
        verifier=verifier,
    )

    state, entries = await history(store)
    assert verifier.calls == 1
    assert runner.calls == {}
    assert settled_on_resume(entries) == []
    assert (state.replans_used, len(state.verdicts)) == (0, 1)
    assert result.ok


# -- components ----------------------------------------------------------------------------


class Planner:
    """A planner object; its bound ``plan`` method is what the run is given."""

    def plan(self, request: PlanRequest) -> Plan:
        raise Crash


async def test_configured_components_are_not_rebuilt_blank(store: Store) -> None:
    """A FunctionExecutor given functions and a bound method record no path; resume asks again."""
    with pytest.raises(Crash):
        await run(
            "stack red on blue",
            planner=Planner().plan,
            executor=executor(),
            verifier=ScriptedVerifier.passing(),
            contract=CONTRACT,
            store=store,
            task_id=TASK,
        )
    crashed, _ = await history(store)
    assert dict(crashed.created.components) == {}

    with pytest.raises(ComponentError) as raised:
        await resume(
            TASK, store=store, planner=ScriptedPlanner(PLAN), verifier=ScriptedVerifier.passing()
        )

    assert raised.value.role == "executor"


async def test_a_planner_without_an_import_path_must_be_passed_again(store: Store) -> None:
    """A local function records no path: resume without a planner raises ComponentError."""

    def crash(request: PlanRequest) -> Plan:
        raise Crash

    with pytest.raises(Crash):
        await run(
            "stack red on blue",
            planner=crash,
            executor=executor(),
            store=store,
            task_id=TASK,
        )
    crashed, _ = await history(store)
    assert "planner" not in crashed.created.components

    with pytest.raises(ComponentError, match="planner") as raised:
        await resume(TASK, store=store)

    assert raised.value.role == "planner"
    assert (await history(store))[0].event_count == crashed.event_count


async def test_a_recorded_path_that_no_longer_imports_names_its_role(store: Store) -> None:
    """A planner path whose module is gone: ComponentError naming the role and the path."""
    await Ledger(store).create(
        "stack red on blue",
        contract=CONTRACT,
        components={"planner": "pev_no_such_module:plan"},
        task_id=TASK,
    )

    with pytest.raises(ComponentError, match="pev_no_such_module:plan") as raised:
        await resume(TASK, store=store, executor=executor())

    assert raised.value.role == "planner"
