"""The console rail: a task's loop printed as it goes round, with live progress on a terminal.

Rails observe; they never decide (``docs/rails.md``). :class:`ConsoleRail` prints one line per
phase boundary; on a terminal it also keeps a live display under those lines, a spinner and the
elapsed time of each node still running, which a redirected output never gets (a pipe or a file
receives the plain lines alone). The words and colours of each line live here too, so that
``pev events`` and ``pev show`` say a boundary the same way the rail does.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from pev.kernel import Decision, Diagnosis, Finish, GlobalReplan, LocalReplan, TaskStatus
from pev.ledger import (
    ApprovalRequested,
    Approved,
    CompensationDispatched,
    CompensationFailed,
    Diagnosed,
    Dispatched,
    EffectCompensated,
    EffectSuperseded,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    NodeReused,
    PlanRejected,
    RecordReconciled,
    Rejected,
    RevisionStarted,
    TaskCreated,
    TaskFinished,
    UnwindStarted,
    VerdictRecorded,
)
from pev.model import CriterionStatus, DeviceFailure, RecordStatus, VerdictStatus, VerifierFailure
from pev.rails._effects import compensation_words, reused_words, unwind_words
from pev.rails._event import RailEvent, RailPhase
from pev.rails._settled import result_error, settlement

__all__ = [
    "RECORD_STYLE",
    "STATUS_STYLE",
    "ConsoleRail",
    "decision_text",
    "describe_decision",
    "diagnosis_text",
    "iso_time",
    "progress_line",
    "reconciliation_text",
    "task_heading",
]

STATUS_STYLE = {
    TaskStatus.SUCCEEDED: "bold green",
    TaskStatus.PARTIAL: "bold yellow",
    TaskStatus.FAILED: "bold red",
    TaskStatus.CANCELLED: "bold magenta",
}
"""The style of each task status, wherever a status is printed."""

RECORD_STYLE = {
    RecordStatus.SUCCEEDED: "green",
    RecordStatus.FAILED: "red",
    RecordStatus.UNKNOWN: "bold yellow",
    RecordStatus.CANCELLED: "magenta",
}
"""The style of each terminal record status, wherever a record is printed."""

_RECORD_MARK = {
    status: (mark, RECORD_STYLE[status])
    for status, mark in (
        (RecordStatus.SUCCEEDED, "✓"),
        (RecordStatus.FAILED, "✗"),
        (RecordStatus.UNKNOWN, "?"),
        (RecordStatus.CANCELLED, "-"),
    )
}
_VERDICT_STYLE = {
    VerdictStatus.SUCCESS: "green",
    VerdictStatus.REPLAN_REQUIRED: "yellow",
    VerdictStatus.FAILURE: "red",
}


def iso_time(at: datetime) -> str:
    """``at`` in ISO 8601 to the second, with its UTC offset: ``2026-12-06T05:41:41+00:00``.

    A naive time (none of pev's are) is taken to be UTC.
    """
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.isoformat(timespec="seconds")


def task_heading(task_id: str) -> Text:
    """``task <id>``, as every view of a task begins."""
    return Text.assemble(("task ", "bold"), (task_id, "bold cyan"))


def diagnosis_text(diagnosis: Diagnosis) -> Text:
    """``diagnosis: <cause>  <detail>``."""
    return Text.assemble(
        ("diagnosis: ", "bold"),
        (str(diagnosis.cause), "yellow"),
        f"  {diagnosis.detail}" if diagnosis.detail else "",
    )


def reconciliation_text(node_id: str, settled: RecordReconciled) -> Text:
    """One reconciliation: mark, node, ``unknown → reconciled: <status>``, the error, the note.

    The status is styled as a record that ended so would be (:data:`RECORD_STYLE`), so a record
    settled as done never reads as a failure; the evidence the reconciliation cites follows.
    """
    found = settlement(settled)
    mark, style = _RECORD_MARK.get(found.status, ("·", ""))
    line = Text.assemble("  ", (mark, style), f" {node_id} ", (found.words, style))
    if found.error is not None:
        line.append(f": {found.error}")
    if found.note:
        line.append(f"  {found.note}", style="dim")
    if found.evidence_refs:
        line.append(f"  [{', '.join(found.evidence_refs)}]", style="dim")
    return line


def decision_text(decision: Decision) -> Text:
    """A decision in words, a finish in its status's colour and a replan in cyan."""
    style = STATUS_STYLE.get(decision.status, "") if isinstance(decision, Finish) else "cyan"
    return Text(describe_decision(decision), style=style)


def describe_decision(decision: Decision) -> str:
    """A decision in words: ``finish succeeded/passed``, ``local replan of a, b``, ...."""
    match decision:
        case Finish(status=status, reason=reason):
            return f"finish {status}/{reason}"
        case LocalReplan(nodes=nodes):
            return f"local replan of {', '.join(sorted(nodes))}"
        case GlobalReplan():
            return "global replan"


# The boundaries that start a call the live display shows running, and those that end one.
_STARTS = frozenset({RailPhase.NODE_STARTED, RailPhase.COMPENSATION_STARTED})
_ENDS = frozenset({RailPhase.NODE_FINISHED, RailPhase.COMPENSATION_FINISHED})


class ConsoleRail:
    """Prints a task's loop as it goes round: one line per phase boundary, and live progress.

    The lines show the task starting, each revision, each node starting and finishing (with its
    status, its error and how long it took), what a reconciliation established of a node whose
    outcome was unknown (``unknown → reconciled: succeeded``, with its note), what befalls an
    effect (``↺ pay reused record 1:pay (sent in revision 1)``, ``↷ record 1:pay superseded``,
    ``⤺ record 1:pay compensated``, ``✗ compensation of 1:pay failed: ...; left in place``, a
    failing task ``unwinding`` its effects), evidence, the verdict, the diagnosis, the decision
    and the ending; the ``planned`` and ``executed`` boundaries add nothing to those and print
    none. With ``live``, a display under the lines shows each node (and compensation) still
    running with a spinner and its elapsed time, refreshed several times a second, and is
    cleared once none runs.

    Like every rail it observes only: what it fails to print (a closed terminal, say) is the
    rail bus's to log, and the run carries on. Call :meth:`close` if the run is abandoned (by
    Ctrl-C, say) before its ``task_finished`` event, to clear the live display.

    Args:
        console: Where to print. [default: a ``rich`` console on standard output]
        live: Keep the live display of running nodes. [default: only when ``console`` is an
            interactive terminal; never for a pipe or a file]
    """

    name = "console"

    def __init__(self, console: Console | None = None, *, live: bool | None = None) -> None:
        self.console = console if console is not None else Console()
        self.live = (
            self.console.is_terminal and not self.console.is_dumb_terminal if live is None else live
        )
        self.printed = 0
        """How many lines it has printed."""
        self._started: dict[str, datetime] = {}
        self._running = _RunningNodes()
        self._display: Live | None = None

    def on_event(self, event: RailEvent) -> None:
        """Print the line for ``event``, if its phase has one, and update the live display."""
        began = None
        record = event.record
        if event.phase in _STARTS and record is not None:
            self._started[record.id] = event.at
        elif event.phase in _ENDS and record is not None:
            began = self._started.pop(record.id, None)
            self._running.remove(record.id)
        elif event.phase is RailPhase.TASK_FINISHED:
            self._started.clear()
            self._running.clear()
        if not self._running:
            self.close()  # the lines below need no display to print above
        line = progress_line(event, began=began)
        if line is not None:
            self.console.print(line, soft_wrap=True)
            self.printed += 1
        if self.live and event.phase in _STARTS and record is not None:
            label = record.node_id + (
                f" ({record.tool})" if record.tool and record.tool != record.node_id else ""
            )
            if event.phase is RailPhase.COMPENSATION_STARTED:
                label = f"undo {label}"
            self._running.add(record.id, label, event.at)
            if self._display is None:
                self._display = Live(
                    self._running,
                    console=self.console,
                    refresh_per_second=8,
                    transient=True,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._display.start()

    def close(self) -> None:
        """Clear the live display, if one is shown (the printed lines stay)."""
        display, self._display = self._display, None
        if display is not None:
            display.stop()


class _RunningNodes:
    """The nodes running now, as the live display shows them: a spinner, the node, its time.

    The display's refresh thread renders it while the rail's task changes it: a lock keeps the
    two apart.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[Spinner, datetime]] = {}

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._nodes)

    def add(self, record_id: str, label: str, at: datetime) -> None:
        with self._lock:
            self._nodes[record_id] = (Spinner("dots", text=Text(label), style="cyan"), at)

    def remove(self, record_id: str) -> None:
        with self._lock:
            self._nodes.pop(record_id, None)

    def clear(self) -> None:
        with self._lock:
            self._nodes.clear()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        with self._lock:
            nodes = list(self._nodes.values())
        now = datetime.now(UTC)
        grid = Table.grid(padding=(0, 2))
        grid.add_column()
        grid.add_column(style="dim", justify="right")
        for spinner, at in nodes:
            elapsed = max((now - at).total_seconds(), 0.0)
            grid.add_row(spinner, f"{elapsed:.1f}s")
        yield grid


def progress_line(event: RailEvent, *, began: datetime | None = None) -> Text | None:
    """The progress line for one phase boundary; ``None`` for ``planned`` and ``executed``.

    Args:
        event: The boundary.
        began: For ``node_finished`` and ``compensation_finished``, when the call started, to
            show how long it took.
    """
    match event.event:
        case TaskCreated(contract=contract):
            line = task_heading(str(event.task_id))
            line.append(f" started, verification {contract.mode}", style="dim")
            return line
        case RevisionStarted() as started if event.phase is RailPhase.REVISION_STARTED:
            nodes = len(started.plan.nodes)
            return Text.assemble(
                (f"revision {started.number} ({started.revision_kind})", "bold"),
                f": {started.reason}",
                (f"  [{nodes} node{'s' if nodes != 1 else ''}]", "dim"),
            )
        case NodeDispatched(record=record):
            tool = f" ({record.tool})" if record.tool and record.tool != record.node_id else ""
            return Text.assemble("  ", ("▶", "cyan"), f" {record.node_id}{tool}")
        case NodeFinished(status=status, result=result, at=at):
            node = event.record.node_id if event.record is not None else str(event.event.record_id)
            mark, style = _RECORD_MARK.get(status, ("·", ""))
            line = Text.assemble("  ", (mark, style), f" {node} ", (str(status), style))
            match result:
                case DeviceFailure(error=error, is_timeout=timeout, outcome_unknown=unknown):
                    note = "timed out, " if timeout else ""
                    note += "outcome unknown, " if unknown else ""
                    line.append(f": {note}{error}")
                case VerifierFailure(reason=reason):
                    line.append(f": {reason}")
                case _:  # a success, or no result: the status says it all
                    pass
            return _took(line, began, at)
        case RecordReconciled() as settled:
            node = event.record.node_id if event.record is not None else str(settled.record_id)
            return reconciliation_text(node, settled)
        case (
            NodeReused()
            | EffectSuperseded()
            | CompensationDispatched()
            | EffectCompensated()
            | CompensationFailed()
            | UnwindStarted()
        ):
            return _effect_line(event, began)
        case EvidenceCaptured(evidence=evidence):
            return Text(f"  evidence: {evidence.kind} ({evidence.phase})", style="dim")
        case VerdictRecorded() as recorded:
            return _verdict(recorded)
        case Diagnosed(diagnosis=diagnosis):
            return diagnosis_text(diagnosis)
        case Dispatched(decision=decision):
            return Text.assemble(("decision: ", "bold"), decision_text(decision))
        case PlanRejected(problems=problems):
            shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
            return Text.assemble(("plan rejected: ", "bold red"), shown)
        case ApprovalRequested(revision=revision, actions=actions, deadline=deadline):
            line = Text.assemble(("awaiting approval", "bold yellow"), f" of revision {revision}")
            if actions:
                line.append(f" (actions: {', '.join(actions)})")
            if deadline is not None:
                line.append(f", until {iso_time(deadline)}", style="dim")
            task = event.task_id
            line.append(
                f": look at its plan with `pev show {task}`, then `pev approve {task}` or "
                f"`pev reject {task} --reason ...`"
            )
            return line
        case Approved(by=by, note=note):
            return Text.assemble(
                ("approved", "bold green"), f" by {by}", f": {note}" if note else ""
            )
        case Rejected(by=by, reason=reason):
            return Text.assemble(("rejected", "bold red"), f" by {by}: {reason}")
        case TaskFinished(status=status, reason=reason):
            return Text.assemble(
                ("finished: ", "bold"), (f"{status}/{reason}", STATUS_STYLE[status])
            )
        case _:  # planned (the revision line says it) and executed (the node lines say it)
            return None


def _effect_line(event: RailEvent, began: datetime | None) -> Text | None:
    """The line for what befalls an effect: reused, superseded, compensated, unwound."""
    match event.event:
        case NodeReused(node_id=node_id, record_id=record_id):
            sent = event.record.revision if event.record is not None else None
            return Text.assemble(
                "  ", ("↺", "green"), f" {node_id} ", (reused_words(record_id, sent), "green")
            )
        case EffectSuperseded(record_id=record_id, revision=revision, reason=reason):
            line = Text.assemble("  ", ("↷", "yellow"), f" record {record_id} ")
            line.append("superseded", style="yellow")
            line.append(f": {reason}" if reason else f" in revision {revision}")
            return line
        case CompensationDispatched(effect=effect, record=record):
            tool = f" ({record.tool})" if record.tool else ""
            words = compensation_words(effect, record.status, None)
            return Text.assemble("  ", ("▶", "cyan"), f" {words}{tool}")
        case EffectCompensated(effect=effect, at=at):
            words = compensation_words(effect, RecordStatus.SUCCEEDED, None)
            return _took(Text.assemble("  ", ("⤺", "green"), " ", (words, "green")), began, at)
        case CompensationFailed(effect=effect, status=status, result=result, at=at) as failed:
            mark, style = _RECORD_MARK.get(status, ("✗", "red"))
            words = compensation_words(effect, status, result_error(result))
            line = Text.assemble("  ", (mark, style), " ", (words, style))
            if failed.settled_on_resume:
                line.append("  (settled on resume)", style="dim")
            return _took(line, began, at)
        case UnwindStarted() as unwind:
            return Text.assemble(("unwinding: ", "bold magenta"), unwind_words(unwind))
        case _:
            return None


def _took(line: Text, began: datetime | None, at: datetime) -> Text:
    """``line`` with how long its call took, when its start is known."""
    if began is not None:
        line.append(f"  {(at - began).total_seconds():.2f}s", style="dim")
    return line


def _verdict(recorded: VerdictRecorded) -> Text:
    line = Text("verdict: ", style="bold")
    if recorded.evidence_missing:
        line.append("not asked (required evidence missing)", style="red")
        return line
    verdict = recorded.verdict
    if verdict is None:
        line.append("none", style="red")
    else:
        line.append(str(verdict.status), style=_VERDICT_STYLE.get(verdict.status, "yellow"))
        unmet = sum(
            1 for result in verdict.criteria if result.status is not CriterionStatus.SATISFIED
        )
        line.append(f"  {len(verdict.criteria) - unmet}/{len(verdict.criteria)} criteria met")
        if verdict.failed_nodes:
            line.append(f"  blames {', '.join(sorted(verdict.failed_nodes))}")
    line.append(f"  reliability: {recorded.reliability}", style="dim")
    return line
