"""A :class:`~pev.chat.ChatModel` over the official ``openai`` SDK: hosted APIs and local servers.

This module is the ``llm`` extra (``pip install 'pev-agent[llm]'``): the only module of pev that
imports ``openai``, and importing it without the SDK raises an :class:`ImportError` that names
the extra. Nothing else in :mod:`pev.llm` needs it: :class:`~pev.llm.LLMPlanner`,
:class:`~pev.llm.LLMVerifier` and the chat seam work with any chat model. ``from pev.llm import
OpenAIChat`` imports this module on first use.

Transport failures (connection errors, timeouts, 408/409/429 and 5xx answers) are retried by the
SDK's own bounded, backed-off mechanism (``max_retries``); what a model *says* is never retried
here: a bad answer is the planner's or verifier's to report, and the engine's to classify.

Structured output is negotiated with each endpoint: a request whose ``response_format`` the
server refuses is sent again one step down the ladder ``json_schema`` → ``json_object_schema``
(llama-cpp-python's own form, used where its refusal says that is the server) → ``json_object``
(the schema in the prompt) → ``prompt`` (no ``response_format``), and the step is remembered by
the :class:`OpenAIChat`, which is one endpoint (a base URL and a model), for every later call. A
refusal is never resent as it was, not even by the SDK's retries. Every call asks for at most
``max_tokens`` output tokens and is bounded by ``call_timeout_s``, retries and negotiation
included. See ``docs/llm.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, cast, get_args
from urllib.parse import parse_qsl, urlsplit

try:
    import openai
    from openai.types.chat import ChatCompletionMessageParam
except ImportError as exc:  # exercised with the SDK hidden, in the tests
    raise ImportError(
        f"pev.llm.openai (OpenAIChat) needs the openai SDK ({exc}): pip install 'pev-agent[llm]'",
        name=exc.name,
    ) from exc

from pev._json import thaw_json
from pev.chat import ChatMessage, ChatReply, ChatRequest, LLMError
from pev.engine._redact import Redactor, remember
from pev.errors import UsageError

__all__ = ["DEFAULT_MAX_TOKENS", "OpenAIChat", "StructuredOutput"]

StructuredOutput = Literal["json_schema", "json_object_schema", "json_object", "prompt"]
"""How a reply's JSON shape is asked for, from the most to the least the server enforces.

* ``json_schema``: ``response_format={"type": "json_schema", "json_schema": {...}}`` (OpenAI,
  vLLM, Ollama, llama.cpp's ``llama-server``, LM Studio);
* ``json_object_schema``: ``{"type": "json_object", "schema": {...}}``, llama-cpp-python's own
  form (its server refuses ``json_schema`` and turns this schema into a grammar);
* ``json_object``: ``{"type": "json_object"}``, with the schema in the prompt;
* ``prompt``: no ``response_format`` at all, the schema in the prompt.
"""

DEFAULT_MAX_TOKENS = 2048
"""The output-token limit of every call unless configured (``max_tokens=``,
``PEV_LLM_MAX_TOKENS``): a plan or a verdict needs far fewer, and a model that loops stops."""

_LADDER: tuple[StructuredOutput, ...] = get_args(StructuredOutput)

_ASKED_AS: dict[StructuredOutput, str] = {
    "json_schema": 'response_format {"type": "json_schema"}',
    "json_object_schema": (
        'response_format {"type": "json_object", "schema": ...} (llama-cpp-python\'s form)'
    ),
    "json_object": 'response_format {"type": "json_object"}, the schema in the prompt',
    "prompt": "no response_format, the schema in the prompt",
}

log = logging.getLogger(__name__)

# What a refusal of the request's format looks like: the status, and a word of its text. A server
# that cannot take a response_format answers 400 or 422 (vLLM, LM Studio, OpenAI's own schema
# checks), or 500 (llama-cpp-python's validation error), naming the field or the schema.
_FORMAT_STATUSES = frozenset({400, 415, 422, 500, 501})
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured output", "schema")
# llama-cpp-python's pydantic error for {"type": "json_schema"}: its own form is the next step.
_LLAMA_CPP_PYTHON = "'text' or 'json_object'"
# How much of a server's error text an LLMError (and so a rejected plan, and so the next
# prompt) carries: one line.
_ERROR_CHARS = 200

LOCAL_PLACEHOLDER_KEY = "pev-local-no-key"
"""Sent to a server given by ``base_url`` when no key is configured: local servers ignore it,
but the SDK requires one."""

# Query parameters that carry a key in the URLs of some APIs (after lower-casing, "-" as "_").
_CREDENTIAL_QUERY_NAMES = frozenset(
    {"access_token", "api_key", "apikey", "auth", "key", "password", "secret", "sig", "token"}
)


# HTTP statuses that say "not now" rather than "not this request": with 5xx, an outage.
_OUTAGE_STATUSES = frozenset({408, 429})


class OpenAIChat:
    """A chat model behind any OpenAI-compatible ``/chat/completions`` endpoint.

    Works with the hosted OpenAI API and with local servers (vLLM, Ollama, llama.cpp's
    ``llama-server``, LM Studio...) through ``base_url``. Use it as an async context manager, or
    call :meth:`aclose` when done, so its connections are closed.

    Args:
        model: The model name the server knows (``gpt-4o-mini``, ``qwen2.5:7b``, ...).
        base_url: The API root, e.g. ``http://localhost:11434/v1``; ``None`` is the hosted
            OpenAI API (or ``OPENAI_BASE_URL`` when set).
        api_key: The key; by default ``PEV_LLM_API_KEY``, else ``OPENAI_API_KEY``, else (for a
            ``base_url``) a placeholder that local servers ignore. It is sent to the server and
            nowhere else: never to the ledger, a repr or an error message.
        timeout_s: How long one HTTP attempt may take.
        max_retries: How many times the SDK retries a transport failure (connection error,
            timeout, 408, 409, 429, 5xx), with exponential backoff; 0 turns retries off. A
            server's refusal of the request's format is never retried.
        structured_output: Where the negotiation of structured output starts (see
            :data:`StructuredOutput`); a refusal steps down from there, never up, so
            ``json_object`` pins a server to JSON objects with the schema in the prompt.
        max_tokens: The most output tokens one reply may have (``max_tokens``, or
            ``max_completion_tokens`` for the hosted OpenAI API); ``None`` sends no limit.
        call_timeout_s: How long one call may take in all: every attempt, the SDK's backoff
            and the negotiation. By default what the SDK's attempts may take: ``timeout_s *
            (max_retries + 1)`` plus its longest backoffs between them (182 s with the other
            defaults). A call past it raises an :class:`LLMError` that is ``unreachable``.

    Raises:
        UsageError: No key for the hosted API, or an option out of range.
    """

    # The options mirror the SDK client's own (model, base URL, key, timeout, retries), plus the
    # choices servers differ on (the output format, a token limit, a bound on the whole call);
    # grouping them in a settings object would hide that mapping.
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        structured_output: StructuredOutput = "json_schema",
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        call_timeout_s: float | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise UsageError(f"OpenAIChat needs a model name, got {model!r}")
        if not timeout_s > 0:
            raise UsageError(f"timeout_s must be positive, got {timeout_s!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise UsageError(f"max_retries must be a whole number >= 0, got {max_retries!r}")
        if structured_output not in _LADDER:
            raise UsageError(
                f"structured_output must be one of {', '.join(_LADDER)}, got {structured_output!r}"
            )
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise UsageError(f"max_tokens must be a whole number >= 1 or None, got {max_tokens!r}")
        if call_timeout_s is not None and not call_timeout_s > 0:
            raise UsageError(f"call_timeout_s must be positive, got {call_timeout_s!r}")
        _refuse_credentials(base_url, "base_url")
        key = api_key or os.environ.get("PEV_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise UsageError(
                    "OpenAIChat has no API key for the hosted API: set PEV_LLM_API_KEY or "
                    "OPENAI_API_KEY, pass api_key=..., or point base_url=... at a local server"
                )
            key = LOCAL_PLACEHOLDER_KEY
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.structured_output: StructuredOutput = structured_output
        self.max_tokens = max_tokens
        # The endpoint's negotiated form (see active_structured_output), and the forms already
        # announced in the log as working.
        self._negotiated: StructuredOutput = structured_output
        self._announced: set[StructuredOutput] = set()
        self.call_timeout_s = (
            float(call_timeout_s)
            if call_timeout_s is not None
            else timeout_s * (max_retries + 1) + _longest_backoff(max_retries)
        )
        self._secret = key
        if key != LOCAL_PLACEHOLDER_KEY:  # a key given as api_key= is redacted from logs too
            remember(Redactor.of({key: "api_key"}))
        self._client = openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            timeout=self.timeout_s,
            max_retries=max_retries,
            # No connection outlives its call: a pooled connection belongs to the event loop
            # that opened it, and each pev.run_sync runs on a loop of its own. A handshake per
            # call costs little next to a model's answer.
            default_headers={"Connection": "close"},
            http_client=openai.DefaultAsyncHttpxClient(
                event_hooks={"response": [_no_retry_of_a_refused_format]}
            ),
        )
        if base_url is None:  # the SDK's default, which OPENAI_BASE_URL may set
            _refuse_credentials(str(self._client.base_url), "OPENAI_BASE_URL")
        self.base_url = str(self._client.base_url).rstrip("/")
        # The hosted API wants the newer name (its reasoning models refuse `max_tokens`); local
        # servers know `max_tokens`, and some of them only that.
        self._token_limit_name = (
            "max_completion_tokens"
            if urlsplit(self.base_url).hostname == "api.openai.com"
            else "max_tokens"
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAIChat:
        """Build one from the environment.

        Reads ``PEV_LLM_MODEL`` (required), ``PEV_LLM_BASE_URL``, ``PEV_LLM_API_KEY`` (else
        ``OPENAI_API_KEY``), ``PEV_LLM_TIMEOUT_S``, ``PEV_LLM_MAX_RETRIES``,
        ``PEV_LLM_CALL_TIMEOUT_S``, ``PEV_LLM_MAX_TOKENS`` (``0``: no limit) and
        ``PEV_LLM_STRUCTURED_OUTPUT`` (where the negotiation starts).

        Raises:
            UsageError: ``PEV_LLM_MODEL`` is not set, or a value does not parse.
        """
        env = os.environ if environ is None else environ
        model = env.get("PEV_LLM_MODEL", "").strip()
        if not model:
            raise UsageError("set PEV_LLM_MODEL to the model name the server knows")
        try:
            timeout_s = float(env.get("PEV_LLM_TIMEOUT_S") or 60.0)
            max_retries = int(env.get("PEV_LLM_MAX_RETRIES") or 2)
            call_timeout = env.get("PEV_LLM_CALL_TIMEOUT_S")
            call_timeout_s = float(call_timeout) if call_timeout else None
            limit = env.get("PEV_LLM_MAX_TOKENS")
            max_tokens = DEFAULT_MAX_TOKENS if not limit else (int(limit) or None)
        except ValueError as exc:
            raise UsageError(
                "PEV_LLM_TIMEOUT_S / PEV_LLM_MAX_RETRIES / PEV_LLM_CALL_TIMEOUT_S / "
                f"PEV_LLM_MAX_TOKENS: {exc}"
            ) from exc
        structured = env.get("PEV_LLM_STRUCTURED_OUTPUT") or "json_schema"
        base_url = env.get("PEV_LLM_BASE_URL") or None
        _refuse_credentials(base_url, "PEV_LLM_BASE_URL")
        key = env.get("PEV_LLM_API_KEY") or env.get("OPENAI_API_KEY")
        return cls(
            model,
            base_url=base_url,
            api_key=key or (LOCAL_PLACEHOLDER_KEY if base_url else None),
            timeout_s=timeout_s,
            max_retries=max_retries,
            structured_output=cast("StructuredOutput", structured),
            max_tokens=max_tokens,
            call_timeout_s=call_timeout_s,
        )

    def __repr__(self) -> str:
        return f"OpenAIChat({self.model!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> OpenAIChat:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    @property
    def active_structured_output(self) -> StructuredOutput:
        """How the next request with a schema is sent.

        The configured start, or lower once this endpoint (its base URL and model) refused it;
        kept for the life of this object, which may serve any number of runs.
        """
        return self._negotiated

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Send one chat-completions request, negotiating its structured output if refused.

        Raises:
            LLMError: The server could not be reached, timed out (an attempt past ``timeout_s``
                or the call past ``call_timeout_s``), or answered with an error after the SDK's
                retries and the negotiation; or its answer held no choice.
        """
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await self._negotiate(request)
        except TimeoutError as exc:
            raise self._error(
                f"no answer within call_timeout_s={self.call_timeout_s:g} "
                f"(timeout_s={self.timeout_s:g}, max_retries={self.max_retries})",
                unreachable=True,
            ) from exc

    async def _negotiate(self, request: ChatRequest) -> ChatReply:
        mode = self.active_structured_output
        while True:
            try:
                completion = await self._send(request, mode)
            except openai.APIStatusError as exc:
                said = _response_text(exc)
                lower = (
                    _step_down(mode, exc.status_code, said) if request.schema is not None else None
                )
                if lower is None:
                    raise self._error(
                        f"the server answered HTTP {exc.status_code}: {self._summary(exc, said)}",
                        exc.status_code,
                        unreachable=exc.status_code in _OUTAGE_STATUSES or exc.status_code >= 500,
                    ) from exc
                self._remember(mode, lower, exc.status_code, self._summary(exc, said))
                mode = lower
                continue
            except openai.APITimeoutError as exc:
                raise self._error(
                    f"no answer within timeout_s={self.timeout_s:g} "
                    f"(max_retries={self.max_retries})",
                    unreachable=True,
                ) from exc
            except openai.APIConnectionError as exc:
                raise self._error(
                    f"could not connect (max_retries={self.max_retries}): {exc.message}",
                    unreachable=True,
                ) from exc
            except openai.OpenAIError as exc:
                raise self._error(f"{type(exc).__name__}: {exc}") from exc
            break
        if request.schema is not None:
            self._announce(mode)
        if not completion.choices:
            raise self._error("the answer holds no choice")
        choice = completion.choices[0]
        if choice.finish_reason == "length":
            log.warning(
                "model %r at %s: the reply was cut at %s=%s output tokens",
                self.model,
                self.base_url,
                self._token_limit_name,
                self.max_tokens,
            )
        usage = completion.usage
        return ChatReply(
            text=choice.message.content or "",
            model=completion.model or self.model,
            input_tokens=usage.prompt_tokens if usage is not None else 0,
            output_tokens=usage.completion_tokens if usage is not None else 0,
        )

    async def _send(self, request: ChatRequest, mode: StructuredOutput) -> Any:
        """One request (with the SDK's retries of transport failures), in the given mode."""
        messages = [_message(message) for message in request.messages]
        options: dict[str, Any] = {}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if self.max_tokens is not None:
            options[self._token_limit_name] = self.max_tokens
        if request.schema is not None:
            schema = thaw_json(request.schema)
            if mode == "json_schema":
                options["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": request.schema_name,
                        "schema": schema,
                        "strict": request.strict,
                    },
                }
            elif mode == "json_object_schema":
                options["response_format"] = {"type": "json_object", "schema": schema}
            else:
                if mode == "json_object":
                    options["response_format"] = {"type": "json_object"}
                _schema_in_prompt(messages, schema)
        return await self._client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            **options,
        )

    def _remember(
        self, refused: StructuredOutput, lower: StructuredOutput, status: int, said: str
    ) -> None:
        if _LADDER.index(lower) > _LADDER.index(self._negotiated):
            self._negotiated = lower
        log.info(
            "model %r at %s refused structured output as %s (HTTP %s: %s); asking with %s "
            "from now on",
            self.model,
            self.base_url,
            _ASKED_AS[refused],
            status,
            said,
            _ASKED_AS[lower],
        )

    def _announce(self, mode: StructuredOutput) -> None:
        """Say once per endpoint and mode how its structured output is asked for."""
        if mode not in self._announced:
            self._announced.add(mode)
            log.info(
                "model %r at %s: structured output as %s",
                self.model,
                self.base_url,
                _ASKED_AS[mode],
            )

    def _summary(self, exc: openai.APIStatusError, said: str) -> str:
        """The server's error message on one line, short, with no credential in it."""
        text = " ".join((_error_message(exc) or said or exc.message).split())
        if len(text) > _ERROR_CHARS:
            text = f"{text[: _ERROR_CHARS - 1]}…"
        return self._masked(text)

    def _error(
        self, problem: str, status_code: int | None = None, *, unreachable: bool = False
    ) -> LLMError:
        text = self._masked(f"model {self.model!r} at {self.base_url}: {problem}")
        return LLMError(text, model=self.model, status_code=status_code, unreachable=unreachable)

    def _masked(self, text: str) -> str:
        # A server may echo what it was sent; the key never leaves in a message or a log line.
        if self._secret and self._secret != LOCAL_PLACEHOLDER_KEY:
            return text.replace(self._secret, "***")
        return text


def _longest_backoff(retries: int) -> float:
    """The SDK's longest waits before ``retries`` retries: 0.5 s doubling, at most 8 s each."""
    return float(sum(min(0.5 * 2.0**attempt, 8.0) for attempt in range(retries)))


def _schema_in_prompt(messages: list[dict[str, Any]], schema: object) -> None:
    """Show the schema in the system message, for a server that does not enforce it."""
    hint = (
        "Reply with one JSON object, and nothing else, that follows this JSON schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )
    # One system message, first: some chat templates accept no other shape.
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{hint}"
    else:
        messages.insert(0, {"role": "system", "content": hint})


def _step_down(mode: StructuredOutput, status: int, text: str) -> StructuredOutput | None:
    """The mode to ask in next when ``text`` refuses ``mode``'s format; ``None``: no refusal."""
    if mode == "prompt" or status not in _FORMAT_STATUSES:
        return None
    lowered = text.lower()
    if not any(word in lowered for word in _FORMAT_WORDS):
        return None
    if mode == "json_schema" and _LLAMA_CPP_PYTHON in text:
        return "json_object_schema"
    if mode == "json_schema":
        # A server that did not say it is llama-cpp-python may ignore a "schema" it does not
        # know, and the model would see no schema at all: it goes to the prompt instead.
        return "json_object"
    return _LADDER[_LADDER.index(mode) + 1]


def _response_text(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # noqa: BLE001 - a body that cannot be read says nothing
        return ""


def _error_message(exc: openai.APIStatusError) -> str:
    """The message an error body holds: OpenAI's ``error.message``, FastAPI's ``detail``."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
        detail = body.get("detail")
        if isinstance(detail, list):
            return "; ".join(
                str(item.get("msg", item)) if isinstance(item, Mapping) else str(item)
                for item in detail
            )
        if detail is not None:
            return str(detail)
    return body if isinstance(body, str) else ""


async def _no_retry_of_a_refused_format(response: Any) -> None:
    """Tell the SDK not to retry a 5xx that refuses the request's format (it would retry 5xx).

    llama-cpp-python answers ``{"type": "json_schema"}`` with HTTP 500; sending it again would
    only be refused again. ``x-should-retry: false`` is the SDK's own signal.
    """
    if response.status_code < 500 or response.status_code not in _FORMAT_STATUSES:
        return
    try:
        if b'"response_format"' not in response.request.content:
            return
        await response.aread()
        text = response.text
    except Exception:  # noqa: BLE001 - unreadable: leave the SDK to its rules
        return
    if _step_down("json_schema", response.status_code, text) is not None:
        response.headers["x-should-retry"] = "false"


def _message(message: ChatMessage) -> dict[str, Any]:
    """The SDK's shape of one message: text, or text and image parts."""
    if not message.images:
        return {"role": message.role, "content": message.text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in message.images)
    return {"role": message.role, "content": parts}


def _refuse_credentials(url: str | None, where: str) -> None:
    """Refuse a server URL that carries credentials, without repeating them.

    The SDK would send ``user:password@`` as Basic auth, and HTTP libraries log request URLs:
    a key belongs in ``api_key`` (or ``PEV_LLM_API_KEY``), which only ever goes into a header.

    Args:
        url: The URL (``None``: nothing to check).
        where: What it was given as (``base_url``, ``PEV_LLM_BASE_URL``), for the message.

    Raises:
        UsageError: The URL holds user information or a key in its query, or does not parse.
    """
    if url is None:
        return
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise UsageError(f"{where} is not a valid URL ({exc})") from None
    if "@" in parts.netloc:
        what = "user information before '@'"
    else:
        names = sorted(
            {name for name, _ in query if name.lower().replace("-", "_") in _CREDENTIAL_QUERY_NAMES}
        )
        if not names:
            return
        what = f"query parameter {', '.join(names)}"
    raise UsageError(
        f"{where} carries credentials ({what}); pass the key with api_key= or "
        "PEV_LLM_API_KEY, which only ever goes into a request header, and give the URL without it"
    )
