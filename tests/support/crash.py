"""A shop killed at every event boundary, and what its ledgers and its other end show after.

- The agent module the children import by name is tests/support/crash_agent.py's ``AGENT``.
- :class:`Shop`: the module's folder, its ledger and other end, and the children it starts.
- :class:`Crashed`: one case, killed and resumed, with every check of the suite (:meth:`problems`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.support.crash_agent import AGENT

from pev.ledger import Ledger, LedgerEntry, NodeDispatched, NodeFinished, TaskState
from pev.model import DeviceFailure, Effect, ExecutionRecord, RecordStatus, Success
from pev.stores import SQLiteStore

TASK = "crash-1"
CHILD_S = 60.0  # a child's whole life on a slow, busy machine; only a hang comes near it


@dataclass(frozen=True, slots=True)
class Ended:
    """How a child ended: its return code, and what it printed."""

    code: int
    out: str
    err: str


@dataclass(frozen=True, slots=True)
class Shop:
    """One case's folder: the agent module, its ledger and its other end."""

    folder: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Shop:
        """Write the agent module into ``folder`` (created if missing)."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pev_crash_agent.py").write_text(AGENT, encoding="utf-8")
        return cls(folder)

    @property
    def db(self) -> Path:
        """The ledger file."""
        return self.folder / "ledger.db"

    def child(self, *args: str, env: dict[str, str] | None = None) -> Ended:
        """Run a child to its end (or its own SIGKILL), within :data:`CHILD_S`."""
        full = dict(os.environ, **(env or {}))
        full["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(self.folder), os.getenv("PYTHONPATH")])
        )
        done = subprocess.run(
            [sys.executable, "-c", "import pev_crash_agent; pev_crash_agent.main()", *args],
            cwd=self.folder,
            env=full,
            capture_output=True,
            text=True,
            timeout=CHILD_S,
            check=False,
        )
        return Ended(done.returncode, done.stdout.strip(), done.stderr)

    def run(self, *, kill_after_event: int = 0, kill_after_send: int = 0) -> Ended:
        """Run the task; the child kills itself after that event or delivery (0: never)."""
        env = {"PEV_CRASH_AFTER_SEND": str(kill_after_send)}
        return self.child("run", str(self.db), TASK, str(kill_after_event), env=env)

    def resume(self) -> Ended:
        """Resume the task in a fresh process, its components rebuilt from their import paths."""
        return self.child("resume", str(self.db), TASK)

    def boundaries(self) -> list[int]:
        """The event count after each append the runs committed, in order."""
        path = self.folder / "boundaries.log"
        return [int(line) for line in path.read_text().split()] if path.exists() else []

    def sent(self) -> Counter[str]:
        """How many times the other end received each idempotency key."""
        path = self.folder / "other-end.log"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return Counter(line.split(" ", 1)[0] for line in lines)

    def ledger(self) -> Snapshot:
        """The task's entries, state and chain check, as the store holds them now."""

        async def read() -> Snapshot:
            store = SQLiteStore(self.db)
            try:
                ledger = Ledger(store)
                report = await ledger.verify(TASK)
                entries = await ledger.entries(TASK)
                return Snapshot(entries, await ledger.state(TASK), report.ok, report.problem)
            finally:
                await store.close()

        return asyncio.run(read())


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A task's ledger read back: its entries, its folded state, whether its chain verifies."""

    entries: tuple[LedgerEntry, ...]
    state: TaskState
    ok: bool
    problem: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Crashed:
    """One case: the run killed at a point, then resumed in a fresh process.

    Attributes:
        name: Where the run was killed (``event 7``, ``send 2``).
        kill_after_event: The event the run was to be killed after (0: after a delivery).
        killed: How the run ended (it must be by its own SIGKILL).
        boundaries: The event count after each append of the killed run.
        before: The ledger right after the kill.
        resumed: How the resume ended.
        after: The ledger once resumed.
        sent: The keys the other end received, counted.
        reference: How a crash-free run ends (``status/reason``).
    """

    name: str
    kill_after_event: int
    killed: Ended
    boundaries: tuple[int, ...]
    before: Snapshot | None = None
    resumed: Ended | None = None
    after: Snapshot | None = None
    sent: Counter[str]
    reference: str

    @classmethod
    def of(
        cls, shop: Shop, name: str, *, reference: str, kill_after_event: int = 0, **kill: int
    ) -> Crashed:
        """Run the case in ``shop`` (killed as told), resume it, read what is left."""
        killed = shop.run(kill_after_event=kill_after_event, **kill)
        case = cls(
            name=name,
            kill_after_event=kill_after_event,
            killed=killed,
            boundaries=tuple(shop.boundaries()),
            sent=shop.sent(),
            reference=reference,
        )
        if killed.code != -signal.SIGKILL or not shop.db.exists():
            return case
        before = shop.ledger()
        resumed = shop.resume()
        after = shop.ledger()
        return dataclasses.replace(
            case, before=before, resumed=resumed, after=after, sent=shop.sent()
        )

    def problems(self) -> list[str]:
        """Every way this case breaks a guarantee, one line each (none: it holds)."""
        if self.before is None or self.after is None or self.resumed is None:
            planned = f"the run was not killed as planned (code {self.killed.code})"
            return [f"{self.name}: {planned}: {_last_lines(self.killed.err)}"]
        found = self._kill_point(len(self.before.entries))
        if not self.before.ok:
            found.append(f"the ledger left by the kill does not verify: {self.before.problem}")
        if self.resumed.code != 0:
            found.append(f"resume exited {self.resumed.code}: {_last_lines(self.resumed.err)}")
        if not self.after.ok:
            found.append(f"the resumed ledger does not verify: {self.after.problem}")
        kept = self.after.entries[: len(self.before.entries)]
        if kept != self.before.entries:
            found.append(f"events lost or changed: {len(self.before.entries)} before the resume")
        if not self.after.state.terminal:
            found.append(f"the task did not end: {self.after.state.phase}")
        found += self._sends()
        found += self._outcome()
        return [f"{self.name}: {problem}" for problem in found]

    def _kill_point(self, held: int) -> list[str]:
        """The kill came right after the append that committed event ``k``, not elsewhere."""
        k = self.kill_after_event
        if not k:
            return []
        earlier = self.boundaries[:-1]
        if self.boundaries[-1:] != (held,) or held < k or (earlier and earlier[-1] >= k):
            return [f"killed after {held} events (appends ending at {self.boundaries}), not {k}"]
        return []

    def _sends(self) -> list[str]:
        """No key delivered twice, none unknown to the ledger, no action re-dispatched.

        A query is dispatched again only after a crash cut its record short (``cancelled``,
        without a result): a read runs again, an action never.
        """
        assert self.after is not None
        state = self.after.state
        found = [f"key {key} delivered {n} times" for key, n in self.sent.items() if n > 1]
        keys = {record.idempotency_key for record in state.records.values()}
        found += [f"key {key} delivered with no record of it" for key in set(self.sent) - keys]
        cut_short = Counter(
            (record.revision, record.node_id)
            for record in state.records.values()
            if record.effect is Effect.QUERY
            and record.status is RecordStatus.CANCELLED
            and record.id not in state.results
        )
        dispatched = Counter(
            (entry.event.record.revision, entry.event.record.node_id)
            for entry in self.after.entries
            if isinstance(entry.event, NodeDispatched)
        )
        dispatched.subtract(cut_short)
        found += [
            f"node {node} of revision {revision} dispatched {n} times"
            for (revision, node), n in dispatched.items()
            if n > 1
        ]
        for record in _unknown_actions(state):
            found += [
                f"{later.node_id} (revision {later.revision}) repeats unknown record {record.id}"
                for later in state.records.values()
                if later.created_at > record.created_at
                and (later.tool, later.args_digest) == (record.tool, record.args_digest)
            ]
        return found

    def _outcome(self) -> list[str]:
        """A crash-free run's result, or an honest one short of it: the crash cut a call short."""
        assert self.after is not None
        state = self.after.state
        ended = state.finished
        outcome = f"{ended.status}/{ended.reason}" if ended else "not ended"
        found = [
            f"the ledger says {record.node_id} ({record.idempotency_key}) succeeded; it was "
            "never delivered"
            for record in state.records.values()
            if record.effect is Effect.ACTION
            and isinstance(_result_of(state, record), Success)
            and not self.sent[record.idempotency_key]
        ]
        if outcome != self.reference and not (
            not outcome.startswith("succeeded/") and _cut_short(self.after)
        ):
            found.append(
                f"ended {outcome}, not {self.reference}, though the crash cut no call short"
            )
        if self.resumed is not None and self.resumed.out.splitlines()[-1:] != [outcome]:
            found.append(f"resume printed {self.resumed.out!r}; the ledger says {outcome}")
        return found


def _result_of(state: TaskState, record: ExecutionRecord) -> object:
    reconciled = state.reconciled.get(record.id)
    return reconciled.result if reconciled else state.results.get(record.id)


def _unknown_actions(state: TaskState) -> list[ExecutionRecord]:
    """Action records whose outcome nobody knows: unknown, and not reconciled since."""
    return [
        record
        for record in state.records.values()
        if record.effect is Effect.ACTION
        and record.status is RecordStatus.UNKNOWN
        and not _settled(_result_of(state, record))
    ]


def _cut_short(ledger: Snapshot) -> bool:
    """Whether the crash cut a call short: a record resume could only settle as not done."""
    return bool(_unknown_actions(ledger.state)) or any(
        isinstance(entry.event, NodeFinished)
        and entry.event.settled_on_resume
        and not isinstance(
            _result_of(ledger.state, ledger.state.records[entry.event.record_id]), Success
        )
        for entry in ledger.entries
    )


def _settled(result: object) -> bool:
    return not (isinstance(result, DeviceFailure) and result.outcome_unknown) and result is not None


def _last_lines(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def summary_line(cases: list[Crashed], events: int) -> str:
    """The suite's figures on one line."""
    outcomes = Counter(
        f"{c.after.state.finished.status}/{c.after.state.finished.reason}"
        for c in cases
        if c.after is not None and c.after.state.finished is not None
    )
    shown = ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items()))
    return f"{len(cases)} kills over a run of {events} events, then resumed: {shown}"


def as_json(cases: list[Crashed]) -> str:
    """The cases' names and outcomes, for a failure message."""
    return json.dumps({c.name: c.resumed.out if c.resumed else c.killed.code for c in cases})
