"""Golden ledgers: recorded histories that today's rules must still read, verify and replay.

The files in ``golden/`` are data written once by ``golden/make_golden.py``, whose scenarios are
never run here (only its ``expected_outcome`` is borrowed). If a change to the fold, the codec or
the hash chain alters what a stored history means, these tests fail; regenerate the files only
when that change is intended.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pev import codec
from pev.kernel import TaskStatus, TerminalReason
from pev.ledger import (
    EffectStatus,
    Ledger,
    LedgerEntry,
    Store,
    TaskFinished,
    replay,
    summarize,
    verify_chain,
)
from pev.stores import MemoryStore, SQLiteStore

GOLDEN = Path(__file__).resolve().parent / "golden"
NAMES = (
    "happy_path",
    "local_replan_then_pass",
    "device_failure_partial",
    "rejected_plan_budget_exhausted",
    "replan_deadline_expired",
)


def lines(name: str) -> list[str]:
    return (GOLDEN / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()


def entries(name: str) -> tuple[LedgerEntry, ...]:
    return tuple(codec.loads(line, LedgerEntry) for line in lines(name))


def expected(name: str) -> dict[str, Any]:
    data = json.loads((GOLDEN / f"{name}.expected.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _generator_outcome() -> Any:
    """The generator's own ``expected_outcome``, so the files and the test share one shape."""
    spec = importlib.util.spec_from_file_location("pev_make_golden", GOLDEN / "make_golden.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the scenarios; main() only runs as a script
    return module.expected_outcome


outcome = _generator_outcome()


def test_golden_files_are_all_present() -> None:
    """Every golden scenario has its ledger and its expected outcome, and there are no others."""
    on_disk = {path.name.removesuffix(".jsonl") for path in GOLDEN.glob("*.jsonl")}
    assert on_disk == set(NAMES)
    for name in NAMES:
        assert (GOLDEN / f"{name}.expected.json").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_golden_lines_decode_to_the_same_text(name: str) -> None:
    """Each line decodes to a LedgerEntry whose canonical encoding is that very line."""
    for line in lines(name):
        assert codec.dumps(codec.loads(line, LedgerEntry)) == line


@pytest.mark.parametrize("name", NAMES)
def test_golden_chain_verifies(name: str) -> None:
    """The hash chain of the recorded history is whole, up to the recorded head hash."""
    stored = entries(name)
    report = verify_chain(
        stored[0].task_id,
        stored,
        head_count=len(stored),
        head_hash=expected(name)["head_hash"],
    )
    assert report.ok, report.problem


@pytest.mark.parametrize("name", NAMES)
def test_golden_replays_to_its_expected_outcome(name: str) -> None:
    """Replaying the recorded history gives exactly the recorded outcome."""
    assert outcome(entries(name)) == expected(name)


@pytest.mark.parametrize("name", NAMES)
def test_golden_every_prefix_folds(name: str) -> None:
    """Every prefix of the recorded history is a state the fold accepts, counted right."""
    stored = entries(name)
    for count in range(1, len(stored) + 1):
        assert replay(stored[:count]).event_count == count


# The effects each recorded history folds to, written before records kept occurrences and args:
# (record, occurrence, args) per effect, all succeeded. An action's args come from its node,
# except where they held a $ref (grab's target); place, redone in a local revision, is the
# second occurrence of its call there.
GOLDEN_EFFECTS: dict[str, list[tuple[str, int, dict[str, Any] | None]]] = {
    "happy_path": [("rec-2", 1, None), ("rec-3", 1, {})],
    "local_replan_then_pass": [("rec-2", 1, None), ("rec-3", 1, {}), ("rec-4", 2, {})],
    "device_failure_partial": [],
    "rejected_plan_budget_exhausted": [],
    "replan_deadline_expired": [("rec-2", 1, None), ("rec-3", 1, {})],
}


@pytest.mark.parametrize("name", NAMES)
def test_golden_replays_with_its_effects(name: str) -> None:
    """Older ledgers read with their actions as effects, numbered in order, keyed as recorded."""
    state = replay(entries(name))
    effects = list(state.effects.values())
    assert [(item.record_id, item.occurrence, item.args) for item in effects] == GOLDEN_EFFECTS[
        name
    ]
    assert all(item.status is EffectStatus.SUCCEEDED for item in effects)
    assert [item.key for item in effects] == [
        state.records[item.record_id].idempotency_key for item in effects
    ]


def _store(kind: str, tmp_path: Path) -> Store:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "golden.db")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("name", NAMES)
async def test_golden_ledger_verifies_inside_a_store(name: str, kind: str, tmp_path: Path) -> None:
    """Loaded into a store, the recorded history verifies and reads back as the same state."""
    stored = entries(name)
    store = _store(kind, tmp_path)
    try:
        state = replay(stored)
        await store.append(stored, summarize(state, head_hash=stored[-1].hash))
        ledger = Ledger(store)
        report = await ledger.verify(stored[0].task_id)
        assert report.ok, report.problem
        assert await ledger.state(stored[0].task_id) == state
    finally:
        await store.close()


def test_golden_edit_is_caught() -> None:
    """Turning the recorded failure into a success breaks the chain at the last event."""
    stored = list(entries("replan_deadline_expired"))
    ending = stored[-1].event
    assert isinstance(ending, TaskFinished)
    forged = replace(ending, status=TaskStatus.SUCCEEDED, reason=TerminalReason.PASSED)
    stored[-1] = replace(stored[-1], event=forged)
    report = verify_chain(stored[0].task_id, stored)
    assert not report.ok
    assert report.first_bad_seq == len(stored)
