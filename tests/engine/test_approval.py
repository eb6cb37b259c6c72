"""Human approval (docs/control.md): a revision that would act waits for a person's decision.

Each test runs a real task on a real store; a reviewer coroutine decides through the public
API, as another process would (the cross-process cases are in tests/test_approval_processes.py).
The tools append to a side-effect list of their own: "never sent before approval" is read from
there, not from pev's ledger.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from tests.support.approval_agent import PAYMENTS, payments_agent

import pev
from pev.errors import StateError, UsageError
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import Approved, Ledger, Rejected, TaskPhase, TaskState, utc_now
from pev.model import Effect, Plan, PlanNode, VerificationContract, VerificationMode
from pev.stores import MemoryStore, SQLiteStore
from pev.testing import ScriptedPlanner, ScriptedVerifier

CONTRACT = VerificationContract(VerificationMode.RECOVERY, "pay the invoice", ("invoice paid",))


class Payments:
    """Two tools: a lookup (query) and a payment (action) that appends to ``sent``."""

    def __init__(self) -> None:
        self.sent: list[int] = []

        @pev.tool(effect="query")
        def balance() -> int:
            return 100

        @pev.tool(effect="action")
        def pay(amount: int) -> str:
            self.sent.append(amount)
            return f"paid {amount}"

        self.tools = [balance, pay]


def paying(amount: int) -> Plan:
    """Look up the balance, then pay ``amount``."""
    return Plan(
        "pay the invoice",
        (
            PlanNode("look", "read the balance", tool="balance", effect=Effect.QUERY),
            PlanNode("pay", "pay it", tool="pay", args={"amount": amount}, after=("look",)),
        ),
    )


LOOKING = Plan("look", (PlanNode("look", "read the balance", tool="balance", effect=Effect.QUERY),))


async def awaiting(store: pev.Store, task_id: str, revision: int, timeout: float = 10) -> TaskState:
    """Wait until the task awaits approval of ``revision``; its state then."""
    ledger = Ledger(store)
    async with asyncio.timeout(timeout):
        while True:
            state = await ledger.state(task_id)
            if state.awaiting is not None and state.awaiting.revision == revision:
                return state
            assert not state.terminal, f"ended {state.finished} before awaiting approval"
            await asyncio.sleep(0.01)


def approval(mode: str = "actions", **options: float) -> pev.RecoveryPolicy:
    """A policy asking for approval (and its timeout, if given)."""
    return pev.RecoveryPolicy(approval=mode, **options)  # type: ignore[arg-type]


async def started(store: pev.Store, planner: object, payments: Payments, **options: object):  # type: ignore[no-untyped-def]
    """``pev.start`` a payment task on ``store`` with a passing verifier."""
    options.setdefault("contract", CONTRACT)
    return await pev.start(
        "pay the invoice",
        planner=planner,  # type: ignore[arg-type]
        tools=payments.tools,
        verifier=ScriptedVerifier.passing(),
        store=store,
        **options,  # type: ignore[arg-type]
    )


async def test_an_action_waits_for_approval_and_runs_once_approved() -> None:
    """Nothing is sent before the approval; who approved, and their note, are in the ledger."""
    store, payments = MemoryStore(), Payments()
    handle = await started(store, ScriptedPlanner(paying(40)), payments, policy=approval())
    state = await awaiting(store, handle.task_id, 1)
    assert state.phase is TaskPhase.AWAITING_APPROVAL
    assert state.awaiting is not None
    assert state.awaiting.actions == ("pay",)
    await asyncio.sleep(0.1)
    assert payments.sent == []  # the lookup waits too: nothing of the revision is dispatched
    assert not state.records
    await handle.approve(by="ada", note="invoice checked")
    result = await handle.result()
    assert (result.status, result.reason) == (TaskStatus.SUCCEEDED, TerminalReason.PASSED)
    assert payments.sent == [40]
    final = await handle.state()
    assert final.reviews == (Approved(revision=1, by="ada", note="invoice checked"),)
    kinds = [entry.event.kind for entry in await Ledger(store).entries(handle.task_id)]
    assert kinds.index("approval_requested") == kinds.index("revision_started") + 1
    assert kinds.index("approved") < kinds.index("node_dispatched")
    assert (await Ledger(store).verify(handle.task_id)).ok


async def test_a_query_only_plan_needs_no_approval_under_actions() -> None:
    """approval="actions" lets a revision of queries run at once; "always" stops it too."""
    payments = Payments()
    result = await pev.run(
        "look", planner=lambda _: LOOKING, tools=payments.tools, policy=approval()
    )
    assert result.ok
    store = MemoryStore()
    handle = await started(store, ScriptedPlanner(LOOKING), payments, policy=approval("always"))
    state = await awaiting(store, handle.task_id, 1)
    assert state.awaiting is not None
    assert state.awaiting.actions == ()
    await handle.approve()
    assert (await handle.result()).ok
    assert (await handle.state()).reviews[0].by  # the user this process runs as, by default


async def test_a_node_marked_action_in_the_plan_asks_for_approval() -> None:
    """A plan node's own effect=action counts, whatever its tool says."""
    store, payments = MemoryStore(), Payments()
    plan = Plan("look", (PlanNode("look", "read it", tool="balance", effect=Effect.ACTION),))
    handle = await started(store, ScriptedPlanner(plan), payments, policy=approval())
    state = await awaiting(store, handle.task_id, 1)
    assert state.awaiting is not None
    assert state.awaiting.actions == ("look",)
    await handle.cancel("changed my mind")
    result = await handle.result()
    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)


async def test_a_rejection_is_fed_to_the_planner_and_the_next_plan_is_approved() -> None:
    """The reviewer's reason reaches the planner; the replan costs one replan of the budget."""
    store, payments = MemoryStore(), Payments()
    planner = ScriptedPlanner(paying(900), paying(40))
    handle = await started(store, planner, payments, policy=approval())
    await awaiting(store, handle.task_id, 1)
    await pev.reject(handle.task_id, "900 is the whole account; pay the 40 due", store=store)
    await awaiting(store, handle.task_id, 2)
    second = planner.requests[1]
    assert any("pay the 40 due" in rejection for rejection in second.rejections)
    assert second.previous_plan == paying(900)
    await pev.approve(handle.task_id, store=store, by="ada", revision=2)
    result = await handle.result()
    assert result.ok
    assert result.revisions == 2
    assert payments.sent == [40]  # the rejected plan sent nothing
    state = await handle.state()
    assert state.replans_used == 1
    assert [type(review) for review in state.reviews] == [Rejected, Approved]


@pytest.mark.parametrize(
    ("mode", "max_replans"),
    [(VerificationMode.RECOVERY, 0), (VerificationMode.ENFORCE, 2)],
    ids=["budget-spent", "not-recovery"],
)
async def test_a_rejection_without_a_replan_left_ends_failed_rejected(
    mode: VerificationMode, max_replans: int
) -> None:
    """With no replan left, or outside recovery mode, a rejection ends the task."""
    store, payments = MemoryStore(), Payments()
    handle = await started(
        store,
        ScriptedPlanner(paying(40)),
        payments,
        contract=VerificationContract(mode, "pay", ("invoice paid",)),
        policy=pev.RecoveryPolicy(approval="actions", max_replans=max_replans),
    )
    await awaiting(store, handle.task_id, 1)
    await handle.reject("not this month", by="bob")
    result = await handle.result()
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.REJECTED)
    assert "not this month" in result.detail
    assert "bob" in result.detail
    assert payments.sent == []


async def test_reject_and_stop_ends_the_task_with_replans_left() -> None:
    """stop=True: the reviewer wants no other plan; the task ends failed/rejected at once."""
    store, payments = MemoryStore(), Payments()
    planner = ScriptedPlanner(paying(900), paying(40))
    handle = await started(
        store, planner, payments, policy=pev.RecoveryPolicy(approval="actions", max_replans=3)
    )
    await awaiting(store, handle.task_id, 1)
    await handle.reject("wrong vendor", by="bob", revision=1, stop=True)
    result = await handle.result()
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.REJECTED)
    assert "revision 1 was rejected by bob: wrong vendor; the reviewer stopped the task" in (
        result.detail
    )
    assert len(planner.requests) == 1  # no other plan was asked for
    assert payments.sent == []
    state = await handle.state()
    assert state.replans_used == 0
    assert state.reviews == (Rejected(revision=1, by="bob", reason="wrong vendor"),)


async def test_a_local_replan_rejected_is_planned_again_for_the_same_nodes() -> None:
    """A rejected local revision is replanned locally: kept nodes are not dispatched again."""
    store, payments = MemoryStore(), Payments()
    planner = ScriptedPlanner(paying(40), None, paying(41))
    handle = await pev.start(
        "pay",
        planner=planner,
        tools=payments.tools,
        verifier=ScriptedVerifier(
            lambda request: pev.Verdict.failed(
                request.contract, failed_nodes=["pay"], feedback="pay 41"
            ),
            lambda request: pev.Verdict.passed(request.contract),
        ),
        contract=CONTRACT,
        store=store,
        policy=pev.RecoveryPolicy(approval="actions", max_replans=3),
    )
    await awaiting(store, handle.task_id, 1)
    await handle.approve()
    declined = await awaiting(store, handle.task_id, 2)
    assert declined.revisions[-1].kind == "local"
    await handle.reject("the amount must be 41, as the verifier said")
    state = await awaiting(store, handle.task_id, 3)
    assert state.revisions[-1].kind == "local"
    assert state.revisions[-1].redo == frozenset({"pay"})
    await handle.approve()
    result = await handle.result()
    assert result.ok
    assert payments.sent == [40, 41]
    looks = [r for r in (await handle.state()).records.values() if r.node_id == "look"]
    assert len(looks) == 1  # kept from revision 1


async def test_the_approval_deadline_ends_the_task_failed_approval_expired() -> None:
    """Nobody decides in time: the waiting run ends the task itself."""
    store, payments = MemoryStore(), Payments()
    result = await pev.run(
        "pay",
        planner=lambda _: paying(40),
        tools=payments.tools,
        store=store,
        policy=approval(approval_timeout_s=0.3),
    )
    assert (result.status, result.reason) == (TaskStatus.FAILED, TerminalReason.APPROVAL_EXPIRED)
    assert "revision 1" in result.detail
    assert payments.sent == []


async def test_the_task_deadline_also_holds_while_awaiting_approval() -> None:
    """task_timeout_s passing first ends the task task_deadline_expired, not approval_expired."""
    result = await pev.run(
        "pay",
        planner=lambda _: paying(40),
        tools=Payments().tools,
        policy=approval(approval_timeout_s=60, task_timeout_s=0.3),
    )
    assert (result.status, result.reason) == (
        TaskStatus.FAILED,
        TerminalReason.TASK_DEADLINE_EXPIRED,
    )


async def test_expiry_needs_no_waiting_driver() -> None:
    """A task nobody waits on expires through expire_overdue (what every engine runs)."""
    store, payments = MemoryStore(), Payments()
    ledger = Ledger(store)
    handle = await started(store, ScriptedPlanner(paying(40)), payments, policy=approval())
    state = await awaiting(store, handle.task_id, 1)
    # Read back the deadline's absence, then expire with a clock far ahead: nothing to do.
    assert (await ledger.expire_overdue(utc_now() + timedelta(days=9))) == ()
    await handle.cancel()
    await handle.result()
    timed = await started(
        store, ScriptedPlanner(paying(40)), payments, policy=approval(approval_timeout_s=60)
    )
    state = await awaiting(store, timed.task_id, 1)
    assert state.awaiting is not None
    assert state.awaiting.deadline is not None
    summary = await store.summary(timed.task_id)
    assert summary is not None
    assert summary.replan_deadline == state.awaiting.deadline
    expired = await Ledger(store).expire_overdue(state.awaiting.deadline + timedelta(seconds=1))
    assert expired == (timed.task_id,)
    result = await timed.result()
    assert result.reason is TerminalReason.APPROVAL_EXPIRED


async def test_a_task_awaiting_approval_holds_no_lease(tmp_path: object) -> None:
    """While it waits, the lease is free; the waiting run takes a new one to go on."""
    store, payments = SQLiteStore(f"{tmp_path}/ledger.db"), Payments()
    try:
        handle = await started(store, ScriptedPlanner(paying(40)), payments, policy=approval())
        await awaiting(store, handle.task_id, 1)
        await asyncio.sleep(0.05)  # the drive releases the lease after its last write
        lease = await store.lease(handle.task_id)
        assert lease is not None
        assert not lease.live(utc_now())
        await handle.approve()
        assert (await handle.result()).ok
        drivers = (await handle.state()).drivers
        assert [driver.epoch for driver in drivers] == [1, 2]
        assert drivers[0].owner == drivers[1].owner
    finally:
        await store.close()


async def test_deciding_on_the_wrong_thing_is_refused_and_writes_nothing() -> None:
    """Approving another revision, a task not awaiting approval, or an empty reason: refused."""
    store, payments = MemoryStore(), Payments()
    handle = await started(store, ScriptedPlanner(paying(40)), payments, policy=approval())
    await awaiting(store, handle.task_id, 1)
    before = (await handle.state()).event_count
    with pytest.raises(StateError, match="awaits approval of revision 1, not 2"):
        await handle.approve(revision=2)
    with pytest.raises(UsageError, match="must not be empty"):
        await handle.reject("   ")
    with pytest.raises(UsageError, match="by must be text"):
        await handle.approve(by=7)  # type: ignore[arg-type]
    assert (await handle.state()).event_count == before
    await handle.approve(revision=1)
    await handle.result()
    with pytest.raises(StateError, match="is succeeded, not awaiting_approval"):
        await handle.approve()
    plain = await pev.run("look", planner=lambda _: LOOKING, tools=payments.tools, store=store)
    with pytest.raises(StateError, match="not awaiting_approval"):
        await pev.reject(plain.task_id, "no", store=store)


def test_the_policy_names_a_bad_approval_value() -> None:
    """approval takes never, actions or always; anything else names the field and the choices."""
    with pytest.raises(pev.PevError, match="approval must be one of 'never', 'actions', 'always'"):
        pev.RecoveryPolicy(approval="sometimes")  # type: ignore[arg-type]
    with pytest.raises(pev.PevError, match="approval_timeout_s"):
        pev.RecoveryPolicy(approval_timeout_s=0)
    assert pev.RecoveryPolicy(approval="always").approval is pev.Approval.ALWAYS


async def left_by_a_worker(store: pev.Store) -> tuple[str, asyncio.Event, asyncio.Task[Any]]:
    """A payment task submitted and driven by a worker until it awaits approval.

    Returns the task's id, the worker's stop event and the worker's task (still running).
    """
    PAYMENTS.clear()
    task_id = await pev.submit("pay", agent=payments_agent, store=store)
    stop = asyncio.Event()
    running = asyncio.create_task(pev.worker(store, stop=stop, poll_s=0.05))
    await awaiting(store, task_id, 1)
    return task_id, stop, running


async def test_a_worker_leaves_a_task_awaiting_approval_and_another_claim_finishes_it() -> None:
    """Workers never hold a waiting task: they release it, and claim it once it is approved."""
    store = MemoryStore()
    task_id, stop, running = await left_by_a_worker(store)
    assert PAYMENTS == []
    await asyncio.sleep(0.2)  # the worker does not claim it back while it waits
    assert (await Ledger(store).state(task_id)).phase is TaskPhase.AWAITING_APPROVAL
    await pev.approve(task_id, store=store, by="ada")
    async with asyncio.timeout(10):
        while not (await Ledger(store).state(task_id)).terminal:
            await asyncio.sleep(0.02)
    stop.set()
    report = await running
    assert (report.awaiting_approval, report.ended) == (1, 1)
    assert PAYMENTS == [40]
    assert (await Ledger(store).state(task_id)).finished.status is TaskStatus.SUCCEEDED  # type: ignore[union-attr]


async def test_resume_of_a_task_awaiting_approval_waits_then_goes_on() -> None:
    """resume finds the task waiting: it waits too, holding nothing, and drives on once decided."""
    store = MemoryStore()
    task_id, stop, running = await left_by_a_worker(store)
    stop.set()
    await running
    resuming = asyncio.create_task(pev.resume(task_id, store=store))
    await asyncio.sleep(0.1)
    assert not resuming.done()
    await pev.approve(task_id, store=store)
    result = await asyncio.wait_for(resuming, 10)
    assert result.ok
    assert PAYMENTS == [40]


async def test_a_cancel_between_the_decision_and_the_drive_ends_the_run_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancel written while nobody holds the lease, just after the decision: the waiting
    driver's run ends cancelled (found by the viewer's operator test: it raised StateError)."""
    from pev.engine._driver import Driver

    store, payments = MemoryStore(), Payments()
    waited = Driver._wait_turn

    async def then_cancelled(self: Driver) -> TaskState:
        state = await waited(self)
        await pev.cancel(state.task_id, store=store, reason="an operator changed their mind")
        return state

    monkeypatch.setattr(Driver, "_wait_turn", then_cancelled)
    planner = ScriptedPlanner(paying(40), paying(35))
    handle = await started(store, planner, payments, policy=approval())
    await awaiting(store, handle.task_id, 1)
    # Rejected, the task awaits its replan: a cancel then ends it at once, lease or none.
    await handle.reject(by="ada", reason="not 40")
    result = await handle.result()
    assert (result.status, result.reason) == (TaskStatus.CANCELLED, TerminalReason.CANCELLED)
    assert payments.sent == []


def test_who_decides_defaults_to_pev_user_then_the_process_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A console run as a service account records decisions under PEV_USER."""
    import getpass

    from pev.engine._control import reviewer

    monkeypatch.setenv("PEV_USER", "  ops-console ")
    assert reviewer() == "ops-console"
    monkeypatch.setenv("PEV_USER", " ")
    assert reviewer() == getpass.getuser()
    monkeypatch.delenv("PEV_USER")
    assert reviewer() == getpass.getuser()
