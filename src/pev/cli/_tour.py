"""`pev demo`: a scripted tour of the kernel and the ledger.

Each scenario is a pick-and-place task whose node results and verdicts are scripted (the way
``pev.testing`` doubles script them); everything else is real: plans are validated, every step is
an event folded and hash-chained into the SQLite ledger, and every decision comes from
:func:`pev.kernel.decide`. The scenarios show each path of the kernel: a slipped grasp is a plan
error re-planned locally, a knocked-over scene needs a global replan, a controller timeout is a
device failure with unknown outcome (accepted as partial, never re-sent), and a crashed camera
makes the verdict unreliable (partial).

The physics-simulation demo of SPEC §10 replaces this tour once the engine lands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pev.kernel import Budget, GlobalReplan, LocalReplan, TaskStatus, decide, diagnose
from pev.ledger import (
    Diagnosed,
    Event,
    Ledger,
    NodeDispatched,
    NodeFinished,
    NodeSkipped,
    RevisionKind,
    RevisionStarted,
    RoundExecuted,
    TaskState,
    VerdictRecorded,
    begin_replan,
    dispatch,
    executed_ok,
    known_refs,
    lineage_results,
)
from pev.model import (
    DeviceFailure,
    Effect,
    ExecutionRecord,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    Reliability,
    Success,
    Verdict,
    VerificationContract,
    VerificationMode,
    classify_verdict,
    digest,
    downstream,
    passes,
    record_status_for,
    validate_plan,
)
from pev.policy import RecoveryPolicy

__all__ = ["SCENARIOS", "Scenario", "run_scenario"]

Judge = Callable[[VerificationContract], Verdict]

CONTRACT = VerificationContract(
    VerificationMode.RECOVERY,
    "put the red and blue cubes in the tray",
    ("red cube in tray", "blue cube in tray"),
)


def _plan(*colours: str) -> Plan:
    nodes = [PlanNode("observe", "read the object poses", tool="observe", effect=Effect.QUERY)]
    for colour in colours:
        nodes.append(
            PlanNode(
                f"pick_{colour}",
                f"grasp the {colour} cube",
                tool="pick",
                args={"object": f"{colour}_cube"},
                after=("observe",),
            )
        )
        nodes.append(
            PlanNode(
                f"place_{colour}",
                f"put the {colour} cube in the tray",
                tool="place",
                args={"object": f"{colour}_cube", "target": "tray"},
                after=(f"pick_{colour}",),
            )
        )
    return Plan(CONTRACT.goal, tuple(nodes))


@dataclass(frozen=True, slots=True)
class Round:
    """What the scripted executor and verifier return in one execute/verify round."""

    results: Mapping[str, NodeResult] = field(default_factory=dict)
    judge: Judge | None = None
    verifier_error: str = ""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scripted task: its story, its rounds, and the ending the kernel must reach."""

    name: str
    story: str
    rounds: tuple[Round, ...]
    expected: TaskStatus


def _ok(*nodes: str) -> dict[str, NodeResult]:
    return {node: Success({"done": True}) for node in nodes}


_ALL = ("observe", "pick_red", "place_red", "pick_blue", "place_blue")


def _slipped(contract: VerificationContract) -> Verdict:
    return Verdict.failed(
        contract,
        failed_nodes=["pick_red"],
        unmet=["red cube in tray"],
        feedback="the red cube slipped out of the gripper; grasp it lower",
    )


def _knocked(contract: VerificationContract) -> Verdict:
    return Verdict.failed(
        contract,
        failed_nodes=["pick_red", "place_red", "pick_blue", "place_blue"],
        feedback="both cubes were knocked off the table; observe the scene again",
    )


def _red_missing(contract: VerificationContract) -> Verdict:
    return Verdict.failed(contract, failed_nodes=["place_red"], unmet=["red cube in tray"])


_HUNG = DeviceFailure(
    "place_red", "controller did not answer within 8 s", is_timeout=True, outcome_unknown=True
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "slip",
        "the gripper opens in transit: a plan error on one node, re-planned locally",
        (Round(_ok(*_ALL), _slipped), Round(_ok("pick_red", "place_red"), Verdict.passed)),
        TaskStatus.SUCCEEDED,
    ),
    Scenario(
        "knock",
        "the cubes are knocked over mid-run: many failed nodes, re-planned globally",
        (Round(_ok(*_ALL), _knocked), Round(_ok(*_ALL), Verdict.passed)),
        TaskStatus.SUCCEEDED,
    ),
    Scenario(
        "timeout",
        "the arm controller hangs: a device failure with unknown outcome, accepted as partial",
        (Round({**_ok(*_ALL), "place_red": _HUNG}, _red_missing),),
        TaskStatus.PARTIAL,
    ),
    Scenario(
        "camera",
        "the camera crashes while verifying: an unreliable verdict, accepted as partial",
        (Round(_ok(*_ALL), verifier_error="RuntimeError: camera driver crashed"),),
        TaskStatus.PARTIAL,
    ),
)


async def run_scenario(
    ledger: Ledger, scenario: Scenario, *, now: Callable[[], datetime]
) -> TaskState:
    """Drive one scenario through the kernel, writing every step to the ledger."""
    plan = _plan("red", "blue")
    validate_plan(plan)
    state = await ledger.create(
        {"scenario": scenario.name, "story": scenario.story},
        contract=CONTRACT,
        policy=RecoveryPolicy(max_replans=2),
    )
    task_id = state.task_id
    state = await ledger.append(
        task_id,
        [
            RevisionStarted(
                number=1, revision_kind=RevisionKind.INITIAL, reason="initial plan", plan=plan
            )
        ],
    )
    for round_ in scenario.rounds:
        revision = state.revisions[-1]
        state = await ledger.append(task_id, _execute(state, round_, now()))
        state = await ledger.append(
            task_id, [RoundExecuted(revision=revision.number, executed_ok=executed_ok(state))]
        )
        state = await ledger.append(task_id, _verify(state, round_, now()))
        if state.terminal:
            break
        events = begin_replan(state, now=now())
        state = await ledger.append(task_id, events)
        if state.terminal:
            break
        action = state.replan_action
        kind = RevisionKind.LOCAL if isinstance(action, LocalReplan) else RevisionKind.GLOBAL
        redo = downstream(plan, action.nodes) if isinstance(action, LocalReplan) else frozenset()
        feedback = action.feedback if isinstance(action, LocalReplan | GlobalReplan) else ""
        state = await ledger.append(
            task_id,
            [
                RevisionStarted(
                    number=revision.number + 1,
                    revision_kind=kind,
                    reason=feedback or str(kind),
                    plan=plan,
                    feedback=feedback,
                    redo=redo,
                )
            ],
        )
    return state


def _execute(state: TaskState, round_: Round, at: datetime) -> list[Event]:
    """Dispatch the revision's nodes (a local revision only its redo set) with scripted results."""
    revision = state.revisions[-1]
    number, plan, redo = revision.number, revision.plan, revision.redo
    events: list[Event] = []
    failed: set[str] = set()
    for node in plan.nodes:
        if redo and node.id not in redo:
            continue  # kept from the lineage, never dispatched again
        blocked = [dep for dep in node.after if dep in failed]
        if blocked:
            failed.add(node.id)
            events.append(NodeSkipped(revision=number, node_id=node.id, blocked_by=tuple(blocked)))
            continue
        record_id = RecordId(f"{state.task_id[:8]}-r{number}-{node.id}")
        record = ExecutionRecord(
            id=record_id,
            task_id=state.task_id,
            revision=number,
            node_id=node.id,
            tool=node.tool,
            args_digest=digest(node.args),
            effect=node.effect,
            idempotency_key=f"{state.task_id}:{record_id}",
            created_at=at,
            updated_at=at,
        )
        result = round_.results.get(node.id, Success(None))
        if not isinstance(result, Success):
            failed.add(node.id)
        events.append(NodeDispatched(record=record))
        events.append(
            NodeFinished(
                record_id=record_id, status=record_status_for(result), result=result, at=at
            )
        )
    return events


def _verify(state: TaskState, round_: Round, at: datetime) -> list[Event]:
    """The verdict, its diagnosis and the kernel's decision for a state that is verifying."""
    number = state.revisions[-1].number
    if round_.judge is None:
        recorded = VerdictRecorded(
            revision=number, verdict=None, reliability=Reliability.THROWN,
            problems=(round_.verifier_error,),
        )  # fmt: skip
    else:
        check = classify_verdict(
            round_.judge(state.contract), contract=state.contract,
            plan=state.revisions[-1].plan, known_refs=known_refs(state),
        )  # fmt: skip
        recorded = VerdictRecorded(
            revision=number, verdict=check.verdict, reliability=check.reliability,
            raw_digest=check.raw_digest, problems=check.problems,
        )  # fmt: skip
    events: list[Event] = [recorded]
    diagnosis = None
    if not passes(recorded.verdict, recorded.reliability):
        reliability = recorded.reliability or Reliability.MALFORMED
        diagnosis = diagnose(recorded.verdict, reliability, lineage_results(state))
        events.append(Diagnosed(revision=number, diagnosis=diagnosis))
    budget = Budget(state.replans_used, state.policy.max_replans, state.created.task_deadline)
    decision = decide(
        state.contract.mode, executed_ok=executed_ok(state), verdict=recorded.verdict,
        reliability=recorded.reliability, diagnosis=diagnosis, budget=budget, now=at,
    )  # fmt: skip
    events.extend(dispatch(state, decision, now=at))
    return events
