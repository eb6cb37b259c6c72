"""A shop whose replan refunds a payment, killed anywhere (tests/engine/test_effects_processes.py).

The agent reserves, pays 100, then notifies with the payment's answer; its verifier blames the
reservation and the payment once, and the local replan reserves the same (reused, never sent
again), pays 50 instead (the 100 is refunded first) and notifies anew. Actions deliver to "the
other end" (``other-end.log``) and the refund to ``undone.log``: append-only files only the tools
write, one line a delivery, ``<key> <what>``. It runs in the children of
:class:`tests.support.crash.Shop`, beside the crash suite's own agent module (renamed
``pev_crash_base``, whose ledger store counts and kills), and is killed and resumed as that
suite's cases are; :class:`Undone` adds the checks of compensations.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.crash import Crashed, Shop, Snapshot
from tests.support.crash_agent import AGENT as BASE

from pev.ledger import TaskEffect
from pev.model import RecordStatus

AGENT = textwrap.dedent(
    '''
    """A shop for the compensation crash tests: reserve, pay, notify; a replan refunds."""

    from __future__ import annotations

    import asyncio
    import os
    import sys
    from datetime import timedelta
    from pathlib import Path

    import pev
    from pev.engine import current_node_context
    from pev.ledger import utc_now
    from pev.model import DeviceFailure, Plan, PlanNode, Success, Verdict, VerificationContract
    from pev.stores import SQLiteStore
    from pev_crash_base import LATER_S, CountingStore, _die

    HERE = Path(__file__).parent
    TIMEOUT_S = 10.0  # far above a delivery's own time; reconcile is asked once it has passed
    KILL_AFTER_SEND = int(os.environ.get("PEV_CRASH_AFTER_SEND", "0"))
    _sent = 0


    def deliver(log, what):
        """Deliver once, to ``log``: one os.write on an O_APPEND file, made durable."""
        global _sent
        key = current_node_context().idempotency_key
        fd = os.open(HERE / log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
        path = HERE / "other-end.log"
        keys = path.read_text().split() if path.exists() else []
        if record.idempotency_key in keys:
            return Success(f"{record.tool} (reconciled)")
        return DeviceFailure(record.node_id, "the other end never received it")


    @pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered)
    def reserve(item: str) -> str:
        """Reserve an item."""
        return deliver("other-end.log", f"reserved {item}")


    def refund(effect):
        """Refund a payment."""
        return deliver("undone.log", f"refunded {effect.args['amount']}")


    @pev.tool(effect="action", timeout_s=TIMEOUT_S, reconcile=delivered, compensate=refund)
    def pay(amount: int) -> str:
        """Pay for it (a refund undoes it)."""
        return deliver("other-end.log", f"paid {amount}")


    @pev.tool(effect="action", timeout_s=TIMEOUT_S)
    async def notify(text: str) -> str:
        """Tell the customer (it cannot say afterwards whether it told them)."""
        await asyncio.sleep(0)
        return deliver("other-end.log", f"notified {text.replace(' ', '-')}")


    CONTRACT = VerificationContract(goal="sell the item", success_criteria=("paid right",))


    def plan(request):
        """Reserve, pay, notify; a local replan pays 50 instead of 100."""
        amount = 50 if request.kind == "local" else 100
        return Plan(
            "sell",
            (
                PlanNode("reserve", "reserve it", tool="reserve", args={"item": "mug"}),
                PlanNode("pay", "pay", tool="pay", args={"amount": amount}, after=("reserve",)),
                PlanNode("notify", "tell them", tool="notify", args={"text": {"$ref": "pay"}},
                         after=("pay",)),
            ),
        )


    def check(request):
        """Blame every node without a success; all done in revision 1, blame two once."""
        missing = [n.id for n in request.plan.nodes if request.output(n.id) is None]
        if missing:
            return Verdict.failed(request.contract, failed_nodes=missing, feedback="not done")
        if request.revision == 1:
            return Verdict.failed(
                request.contract, failed_nodes=["reserve", "pay"], feedback="pay 50"
            )
        return Verdict.passed(request.contract)


    shop = pev.Agent(plan, verifier=check, tools=[reserve, pay, notify], contract=CONTRACT)


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


@dataclass(frozen=True, slots=True)
class UndoShop(Shop):
    """A :class:`Shop` that runs this module's agent, and whose refunds go to ``undone.log``."""

    @classmethod
    def in_folder(cls, folder: Path) -> UndoShop:
        """Write the agent module (and the crash suite's, as its base) into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pev_crash_base.py").write_text(BASE, encoding="utf-8")
        (folder / "pev_crash_agent.py").write_text(AGENT, encoding="utf-8")
        return cls(folder)

    def undone(self) -> Counter[str]:
        """How many times each compensation key was delivered (its refund made)."""
        path = self.folder / "undone.log"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return Counter(line.split(" ", 1)[0] for line in lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class Undone(Crashed):
    """One case of the refunding shop: the crash suite's checks, and those of compensations.

    Attributes:
        undone: The compensation keys the refunds were delivered under, counted.
    """

    undone: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of_shop(cls, shop: UndoShop, name: str, *, reference: str, **kill: int) -> Undone:
        """Run the case in ``shop`` (killed as told), resume it, read what is left."""
        case = cls.of(shop, name, reference=reference, **kill)
        return dataclasses.replace(case, undone=shop.undone())

    def problems(self) -> list[str]:
        """Every way this case breaks a guarantee, the crash suite's and compensations'."""
        found = Crashed.problems(self)
        if self.after is None:
            return found
        return found + [f"{self.name}: {problem}" for problem in self._undos(self.after)]

    def _undos(self, after: Snapshot) -> list[str]:
        """No refund made twice; each under its effect's compensation key, recorded as such."""
        effects = after.state.effects.values()
        keys = {e.compensation.idempotency_key for e in effects if e.compensation is not None}
        found = [f"refund {key} made {n} times" for key, n in self.undone.items() if n > 1]
        found += [f"refund {key} made with no record of it" for key in set(self.undone) - keys]
        found += [
            f"compensation of {e.record_id} has key {e.compensation.idempotency_key}, not "
            f"{e.key}/compensate"
            for e in effects
            if e.compensation is not None
            and e.compensation.idempotency_key != f"{e.key}/compensate"
        ]
        return found

    def _outcome(self) -> list[str]:
        """A crash-free run's end; or ``partial``, naming an effect whose refund was cut short."""
        assert self.after is not None
        left = cut_short(self.after.state.effects.values())
        if not left:
            return Crashed._outcome(self)
        ended = self.after.state.finished
        if ended is None or (ended.status, ended.reason) != ("partial", "device_failure"):
            return [f"a refund was cut short, yet the task ended {ended}"]
        return [
            f"the end does not name {effect.record_id}, whose refund was cut short: {ended.detail}"
            for effect in left
            if effect.record_id not in ended.detail
        ]


def cut_short(effects: object) -> list[TaskEffect]:
    """The effects whose compensation a crash left unfinished (settled ``unknown`` on resume)."""
    return [
        effect
        for effect in effects  # type: ignore[attr-defined]
        if effect.compensation is not None and effect.compensation.status is RecordStatus.UNKNOWN
    ]
