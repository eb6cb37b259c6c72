"""The viewer's ASGI app through starlette's TestClient: pages, escaping, Host check, CSRF."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.web.support import HOSTILE_ID, MARKUP, SCRIPT, AwaitingTask, phase_of, run_apart

import pev
from pev.ledger import TaskPhase
from pev.web import create_app

BASE = "http://127.0.0.1"


def client(db: Path, *, operator: bool = False) -> TestClient:
    """A test client of the viewer over the SQLite ledger at ``db``."""
    app = create_app(pev.SQLiteStore(db), operator=operator, close_store=True)
    return TestClient(app, base_url=BASE, follow_redirects=False)


@pytest.fixture
def viewer(hostile_db: Path) -> Iterator[TestClient]:
    """A read-only viewer of the hostile task's ledger."""
    with client(hostile_db) as test_client:
        yield test_client


def _token(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "the page has no CSRF token"
    return found.group(1)


def test_the_task_list_links_each_task(viewer: TestClient) -> None:
    """The list shows the task with its status and a link to its page."""
    page = viewer.get("/")
    assert page.status_code == 200
    assert f'href="/tasks/{HOSTILE_ID}"' in page.text
    assert "succeeded" in page.text


def test_the_list_filters_by_status_and_searches(viewer: TestClient) -> None:
    """A status filter or a search that matches nothing lists no task."""
    assert HOSTILE_ID in viewer.get("/?status=succeeded").text
    assert HOSTILE_ID not in viewer.get("/?status=failed").text
    assert HOSTILE_ID in viewer.get("/?q=HOSTILE").text
    assert 'id="no-tasks"' in viewer.get("/?q=nothing-like-it").text


def test_everything_from_the_ledger_is_escaped(viewer: TestClient) -> None:
    """Script tags and markup planted in input, plan, outputs and feedback come out as text."""
    page = viewer.get(f"/tasks/{HOSTILE_ID}").text
    for planted in (SCRIPT, MARKUP, "<b>bold</b>"):
        assert planted not in page
    assert "&lt;script&gt;alert(" in page  # shown, as text
    assert "&lt;img src=x onerror=" in page
    assert "verdict-feedback" in page
    # The only script elements are the viewer's own files and its JSON data blocks.
    scripts = re.findall(r"<script[^>]*>", page)
    assert all('src="/static/' in tag or 'type="application/json"' in tag for tag in scripts)
    for block in re.findall(
        r'<script type="application/json"[^>]*>(.*?)</script>', page, re.DOTALL
    ):
        assert "<" not in block


def test_the_task_page_shows_the_replan(viewer: TestClient) -> None:
    """Both revisions, the failed verdict that blamed the node, its diagnosis and decision."""
    page = viewer.get(f"/tasks/{HOSTILE_ID}").text
    assert 'id="r1"' in page
    assert 'id="r2"' in page
    assert "diagnosis:" in page
    assert "local replan of pour" in page
    assert "chain verified" in page


def test_a_verdict_badge_is_coloured_by_its_status(viewer: TestClient) -> None:
    """A passing verdict's badge is green; the one that led to the replan is not."""
    page = viewer.get(f"/tasks/{HOSTILE_ID}").text
    badges = re.findall(r'verdict <span class="badge (\w+)">(\w+)</span>', page)
    assert ("ok", "success") in badges
    assert all(css != "ok" for css, status in badges if status != "success")


def test_responses_forbid_outside_assets_and_framing(viewer: TestClient) -> None:
    """Every page sets a CSP of the viewer's own origin only, and refuses to be framed."""
    headers = viewer.get("/").headers
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "host", ["evil.example", "127.0.0.1.evil.example", "localhost.evil:80", ""]
)
def test_a_foreign_host_header_is_refused(viewer: TestClient, host: str) -> None:
    """DNS rebinding: a Host header naming another host gets 400, not the ledger."""
    page = viewer.get("/", headers={"host": host})
    assert page.status_code == 400
    assert HOSTILE_ID not in page.text


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost", "[::1]:8765"])
def test_loopback_host_headers_are_served(viewer: TestClient, host: str) -> None:
    """The loopback names, with or without a port, are served."""
    assert viewer.get("/", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/tasks/no-such-task", "/tasks/no-such-task/evidence/x", f"/tasks/{HOSTILE_ID}/evidence/x"],
)
def test_unknown_tasks_and_evidence_are_404(viewer: TestClient, path: str) -> None:
    """A task or artifact that does not exist is a 404 page."""
    assert viewer.get(path).status_code == 404


def test_the_vendored_layout_library_is_served(viewer: TestClient) -> None:
    """dagre comes from the package itself."""
    script = viewer.get("/static/vendor/dagre.min.js")
    assert script.status_code == 200
    assert "dagre" in script.text


def test_a_read_only_viewer_has_no_buttons_and_refuses_posts(viewer: TestClient) -> None:
    """Without --operator: no forms on the page, and a POST is 403 whatever it carries."""
    assert 'name="csrf"' not in viewer.get(f"/tasks/{HOSTILE_ID}").text
    refused = viewer.post(f"/tasks/{HOSTILE_ID}/cancel", data={"csrf": "x"})
    assert refused.status_code == 403


def test_operator_approves_a_task_awaiting_approval(awaiting: AwaitingTask) -> None:
    """With --operator, the approve form (with its token) approves; the driver then pays."""
    with client(awaiting.db, operator=True) as operator:
        page = operator.get(f"/tasks/{awaiting.task_id}").text
        assert 'id="approve"' in page
        done = operator.post(
            f"/tasks/{awaiting.task_id}/approve",
            data={"csrf": _token(page), "revision": "1", "note": "ok <b>by me</b>"},
        )
        assert done.status_code == 303
        assert done.headers["location"] == f"/tasks/{awaiting.task_id}?done=approved"
    assert awaiting.finished().ok


@pytest.mark.parametrize(
    ("form", "headers"),
    [
        pytest.param({}, {}, id="no-token"),
        pytest.param({"csrf": "forged"}, {}, id="wrong-token"),
        pytest.param(None, {"origin": "http://evil.example"}, id="foreign-origin"),
    ],
)
def test_operator_posts_need_the_token_from_the_same_origin(
    awaiting: AwaitingTask, form: dict[str, str] | None, headers: dict[str, str]
) -> None:
    """CSRF: a POST without the page's token, or from another origin, is 403 and changes nothing."""
    with client(awaiting.db, operator=True) as operator:
        token = _token(operator.get(f"/tasks/{awaiting.task_id}").text)
        sent = {"csrf": token} if form is None else form
        refused = operator.post(f"/tasks/{awaiting.task_id}/approve", data=sent, headers=headers)
        assert refused.status_code == 403
    assert run_apart(lambda: phase_of(awaiting.db, awaiting.task_id)) is TaskPhase.AWAITING_APPROVAL


def test_an_ended_task_has_no_operator_forms(hostile_db: Path) -> None:
    """Even with --operator, a task that has ended offers no button to press."""
    with client(hostile_db, operator=True) as operator:
        assert 'name="csrf"' not in operator.get(f"/tasks/{HOSTILE_ID}").text


def test_approving_twice_is_a_409_saying_why(awaiting: AwaitingTask) -> None:
    """A second approval of the same revision finds the task no longer awaiting: 409."""
    with client(awaiting.db, operator=True) as operator:
        token = _token(operator.get(f"/tasks/{awaiting.task_id}").text)
        form = {"csrf": token, "revision": "1"}
        assert operator.post(f"/tasks/{awaiting.task_id}/approve", data=form).status_code == 303
        again = operator.post(f"/tasks/{awaiting.task_id}/approve", data=form)
        assert again.status_code == 409
        assert 'id="error-message"' in again.text
    assert awaiting.finished().ok


def test_operator_rejects_and_cancels(awaiting: AwaitingTask) -> None:
    """Reject (with a reason) replans; cancel then ends the task cancelled."""
    with client(awaiting.db, operator=True) as operator:
        page = operator.get(f"/tasks/{awaiting.task_id}").text
        token = _token(page)
        rejected = operator.post(
            f"/tasks/{awaiting.task_id}/reject",
            data={"csrf": token, "revision": "1", "reason": "pay 30 instead"},
        )
        assert rejected.status_code == 303
        cancelled = operator.post(
            f"/tasks/{awaiting.task_id}/cancel", data={"csrf": token, "reason": "enough"}
        )
        assert cancelled.status_code == 303
    assert awaiting.finished().status == "cancelled"


def test_operator_rejects_and_stops(awaiting: AwaitingTask) -> None:
    """The reject-and-stop button ends the task failed/rejected, with no other plan."""
    with client(awaiting.db, operator=True) as operator:
        page = operator.get(f"/tasks/{awaiting.task_id}").text
        assert 'id="reject-stop"' in page
        stopped = operator.post(
            f"/tasks/{awaiting.task_id}/reject",
            data={"csrf": _token(page), "revision": "1", "reason": "wrong vendor", "stop": "yes"},
        )
        assert stopped.status_code == 303
    ended = awaiting.finished()
    assert (ended.status, ended.reason) == ("failed", "rejected")
    assert "the reviewer stopped the task" in ended.detail
