"""A verifier in another language checks pev's ledgers: js/verify_ledger.mjs, under Node.js.

It was written from docs/ledger-format.md alone, with no pev code and no npm packages, so these
tests show that the format document says enough to verify a chain: the golden ledgers (schema 1),
fresh ones exported with `pev ledger export` (schema 2, and schema 3 with the key), a pinned one
holding integers beyond ±(2**53-1) (js/big_integers.jsonl, exact digits under §3.3), and that it
rejects a changed value, a changed time, a dropped, a moved and a dropped last event.

Skipped where ``node`` is not on PATH; failed instead under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.support import builders
from tests.support.builders import T0

from pev import codec
from pev.cli import cli
from pev.ledger import (
    LEDGER_KEY_ENV,
    CaptureFailed,
    Ledger,
    LedgerEntry,
    NodeDispatched,
    NodeFinished,
    replay,
    summarize,
)
from pev.model import (
    EvidencePhase,
    JsonValue,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    Success,
)
from pev.stores import SQLiteStore
from pev.testing import FakeClock

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "js" / "verify_ledger.mjs"
GOLDEN = HERE / "golden"
PINNED = HERE / "js" / "big_integers.jsonl"
NAMES = sorted(path.stem for path in GOLDEN.glob("*.jsonl"))
KEY = "a key for the verifier"
TASK = "fresh-τ-task"

# Integers past ±(2**53-1), most of which no double holds (RFC 8785 alone would change their
# text), and an integral double beyond that range, whose text the rule keeps (§3.3).
BIG_INTS = [
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    9876543210123457,
    2**63 - 1,
    -(2**63),
    2**64 + 1,
    -(2**64 + 1),
    10**39 + 7,
    -(10**39 + 7),
]
BIG: list[JsonValue] = [*BIG_INTS, 1e20]
PINNED_TASK = "big-integers"
PINNED_VALUES: dict[str, JsonValue] = {"ids": BIG, "id": {"snowflake": 9876543210123456}}

# Values whose canonical text differs between forms: integral, signed-zero, tiny and huge
# floats, big integers, control characters, non-ASCII and astral text, keys that sort
# differently in UTF-16.
AWKWARD: dict[str, JsonValue] = {
    "floats": [1.0, -0.0, 1e-7, 1e21, 1e20, 0.1 + 0.2, 5e-324, 2.5, -1.5e-10],
    "text": 'Grüße 😀 "quoted" back\\slash \u2028 tab\t nul\x00 del\x7f',
    "\U0001f600": "astral key",
    "\ufb01": "ligature key",
    "nested": {"deep": [[[{"z": None, "a": True}]]], "empty": {}, "list": []},
    "ints": [0, -7, 9007199254740991],
    "big ints": BIG,
}


@pytest.fixture
def node() -> str:
    """The ``node`` executable (skipped without one; under CI=true, failed)."""
    found = shutil.which("node")
    if found is None:
        reason = "Node.js (node) is not on PATH: the JavaScript verifier cannot run"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the JavaScript verifier to run: {reason}")
        pytest.skip(reason)
    return found


def _js(node: str, path: Path, *args: str, key: str | None = None) -> tuple[int, str]:
    """Run the JavaScript verifier on ``path``: its exit code and its one line."""
    env = {name: value for name, value in os.environ.items() if name != LEDGER_KEY_ENV}
    if key is not None:
        env[LEDGER_KEY_ENV] = key
    done = subprocess.run(
        [node, str(SCRIPT), str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.stderr == ""
    return done.returncode, done.stdout.strip()


def _export(db: Path, task_id: str, out: Path) -> list[str]:
    """`pev --db DB ledger export TASK -o OUT`; the lines written."""
    result = CliRunner().invoke(
        cli, ["--db", str(db), "ledger", "export", task_id, "-o", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return _lines(out)


def _lines(path: Path) -> list[str]:
    """The lines of an export (split at newlines only: a text may hold U+2028 as it is)."""
    return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")


async def _write_fresh(
    db: Path, *, key: str | None, values: JsonValue = AWKWARD, task: str = TASK
) -> None:
    """A task of awkward ``values`` written by a ledger today, with ``key`` or without.

    (``values=PINNED_VALUES, task=PINNED_TASK`` wrote js/big_integers.jsonl.)
    """
    store = SQLiteStore(db)
    try:
        ledger = Ledger(store, clock=FakeClock(T0, step=timedelta(milliseconds=7)), key=key)
        await ledger.create(values, task_id=task)
        plan = Plan(
            "put the cube in the tray", (PlanNode("a", "move it", tool="arm", args=values),)
        )
        record = builders.record("r1", "a", task_id=task)
        await ledger.append(task, [builders.revision(1, plan=plan), NodeDispatched(record=record)])
        done = NodeFinished(
            record_id=RecordId("r1"), status=RecordStatus.SUCCEEDED, result=Success(values), at=T0
        )
        await ledger.append(task, [done])
        for error in ("camera offline", "lens fogged", "still fogged"):
            capture = CaptureFailed(revision=1, phase=EvidencePhase.AFTER, error=error)
            await ledger.append(task, [capture])
        assert (await ledger.verify(task)).ok
    finally:
        await store.close()


def _exported(folder: Path, name: str, *, key: str | None) -> Path:
    """A fresh ledger of :data:`AWKWARD` values written in ``folder``, exported as JSON lines."""
    db = folder / f"{name}.db"
    asyncio.run(_write_fresh(db, key=key))
    out = folder / f"{name}.jsonl"
    _export(db, TASK, out)
    return out


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A fresh unkeyed ledger, exported."""
    return _exported(tmp_path, "fresh", key=None)


@pytest.fixture
def keyed(tmp_path: Path) -> Path:
    """The same, sealed with :data:`KEY`."""
    return _exported(tmp_path, "keyed", key=KEY)


def _rewrite(path: Path, change: object) -> Path:
    """A copy of the export with its lines changed by ``change(lines) -> lines``."""
    lines = _lines(path)
    changed = path.with_name(f"changed-{path.name}")
    changed.write_text("\n".join(change(lines)) + "\n", encoding="utf-8")  # type: ignore[operator]
    return changed


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_ledger_verifies(node: str, name: str) -> None:
    """The recorded histories (schema 1, pev's own canonical text) verify in JavaScript."""
    code, line = _js(node, GOLDEN / f"{name}.jsonl")
    assert (code, line.split(":")[0]) == (0, "ok"), line


def _load(db: Path, lines: list[str]) -> None:
    """Exported lines, decoded, written into a SQLite ledger at ``db`` (its index as well)."""

    async def load() -> None:
        decoded: list[LedgerEntry] = [codec.loads(line, LedgerEntry) for line in lines]
        store = SQLiteStore(db)
        try:
            await store.append(decoded, summarize(replay(decoded), head_hash=decoded[-1].hash))
        finally:
            await store.close()

    asyncio.run(load())


def test_export_writes_the_golden_format(tmp_path: Path) -> None:
    """A golden ledger loaded into a store is exported as the very lines it was recorded in."""
    lines = (GOLDEN / "happy_path.jsonl").read_text(encoding="utf-8").splitlines()
    db = tmp_path / "golden.db"
    _load(db, lines)
    assert _export(db, json.loads(lines[0])["task_id"], tmp_path / "out.jsonl") == lines


def test_a_fresh_ledger_verifies(node: str, fresh: Path) -> None:
    """A ledger written today (JCS text, schema 2) with awkward values verifies in JavaScript."""
    lines = _lines(fresh)
    assert {json.loads(line)["schema"] for line in lines} == {2}
    assert "1e-7" in lines[0]
    assert "1.0" not in lines[0]
    code, line = _js(node, fresh)
    assert (code, line) == (0, f"ok: 7 events of task {TASK} verified (0 sealed with the key)")


def test_the_pinned_big_integer_ledger_verifies(node: str) -> None:
    """Integers past ±(2**53-1), 64-bit and 40-digit ones, verify in JavaScript (§3.3)."""
    assert _js(node, PINNED) == (
        0,
        "ok: 7 events of task big-integers verified (0 sealed with the key)",
    )


def test_the_pinned_big_integer_ledger_reads_back_exactly(tmp_path: Path) -> None:
    """pev reads the pinned ledger, verifies it, folds its integers exactly, writes its bytes."""
    lines = _lines(PINNED)
    db = tmp_path / "pinned.db"
    _load(db, lines)

    async def verified_input() -> JsonValue:
        store = SQLiteStore(db)
        try:
            ledger = Ledger(store)
            report = await ledger.verify(PINNED_TASK)
            assert report.ok, report.problem
            return (await ledger.state(PINNED_TASK)).created.input  # type: ignore[union-attr]
        finally:
            await store.close()

    assert asyncio.run(verified_input()) == PINNED_VALUES
    assert _export(db, PINNED_TASK, tmp_path / "out.jsonl") == lines


def test_a_fresh_ledger_writes_big_integers_exactly(fresh: Path) -> None:
    """A ledger written today holds each integer past ±(2**53-1) as its exact digits."""
    created = json.loads(_lines(fresh)[0])["event"]  # Python's json reads integers exactly
    assert created["input"]["big ints"] == [*BIG_INTS, 10**20]


def test_a_changed_digit_of_a_big_integer_is_caught(node: str, tmp_path: Path) -> None:
    """9007199254740993 made ...992 (one double to JSON.parse) fails: the digits are kept."""
    pinned = tmp_path / PINNED.name
    pinned.write_text(
        PINNED.read_text("utf-8").replace(",9007199254740993,", ",9007199254740992,", 1), "utf-8"
    )
    code, line = _js(node, pinned)
    assert (code, line) == (
        1,
        "FAIL: event 1 was changed after it was written (its hash does not match)",
    )


def test_an_integer_of_more_digits_than_the_bound_fails(node: str, tmp_path: Path) -> None:
    """An integer of 641 digits is no ledger text in JavaScript either, named at its event."""
    pinned = tmp_path / PINNED.name
    forty = "1000000000000000000000000000000000000007"
    pinned.write_text(PINNED.read_text("utf-8").replace(forty, "1" + "0" * 640, 1), "utf-8")
    code, line = _js(node, pinned)
    assert (code, line) == (
        1,
        "FAIL: event 1: an integer of 641 digits, more than the 640 a ledger records",
    )


def test_the_embedded_demo_verifies(node: str, tmp_path: Path) -> None:
    """A task of the simulator demo, exported, verifies in JavaScript."""
    pytest.importorskip("pev.sim", reason="`pev demo` needs the sim extra", exc_type=ImportError)
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(
        cli, ["--db", str(db), "demo", "--fault", "slip"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output

    async def task_ids() -> tuple[str, ...]:
        store = SQLiteStore(db)
        try:
            return await store.ledger_task_ids()
        finally:
            await store.close()

    (task_id,) = asyncio.run(task_ids())
    out = tmp_path / "demo.jsonl"
    _export(db, task_id, out)
    code, line = _js(node, out)
    assert (code, line.split(":")[0]) == (0, "ok"), line


def test_a_keyed_ledger_verifies_with_its_key(node: str, keyed: Path) -> None:
    """Schema 3 (HMAC-SHA256) verifies with the key, from PEV_LEDGER_KEY or --key."""
    assert _js(node, keyed, key=KEY)[0] == 0
    assert _js(node, keyed, "--key", KEY)[0] == 0


def test_a_keyed_ledger_without_its_key_asks_for_it(node: str, keyed: Path) -> None:
    """Without the key it fails, saying to set PEV_LEDGER_KEY."""
    code, line = _js(node, keyed)
    assert code == 1
    assert "PEV_LEDGER_KEY" in line


def test_a_keyed_ledger_under_another_key_fails(node: str, keyed: Path) -> None:
    """Under another key the first event's seal does not match."""
    code, line = _js(node, keyed, key="not the key")
    assert (code, line.startswith("FAIL: event 1 ")) == (1, True)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(
            lambda lines: [line.replace("lens fogged", "lens clear") for line in lines],
            "event 6 was changed",
            id="changed-value",
        ),
        pytest.param(
            lambda lines: [*lines[:2], lines[2].replace('"at":"2026', '"at":"2027'), *lines[3:]],
            "event 3 was changed",
            id="changed-time",
        ),
        pytest.param(lambda lines: [*lines[:3], *lines[4:]], "expected event 4", id="dropped"),
        pytest.param(
            lambda lines: [*lines[:3], lines[4], lines[3], *lines[5:]],
            "expected event 4",
            id="reordered",
        ),
        pytest.param(
            lambda lines: [line.replace('"seq":5,', '"seq":6,') for line in lines],
            "expected event 5",
            id="renumbered",
        ),
    ],
)
def test_a_tampered_ledger_is_rejected(node: str, fresh: Path, change: object, reason: str) -> None:
    """A changed value or time, a dropped or moved event: exit 1, naming the first bad event."""
    code, line = _js(node, _rewrite(fresh, change))
    assert code == 1
    assert line.startswith("FAIL: ")
    assert reason in line


def test_a_dropped_last_event_is_caught_against_the_head(node: str, fresh: Path) -> None:
    """Without its last line the chain is whole; the head kept elsewhere gives it away."""
    lines = _lines(fresh)
    head = json.loads(lines[-1])
    short = _rewrite(fresh, lambda kept: kept[:-1])
    assert _js(node, short)[0] == 0
    code, line = _js(node, short, "--head", f"{head['seq']}:{head['hash']}")
    assert code == 1
    assert "head says 7 events" in line


def test_a_keyed_event_resealed_without_the_key_is_rejected(node: str, keyed: Path) -> None:
    """A keyed chain whose last event claims sha256 (schema 2) fails: a reseal without the key."""
    change = lambda lines: [*lines[:-1], lines[-1].replace('"schema":3', '"schema":2')]  # noqa: E731
    code, line = _js(node, _rewrite(keyed, change), key=KEY)
    assert code == 1
    assert "not sealed with the key" in line
