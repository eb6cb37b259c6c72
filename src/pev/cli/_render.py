"""Terminal views of tasks: the task list and one task's revision timeline (rich renderables)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pev.kernel import Finish, TaskStatus
from pev.ledger import (
    Approved,
    ChainReport,
    Dispatched,
    EffectStatus,
    Lease,
    PlanRejected,
    Revision,
    StartFailed,
    TaskEffect,
    TaskPhase,
    TaskState,
    TaskSummary,
    VerdictRecorded,
    call_name,
    known_refs,
)
from pev.ledger._queries import NodeStanding, node_standings
from pev.model import CriterionStatus, Effect, ExecutionRecord, PlanNode, canonical_json
from pev.rails._console import (
    RECORD_STYLE,
    STATUS_STYLE,
    decision_text,
    describe_decision,
    diagnosis_text,
    iso_time,
    reconciliation_text,
    task_heading,
)
from pev.rails._effects import ARGS_CHARS, args_text, undoing, unwind_words
from pev.rails._settled import settlement

__all__ = [
    "SHORT_ID",
    "STATUS_STYLE",
    "chain_report",
    "decision_text",
    "describe_decision",
    "diagnosis_text",
    "task_heading",
    "task_table",
    "timeline",
]

SHORT_ID = 8
"""How many leading characters of a task id the task list shows."""

_CRITERION_MARK = {
    CriterionStatus.SATISFIED: Text("✓", style="green"),
    CriterionStatus.UNSATISFIED: Text("✗", style="red"),
    CriterionStatus.UNKNOWN: Text("?", style="yellow"),
}


def _status_text(phase: TaskPhase, status: TaskStatus | None) -> Text:
    if status is None:
        return Text(str(phase), style="cyan")
    return Text(str(status), style=STATUS_STYLE[status])


def task_table(summaries: Sequence[TaskSummary], drivers: Mapping[str, str] | None = None) -> Table:
    """The task list: short id (any unique prefix works in `pev show`), status, title, time.

    ``drivers`` maps the id of a task being driven now to its driver (the lease's owner); with
    any, a ``driver`` column shows them.
    """
    table = Table(title="tasks", title_justify="left", expand=False)
    table.add_column("task", no_wrap=True, min_width=SHORT_ID)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=23)
    table.add_column("updated", no_wrap=True)
    table.add_column("title", overflow="fold", min_width=12)
    if drivers:
        table.add_column("driver", overflow="fold", min_width=10)
    for summary in summaries:
        row: list[RenderableType] = [
            summary.task_id[:SHORT_ID],
            _status_text(summary.phase, summary.status),
            str(summary.reason or ""),
            iso_time(summary.updated_at),
            summary.title,
        ]
        if drivers:
            row.append(drivers.get(summary.task_id, ""))
        table.add_row(*row)
    return table


def driver_line(state: TaskState, lease: Lease | None, now: datetime) -> Text | None:
    """Who drives a task that has not ended, from its lease; ``None`` for an ended task."""
    if state.terminal:
        return None
    if state.phase is TaskPhase.AWAITING_APPROVAL:
        # Waiting holds no lease (docs/control.md): not a dead run, a person's turn.
        return Text(
            "waiting for a person's decision, holding no lease: the run that waits for it (or "
            "a worker, or `pev resume`) goes on once it is approved or rejected",
            style="cyan",
        )
    if lease is None:
        return Text(
            "no driver has taken it yet: a worker (`pev worker`) or `pev resume` drives it",
            style="yellow",
        )
    until = iso_time(lease.expires_at)
    if lease.live(now):
        return Text(f"driven now by {lease.owner} (lease epoch {lease.epoch}, until {until})")
    return Text(
        f"no live driver: the lease of {lease.owner} ended at {until}; `pev resume` drives it",
        style="yellow",
    )


def timeline(state: TaskState, *, driver: Text | None = None) -> Group:
    """One task, revision by revision: plan and node status, verdict, diagnosis, decision.

    Then its effects (what its actions did to the world, and what became of each), and how it
    ended. ``driver`` (see :func:`driver_line`) says who drives the task now, under its header.
    """
    parts: list[RenderableType] = [_header(state)]
    if driver is not None:
        parts.insert(1, Group(driver, Text("")))
    rejections = list(state.rejections)
    for revision in state.revisions:
        while rejections and rejections[0].attempt < revision.attempt:
            parts.append(_rejection(rejections.pop(0)))
        parts.append(_revision(state, revision))
    parts.extend(_rejection(rejected) for rejected in rejections)
    if state.effects:
        parts.append(_effects(state))
    parts.append(_ending(state))
    return Group(*parts)


def _header(state: TaskState) -> RenderableType:
    contract = state.contract
    lines = [task_heading(state.task_id), Text(f"input: {canonical_json(state.created.input)}")]
    lines.append(
        Text(f"contract: {contract.mode}" + (f", goal: {contract.goal}" if contract.goal else ""))
    )
    lines.extend(Text(f"  criterion: {criterion}") for criterion in contract.success_criteria)
    # Who drove it and which drives could not start, in the order of their lease epochs.
    stretches: list[tuple[int, Text]] = [
        (driver.epoch, Text(f"driven by {driver.owner} (lease epoch {driver.epoch})", style="dim"))
        for driver in state.drivers
    ]
    stretches.extend((failed.epoch, start_failed_text(failed)) for failed in state.start_failures)
    lines.extend(line for _, line in sorted(stretches, key=lambda stretch: stretch[0]))
    return Group(*lines, Text(""))


def start_failed_text(failed: StartFailed) -> Text:
    """A drive that could not start: who tried, where, and why (see docs/workers.md)."""
    where = f"{failed.host}, process {failed.process}" if failed.host else "unknown host"
    return Text.assemble(
        ("could not start: ", "red"),
        f"{failed.owner} ({where}, lease epoch {failed.epoch}): {failed.cause}",
    )


def _rejection(rejected: PlanRejected) -> RenderableType:
    lines = [
        Text(f"plan rejected (planner call {rejected.attempt}, {rejected.planning}):", style="red")
    ]
    lines.extend(Text(f"  - {problem}") for problem in rejected.problems)
    return Group(*lines, Text(""))


def _revision(state: TaskState, revision: Revision) -> RenderableType:
    title = f"revision {revision.number} ({revision.kind}): {revision.reason}"
    table = Table(title=title, title_justify="left", title_style="bold", expand=False)
    for column in ("node", "tool"):
        table.add_column(column)
    table.add_column("args", overflow="fold")
    for column in ("effect", "after", "record"):
        table.add_column(column)
    effect_of = _effects_of(state, revision.number)
    standings = node_standings(state, revision)
    for standing in standings:
        node, record = standing.node, standing.record
        if record is not None and standing.state == "reused":
            # Satisfied by an effect an earlier revision sent: this revision sent nothing.
            cell = Text.assemble(
                (f"reused {record.id}", "green"), (f" (sent in revision {record.revision})", "dim")
            )
        elif record is not None:
            # A reconciliation settles a record of unknown outcome: its settled status shows.
            settled = state.reconciled.get(record.id)
            found = None if settled is None else settlement(settled)
            status = record.status if found is None else found.status
            cell = Text(
                str(status) if found is None else found.words, style=RECORD_STYLE.get(status, "")
            )
            if record.error:
                cell.append(f" ({record.error})", style="dim")
        else:
            word = standing.state.replace("_", " ")
            cell = Text(word, style="dim green" if word == "kept" else "dim")
        effect = effect_of(node, record)
        table.add_row(node.id, node.tool or "", _args(node), effect, ", ".join(node.after), cell)
    parts: list[RenderableType] = [table]
    # A reused node's record, its attempts and its reconciliation belong to the revision that
    # sent it, and are shown there.
    sent = [standing for standing in standings if standing.state != "reused"]
    parts.extend(_attempt_lines(state, sent))
    parts.extend(
        reconciliation_text(standing.node.id, settled)
        for standing in sent
        if standing.record is not None
        and (settled := state.reconciled.get(standing.record.id)) is not None
    )
    parts.extend(approval_lines(state, revision.number))
    parts.extend(_verdicts(state, revision.number))
    parts.append(Text(""))
    return Group(*parts)


def _args(node: PlanNode) -> str:
    """A node's args as canonical JSON (a ``$ref`` as written), cut as the effects table cuts."""
    if not node.args:
        return ""
    text = canonical_json(node.args)
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 1] + "…"


def _effects_of(
    state: TaskState, number: int
) -> Callable[[PlanNode, ExecutionRecord | None], Text]:
    """How a revision's nodes show their effect: ``query`` or ``action``, resolved.

    A dispatched node's record holds its effect as it ran; else the node's own, when the plan
    gives one; else, for a revision that asked for approval, what the request named (its
    actions; the rest are queries); else the tool's, which the ledger does not record. The
    actions a person is asked to approve now stand out.
    """
    requests = [request for request in state.approvals if request.revision == number]
    actions = {node_id for request in requests for node_id in request.actions}
    waiting = state.awaiting is not None and state.awaiting.revision == number

    def effect_of(node: PlanNode, record: ExecutionRecord | None) -> Text:
        if record is not None:
            return Text(str(record.effect))
        if node.id in actions:
            if waiting:
                return Text("action: to approve", style="bold yellow")
            return Text(str(Effect.ACTION))
        if node.effect is not None:
            return Text(str(node.effect))
        return Text(str(Effect.QUERY) if requests else "tool's")

    return effect_of


_EFFECT_STYLE = {
    EffectStatus.SUCCEEDED: "green",
    EffectStatus.DONE: "green",
    EffectStatus.UNKNOWN: "bold yellow",
    EffectStatus.NOT_DONE: "dim",
}
_UNDOING_STYLE = {"compensated": "green", "failed": "red", "unknown": "bold yellow"}


def _effects(state: TaskState) -> RenderableType:
    """The task's effects: each action that took effect (or may have), and what became of it."""
    table = Table(title="effects", title_justify="left", title_style="bold", expand=False)
    for column in ("record", "tool", "args", "occurrence", "key", "status", "superseded"):
        table.add_column(column, overflow="fold")
    table.add_column("compensation", overflow="fold")
    for effect in state.effects.values():
        table.add_row(
            effect.record_id,
            call_name(effect.tool, effect.node_id),
            args_text(effect),
            str(effect.occurrence),
            effect.key,
            Text(str(effect.status), style=_EFFECT_STYLE.get(effect.status, "")),
            "" if effect.superseded is None else f"in revision {effect.superseded}",
            _compensation_cell(effect),
        )
    parts: list[RenderableType] = [table]
    if state.unwinding is not None:
        ended = state.finished is not None
        words = unwind_words(state.unwinding, ended=ended)
        parts.append(Text(f"{'unwound' if ended else 'unwinding'}: {words}", style="magenta"))
    return Group(*parts, Text(""))


def _compensation_cell(effect: TaskEffect) -> Text:
    undone = undoing(effect)
    if undone is None:
        # Superseded and never undone (its tool has no compensate): it stays in the world.
        return Text("none: left in place" if effect.superseded is not None else "", style="dim")
    return Text(undone.words, style=_UNDOING_STYLE.get(undone.state, "cyan"))


def _attempt_lines(state: TaskState, standings: Sequence[NodeStanding]) -> list[Text]:
    """Each attempt of the calls a retry policy made more than once: when, how long, and why."""
    lines: list[Text] = []
    for standing in standings:
        node, record = standing.node, standing.record
        result = None if record is None else state.results.get(record.id)
        if result is None or not result.attempts:
            continue
        lines.append(Text(f"attempts of {node.id} ({node.tool}):", style="bold"))
        for attempt in result.attempts:
            line = Text(
                f"  attempt {attempt.number} at +{attempt.started_s:.3f} s "
                f"({attempt.duration_s:.3f} s): "
            )
            if attempt.error is None:
                line.append("succeeded", style="green")
            else:
                line.append(attempt.error, style="red")
            if attempt.wait_s:
                line.append(f"; then waited {attempt.wait_s:.3f} s", style="dim")
            lines.append(line)
    return lines


def approval_lines(state: TaskState, number: int) -> list[Text]:
    """The approval a revision asked for and the decision on it: who, when, and what they said."""
    lines: list[Text] = []
    for request in (r for r in state.approvals if r.revision == number):
        line = Text("approval: asked", style="bold")
        if request.actions:
            line.append(f" for actions {', '.join(request.actions)}", style="")
        if request.deadline is not None:
            line.append(f", by {iso_time(request.deadline)}", style="dim")
        lines.append(line)
    for review in (r for r in state.reviews if r.revision == number):
        if isinstance(review, Approved):
            line = Text.assemble(("  approved", "green"), f" by {review.by}")
            if review.note:
                line.append(f": {review.note}", style="italic")
        else:
            line = Text.assemble(("  rejected", "red"), f" by {review.by}: ")
            line.append(review.reason, style="italic")
        lines.append(line)
    return lines


def _verdicts(state: TaskState, number: int) -> list[RenderableType]:
    parts: list[RenderableType] = []
    refs = known_refs(state)
    for recorded in (v for v in state.verdicts if v.revision == number):
        parts.extend(_verdict(recorded, refs))
    parts.extend(diagnosis_text(d.diagnosis) for d in state.diagnoses if d.revision == number)
    parts.extend(_decision(d) for d in state.decisions if d.revision == number)
    return parts


def _verdict(recorded: VerdictRecorded, refs: frozenset[str]) -> list[RenderableType]:
    if recorded.evidence_missing:
        return [Text("verdict: not asked (required evidence missing)", style="red")]
    verdict = recorded.verdict
    line = Text("verdict: ", style="bold")
    line.append(str(verdict.status) if verdict else "none")
    line.append(f"  reliability: {recorded.reliability}", style="dim")
    parts: list[RenderableType] = [line]
    parts.extend(Text(f"  ! {problem}", style="red") for problem in recorded.problems)
    if verdict is not None:
        for result in verdict.criteria:
            mark = _CRITERION_MARK.get(result.status, Text("?"))
            cited = ", ".join(ref for ref in result.evidence_refs if ref in refs)
            parts.append(
                Text.assemble(
                    "  ", mark, f" {result.criterion}", (f"  [{cited}]" if cited else "", "dim")
                )
            )
        if verdict.failed_nodes:
            parts.append(Text(f"  blames: {', '.join(sorted(verdict.failed_nodes))}"))
        if verdict.feedback:
            parts.append(Text(f"  feedback: {verdict.feedback}", style="italic"))
    return parts


def _decision(dispatched: Dispatched) -> RenderableType:
    decision = dispatched.decision
    line = Text("decision: ", style="bold")
    line.append_text(decision_text(decision))
    if isinstance(decision, Finish) and decision.shadow is not None:
        line.append(f"  (recovery would have: {describe_decision(decision.shadow)})", style="dim")
    return line


def _ending(state: TaskState) -> RenderableType:
    finished = state.finished
    if finished is None:
        note = f"in progress: {state.phase}"
        if state.replan_deadline is not None:
            note += f" (replan must begin by {iso_time(state.replan_deadline)})"
        waiting = state.awaiting
        if waiting is not None:
            note += (
                f" (revision {waiting.revision}: `pev approve {state.task_id}` or "
                f"`pev reject {state.task_id} --reason ...`"
            )
            if waiting.deadline is not None:
                note += f", by {iso_time(waiting.deadline)}"
            note += ")"
        return Text(note, style="cyan")
    line = Text.assemble(
        ("result: ", "bold"),
        (f"{finished.status}/{finished.reason}", STATUS_STYLE[finished.status]),
    )
    if finished.detail:
        line.append(f"  {finished.detail}", style="dim")
    parts: list[RenderableType] = [line]
    parts.extend(
        Text(f"  output {node}: {canonical_json(value)}")
        for node, value in finished.outputs.items()
    )
    if finished.output is not None:  # the agent's own output (docs/engine.md, "Typed agents")
        parts.append(
            Text.assemble(("  the task's output: ", "bold"), canonical_json(finished.output))
        )
    return Group(*parts)


def chain_report(report: ChainReport) -> Text:
    """One line per verified task: ok, or the first bad event and what is wrong with it."""
    if report.ok:
        # How many are sealed with the key: a task rewritten whole without it has none.
        keyed = f", {report.keyed_events} sealed with the key" if report.keyed_events else ""
        return Text.assemble(
            ("ok  ", "bold green"), f"{report.task_id}  ({report.events} events{keyed})"
        )
    where = f"event {report.first_bad_seq}" if report.first_bad_seq is not None else "ledger"
    return Text.assemble(("BAD ", "bold red"), f"{report.task_id}  {where}: {report.problem}")
