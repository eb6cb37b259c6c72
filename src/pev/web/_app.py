"""The viewer's ASGI application: pages over a store, live updates, and the operator's buttons.

Read-only unless built with ``operator=True``, which adds approve, reject and cancel (POSTs that
carry the page's CSRF token). Every response passes :class:`_Guard`: a request whose ``Host``
header names no allowed host is refused (against DNS rebinding), and each response forbids
framing and every script, style or image from outside the viewer itself.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pev.engine import approve, cancel, reject
from pev.errors import PevError, StateError, UnknownTaskError, UsageError
from pev.experience import LessonBook
from pev.ledger import TERMINAL_PHASES, Ledger, Store, TaskPhase, TaskSummary, follow
from pev.web._views import IMAGE_TYPES, status_class, task_view

__all__ = ["LOOPBACK_HOSTS", "create_app"]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names a viewer bound to the loopback interface answers to."""

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]

# Nothing loads from outside the viewer: scripts, styles, images and fetches are its own.
_SECURITY_HEADERS = (
    (
        b"content-security-policy",
        (
            b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
)
_MAX_FORM_BYTES = 64 * 1024
_LIST_LIMIT = 100
_SEARCH_SCAN = 5000  # how many of the newest tasks a search looks through
_ACTIONS = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}
_PHASE_FILTERS = ("active", *(str(phase) for phase in TaskPhase))


def host_name(header: str) -> str:
    """The host a ``Host`` header names, without its port (``[::1]:8000`` gives ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Guard:
    """Refuse a request for a host not allowed; add the security headers to every response."""

    def __init__(self, app: _App, *, hosts: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if host not in self._hosts:
            refused = PlainTextResponse("this viewer does not answer to that Host header", 400)
            await self._secured(send)(refused, scope, receive)
            return
        await self._app(scope, receive, self._secured_send(send))

    def _secured(self, send: _Send) -> Callable[[Response, _Scope, _Receive], Awaitable[None]]:
        async def respond(response: Response, scope: _Scope, receive: _Receive) -> None:
            await response(scope, receive, self._secured_send(send))

        return respond

    @staticmethod
    def _secured_send(send: _Send) -> _Send:
        async def secured(message: _Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_SECURITY_HEADERS]
            await send(message)

        return secured


@dataclass(frozen=True, slots=True)
class _Viewer:
    """What every route reads: the store, the templates, and the operator's settings."""

    store: Store
    templates: Environment
    operator: bool
    csrf_token: str

    def page(self, request: Request, name: str, status_code: int = 200, **values: Any) -> Response:
        template = self.templates.get_template(name)
        body = template.render(
            request=request, operator=self.operator, csrf_token=self.csrf_token, **values
        )
        return HTMLResponse(body, status_code=status_code)


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("pev.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["status_class"] = status_class
    env.filters["segment"] = _segment
    return env


def _segment(text: str) -> str:
    """``text`` as one path segment of a URL."""
    return quote(text, safe="")


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _viewer(request: Request) -> _Viewer:
    viewer: _Viewer = request.app.state.viewer
    return viewer


async def _task_list(request: Request) -> Response:
    viewer = _viewer(request)
    chosen = request.query_params.get("status", "")
    query = request.query_params.get("q", "").strip()
    phases: set[TaskPhase] | None = None
    if chosen == "active":
        phases = set(TaskPhase) - TERMINAL_PHASES
    elif chosen in _PHASE_FILTERS:
        phases = {TaskPhase(chosen)}
    else:
        chosen = ""
    limit = _SEARCH_SCAN if query else _LIST_LIMIT
    summaries: tuple[TaskSummary, ...] = await viewer.store.list_tasks(phases=phases, limit=limit)
    if query:
        needle = query.casefold()
        summaries = tuple(
            s for s in summaries if needle in s.title.casefold() or needle in s.task_id.casefold()
        )[:_LIST_LIMIT]
    live = any(s.phase not in TERMINAL_PHASES for s in summaries)
    return viewer.page(
        request,
        "tasks.html",
        summaries=summaries,
        chosen=chosen,
        query=query,
        filters=_PHASE_FILTERS,
        live=live,
    )


async def _task_page(request: Request) -> Response:
    viewer = _viewer(request)
    task_id = request.path_params["task_id"]
    ledger = Ledger(viewer.store)
    try:
        state = await ledger.state(task_id)
    except UnknownTaskError:
        return _not_found(request, f"no task has id {task_id}")
    report = await ledger.verify(task_id)
    message = request.query_params.get("done", "")
    return viewer.page(
        request,
        "task.html",
        task=task_view(state),
        chain=report,
        done=message if message in _ACTIONS.values() else "",
    )


async def _task_stream(request: Request) -> Response:
    """Server-sent events: ``changed`` (and the last sequence number) as the task's ledger grows."""
    viewer = _viewer(request)
    task_id = request.path_params["task_id"]
    try:
        after = max(0, int(request.query_params.get("after", "0")))
    except ValueError:
        after = 0
    if await viewer.store.summary(task_id) is None:
        return _not_found(request, f"no task has id {task_id}")

    async def changes() -> AsyncIterator[str]:
        async with contextlib.aclosing(follow(viewer.store, task_id, after=after)) as batches:
            async for batch in batches:
                if batch:
                    yield f"event: changed\ndata: {batch[-1].seq}\n\n"
        yield "event: ended\ndata: \n\n"

    return StreamingResponse(
        changes(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _evidence(request: Request) -> Response:
    viewer = _viewer(request)
    task_id = request.path_params["task_id"]
    evidence_id = request.path_params["evidence_id"]
    try:
        state = await Ledger(viewer.store).state(task_id)
    except UnknownTaskError:
        return _not_found(request, f"no task has id {task_id}")
    for item in state.evidence:
        if item.id == evidence_id and item.artifact is not None:
            headers = {"cache-control": "private, max-age=3600"}
            if item.media_type in IMAGE_TYPES:
                return Response(item.artifact, media_type=item.media_type, headers=headers)
            # Anything else (HTML, SVG, ...) is never rendered by the browser: only saved.
            headers["content-disposition"] = "attachment"
            return Response(item.artifact, media_type="application/octet-stream", headers=headers)
    return _not_found(request, f"task {task_id} has no artifact {evidence_id}")


async def _lessons(request: Request) -> Response:
    viewer = _viewer(request)
    lessons = await LessonBook(viewer.store).all()
    return viewer.page(request, "lessons.html", lessons=lessons)


def _not_found(request: Request, message: str) -> Response:
    return _viewer(request).page(request, "error.html", 404, title="not found", message=message)


async def _form(request: Request) -> dict[str, str] | None:
    """The POSTed urlencoded form (one value per field); ``None`` if it is too large."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            return None
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _same_origin(request: Request) -> bool:
    """A browser's ``Origin`` (when it sends one) names the host this request was sent to."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


async def _operate(request: Request) -> Response:
    """Approve, reject or cancel a task: operator mode only, with the page's CSRF token."""
    viewer = _viewer(request)
    action = request.path_params["action"]
    if action not in _ACTIONS:
        return _not_found(request, f"no such action: {action}")
    if not viewer.operator:
        message = "this viewer is read-only: start it with `pev serve --operator` to act"
        return viewer.page(request, "error.html", 403, title="read-only", message=message)
    form = await _form(request)
    token = "" if form is None else form.get("csrf", "")
    if (
        form is None
        or not _same_origin(request)
        or not hmac.compare_digest(token.encode(), viewer.csrf_token.encode())
    ):
        message = "the form's CSRF token is missing or wrong: reload the task's page and retry"
        return viewer.page(request, "error.html", 403, title="refused", message=message)
    task_id = request.path_params["task_id"]
    by = form.get("by") or None
    revision = _revision(form.get("revision", ""))
    try:
        if action == "approve":
            await approve(
                task_id, store=viewer.store, by=by, note=form.get("note", ""), revision=revision
            )
        elif action == "reject":
            await reject(
                task_id,
                form.get("reason", ""),
                store=viewer.store,
                by=by,
                revision=revision,
                stop=form.get("stop") == "yes",  # the reject-and-stop button
            )
        else:
            await cancel(task_id, store=viewer.store, reason=form.get("reason", ""))
    except UnknownTaskError:
        return _not_found(request, f"no task has id {task_id}")
    except (StateError, UsageError) as exc:
        return viewer.page(request, "error.html", 409, title=f"cannot {action}", message=str(exc))
    return RedirectResponse(f"/tasks/{_segment(task_id)}?done={_ACTIONS[action]}", 303)


def _revision(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None


async def _on_error(request: Request, exc: Exception) -> Response:
    title = "store error" if isinstance(exc, PevError) else "error"
    return _viewer(request).page(request, "error.html", 500, title=title, message=str(exc))


def create_app(
    store: Store,
    *,
    operator: bool = False,
    hosts: Collection[str] = LOOPBACK_HOSTS,
    close_store: bool = False,
) -> _App:
    """The viewer over ``store``, as an ASGI application (serve it with uvicorn).

    Args:
        store: The ledger to show.
        operator: Add approve, reject and cancel buttons (and the POST routes behind them).
        hosts: The host names the ``Host`` header may carry (without a port); any other
            request is refused with 400. The loopback names by default.
        close_store: Close ``store`` when the application shuts down.
    """
    templates = _templates()
    viewer = _Viewer(
        store=store,
        templates=templates,
        operator=operator,
        csrf_token=secrets.token_urlsafe(32),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_store:
                await store.close()

    static = Path(__file__).with_name("static")
    app = Starlette(
        routes=[
            Route("/", _task_list, name="tasks"),
            Route("/lessons", _lessons, name="lessons"),
            Route("/tasks/{task_id}", _task_page, name="task"),
            Route("/tasks/{task_id}/stream", _task_stream, name="stream"),
            Route("/tasks/{task_id}/evidence/{evidence_id}", _evidence, name="evidence"),
            Route(
                "/tasks/{task_id}/{action:str}",
                _operate,
                methods=["POST"],
                name="operate",
            ),
            Mount("/static", StaticFiles(directory=static), name="static"),
        ],
        exception_handlers={Exception: _on_error},
        lifespan=lifespan,
    )
    app.state.viewer = viewer
    return _Guard(app, hosts=frozenset(host_name(h) for h in hosts))
