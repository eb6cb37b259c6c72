"""Live progress for `pev run` and `pev resume`: a rail that prints the loop as it goes round.

Rails observe; they never decide (``docs/rails.md``). This one prints one line per phase
boundary and keeps nothing but the start times of nodes still running; whatever it might raise
the rail bus logs and counts, and the run carries on.
"""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.text import Text

from pev.cli._render import STATUS_STYLE, decision_text, diagnosis_text, task_heading
from pev.engine import RunResult
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
from pev.rails import RailEvent, RailPhase

__all__ = ["ConsoleRail", "progress_line", "result_line"]

_RECORD_MARK = {
    RecordStatus.SUCCEEDED: ("✓", "green"),
    RecordStatus.FAILED: ("✗", "red"),
    RecordStatus.UNKNOWN: ("?", "bold yellow"),
    RecordStatus.CANCELLED: ("-", "magenta"),
}
_VERDICT_STYLE = {
    VerdictStatus.SUCCESS: "green",
    VerdictStatus.REPLAN_REQUIRED: "yellow",
    VerdictStatus.FAILURE: "red",
}


class ConsoleRail:
    """Prints one line per phase boundary of a task while it runs.

    It shows the task starting, each revision, each node starting and finishing (with its
    status, its error and how long it took), evidence, the verdict, the diagnosis, the decision
    and the ending. The ``planned`` and ``executed`` boundaries add nothing to those lines and
    print none.

    Args:
        console: Where to print.
    """

    name = "console"

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printed = 0
        """How many lines it has printed."""
        self._started: dict[str, datetime] = {}

    def on_event(self, event: RailEvent) -> None:
        """Print the line for ``event``, if its phase has one."""
        if event.phase is RailPhase.NODE_STARTED and event.record is not None:
            self._started[event.record.id] = event.at
        began = None
        if event.phase is RailPhase.NODE_FINISHED and event.record is not None:
            began = self._started.pop(event.record.id, None)
        elif event.phase is RailPhase.TASK_FINISHED:
            self._started.clear()
        line = progress_line(event, began=began)
        if line is not None:
            self.console.print(line, soft_wrap=True)
            self.printed += 1


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
                line.append(f", until {deadline:%Y-%m-%d %H:%M:%S} UTC", style="dim")
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


def result_line(result: RunResult) -> Text:
    """The last line of `pev run` and `pev resume`: the task and how it ended."""
    line = task_heading(str(result.task_id))
    line.append(": ")
    line.append(f"{result.status}/{result.reason}", style=STATUS_STYLE[result.status])
    if result.detail and not result.ok:
        line.append(f"  {result.detail}", style="dim")
    return line
