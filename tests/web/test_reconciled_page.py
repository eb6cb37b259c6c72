"""The viewer on a record of unknown outcome that a reconciliation settled, through TestClient.

The task of ``tests.support.reconciled``: ``post`` times out after taking effect, its record
ends ``unknown``, and its tool's ``reconcile`` settles it as done (or not). The page draws the
settled outcome, marked as reconciled: never the yellow unknown box with a red error for a
record settled as done.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from tests.support.reconciled import NOT_FOUND, POSTED, reconciled_in
from tests.web.support import run_apart

import pev
from pev.web import create_app

DONE = "post-done"
NOT_DONE = "post-not-done"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A viewer of a ledger with the task twice: settled as done, and settled as not done."""
    db = tmp_path_factory.mktemp("reconciled") / "ledger.db"
    run_apart(lambda: reconciled_in(db, task_id=DONE))
    run_apart(lambda: reconciled_in(db, done=False, task_id=NOT_DONE))
    app = create_app(pev.SQLiteStore(db), close_store=True)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def _graph_node(page: str) -> dict[str, object]:
    """The one node of revision 1's graph, as the page hands it to the layout script."""
    found = re.search(r'<script type="application/json" id="graph-data-r1">(.*?)</script>', page)
    assert found is not None
    [node] = json.loads(found.group(1))["nodes"]
    assert isinstance(node, dict)
    return node


def _row(page: str) -> str:
    """The node table's row of the task's one record."""
    found = re.search(r'<tr id="rec-1:post" class="node-row">(.*?)</tr>', page, re.DOTALL)
    assert found is not None
    return found.group(1)


def test_the_graph_draws_a_record_settled_as_done_as_succeeded(viewer: TestClient) -> None:
    """Its graph node is succeeded (green), labelled as reconciled: not unknown (yellow)."""
    node = _graph_node(viewer.get(f"/tasks/{DONE}").text)

    assert node["status"] == "succeeded"
    assert node["css"] == "ok"
    assert node["reconciled"] is True
    assert node["label"] == "reconciled: succeeded"
    assert node["title"] == "unknown → reconciled: succeeded"


def test_the_records_table_shows_the_settled_success_and_the_note(viewer: TestClient) -> None:
    """A green succeeded badge, a reconciled mark, the output found, the note; no red error."""
    row = _row(viewer.get(f"/tasks/{DONE}").text)

    assert '<span class="badge ok">succeeded</span>' in row
    assert '<span class="badge reconciled"' in row
    assert "unknown → reconciled: succeeded" in row
    assert "reconcile" in row.split("unknown → reconciled: succeeded", 1)[1]
    assert f'<code class="json">&#34;{POSTED}&#34;</code>' in row  # the output found
    assert 'class="error"' not in row
    assert "badge warn" not in row


def test_a_record_settled_as_not_done_is_drawn_as_failed(viewer: TestClient) -> None:
    """Settled as not done: a failed (red) graph node and badge, with what the reconcile found."""
    page = viewer.get(f"/tasks/{NOT_DONE}").text
    node = _graph_node(page)
    row = _row(page)

    assert (node["status"], node["css"], node["reconciled"]) == ("failed", "bad", True)
    assert '<span class="badge bad">failed</span>' in row
    assert f'<span class="error">{NOT_FOUND}</span>' in row
    assert "unknown → reconciled: failed" in row
