"""The rail bus: turns freshly written ledger entries into rail events and hands them out.

Rails observe; they never decide. The bus gives every rail its own copy of every event, ignores
what rails return, and logs and counts what they raise, so nothing a rail does can reach the
engine or another rail. The copies go through pev's codec (``decode(encode(value))``): a deep
copy is no cheaper and cannot copy the read-only mappings some events hold.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias

from pev.codec import decode, encode
from pev.ledger import (
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    RevisionStarted,
    TaskFinished,
    TaskState,
)
from pev.model import ExecutionRecord, Plan, VerificationContract
from pev.model._exceptions import describe_exception
from pev.rails._event import PHASES_OF_EVENT, Rail, RailEvent, RailPhase

__all__ = ["RailBus", "RailLike"]

_LOG = logging.getLogger("pev.rails")

RailLike: TypeAlias = Rail | Callable[[RailEvent], object]
"""A rail object (sync or async ``on_event``), or any callable taking a :class:`RailEvent`."""

# Copies of a task's contract and plan are kept per rail between events (a plan is the bulk of a
# copy's cost and changes only with a new revision). Tasks that end are dropped at once; this
# bounds what tasks that never end (a crash) can leave behind.
_MAX_VIEWS_PER_RAIL = 128


@dataclass(frozen=True, slots=True)
class _View:
    """One rail's private copy of a task's contract and plan, and what it was copied from."""

    contract_source: VerificationContract
    plan_source: Plan | None
    contract: VerificationContract
    plan: Plan | None
    tools: Mapping[str, str]


@dataclass(slots=True)
class _Slot:
    """A rail as the bus calls it."""

    rail: RailLike
    name: str
    call: Callable[[RailEvent], object]
    views: dict[str, _View] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Written:
    """One entry that marks rail phases, with the plan and record in force once it was written."""

    entry: LedgerEntry
    phases: tuple[RailPhase, ...]
    plan: Plan | None
    record: ExecutionRecord | None


@dataclass(frozen=True, slots=True)
class _Frame:
    """An entry ready to copy: encoded once, decoded once per rail and phase."""

    written: _Written
    contract: VerificationContract
    entry_data: object
    record_data: object


class RailBus:
    """Delivers the loop's phase boundaries to rails; rails observe, they never decide.

    The engine calls :meth:`emit` after every successful append. Rails run one after another in
    the order given, on the engine's event loop: a sync rail should be quick (nothing can bound
    it), and an async one is given ``timeout_s`` per event. Emits never overlap: one that comes
    while another is delivering waits its turn, so a rail sees one event at a time, in order.

    Args:
        rails: Objects with a sync or async ``on_event(event)`` method, or callables taking
            the event.
        timeout_s: How long each call of an async rail may take; a call that runs past it is
            cancelled and counted as a failure.

    Raises:
        TypeError: A rail has no ``on_event`` method and is not callable.
        ValueError: ``timeout_s`` is not a positive number.
    """

    def __init__(self, rails: Iterable[RailLike], *, timeout_s: float = 1.0) -> None:
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self._slots = tuple(_slot(rail) for rail in rails)
        self._timeout_s = float(timeout_s)
        self.failures: Counter[str] = Counter()
        """How many times each rail (by name) raised or timed out."""
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    @property
    def rails(self) -> tuple[RailLike, ...]:
        """The rails, in the order they are called."""
        return tuple(slot.rail for slot in self._slots)

    @property
    def timeout_s(self) -> float:
        """How long each call of an async rail may take."""
        return self._timeout_s

    @property
    def failure_count(self) -> int:
        """How many rail calls raised or timed out, all rails together."""
        return self.failures.total()

    async def emit(self, entries: Sequence[LedgerEntry], state: TaskState) -> None:
        """Tell every rail about the phase boundaries among ``entries``.

        Args:
            entries: The entries one append just wrote, in sequence order.
            state: The task's state after them.

        Raises:
            BaseException: Only what is not an :class:`Exception` (a ``KeyboardInterrupt``, a
                cancellation) escapes; a rail's exception is logged and counted.
        """
        if not self._slots:
            return
        async with self._turn():
            for written in _written(entries, state):
                await self._deliver(written, state.contract)
                if isinstance(written.entry.event, TaskFinished):
                    for slot in self._slots:
                        slot.views.pop(written.entry.task_id, None)

    def _turn(self) -> asyncio.Lock:
        # One lock per event loop: a bus may serve several asyncio.run calls in turn, and a lock
        # that once waited is bound to the loop it waited on.
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _deliver(self, written: _Written, contract: VerificationContract) -> None:
        entry = written.entry
        try:
            entry_data = encode(entry)
            record_data = (
                encode(written.record)
                if written.record is not None and not isinstance(entry.event, NodeDispatched)
                else None
            )
        except Exception:  # noqa: BLE001 - a value the codec cannot copy: rails miss this entry
            _LOG.exception(
                "rails missed task %s seq %d: its entry could not be copied",
                entry.task_id,
                entry.seq,
            )
            for slot in self._slots:
                self.failures[slot.name] += len(written.phases)
            return
        frame = _Frame(written, contract, entry_data, record_data)
        for phase in written.phases:
            for slot in self._slots:
                await self._call(slot, phase, frame)

    async def _call(self, slot: _Slot, phase: RailPhase, frame: _Frame) -> None:
        entry = frame.written.entry
        scope: asyncio.Timeout | None = None
        try:
            event = _private_copy(slot, phase, frame)
            result = slot.call(event)
            if inspect.isawaitable(result):
                scope = asyncio.timeout(self._timeout_s)
                async with scope:
                    await result
        except Exception as exc:  # noqa: BLE001 - rails never decide: whatever they raise stops here
            self.failures[slot.name] += 1
            extra = {"pev": {"rail": slot.name, "phase": str(phase), "task": entry.task_id}}
            if isinstance(exc, TimeoutError) and scope is not None and scope.expired():
                _LOG.error(
                    "rail %s timed out after %g s at phase %s (task %s, seq %d)",
                    slot.name,
                    self._timeout_s,
                    phase,
                    entry.task_id,
                    entry.seq,
                    extra=extra,
                )
            else:
                # Logged at ERROR, with the traceback: a rail that raises is a bug in the rail.
                _LOG.exception(
                    "rail %s raised at phase %s (task %s, seq %d): %s",
                    slot.name,
                    phase,
                    entry.task_id,
                    entry.seq,
                    describe_exception(exc),
                    extra=extra,
                )


def _slot(rail: RailLike) -> _Slot:
    call = getattr(rail, "on_event", None)
    if call is None:
        if not callable(rail):
            raise TypeError(
                f"{type(rail).__name__} is not a rail: pass an object with a sync or async "
                "on_event(event) method, or a function taking the event"
            )
        call = rail
    return _Slot(rail=rail, name=_name_of(rail), call=call)


def _name_of(rail: object) -> str:
    """A rail's ``name`` attribute, else its function or class name."""
    name = getattr(rail, "name", None)
    if isinstance(name, str) and name:
        return name
    qualname = getattr(rail, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname
    return type(rail).__qualname__


def _written(entries: Sequence[LedgerEntry], state: TaskState) -> Iterator[_Written]:
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
        record: ExecutionRecord | None = None
        if isinstance(event, NodeDispatched):
            record = event.record
        elif isinstance(event, NodeFinished):
            record = state.records.get(event.record_id)
        yield _Written(entry=entry, phases=phases, plan=plan, record=record)


def _private_copy(slot: _Slot, phase: RailPhase, frame: _Frame) -> RailEvent:
    entry: LedgerEntry = decode(frame.entry_data, LedgerEntry)
    view = _view(slot, entry.task_id, frame.contract, frame.written.plan)
    record: ExecutionRecord | None = None
    if isinstance(entry.event, NodeDispatched):
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


def _view(slot: _Slot, task_id: str, contract: VerificationContract, plan: Plan | None) -> _View:
    """The rail's copy of the task's contract and plan, copied again when either changed."""
    view = slot.views.get(task_id)
    if view is not None and view.contract_source is contract and view.plan_source is plan:
        return view
    plan_copy: Plan | None = decode(encode(plan), Plan) if plan is not None else None
    tools = (
        {} if plan_copy is None else {n.id: n.tool for n in plan_copy.nodes if n.tool is not None}
    )
    view = _View(
        contract_source=contract,
        plan_source=plan,
        contract=decode(encode(contract), VerificationContract),
        plan=plan_copy,
        tools=MappingProxyType(tools),
    )
    slot.views.pop(task_id, None)
    slot.views[task_id] = view
    if len(slot.views) > _MAX_VIEWS_PER_RAIL:
        del slot.views[next(iter(slot.views))]
    return view
