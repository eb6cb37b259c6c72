"""Regenerate the golden ledgers that tests/ledger/test_golden.py replays.

Each scenario drives a :class:`pev.ledger.Ledger` over a ``MemoryStore`` with a fixed clock and
fixed ids, through the machine functions and the kernel, exactly as the engine would. It writes

* ``<name>.jsonl``: one ``pev.codec.dumps(entry)`` per line, the task's stored entries in order;
* ``<name>.expected.json``: what replaying them gives (phase, status, reason, replans used,
  revisions, outputs, event kinds in order, head hash).

The files are data, committed with the tests; the tests only read them and never run this
script. A change to the rules that alters a stored history (the fold, the codec, the hash chain)
makes the golden tests fail. Regenerate only when such a change is intended, and say so in the
change: ``.venv/bin/python tests/ledger/golden/make_golden.py`` from the repository root, then
review the diff of the ``.jsonl`` and ``.expected.json`` files.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pev import codec
from pev.kernel import Budget, decide, diagnose
from pev.ledger import (
    Diagnosed,
    Event,
    EvidenceCaptured,
    Ledger,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    NodeProgressed,
    NodeSkipped,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskState,
    Usage,
    VerdictRecorded,
    begin_replan,
    dispatch,
    executed_ok,
    lineage_results,
    missing_evidence,
    reject_plan,
    replay,
)
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Reliability,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
    digest,
    passes,
    record_status_for,
)
from pev.policy import RecoveryPolicy
from pev.stores import MemoryStore

HERE = Path(__file__).resolve().parent
START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY,
    "put the red cup in the sink",
    ("the red cup is in the sink",),
    constraints=("do not touch the blue cup",),
)
POLICY = RecoveryPolicy(max_replans=2, replan_timeout_s=120)
PLAN = Plan(
    "put the red cup in the sink",
    (
        PlanNode("look", "find the red cup", tool="camera", effect=Effect.QUERY),
        PlanNode(
            "grab",
            "grab the red cup",
            tool="arm",
            args={"target": {"$ref": "look"}},
            after=("look",),
        ),
        PlanNode("place", "put it in the sink", tool="arm", after=("grab",)),
    ),
)


class FixedClock:
    """Each reading is one second after the previous one; ``skip`` jumps ahead."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def skip(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class Run:
    """One scenario's ledger, with the steps the engine would take, in order."""

    def __init__(self, ledger: Ledger, clock: FixedClock, task_id: str) -> None:
        self.ledger = ledger
        self.clock = clock
        self.task_id = task_id
        self.records = iter(range(1, 100))

    async def state(self) -> TaskState:
        return await self.ledger.state(self.task_id)

    async def revise(
        self,
        number: int,
        kind: RevisionKind,
        plan: Plan,
        *,
        feedback: str = "",
        redo: frozenset[str] = frozenset(),
    ) -> None:
        event = RevisionStarted(
            number=number,
            revision_kind=kind,
            reason="initial plan" if kind is RevisionKind.INITIAL else "replan",
            plan=plan,
            feedback=feedback,
            redo=redo,
            usage=Usage(model="scripted-planner", input_tokens=120, output_tokens=40),
        )
        await self.ledger.append(self.task_id, [event])

    async def run_node(self, node_id: str, result: NodeResult, *, progress: bool = False) -> None:
        state = await self.state()
        assert state.revision is not None
        node = state.revision.plan.node(node_id)
        rid = RecordId(f"rec-{next(self.records)}")
        record = ExecutionRecord(
            id=rid,
            task_id=state.task_id,
            revision=state.revision.number,
            node_id=node.id,
            tool=node.tool,
            args_digest=digest(node.args),
            effect=node.effect,
            idempotency_key=f"{state.task_id}:{rid}",
            created_at=self.clock.now,
            updated_at=self.clock.now,
        )
        # The pending record is committed before the tool is called.
        await self.ledger.append(self.task_id, [NodeDispatched(record=record)])
        if progress:
            running = NodeProgressed(record_id=rid, status=RecordStatus.RUNNING, at=self.clock())
            await self.ledger.append(self.task_id, [running])
        finished = NodeFinished(
            record_id=rid, status=record_status_for(result), result=result, at=self.clock()
        )
        await self.ledger.append(self.task_id, [finished])

    async def skip(self, node_id: str, *, blocked_by: tuple[str, ...]) -> None:
        state = await self.state()
        assert state.revision is not None
        skipped = NodeSkipped(
            revision=state.revision.number, node_id=node_id, blocked_by=blocked_by
        )
        await self.ledger.append(self.task_id, [skipped])

    async def observe(self, eid: str, payload: object) -> None:
        state = await self.state()
        assert state.revision is not None
        evidence = Evidence(
            id=EvidenceId(eid),
            phase=EvidencePhase.AFTER,
            kind="state",
            source="overhead-camera",
            captured_at=self.clock.now,
            revision=state.revision.number,
            payload=payload,
        )
        await self.ledger.append(self.task_id, [EvidenceCaptured(evidence=evidence)])

    async def verify_and_decide(self, verdict: Verdict) -> None:
        """End the round, record the verdict, diagnose, decide with the kernel, dispatch."""
        state = await self.state()
        assert state.revision is not None
        number = state.revision.number
        state = await self.ledger.append(
            self.task_id, [RoundExecuted(revision=number, executed_ok=executed_ok(state))]
        )
        reliability = Reliability.OK
        events: list[Event] = [
            VerdictRecorded(
                revision=number,
                verdict=verdict,
                reliability=reliability,
                raw_digest=digest(codec.dumps(verdict)),
            )
        ]
        diagnosis = None
        if not passes(verdict, reliability):
            diagnosis = diagnose(verdict, reliability, lineage_results(state))
            events.append(Diagnosed(revision=number, diagnosis=diagnosis))
        now = self.clock.now
        decision = decide(
            state.contract.mode,
            executed_ok=executed_ok(state),
            verdict=verdict,
            reliability=reliability,
            diagnosis=diagnosis,
            budget=Budget(state.replans_used, state.policy.max_replans),
            now=now,
            evidence_missing=bool(missing_evidence(state, number)),
            local_limit=state.policy.local_limit,
        )
        events.extend(dispatch(state, decision, now=now))
        await self.ledger.append(self.task_id, events)

    async def begin_replan(self) -> None:
        state = await self.state()
        await self.ledger.append(self.task_id, begin_replan(state, now=self.clock.now))

    async def reject(self, *problems: str, plan: Plan | None = None) -> None:
        state = await self.state()
        events = reject_plan(state, problems=problems, plan=plan, now=self.clock.now)
        await self.ledger.append(self.task_id, events)


# --- the scenarios ----------------------------------------------------------------------------


async def happy_path(run: Run) -> None:
    """The first plan runs and the verifier passes it: succeeded/passed."""
    await run.revise(1, RevisionKind.INITIAL, PLAN)
    await run.run_node("look", Success({"cup": "red", "at": [0.4, 0.1]}))
    await run.run_node("grab", Success("holding"), progress=True)
    await run.run_node("place", Success("in the sink"), progress=True)
    await run.observe("ev-1", {"sink": ["red cup"]})
    await run.verify_and_decide(Verdict.passed(CONTRACT, evidence_refs=["evidence:ev-1"]))


async def local_replan_then_pass(run: Run) -> None:
    """The verifier blames `place` (a plan error): a local replan redoes it and then passes."""
    await run.revise(1, RevisionKind.INITIAL, PLAN)
    await run.run_node("look", Success({"cup": "red", "at": [0.4, 0.1]}))
    await run.run_node("grab", Success("holding"))
    await run.run_node("place", Success("on the counter"))
    await run.verify_and_decide(
        Verdict.failed(CONTRACT, failed_nodes=["place"], feedback="the cup is on the counter")
    )
    await run.begin_replan()
    fixed = Plan(
        PLAN.goal,
        (
            *PLAN.nodes[:2],
            PlanNode(
                "place", "put it in the sink, not on the counter", tool="arm", after=("grab",)
            ),
        ),
    )
    await run.revise(
        2,
        RevisionKind.LOCAL,
        fixed,
        feedback="the cup is on the counter",
        redo=frozenset({"place"}),
    )
    await run.run_node("place", Success("in the sink"))
    await run.verify_and_decide(Verdict.passed(CONTRACT))


async def device_failure_partial(run: Run) -> None:
    """The arm fails on `grab` and the verifier blames it: an honest partial/device_failure."""
    await run.revise(1, RevisionKind.INITIAL, PLAN)
    await run.run_node("look", Success({"cup": "red", "at": [0.4, 0.1]}))
    await run.run_node("grab", DeviceFailure("grab", "gripper offline"))
    await run.skip("place", blocked_by=("grab",))
    await run.verify_and_decide(
        Verdict.failed(CONTRACT, failed_nodes=["grab", "place"], feedback="nothing was moved")
    )


async def rejected_plan_budget_exhausted(run: Run) -> None:
    """Every plan is invalid; with max_replans=1 the second rejection ends failed/invalid_plan."""
    await run.reject("the plan has no nodes; a plan needs at least one")
    await run.begin_replan()
    bad = Plan(PLAN.goal, (PlanNode("grab", "grab", tool="arm", after=("nowhere",)),))
    await run.reject("node 'grab' depends on 'nowhere', which is not in the plan", plan=bad)


async def replan_deadline_expired(run: Run) -> None:
    """A global replan is decided, but no revision begins before the replan deadline."""
    await run.revise(1, RevisionKind.INITIAL, PLAN)
    await run.run_node("look", Success({"cup": "none"}))
    await run.run_node("grab", Success("holding nothing"))
    await run.run_node("place", Success("in the sink"))
    await run.verify_and_decide(
        Verdict.failed(CONTRACT, feedback="there is no red cup on the table; look elsewhere")
    )
    late = run.clock.skip(POLICY.replan_timeout_s + 5)
    expired = await run.ledger.expire_overdue(late)
    assert expired == (run.task_id,), expired


Scenario = Callable[[Run], Awaitable[None]]

SCENARIOS: dict[str, tuple[Scenario, RecoveryPolicy]] = {
    "happy_path": (happy_path, POLICY),
    "local_replan_then_pass": (local_replan_then_pass, POLICY),
    "device_failure_partial": (device_failure_partial, POLICY),
    "rejected_plan_budget_exhausted": (
        rejected_plan_budget_exhausted,
        RecoveryPolicy(max_replans=1, replan_timeout_s=120),
    ),
    "replan_deadline_expired": (replan_deadline_expired, POLICY),
}


def expected_outcome(entries: tuple[LedgerEntry, ...]) -> dict[str, object]:
    """What replaying a golden ledger gives; test_golden.py compares it with the stored file."""
    state = replay(entries)
    finished = state.finished
    return {
        "phase": str(state.phase),
        "status": str(finished.status) if finished else None,
        "reason": str(finished.reason) if finished else None,
        "replans_used": state.replans_used,
        "revisions": len(state.revisions),
        "outputs": codec.encode(finished.outputs) if finished else None,
        "event_kinds": [entry.event.kind for entry in entries],
        "head_hash": entries[-1].hash,
    }


async def build(name: str) -> tuple[LedgerEntry, ...]:
    scenario, policy = SCENARIOS[name]
    clock = FixedClock()
    store = MemoryStore()
    ledger = Ledger(store, clock=clock)
    task_id = f"golden-{name.replace('_', '-')}"
    await ledger.create(
        {"request": "put the red cup in the sink"},
        contract=CONTRACT,
        policy=policy,
        components={"planner": "golden:planner", "executor": "golden:executor"},
        task_id=task_id,
    )
    await scenario(Run(ledger, clock, task_id))
    entries = await ledger.entries(task_id)
    report = await ledger.verify(task_id)
    assert report.ok, report
    await store.close()
    return entries


def _lines(entries: tuple[LedgerEntry, ...]) -> Iterator[str]:
    for entry in entries:
        yield codec.dumps(entry) + "\n"


def main() -> None:
    for name in SCENARIOS:
        entries = asyncio.run(build(name))
        (HERE / f"{name}.jsonl").write_text("".join(_lines(entries)), encoding="utf-8")
        outcome = expected_outcome(entries)
        expected = json.dumps(outcome, indent=2, sort_keys=True) + "\n"
        (HERE / f"{name}.expected.json").write_text(expected, encoding="utf-8")
        print(f"{name}: {len(entries)} events, {outcome['reason']}")


if __name__ == "__main__":
    main()
