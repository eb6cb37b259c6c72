"""A real chat-completions server on loopback that answers with scripted replies.

Each test queues the replies it needs (``server.reply(...)``, ``server.fail(500)``); the server
pops one per HTTP request, so a retry by the SDK consumes the next one, and records every
request (its JSON body and headers) so a test can check what the client sent. When the queue is
empty it answers 418, which the SDK does not retry: an unexpected extra call shows up at once.
A ``gate`` may answer a request first, without touching the queue (a server that refuses some
``response_format``, whatever it is asked).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Content = str | Callable[["Seen"], str]
"""The assistant's text, or a function of the request that returns it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scripted:
    """One scripted HTTP answer."""

    status: int = 200
    content: Content = ""
    error: object = None  # the error answer's JSON body; None: a generic server error
    delay_s: float = 0.0
    prompt_tokens: int = 11
    completion_tokens: int = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def user_text(self) -> str:
        """The text of the last user message (its text part, when it has images)."""
        content = [m for m in self.body["messages"] if m["role"] == "user"][-1]["content"]
        if isinstance(content, str):
            return content
        return "\n".join(part["text"] for part in content if part["type"] == "text")

    @property
    def refs(self) -> list[str]:
        """The references the prompt lists as citable."""
        listed = self.user_text.split("## References you may cite", 1)[-1].split("##", 1)[0]
        return re.findall(r"^- ((?:record|evidence):\S+)$", listed, re.MULTILINE)


@dataclass
class ChatServer:
    """The scripted server; ``url`` is its ``/v1`` root, ``model`` what it answers as.

    It takes any API key: what a client sends is in ``requests``, for a test to check.
    """

    url: str = ""
    model: str = "scripted-model"
    replies: deque[Scripted] = field(default_factory=deque)
    requests: list[Seen] = field(default_factory=list)
    gate: Callable[[Seen], Scripted | None] | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, content: Content, **options: Any) -> None:
        """Queue a 200 answer whose assistant message is ``content``."""
        self.replies.append(Scripted(content=content, **options))

    def refuse_when(
        self, refused: Callable[[Seen], bool], *, status: int, error: object = None
    ) -> None:
        """Answer every request that ``refused`` picks with HTTP ``status`` (and ``error``)."""
        answer = Scripted(status=status, error=error)
        self.gate = lambda seen: answer if refused(seen) else None

    def fail(self, status: int, *, times: int = 1, error: object = None) -> None:
        """Queue ``times`` error answers with HTTP ``status`` (and ``error`` as the body)."""
        self.replies.extend(Scripted(status=status, error=error) for _ in range(times))

    def next_reply(self, seen: Seen) -> Scripted | None:
        with self.lock:
            self.requests.append(seen)
            gated = self.gate(seen) if self.gate is not None else None
            if gated is not None:
                return gated
            return self.replies.popleft() if self.replies else None


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Keep the test output quiet."""

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            seen = Seen(
                path=self.path, headers={k.lower(): v for k, v in self.headers.items()}, body=body
            )
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            scripted = server.next_reply(seen)
            if scripted is None:
                self._send(418, {"error": {"message": "no scripted reply left"}})
                return
            if scripted.delay_s and server.stopping.wait(scripted.delay_s):
                return
            if scripted.status != 200:
                # retry-after-ms keeps the SDK's backoff short, so the test stays fast.
                message = scripted.error or {
                    "error": {"message": "scripted failure", "type": "server_error"}
                }
                self._send(scripted.status, message, {"retry-after-ms": "10"})
                return
            content = scripted.content
            text = content(seen) if callable(content) else content
            self._send(
                200,
                {
                    "id": "chatcmpl-scripted",
                    "object": "chat.completion",
                    "created": 0,
                    "model": server.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": scripted.prompt_tokens,
                        "completion_tokens": scripted.completion_tokens,
                        "total_tokens": scripted.prompt_tokens + scripted.completion_tokens,
                    },
                },
            )

        def _send(
            self, status: int, payload: object, headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer

    return Handler


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted chat-completions server on 127.0.0.1, on a free port."""
    server = ChatServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    httpd.block_on_close = False
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    # A short poll interval: shutdown() waits for it, once per test.
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.02,), name="chat-server", daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
