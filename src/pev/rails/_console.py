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
    Diagnosed,
    Dispatched,
    EvidenceCaptured,
    NodeDispatched,
    NodeFinished,
    PlanRejected,
    Rejected,
    RevisionStarted,
    TaskCreated,
    TaskFinished,
    VerdictRecorded,
)
from pev.model import CriterionStatus, DeviceFailure, RecordStatus, VerdictStatus, VerifierFailure
from pev.rails._event import RailEvent, RailPhase

__all__ = [
    "RECORD_STYLE",
    "STATUS_STYLE",
    "ConsoleRail",
    "decision_text",
    "describe_decision",
    "diagnosis_text",
    "iso_time",
    "progress_line",
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


class ConsoleRail:
    """Prints a task's loop as it goes round: one line per phase boundary, and live progress.

    The lines show the task starting, each revision, each node starting and finishing (with its
    status, its error and how long it took), evidence, the verdict, the diagnosis, the decision
    and the ending; the ``planned`` and ``executed`` boundaries add nothing to those and print
    none. With ``live``, a display under the lines shows each node still running with a spinner
    and its elapsed time, refreshed several times a second, and is cleared once none runs.

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
        if event.phase is RailPhase.NODE_STARTED and record is not None:
            self._started[record.id] = event.at
        elif event.phase is RailPhase.NODE_FINISHED and record is not None:
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
        if self.live and event.phase is RailPhase.NODE_STARTED and record is not None:
            label = record.node_id + (
                f" ({record.tool})" if record.tool and record.tool != record.node_id else ""
            )
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
        began: For ``node_finished``, when the node started, to show how long it took.
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
            if began is not None:
                line.append(f"  {(at - began).total_seconds():.2f}s", style="dim")
            return line
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
