"""Real ledgers for the rail tests: tasks written event by event, emitted the way the engine does.

``Tasks`` writes through a real :class:`~pev.ledger.Ledger`; each ``append`` can hand the entries
it just wrote to a :class:`~pev.rails.RailBus`, as the engine does after every append. The whole
tasks it writes (``simple``, ``everything``) end, as a drive does, by draining the bus, so that
the rails have seen everything by the time they return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from tests.support import builders

from pev.kernel import Finish, GlobalReplan, TaskStatus, TerminalReason, diagnose
from pev.ledger import (
    ApprovalRequested,
    Approved,
    AwaitingReplan,
    CaptureFailed,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    DriverStarted,
    EffectCompensated,
    EffectSuperseded,
    Event,
    Ledger,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeReused,
    NodeSkipped,
    RecordReconciled,
    Rejected,
    RevisionKind,
    RoundExecuted,
    StartFailed,
    TaskFinished,
    TaskState,
    UnwindStarted,
    VerdictRecorded,
    begin_replan,
    dispatch,
    lineage_results,
    reject_plan,
    request_cancel,
)
from pev.model import (
    DeviceFailure,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordStatus,
    Reliability,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
    digest,
)
from pev.rails import RailBus, RailEvent
from pev.stores import MemoryStore
from pev.testing import FakeClock

START = datetime(2026, 1, 1, tzinfo=UTC)
CONTRACT = VerificationContract(
    VerificationMode.RECOVERY, "water the plants", ("soil is damp",), required_evidence=("state",)
)


@dataclass
class Recorder:
    """A rail that keeps every event it is given."""

    events: list[RailEvent] = field(default_factory=list)

    def on_event(self, event: RailEvent) -> None:
        self.events.append(event)

    @property
    def phases(self) -> list[str]:
        return [str(event.phase) for event in self.events]


class Tasks:
    """Writes tasks into one ledger, optionally emitting each append to a bus."""

    def __init__(self, bus: RailBus | None = None) -> None:
        # Moves one second each time it is read, from one second past START.
        self.clock = FakeClock(START + timedelta(seconds=1), step=1)
        self.ledger = Ledger(MemoryStore(), clock=self.clock)
        self.bus = bus
        self._records = 0

    async def create(self, task_id: str) -> TaskState:
        state = await self.ledger.create({"ask": "water"}, contract=CONTRACT, task_id=task_id)
        await self._emit(task_id, 1, state)
        return state

    async def append(self, task_id: str, events: Sequence[Event]) -> TaskState:
        state = await self.ledger.append(task_id, events)
        await self._emit(task_id, len(events), state)
        return state

    async def entries(self, task_id: str) -> tuple[LedgerEntry, ...]:
        return await self.ledger.entries(task_id)

    async def drain(self) -> None:
        """Wait for the bus's rails to see what was emitted, as the engine does after a drive."""
        if self.bus is not None:
            await self.bus.drain()

    async def _emit(self, task_id: str, count: int, state: TaskState) -> None:
        if self.bus is not None:
            written = (await self.ledger.entries(task_id))[-count:]
            await self.bus.emit(written, state)

    def record(self, state: TaskState, node: PlanNode) -> ExecutionRecord:
        self._records += 1
        now = self.clock()
        return builders.record(
            f"{state.task_id}-r{self._records}",
            node.id,
            task_id=state.task_id,
            revision=state.revision.number if state.revision else 0,
            tool=node.tool,
            args_digest=digest(dict(node.args)),
            idempotency_key=f"{state.task_id}:{self._records}",
            at=now,
        )

    async def run_node(self, task_id: str, node: PlanNode, result: NodeResult) -> TaskState:
        state = await self.ledger.state(task_id)
        record = self.record(state, node)
        await self.append(task_id, [NodeDispatched(record=record)])
        return await self.append(task_id, [builders.finished(record.id, result, at=self.clock())])

    async def revision(self, task_id: str, plan: Plan, *, number: int = 1) -> TaskState:
        kind = RevisionKind.INITIAL if number == 1 else RevisionKind.GLOBAL
        reason = "initial plan" if number == 1 else "try again"
        return await self.append(
            task_id, [builders.revision(number, kind, plan=plan, reason=reason)]
        )

    async def effects(self, task_id: str) -> TaskState:
        """A task whose ledger holds what befalls effects: reuse, superseding, compensation."""
        await self.create(task_id)
        pour = PlanNode("pour", "pour water", tool="can", args={"litres": 1})
        more = PlanNode("more", "pour more", tool="can", args={"litres": 2})
        again = PlanNode("again", "pour water", tool="can", args={"litres": 1})
        state = await self.revision(task_id, Plan("water the plants", (pour, more, again)))
        poured, more_poured = (
            self.record(state, pour),
            self.record(state, more),
        )
        for record, value in ((poured, 1), (more_poured, 2)):
            await self.append(task_id, [NodeDispatched(record=record)])
            await self.append(task_id, [builders.finished(record.id, Success(value))])
        await self.append(task_id, [NodeReused(revision=1, node_id="again", record_id=poured.id)])
        refund, undo = self.record(state, more), self.record(state, pour)
        await self.append(
            task_id,
            [
                EffectSuperseded(record_id=more_poured.id, revision=1, reason="too much"),
                CompensationDispatched(effect=more_poured.id, record=refund),
            ],
        )
        failed = DeviceFailure("more", "the drain is blocked")
        await self.append(
            task_id,
            [
                CompensationFailed(
                    effect=more_poured.id,
                    record_id=refund.id,
                    status=RecordStatus.FAILED,
                    result=failed,
                    at=self.clock(),
                ),
                CompensationDispatched(effect=poured.id, record=undo),
            ],
        )
        await self.append(
            task_id,
            [
                EffectCompensated(
                    effect=poured.id, record_id=undo.id, result=Success(None), at=self.clock()
                ),
                UnwindStarted(status=TaskStatus.FAILED, reason=TerminalReason.EXECUTION_FAILED),
            ],
        )
        state = await self.append(
            task_id,
            [TaskFinished(status=TaskStatus.PARTIAL, reason=TerminalReason.DEVICE_FAILURE)],
        )
        await self.drain()
        return state

    async def simple(
        self, task_id: str, results: Mapping[PlanNode, NodeResult], *, blame: Sequence[str] = ()
    ) -> TaskState:
        """One revision: run each node, verify (failing on ``blame``), and finish."""
        await self.create(task_id)
        state = await self.revision(task_id, Plan("water the plants", tuple(results)))
        for node, result in results.items():
            state = await self.run_node(task_id, node, result)
        ok = all(isinstance(result, Success) for result in results.values())
        state = await self.append(task_id, [RoundExecuted(revision=1, executed_ok=ok)])
        if blame:
            verdict = Verdict.failed(CONTRACT, failed_nodes=blame, feedback="still dry")
            diagnosis = diagnose(verdict, Reliability.OK, lineage_results(state))
            judged: list[Event] = [
                VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK),
                Diagnosed(revision=1, diagnosis=diagnosis),
            ]
            decision = Finish(TaskStatus.PARTIAL, TerminalReason.DEVICE_FAILURE, detail="broken")
        else:
            verdict = Verdict.passed(CONTRACT)
            judged = [VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK)]
            decision = Finish(TaskStatus.SUCCEEDED, TerminalReason.PASSED)
        state = await self.append(task_id, judged)
        state = await self.append(task_id, dispatch(state, decision, now=self.clock()))
        await self.drain()
        return state

    async def everything(self, task_id: str) -> TaskState:
        """A task whose ledger holds every kind of event there is."""
        await self.create(task_id)
        await self.append(task_id, [StartFailed(owner="host:1:a", epoch=1, cause="ImportError: x")])
        await self.append(task_id, [DriverStarted(owner="host:1:a", epoch=2, host="host")])
        state = await self.ledger.state(task_id)
        rejected = reject_plan(state, problems=("no nodes",), plan=None, now=self.clock())
        state = await self.append(task_id, rejected)
        state = await self.append(task_id, begin_replan(state, now=self.clock()))
        pour = PlanNode("pour", "pour water", tool="can", args={"litres": 1})
        look = PlanNode("look", "look at the soil", tool="camera", after=("pour",))
        state = await self.revision(task_id, Plan("water the plants", (pour, look)))
        await self.append(task_id, [ApprovalRequested(revision=1, actions=("pour",))])
        state = await self.append(task_id, [Approved(revision=1, by="ada", note="go")])
        record = self.record(state, pour)
        await self.append(task_id, [NodeDispatched(record=record)])
        lost = DeviceFailure("pour", "no answer", is_timeout=True, outcome_unknown=True)
        await self.append(
            task_id,
            [
                NodeProgressed(record_id=record.id, status=RecordStatus.RUNNING, at=self.clock()),
                NodeFinished(
                    record_id=record.id, status=RecordStatus.UNKNOWN, result=lost, at=self.clock()
                ),
                NodeSkipped(revision=1, node_id="look", blocked_by=("pour",)),
            ],
        )
        observed = builders.captured(
            f"{task_id}-e1", source="soil probe", at=self.clock(), payload={"moisture": 0.4}
        )
        await self.append(
            task_id,
            [
                RecordReconciled(record_id=record.id, result=Success({"poured": True})),
                observed,
                CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error="camera offline"),
            ],
        )
        state = await self.append(task_id, [RoundExecuted(revision=1, executed_ok=False)])
        verdict = Verdict.failed(CONTRACT, failed_nodes=["look"], feedback="no picture")
        diagnosis = diagnose(verdict, Reliability.OK, lineage_results(state))
        state = await self.append(
            task_id,
            [
                VerdictRecorded(revision=1, verdict=verdict, reliability=Reliability.OK),
                Diagnosed(revision=1, diagnosis=diagnosis),
            ],
        )
        state = await self.append(
            task_id, dispatch(state, GlobalReplan("look again"), now=self.clock())
        )
        state = await self.append(task_id, begin_replan(state, now=self.clock()))
        state = await self.revision(task_id, Plan("water the plants", (pour,)), number=2)
        await self.append(task_id, [ApprovalRequested(revision=2, actions=("pour",))])
        deadline = self.clock() + timedelta(seconds=60)
        state = await self.append(
            task_id,
            [
                Rejected(revision=2, by="ada", reason="not again"),
                AwaitingReplan(action=None, deadline=deadline),
            ],
        )
        state = await self.append(task_id, request_cancel(state, reason="enough"))
        await self.drain()
        return state


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def new_recorder() -> Callable[[], Recorder]:
    """Makes more recorders, for tests that need several."""
    return Recorder


@pytest.fixture
def tasks() -> Tasks:
    """A ledger to write tasks into, emitting nothing (tests call ``bus.emit`` themselves)."""
    return Tasks()
