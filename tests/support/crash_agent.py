"""The source of the shop the crash suite kills (tests/support/crash.py writes it to a file).

It surveys, then reserves and labels at once (two actions that deliver to "the other end", an
append-only file only the tools write), then reports; its verifier blames the label once, so
the planner asks for a second label (a new occurrence: ``repeat=True``) in a second revision.
A child run kills itself (SIGKILL) right after the store commits its ``k``-th event
(``main``'s last argument), or right after the tools' ``n``-th delivery
(``PEV_CRASH_AFTER_SEND``); a resume runs with a clock a minute ahead, as an operator
who resumes a minute after the crash.
"""

import textwrap

# The agent lives in a module of its own, imported by name in every child, so that its
# components have import paths (`pev_crash_agent:shop`) that a fresh process rebuilds them from.
AGENT = textwrap.dedent(
    '''
    """A shop for the crash-boundary tests: survey, reserve and label at once, then report."""

    from __future__ import annotations

    import asyncio
    import os
    import signal
    import sys
    from datetime import timedelta
    from pathlib import Path

    import pev
    from pev.engine import current_node_context
    from pev.ledger import utc_now
    from pev.model import DeviceFailure, Plan, PlanNode, Success, Verdict, VerificationContract
    from pev.stores import SQLiteStore

    HERE = Path(__file__).parent
    OTHER_END = HERE / "other-end.log"
    BOUNDARIES = HERE / "boundaries.log"
    TIMEOUT_S = 10.0  # far above a delivery's own time; reconcile is asked once it has passed
    # The resumer's clock runs this far ahead: past the killed driver's lease (30 s) and every
    # tool's deadline, as when an operator resumes a minute after a crash.
    LATER_S = 60.0
    KILL_AFTER_SEND = int(os.environ.get("PEV_CRASH_AFTER_SEND", "0"))
    _sent = 0


    def _die():
        os.kill(os.getpid(), signal.SIGKILL)


    def deliver(what):
        """Deliver once to the other end: one os.write on an O_APPEND file, made durable."""
        global _sent
        key = current_node_context().idempotency_key
        fd = os.open(OTHER_END, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key} {what}\\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        _sent += 1
        if _sent == KILL_AFTER_SEND:
            _die()  # delivered, and the ledger will never hear of it from this process
        return what


    def delivered(record):
        """What the other end did with the record's key (asked past the record's deadline)."""
        keys = OTHER_END.read_text().split() if OTHER_END.exists() else []
        if record.idempotency_key in keys:
            return Success(f"{record.tool} (reconciled)")
        return DeviceFailure(record.node_id, "the other end never received it")


    @pev.tool(effect="query")
    def survey() -> dict:
        """Count the stock."""
        return {"stock": 3}


    @pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
    def reserve(item: str) -> str:
        """Reserve an item (it can say afterwards whether a reservation was made)."""
        return deliver(f"reserved {item}")


    @pev.tool(effect="action", timeout_s=TIMEOUT_S)
    async def label(text: str) -> str:
        """Print a label (it cannot say afterwards whether it printed one)."""
        await asyncio.sleep(0)
        return deliver(f"labelled {text}")


    @pev.tool(effect="query")
    def report(reserved: str, labelled: str) -> str:
        """Say what was done."""
        return f"{reserved}; {labelled}"


    CONTRACT = VerificationContract(
        goal="sell the item", success_criteria=("the item is reserved and labelled",)
    )


    def plan(request):
        """Survey, then reserve and label at once, then report; a local replan labels again."""
        item = str(request.input)
        # The first label is smudged: printing another is the intent, a new occurrence.
        again = request.kind == "local"
        return Plan(
            "sell",
            (
                PlanNode("survey", "count the stock", tool="survey", effect="query"),
                PlanNode("reserve", "reserve it", tool="reserve", args={"item": item},
                         after=("survey",)),
                PlanNode("label", "label it", tool="label", args={"text": item},
                         after=("survey",), repeat=again),
                PlanNode(
                    "report",
                    "say what was done",
                    tool="report",
                    args={"reserved": {"$ref": "reserve"}, "labelled": {"$ref": "label"}},
                    after=("reserve", "label"),
                    effect="query",
                ),
            ),
        )


    def check(request):
        """Blame every node without a success; all done in revision 1, blame the label once."""
        missing = [n.id for n in request.plan.nodes if request.output(n.id) is None]
        if missing:
            return Verdict.failed(request.contract, failed_nodes=missing, feedback="not done")
        if request.revision == 1:
            return Verdict.failed(request.contract, failed_nodes=["label"], feedback="smudged")
        return Verdict.passed(request.contract)


    shop = pev.Agent(plan, verifier=check, tools=[survey, reserve, label, report],
                     contract=CONTRACT)


    class CountingStore(SQLiteStore):
        """An SQLite store that notes each append's events, and dies after the k-th one."""

        def __init__(self, path, kill_after):
            super().__init__(path)
            self._kill_after = kill_after
            self._events = 0

        async def append(self, entries, summary, *, fence=None):
            await super().append(entries, summary, fence=fence)
            self._events += len(entries)
            with BOUNDARIES.open("a") as file:
                file.write(f"{self._events}\\n")
            if self._kill_after and self._events >= self._kill_after:
                _die()  # committed: a power loss now would keep every event up to here


    def main():
        command, db, task_id = sys.argv[1:4]
        if command == "run":
            store = CountingStore(db, int(sys.argv[4]))
            result = pev.run_sync("the red mug", agent=shop, store=store, task_id=task_id)
        else:
            later = lambda: utc_now() + timedelta(seconds=LATER_S)  # noqa: E731
            result = asyncio.run(pev.resume(task_id, store=SQLiteStore(db), clock=later))
        print(f"{result.status}/{result.reason}", flush=True)
    '''
)
