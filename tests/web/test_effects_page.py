"""The viewer on tasks whose effects were reused, superseded and compensated, through TestClient.

The tasks of ``tests.support.effect_surfaces``: ``paid`` refunds a payment its local replan
replaces and reuses both its effects in a global replan; ``unwound`` fails and undoes its
effects, the refund failing. A reused node is drawn as succeeded, marked reused, with a link to
the record it reuses; the effects table marks what was superseded and compensated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.support.effect_surfaces import (
    CLOSED,
    PAID,
    POSTED,
    UNWOUND,
    cut_at,
    effects_in,
    run_unwound,
)
from tests.web.support import run_apart

import pev
from pev.web import create_app

STYLE = Path(pev.__file__).parent / "web" / "static" / "style.css"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger holding both tasks."""
    path = tmp_path_factory.mktemp("effects") / "ledger.db"
    run_apart(lambda: effects_in(path))
    return path


@pytest.fixture(scope="module")
def viewer(db: Path) -> Iterator[TestClient]:
    """A viewer of that ledger."""
    app = create_app(pev.SQLiteStore(db), close_store=True)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture(scope="module")
def unwinding() -> Iterator[TestClient]:
    """A viewer of the unwound task as it stood while undoing its first effect."""

    async def write() -> pev.MemoryStore:
        source, store = pev.MemoryStore(), pev.MemoryStore()
        await run_unwound(source)
        await cut_at(source, store, UNWOUND, "compensation_dispatched")
        return store

    with TestClient(create_app(run_apart(write)), base_url="http://127.0.0.1") as client:
        yield client


def _graph_nodes(page: str, revision: int) -> dict[str, dict[str, object]]:
    """The nodes of a revision's graph, by id, as the page hands them to the layout script."""
    found = re.search(
        rf'<script type="application/json" id="graph-data-r{revision}">(.*?)</script>', page
    )
    assert found is not None
    return {node["id"]: node for node in json.loads(found.group(1))["nodes"]}


def _section(page: str, revision: int) -> str:
    found = re.search(
        rf'<section class="revision" id="r{revision}">(.*?)</section>', page, re.DOTALL
    )
    assert found is not None
    return found.group(1)


def _effect_row(page: str, record_id: str) -> str:
    found = re.search(rf'<tr id="effect-{record_id}" class="([^"]*)">(.*?)</tr>', page, re.DOTALL)
    assert found is not None
    return found.group(1) + "|" + found.group(2)


def test_the_graph_draws_a_reused_node_as_succeeded_and_marked(viewer: TestClient) -> None:
    """Green (succeeded), labelled with the record it reuses, linking to that record's row."""
    nodes = _graph_nodes(viewer.get(f"/tasks/{PAID}").text, 3)

    ship = nodes["ship"]
    assert (ship["status"], ship["css"]) == ("succeeded", "ok")
    assert ship["label"] == "reused 1:ship"
    assert ship["title"] == "reused record 1:ship (sent in revision 1)"
    assert ship["reused"] == "rec-1:ship"
    assert nodes["pay"]["reused"] == "rec-2:pay"


def test_a_reused_row_links_to_the_record_in_the_revision_that_sent_it(
    viewer: TestClient,
) -> None:
    """A reused badge links to #rec-1:ship, the row of revision 1; the row itself has no id."""
    page = viewer.get(f"/tasks/{PAID}").text

    third = _section(page, 3)
    assert '<a class="badge reused" href="#rec-1:ship"' in third
    assert ">reused 1:ship</a>" in third
    assert '<span class="badge ok">succeeded</span>' in third
    assert 'id="rec-' not in third  # the record's row is revision 1's, not this one's
    assert '<tr id="rec-1:ship" class="node-row">' in _section(page, 1)
    assert page.count('id="rec-1:ship"') == 1


def test_the_effects_table_marks_a_superseded_compensated_effect(viewer: TestClient) -> None:
    """1:pay: superseded in revision 2, compensated (struck through); 2:pay unmarked."""
    page = viewer.get(f"/tasks/{PAID}").text

    refunded = _effect_row(page, "1:pay")
    assert refunded.startswith("effect-row superseded compensated|")
    assert '<span class="badge superseded">superseded in revision 2</span>' in refunded
    assert '<span class="badge ok">compensated</span>' in refunded
    assert '<a href="#rec-1:pay">1:pay</a>' in refunded
    assert "paid/pay/4d4bbe59c6aad224/1" in refunded  # its idempotency key
    assert _effect_row(page, "2:pay").startswith("effect-row|")


def test_the_effects_table_says_a_superseded_effect_is_left_in_place(viewer: TestClient) -> None:
    """A post nothing undoes, superseded in revision 2: marked superseded, left in place."""
    first = _effect_row(viewer.get(f"/tasks/{POSTED}").text, "1:post")

    assert first.startswith("effect-row superseded|")
    assert '<span class="badge superseded">superseded in revision 2</span>' in first
    assert '<span class="muted">left in place</span>' in first


def test_the_effects_table_names_a_failed_compensation(viewer: TestClient) -> None:
    """The refund that failed: a red badge, its error, left in place; then how the task unwound."""
    page = viewer.get(f"/tasks/{UNWOUND}").text

    paid = _effect_row(page, "1:pay")
    assert '<span class="badge bad">failed</span>' in paid
    assert f"RuntimeError: {CLOSED}" in paid
    assert "left in place" in paid
    assert "compensated" in _effect_row(page, "1:ship").split("|")[0]
    assert '<span class="badge undo">unwound</span> it undid its effects' in page


def test_a_task_unwinding_has_the_compensating_colour(unwinding: TestClient) -> None:
    """Its status badge reads compensating, in the undo colour, on its page and in the list."""
    page = unwinding.get(f"/tasks/{UNWOUND}").text
    listed = unwinding.get("/").text

    assert '<span class="badge undo" id="task-status">compensating</span>' in page
    assert '<span class="badge undo">compensating</span>' in listed
    assert ".badge.undo { color: var(--undo); }" in STYLE.read_text(encoding="utf-8")


def test_a_compensation_under_way_is_shown_as_such(unwinding: TestClient) -> None:
    """The effect being undone reads compensating; the unwind says how the task will end."""
    page = unwinding.get(f"/tasks/{UNWOUND}").text

    assert '<span class="badge run">compensating</span>' in _effect_row(page, "1:pay")
    assert "unwinding</span> undoing its effects before it ends failed/" in page


def test_the_list_filters_by_the_compensating_phase(unwinding: TestClient) -> None:
    """``compensating`` is a choice of the filter, and choosing it lists the task unwinding."""
    listed = unwinding.get("/").text
    chosen = unwinding.get("/", params={"status": "compensating"}).text
    none = unwinding.get("/", params={"status": "executing"}).text

    assert '<option value="compensating">compensating</option>' in listed
    assert f'href="/tasks/{UNWOUND}"' in chosen
    assert f'href="/tasks/{UNWOUND}"' not in none
