"""The viewer in a real browser: Playwright drives Debian's chromium against `pev serve`.

Skipped when /usr/bin/chromium is missing (`make test` installs it), except under ``CI=true``,
where a missing browser fails. Screenshots go to ``test-artifacts/viewer/``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.effect_surfaces import PAID, effects_in
from tests.support.reconciled import reconciled_in
from tests.web.support import AwaitingTask, run_apart

import pev

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright")

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "viewer"
WAIT_MS = 15_000  # the longest any page wait lasts

if not CHROMIUM.exists():
    if os.environ.get("CI") == "true":
        pytest.fail("CI: the browser tests need /usr/bin/chromium (apt-get install chromium)")
    pytest.skip(
        "no /usr/bin/chromium: apt-get install -y chromium (or `make test`) to run the browser "
        "tests",
        allow_module_level=True,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """`pev serve` over ``db`` on a free loopback port, in its own process."""

    def __init__(self, db: Path, *, operator: bool = False) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "pev", "--db", str(db), "serve", "--port", str(self.port)]
        if operator:
            command.append("--operator")
        self._process = subprocess.Popen(command, stderr=subprocess.PIPE)

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self._process.poll() is None, (
                self._process.stderr and self._process.stderr.read()
            )
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise AssertionError("pev serve did not start listening in 20 s")

    def __exit__(self, *exc_info: object) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        if self._process.stderr is not None:
            self._process.stderr.close()


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A ledger holding the demo's slip task (a local replan, with camera images)."""
    from pev.sim import run_demo

    db = tmp_path_factory.mktemp("demo") / "demo.db"

    async def run() -> str:
        store = pev.SQLiteStore(db)
        try:
            return (await run_demo("slip", store=store)).task_id
        finally:
            await store.close()

    return db, run_apart(run)


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    """Debian's chromium, headless, driven by Playwright."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: sync_api.Browser) -> Iterator[sync_api.Page]:
    """A fresh page whose every wait is bounded; any request outside the viewer fails the test."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    outside: list[str] = []
    opened.on(
        "request",
        lambda request: (
            None if request.url.startswith("http://127.0.0.1:") else outside.append(request.url)
        ),
    )
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert outside == []
    assert errors == []


def _shot(page: sync_api.Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.mark.slow
def test_the_demo_task_its_replan_graph_and_camera_image(
    page: sync_api.Page, demo_db: tuple[Path, str]
) -> None:
    """Task list → the slip task → both revisions' graphs with node statuses → camera image."""
    db, task_id = demo_db
    with Server(db) as server:
        page.goto(server.url + "/")
        sync_api.expect(page.locator("tr.task-row")).to_have_count(1)
        _shot(page, "task-list.png")
        page.click(f'a[href="/tasks/{task_id}"]')
        page.wait_for_url(f"**/tasks/{task_id}")
        # Both revisions are drawn by dagre: one group per node, each with its status.
        nodes = page.locator("#graph-r1 svg g.graph-node")
        sync_api.expect(nodes.first).to_be_visible()
        assert nodes.count() == page.locator("#r1 tr.node-row").count()
        statuses = set(nodes.evaluate_all("gs => gs.map(g => g.dataset.status)"))
        assert "succeeded" in statuses
        page.click('#timeline a[href="#r2"]')
        sync_api.expect(page.locator("#graph-r2 svg g.graph-node").first).to_be_visible()
        assert "local replan" in page.locator("#r1 .decision").inner_text()
        # The camera's image, served from the ledger, is decoded by the browser.
        image = page.locator(".evidence img").first
        image.scroll_into_view_if_needed()
        sync_api.expect(image).to_be_visible()
        page.wait_for_function(
            "() => { const i = document.querySelector('.evidence img'); "
            "return i.complete && i.naturalWidth > 0; }"
        )
        page.goto(f"{server.url}/tasks/{task_id}")
        sync_api.expect(page.locator("#graph-r1 svg")).to_be_visible()
        _shot(page, "task-replan.png")


@pytest.mark.slow
def test_an_operator_approves_a_waiting_task(page: sync_api.Page, tmp_path: Path) -> None:
    """With --operator, pressing approve lets the waiting task's driver finish it."""
    with AwaitingTask(tmp_path / "approve.db") as task, Server(task.db, operator=True) as server:
        page.goto(f"{server.url}/tasks/{task.task_id}")
        sync_api.expect(page.locator("#task-status")).to_have_text("awaiting_approval")
        _shot(page, "operator-awaiting.png")
        page.fill('input[name="note"]', "checked the amount")
        page.click("#approve")
        page.wait_for_url(f"**/tasks/{task.task_id}?done=approved")
        assert task.finished().ok
        # The page follows the task live until it has ended.
        sync_api.expect(page.locator("#task-status")).to_have_text("succeeded")
        _shot(page, "operator-approved.png")


@pytest.mark.slow
def test_a_record_reconciled_as_done_is_drawn_green_and_marked(
    page: sync_api.Page, tmp_path: Path
) -> None:
    """A timed-out action settled as done: a green node labelled reconciled, never yellow."""
    db = tmp_path / "reconciled.db"
    task_id = run_apart(lambda: reconciled_in(db))
    with Server(db) as server:
        page.goto(f"{server.url}/tasks/{task_id}")
        node = page.locator('#graph-r1 svg g.graph-node[data-node="post"]')
        sync_api.expect(node).to_have_attribute("data-status", "succeeded")
        sync_api.expect(node).to_have_attribute("data-reconciled", "true")
        sync_api.expect(node.locator("text.state")).to_have_text("reconciled: succeeded")
        fill = node.locator("rect").evaluate("rect => getComputedStyle(rect).fill")
        assert fill == "rgb(218, 251, 225)"  # the succeeded fill (#dafbe1), not yellow
        _shot(page, "task-reconciled.png")


@pytest.mark.slow
def test_a_reused_node_is_drawn_green_marked_and_linked(
    page: sync_api.Page, tmp_path: Path
) -> None:
    """A reused node: green, marked reused, a link to its record; the effects table's marks."""
    db = tmp_path / "effects.db"
    run_apart(lambda: effects_in(db))
    with Server(db) as server:
        page.goto(f"{server.url}/tasks/{PAID}")
        node = page.locator('#graph-r3 svg g.graph-node[data-node="ship"]')
        sync_api.expect(node).to_have_attribute("data-status", "succeeded")
        sync_api.expect(node).to_have_attribute("data-reused", "true")
        sync_api.expect(node.locator("text.state")).to_have_text("reused 1:ship")
        rect = node.locator("rect")
        assert rect.evaluate("rect => getComputedStyle(rect).fill") == "rgb(218, 251, 225)"
        assert rect.evaluate("rect => getComputedStyle(rect).strokeDasharray") == "7px, 3px"
        refunded = page.locator('tr[id="effect-1:pay"]')
        sync_api.expect(refunded).to_have_class(re.compile(r"\bsuperseded\b.*\bcompensated\b"))
        sync_api.expect(refunded.locator(".badge.superseded")).to_have_text(
            "superseded in revision 2"
        )
        struck = refunded.locator("td").first.evaluate(
            "td => getComputedStyle(td).textDecorationLine"
        )
        assert struck == "line-through"
        _shot(page, "task-effects.png")
        # The graph's reused node links to the row of the record it reuses, in revision 1.
        node.click()
        page.wait_for_url(re.compile(r"#rec-1:ship$"))
        assert page.locator('tr[id="rec-1:ship"]').evaluate("row => row.matches(':target')")
