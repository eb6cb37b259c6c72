"""`pev show` and `pev events` on tasks whose effects were reused, superseded and compensated.

The tasks of ``tests.support.effect_surfaces``: ``paid`` refunds a payment its local replan
replaces and reuses both its effects in a global replan; ``unwound`` fails and undoes its
effects, the refund failing. Each view says what became of every effect.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.cli_documents import pev_stdout, valid_document
from tests.support.effect_surfaces import (
    CLOSED,
    PAID,
    POSTED,
    UNWOUND,
    cut_at,
    effects_in,
    run_unwound,
)

import pev


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger holding both tasks."""
    path = tmp_path_factory.mktemp("effects") / "ledger.db"
    asyncio.run(effects_in(path))
    return path


def _rows(out: str, first: str) -> list[list[str]]:
    """The rows of the table printed in ``out`` whose first cell is ``first``, cell by cell."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in out.splitlines()
        if line.startswith("│") and line.strip("│").split("│")[0].strip() == first
    ]


def _line(out: str, kind: str) -> list[str]:
    """The `pev events` lines of the events of ``kind``."""
    return [line for line in out.splitlines() if line.split()[2] == kind]


def test_show_marks_a_reused_node_with_its_record(db: Path) -> None:
    """Revision 3's nodes read ``reused 1:ship (sent in revision 1)``: nothing was sent."""
    out = pev_stdout(db, "show", PAID)

    ship = ["ship", "ship", '{"item":"cup"}', "action", "", "reused 1:ship (sent in revision 1)"]
    assert ship in _rows(out, "ship")
    paid = [row for row in _rows(out, "pay") if row[-1].startswith("reused")]
    assert [row[:2] + row[3:] for row in paid] == [
        ["pay", "pay", "action", "ship", "reused 2:pay (sent in revision 2)"]
    ]


def test_show_lists_the_effects_superseded_and_compensated(db: Path) -> None:
    """The effects table: 1:pay superseded in revision 2 and compensated; 2:pay stands."""
    out = pev_stdout(db, "show", PAID)

    assert "effects" in [line.strip() for line in out.splitlines()]
    [refunded] = _rows(out, "1:pay")
    assert refunded[:4] == ["1:pay", "pay", '{"amount":100}', "1"]
    assert refunded[5:] == ["succeeded", "in revision 2", "compensated"]
    [paid] = _rows(out, "2:pay")
    assert paid[5:] == ["succeeded", "", ""]
    assert paid[4] == "paid/pay/0b8895843d28a813/1"  # its idempotency key


def test_show_says_a_superseded_effect_nothing_undoes_is_left_in_place(db: Path) -> None:
    """A post without a compensate, superseded in revision 2: ``none: left in place``."""
    out = pev_stdout(db, "show", POSTED)

    [first] = _rows(out, "1:post")
    assert first[-2:] == ["in revision 2", "none: left in place"]


def test_show_says_an_unwound_task_left_an_effect_in_place(db: Path) -> None:
    """The failed refund is named with its error and ``left in place``; then how it unwound."""
    out = pev_stdout(db, "show", UNWOUND)
    words = " ".join(out.replace("│", " ").split())

    assert f"compensation failed: RuntimeError: {CLOSED}" in words
    assert "left in place" in words
    assert (
        "unwound: it undid its effects, newest first, as it ended failed/replan_budget_exhausted"
        in out
    )


def test_show_says_a_task_is_unwinding(tmp_path: Path) -> None:
    """A task cut at unwind_started is in progress, compensating, and says how it will end."""
    db = tmp_path / "ledger.db"

    async def write() -> None:
        source, store = pev.MemoryStore(), pev.SQLiteStore(db)
        try:
            await run_unwound(source)
            await cut_at(source, store, UNWOUND, "compensation_dispatched")
        finally:
            await store.close()

    asyncio.run(write())
    out = pev_stdout(db, "show", UNWOUND)

    assert "unwinding: undoing its effects before it ends failed/replan_budget_exhausted" in out
    assert "in progress: compensating" in out
    assert "compensating" in _rows(out, "1:pay")[0][-1]


def test_show_json_gives_a_reused_node_the_record_it_reuses(db: Path) -> None:
    """state ``reused``; its record is the effect's, with the revision that sent it."""
    document = valid_document("show", pev_stdout(db, "show", PAID, "--json"))

    ship, pay = document["revisions"][2]["nodes"]
    assert (ship["state"], ship["record"]["id"], ship["record"]["revision"]) == (
        "reused",
        "1:ship",
        1,
    )
    assert (pay["state"], pay["record"]["id"], pay["record"]["revision"]) == ("reused", "2:pay", 2)


def test_show_json_lists_the_effects(db: Path) -> None:
    """A stable ``effects`` array: the superseded payment compensated, and its compensation."""
    document = valid_document("show", pev_stdout(db, "show", PAID, "--json"))

    assert [effect["record_id"] for effect in document["effects"]] == ["1:ship", "1:pay", "2:pay"]
    refunded = document["effects"][1]
    assert refunded["args"] == {"amount": 100}
    assert (refunded["occurrence"], refunded["status"], refunded["superseded"]) == (
        1,
        "succeeded",
        2,
    )
    assert (refunded["compensated"], refunded["in_world"]) == (True, False)
    compensation = refunded["compensation"]
    assert (compensation["record_id"], compensation["state"]) == ("undo:1:pay", "compensated")
    assert compensation["result"] == {"kind": "success", "value": "refunded 100"}
    assert document["unwind"] is None


def test_show_json_of_an_unwound_task(db: Path) -> None:
    """``unwind`` says how it was to end; the failed refund's compensation says why."""
    document = valid_document("show", pev_stdout(db, "show", UNWOUND, "--json"))

    assert document["unwind"] == {
        "status": "failed",
        "reason": "replan_budget_exhausted",
        "detail": "verifier blamed pay",
    }
    shipped, paid = document["effects"]
    assert shipped["compensation"]["state"] == "compensated"
    assert paid["compensation"]["state"] == "failed"
    assert CLOSED in paid["compensation"]["error"]
    assert (paid["compensated"], paid["in_world"]) == (False, True)


def test_events_say_what_befell_each_effect(db: Path) -> None:
    """Superseded, compensating, compensated and reused lines, in words; --follow the same."""
    out = pev_stdout(db, "events", PAID)

    [superseded] = _line(out, "effect_superseded")
    assert superseded.endswith(
        "↷ record 1:pay superseded: revision 2 redoes node 'pay' with another call"
    )
    [dispatched] = _line(out, "compensation_dispatched")
    assert dispatched.endswith("▶ compensating record 1:pay (pay)")
    [compensated] = _line(out, "effect_compensated")
    assert compensated.endswith("⤺ record 1:pay compensated")
    assert [line.split("node_reused  ", 1)[1] for line in _line(out, "node_reused")] == [
        "↺ ship reused record 1:ship (sent in revision 1)",
        "↺ pay reused record 2:pay (sent in revision 2)",
    ]
    assert pev_stdout(db, "events", PAID, "--follow") == out


def test_events_say_how_a_task_unwound(db: Path) -> None:
    """The unwind line, and the failed compensation with its error and ``left in place``."""
    out = pev_stdout(db, "events", UNWOUND)

    [unwind] = _line(out, "unwind_started")
    assert unwind.endswith(
        "unwinding: undoing its effects before it ends failed/replan_budget_exhausted"
    )
    [failed] = _line(out, "compensation_failed")
    assert f"✗ compensation of 1:pay failed: RuntimeError: {CLOSED}" in failed
    assert failed.endswith("; left in place")


def test_events_json_holds_the_new_events(db: Path) -> None:
    """--json and --follow --json: node_reused cites its record, compensations their effect."""
    document = valid_document("events", pev_stdout(db, "events", PAID, "--json"))

    reused = [e["event"] for e in document["events"] if e["kind"] == "node_reused"]
    assert [(e["node_id"], e["record_id"], e["revision"]) for e in reused] == [
        ("ship", "1:ship", 3),
        ("pay", "2:pay", 3),
    ]
    [compensated] = [e["event"] for e in document["events"] if e["kind"] == "effect_compensated"]
    assert (compensated["effect"], compensated["record_id"]) == ("1:pay", "undo:1:pay")
    followed = pev_stdout(db, "events", PAID, "--follow", "--json").splitlines()
    assert [valid_document("events --follow", line) for line in followed] == document["events"]
