"""Each rail's private copy of each event, made with pev's codec (``decode(encode(value))``).

A deep copy is no cheaper and cannot copy the read-only mappings some events hold. An entry is
encoded once, when the bus takes it in; each rail decodes its own copy when it is about to see
it. The plan and contract are the bulk of a copy's cost and change only with a new revision, so
each rail keeps its copy of them (a :class:`View`) from one event of a task to the next.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pev.codec import decode, encode
from pev.ledger import (
    CompensationDispatched,
    LedgerEntry,
    NodeDispatched,
    RevisionStarted,
    TaskState,
)
from pev.model import ExecutionRecord, Plan, VerificationContract
from pev.rails._event import PHASES_OF_EVENT, RailEvent, RailPhase, record_of

__all__ = ["MAX_VIEWS_PER_RAIL", "Frame", "View", "Written", "frame_of", "private_copy", "written"]

# The events that hold their record whole: each rail's copy of the entry carries it already.
_HOLD_RECORDS = (NodeDispatched, CompensationDispatched)

# Tasks that end drop their views at once; this bounds what tasks that never end (a crash) can
# leave behind in a rail.
MAX_VIEWS_PER_RAIL = 128


@dataclass(frozen=True, slots=True)
class View:
    """One rail's private copy of a task's contract and plan, and what it was copied from."""

    contract_source: VerificationContract
    plan_source: Plan | None
    contract: VerificationContract
    plan: Plan | None
    tools: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Written:
    """One entry that marks rail phases, with the plan and record in force once it was written."""

    entry: LedgerEntry
    phases: tuple[RailPhase, ...]
    plan: Plan | None
    record: ExecutionRecord | None


@dataclass(frozen=True, slots=True)
class Frame:
    """An entry ready to copy: encoded once, decoded once per rail and phase."""

    written: Written
    contract: VerificationContract
    entry_data: object
    record_data: object


def written(entries: Sequence[LedgerEntry], state: TaskState) -> Iterator[Written]:
    """The entries that mark rail phases, each with the plan in force once it was written.

    ``state`` is the state after the whole batch, so an entry written before a revision that
    started later in the same batch sees the revision before it.
    """
    revisions = state.revisions
    later = sum(isinstance(entry.event, RevisionStarted) for entry in entries)
    for entry in entries:
        event = entry.event
        if isinstance(event, RevisionStarted):
            later -= 1
        phases = PHASES_OF_EVENT.get(event.kind)
        if not phases:
            continue
        index = len(revisions) - 1 - later
        plan = revisions[index].plan if index >= 0 else None
        yield Written(entry=entry, phases=phases, plan=plan, record=record_of(event, state))


def frame_of(entry: Written, contract: VerificationContract) -> Frame:
    """Encode ``entry`` (and its record, unless the entry holds it) once, for every rail.

    Raises:
        Exception: Whatever the codec raises for a value it cannot copy.
    """
    record_data = (
        encode(entry.record)
        if entry.record is not None and not isinstance(entry.entry.event, _HOLD_RECORDS)
        else None
    )
    return Frame(entry, contract, encode(entry.entry), record_data)


def private_copy(views: dict[str, View], phase: RailPhase, frame: Frame) -> RailEvent:
    """A fresh copy of ``frame`` as one rail sees it at ``phase``; ``views`` is that rail's."""
    entry: LedgerEntry = decode(frame.entry_data, LedgerEntry)
    view = _view(views, entry.task_id, frame.contract, frame.written.plan)
    record: ExecutionRecord | None = None
    if isinstance(entry.event, _HOLD_RECORDS):
        record = entry.event.record
    elif frame.record_data is not None:
        record = decode(frame.record_data, ExecutionRecord)
    return RailEvent(
        phase=phase,
        task_id=entry.task_id,
        seq=entry.seq,
        at=entry.at,
        event=entry.event,
        contract=view.contract,
        plan=view.plan,
        tools=view.tools,
        record=record,
    )


def _view(
    views: dict[str, View], task_id: str, contract: VerificationContract, plan: Plan | None
) -> View:
    """The rail's copy of the task's contract and plan, copied again when either changed."""
    view = views.get(task_id)
    if view is not None and view.contract_source is contract and view.plan_source is plan:
        return view
    plan_copy: Plan | None = decode(encode(plan), Plan) if plan is not None else None
    tools = (
        {} if plan_copy is None else {n.id: n.tool for n in plan_copy.nodes if n.tool is not None}
    )
    view = View(
        contract_source=contract,
        plan_source=plan,
        contract=decode(encode(contract), VerificationContract),
        plan=plan_copy,
        tools=MappingProxyType(tools),
    )
    views.pop(task_id, None)
    views[task_id] = view
    if len(views) > MAX_VIEWS_PER_RAIL:
        del views[next(iter(views))]
    return view
