"""`pev events` and `pev show` on a record of unknown outcome that a reconciliation settled.

The task of ``tests.support.reconciled``: ``post`` times out after taking effect, its record
ends ``unknown`` (never rewritten), and its tool's ``reconcile`` settles it as done (or not).
Each view says ``unknown → reconciled: <status>`` with the reconciliation's note, never a
failure for a record settled as done.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.cli_documents import pev_stdout, valid_document
from tests.support.reconciled import NOT_FOUND, POSTED, reconciled_in

DONE = "post-done"
NOT_DONE = "post-not-done"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with the task twice: settled as done, and settled as not done."""
    path = tmp_path_factory.mktemp("reconciled") / "ledger.db"
    asyncio.run(reconciled_in(path, task_id=DONE))
    asyncio.run(reconciled_in(path, done=False, task_id=NOT_DONE))
    return path


def _words(out: str) -> str:
    """The text with table borders and wrapping gone."""
    return " ".join(out.replace("│", " ").split())


def test_events_say_what_the_reconciliation_established(db: Path) -> None:
    """The record_reconciled line follows the unknown node's: ✓ unknown → reconciled: succeeded."""
    lines = pev_stdout(db, "events", DONE).splitlines()

    [settled] = [line for line in lines if line.split()[2] == "record_reconciled"]
    assert "record_reconciled  ✓ post unknown → reconciled: succeeded  " in settled
    assert "reconcile" in settled.split("succeeded", 1)[1]  # its note
    assert pev_stdout(db, "events", DONE, "--follow").splitlines() == lines


def test_events_say_what_a_reconciliation_found_not_done(db: Path) -> None:
    """Settled as not done: ✗ unknown → reconciled: failed, with what the reconcile found."""
    lines = pev_stdout(db, "events", NOT_DONE).splitlines()

    [settled] = [line for line in lines if line.split()[2] == "record_reconciled"]
    assert f"✗ post unknown → reconciled: failed: {NOT_FOUND}" in settled


def test_events_json_holds_the_reconciliation(db: Path) -> None:
    """--json, and --follow --json: the event with its record, result and note, as documented."""
    document = valid_document("events", pev_stdout(db, "events", DONE, "--json"))

    [settled] = [e for e in document["events"] if e["kind"] == "record_reconciled"]
    assert settled["event"]["record_id"] == "1:post"
    assert settled["event"]["result"]["value"] == POSTED
    assert "reconcile" in settled["event"]["note"]
    followed = pev_stdout(db, "events", DONE, "--follow", "--json").splitlines()
    assert [valid_document("events --follow", line) for line in followed] == document["events"]


def test_show_gives_the_settled_status_and_the_note(db: Path) -> None:
    """The record reads unknown → reconciled: succeeded, and a line under it gives the note."""
    out = pev_stdout(db, "show", DONE)

    assert "unknown → reconciled: succeeded" in _words(out)
    [line] = [line for line in out.splitlines() if line.startswith("  ✓ post ")]
    assert line.startswith("  ✓ post unknown → reconciled: succeeded  ")
    assert "reconcile" in line.split("succeeded", 1)[1]


def test_show_gives_a_record_settled_as_not_done_as_failed(db: Path) -> None:
    """Settled as not done: unknown → reconciled: failed, with what the reconcile found."""
    out = pev_stdout(db, "show", NOT_DONE)

    assert "unknown → reconciled: failed" in _words(out)
    assert f"  ✗ post unknown → reconciled: failed: {NOT_FOUND}" in out


def test_show_json_gives_the_settled_status_and_the_reconciliation(db: Path) -> None:
    """The record stays unknown; settled_status and reconciliation say what was established."""
    document = valid_document("show", pev_stdout(db, "show", DONE, "--json"))

    [node] = document["revisions"][0]["nodes"]
    record = node["record"]
    assert (node["state"], record["status"]) == ("unknown", "unknown")
    assert record["reconciled_as"] == record["settled_status"] == "succeeded"
    reconciliation = record["reconciliation"]
    assert (reconciliation["status"], reconciliation["error"]) == ("succeeded", None)
    assert "reconcile" in reconciliation["note"]
    assert reconciliation["evidence_refs"] == []


def test_show_json_of_a_record_settled_as_not_done(db: Path) -> None:
    """Settled as not done: settled_status failed, and the reconciliation's error."""
    document = valid_document("show", pev_stdout(db, "show", NOT_DONE, "--json"))

    [node] = document["revisions"][0]["nodes"]
    assert node["record"]["settled_status"] == "failed"
    assert node["record"]["reconciliation"]["error"] == NOT_FOUND
