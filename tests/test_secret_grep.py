"""A planted secret is found nowhere pev writes, logs, shows or asks (docs/tools.md, "Secrets").

One scenario, run once: a distinctive random value is put in the environment, and four tasks run
on an SQLite file with the LLM planner and verifier (over scripted chat models that keep every
prompt) and a lesson book whose drafter is a chat model too. Their one tool takes the value as
a ``pev.Secret``. In the first three tasks the tool raises an exception whose message (and its
cause's) quotes the value; in the fourth it returns the value inside its output, the verifier
rejects that first answer, and the planner replans, charging once more. The tool writes a hash
of what it received to a file of its own, which shows that it did receive the value. Then each
place is searched for the value: the ledger file (and its WAL) while open and after closing,
every log record (DEBUG and up, on every logger), ``pev show``, ``pev tasks`` and ``pev
lessons``, the experience store, the chat models' prompts, and the run results.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import pytest
from click.testing import CliRunner

import pev
from pev.cli import cli
from pev.codec import encode
from pev.experience import LessonBook
from pev.llm import LLMPlanner, LLMVerifier
from pev.model import Plan, PlanNode, Verdict, VerificationContract
from pev.stores import SQLiteStore
from pev.testing import ScriptedChat

ENV = "PEV_TEST_PLANTED_TOKEN"
MARKER = f"[secret {ENV}]"
HASHES = "PEV_TEST_PLANTED_TOKEN_HASHES"
DECLINED_OVER = 100
CRITERION = "the card is charged"
CONTRACT = VerificationContract(goal="charge the card", success_criteria=[CRITERION])


def _gateway_refuses(token: str) -> None:
    raise ConnectionRefusedError(f"gateway refused Authorization: Bearer {token}")


@pev.tool
def charge(amount: int, token: Annotated[str, pev.Secret(ENV)]) -> dict[str, object]:
    """Charge the card; the gateway declines large amounts."""
    with Path(os.environ[HASHES]).open("a", encoding="utf-8") as log:
        log.write(hashlib.sha256(token.encode()).hexdigest() + "\n")
    if amount > DECLINED_OVER:
        try:
            _gateway_refuses(token)
        except ConnectionRefusedError as exc:
            raise PermissionError(f"card declined for token {token}") from exc
    return {"receipt": "r-1", "sent": f"Authorization: Bearer {token}"}


def plan_reply(amount: int, *, repeat: bool = False) -> str:
    """A model's reply: a plan with one charge of ``amount`` (``repeat``: once more)."""
    charging = PlanNode(
        "charge", "charge the card", tool="charge", args={"amount": amount}, repeat=repeat
    )
    nodes = (charging,)
    return json.dumps(encode(Plan(CONTRACT.goal, nodes)))


def verdict_reply(*, passed: bool) -> str:
    """A model's reply: the verdict."""
    verdict = (
        Verdict.passed(CONTRACT)
        if passed
        else Verdict.failed(CONTRACT, failed_nodes=["charge"], feedback="the card was not charged")
    )
    return json.dumps(encode(verdict))


@dataclass
class Seen:
    """What the scenario left, by place, and what the tool received."""

    value: str
    places: dict[str, str] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    hashes: list[str] = field(default_factory=list)
    results: list[pev.RunResult] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)


class Keep(logging.Handler):
    """Keeps every record, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def file_bytes(folder: Path) -> bytes:
    """The bytes of the ledger file and its companions (-wal, -shm)."""
    return b"".join(path.read_bytes() for path in sorted(folder.glob("ledger.db*")))


async def scenario(folder: Path, seen: Seen) -> None:
    db = folder / "ledger.db"
    store = SQLiteStore(db)
    # The fourth task's replan charges again on purpose: a charge the task already made is
    # otherwise reused, never sent twice (docs/engine.md, "Effects happen once").
    planner_chat = ScriptedChat(*[plan_reply(500)] * 3, plan_reply(30), plan_reply(30, repeat=True))
    verifier_chat = ScriptedChat(*[verdict_reply(passed=False)] * 4, verdict_reply(passed=True))
    drafter = ScriptedChat("After a charge fails, check the card before charging it again.")
    book = LessonBook(store, drafter=drafter)
    try:
        for order in range(4):
            seen.results.append(
                await pev.run(
                    f"charge order {order}",
                    planner=LLMPlanner(planner_chat),
                    verifier=LLMVerifier(verifier_chat),
                    tools=[charge],
                    contract=CONTRACT,
                    store=store,
                    experience=book,
                )
            )
        seen.raw["ledger file, open"] = file_bytes(folder)
        lessons = await book.all()
        seen.lessons = [lesson.id for lesson in lessons if lesson.active]
        episodes = [await book.episodes(lesson.id) for lesson in lessons]
        seen.places["experience store"] = repr(lessons) + repr(episodes)
    finally:
        await store.close()
    seen.raw["ledger file, closed"] = file_bytes(folder)
    chats = (planner_chat, verifier_chat, drafter)
    seen.places["LLM prompts"] = "\n".join(
        f"{message.text}\n{request.schema!r}"
        for chat in chats
        for request in chat.requests
        for message in request.messages
    )
    seen.places["run results"] = "\n".join(f"{r!r}\n{r.detail}" for r in seen.results)


def unwrapped(text: str) -> str:
    """``text`` without whitespace: lines a console wrapped, joined again."""
    return "".join(text.split())


def cli_output(db: Path, *args: str) -> str:
    """The output of `pev --db DB ARGS...`, which must succeed."""
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Seen:
    """The scenario, run once, with every place it left text in."""
    folder = tmp_path_factory.mktemp("planted")
    found = Seen(value=f"pev-planted-{secrets.token_hex(16)}")
    keep = Keep()
    root, pev_log = logging.getLogger(), logging.getLogger("pev")
    levels = (root.level, pev_log.level)
    root.addHandler(keep)
    root.setLevel(logging.DEBUG)
    pev_log.setLevel(logging.DEBUG)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, found.value)
        patch.setenv(HASHES, str(folder / "hashes.log"))
        try:
            asyncio.run(scenario(folder, found))
        finally:
            root.removeHandler(keep)
            root.setLevel(levels[0])
            pev_log.setLevel(levels[1])
    found.places["logs"] = "\n".join(keep.lines)
    db = folder / "ledger.db"
    found.places["pev show"] = "\n".join(
        cli_output(db, "show", result.task_id) for result in found.results
    )
    found.places["pev tasks"] = cli_output(db, "tasks")
    found.places["pev lessons"] = cli_output(db, "lessons", "--all") + "\n".join(
        cli_output(db, "lessons", lesson_id) for lesson_id in found.lessons
    )
    found.hashes = (folder / "hashes.log").read_text(encoding="utf-8").split()
    return found


def test_the_tool_received_the_secret_at_every_call(seen: Seen) -> None:
    """Five calls (three declined, two charged), each handed the planted value itself."""
    assert seen.hashes == [hashlib.sha256(seen.value.encode()).hexdigest()] * 5


def test_the_scenario_took_every_path_it_searches(seen: Seen) -> None:
    """Declines, a replan, a success, an active drafted lesson: what the search relies on."""
    statuses = [(r.status.value, r.revisions) for r in seen.results]
    assert statuses == [("partial", 1)] * 3 + [("succeeded", 2)]
    assert seen.lessons  # an active lesson, drafted by the chat model
    assert "LLM prompts" in seen.places
    assert "charge" in seen.places["pev lessons"]


@pytest.mark.parametrize("place", ["ledger file, open", "ledger file, closed"])
def test_the_ledger_file_holds_the_name_and_never_the_value(seen: Seen, place: str) -> None:
    """The SQLite file (and its WAL) recorded the failures and the output with the name only."""
    data = seen.raw[place]
    assert MARKER.encode() in data
    assert seen.value.encode() not in data


@pytest.mark.parametrize(
    "place",
    [
        "logs",
        "pev show",
        "pev tasks",
        "pev lessons",
        "experience store",
        "LLM prompts",
        "run results",
    ],
)
def test_the_secret_is_nowhere(seen: Seen, place: str) -> None:
    """The planted value appears in no log line, command output, lesson, prompt or result.

    Whitespace is removed too before searching, so that a value a console wrapped is found.
    """
    text = seen.places[place]
    assert text
    assert seen.value not in text
    assert seen.value not in unwrapped(text)


def test_the_prompts_logs_and_shown_task_say_which_secret_instead(seen: Seen) -> None:
    """Where the value would have been, prompts, logs and `pev show` name its source."""
    assert f"card declined for token {MARKER}" in seen.places["LLM prompts"]
    assert f"gateway refused Authorization: Bearer {MARKER}" in seen.places["logs"]  # the cause
    assert unwrapped(MARKER) in unwrapped(seen.places["pev show"])
