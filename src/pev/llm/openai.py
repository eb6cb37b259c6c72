"""A :class:`~pev.chat.ChatModel` over the official ``openai`` SDK: hosted APIs and local servers.

This module is the ``llm`` extra (``pip install 'pev-agent[llm]'``): the only module of pev that
imports ``openai``, and importing it without the SDK raises an :class:`ImportError` that names
the extra. Nothing else in :mod:`pev.llm` needs it: :class:`~pev.llm.LLMPlanner`,
:class:`~pev.llm.LLMVerifier` and the chat seam work with any chat model. ``from pev.llm import
OpenAIChat`` imports this module on first use.

Transport failures (connection errors, timeouts, 408/409/429 and 5xx answers) are retried by the
SDK's own bounded, backed-off mechanism (``max_retries``); what a model *says* is never retried
here: a bad answer is the planner's or verifier's to report, and the engine's to classify. See
``docs/llm.md``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, urlsplit

try:
    import openai
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat
except ImportError as exc:  # exercised with the SDK hidden, in the tests
    raise ImportError(
        f"pev.llm.openai (OpenAIChat) needs the openai SDK ({exc}): pip install 'pev-agent[llm]'",
        name=exc.name,
    ) from exc

from pev._json import thaw_json
from pev.chat import ChatMessage, ChatReply, ChatRequest, LLMError
from pev.errors import UsageError

__all__ = ["OpenAIChat", "StructuredOutput"]

StructuredOutput = Literal["json_schema", "json_object"]
"""How a reply's JSON shape is asked for: the schema itself, or just "some JSON object"."""

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
            timeout, 408, 409, 429, 5xx), with exponential backoff; 0 turns retries off.
        structured_output: ``json_schema`` sends the reply's JSON schema
            (``response_format={"type": "json_schema", ...}``); ``json_object`` asks only for a
            JSON object and puts the schema in the prompt, for servers without ``json_schema``.

    Raises:
        UsageError: No key for the hosted API, or an option out of range.
    """

    # The options mirror the SDK client's own (model, base URL, key, timeout, retries), plus the
    # one choice servers differ on; grouping them in a settings object would hide that mapping.
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        structured_output: StructuredOutput = "json_schema",
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise UsageError(f"OpenAIChat needs a model name, got {model!r}")
        if not timeout_s > 0:
            raise UsageError(f"timeout_s must be positive, got {timeout_s!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise UsageError(f"max_retries must be a whole number >= 0, got {max_retries!r}")
        if structured_output not in ("json_schema", "json_object"):
            raise UsageError(
                f"structured_output must be 'json_schema' or 'json_object', "
                f"got {structured_output!r}"
            )
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
        self._secret = key
        self._client = openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            timeout=self.timeout_s,
            max_retries=max_retries,
            # No connection outlives its call: a pooled connection belongs to the event loop
            # that opened it, and each pev.run_sync runs on a loop of its own. A handshake per
            # call costs little next to a model's answer.
            default_headers={"Connection": "close"},
        )
        if base_url is None:  # the SDK's default, which OPENAI_BASE_URL may set
            _refuse_credentials(str(self._client.base_url), "OPENAI_BASE_URL")
        self.base_url = str(self._client.base_url).rstrip("/")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAIChat:
        """Build one from the environment.

        Reads ``PEV_LLM_MODEL`` (required), ``PEV_LLM_BASE_URL``, ``PEV_LLM_API_KEY`` (else
        ``OPENAI_API_KEY``), ``PEV_LLM_TIMEOUT_S``, ``PEV_LLM_MAX_RETRIES`` and
        ``PEV_LLM_STRUCTURED_OUTPUT`` (``json_schema`` or ``json_object``).

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
        except ValueError as exc:
            raise UsageError(f"PEV_LLM_TIMEOUT_S / PEV_LLM_MAX_RETRIES: {exc}") from exc
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

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Send one chat-completions request (retrying transport failures only).

        Raises:
            LLMError: The server could not be reached, timed out, or answered with an error,
                after the SDK's retries; or its answer held no choice.
        """
        messages = [_message(message) for message in request.messages]
        options: dict[str, Any] = {}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.schema is not None:
            schema = thaw_json(request.schema)
            if self.structured_output == "json_schema":
                options["response_format"] = cast(
                    "ResponseFormat",
                    {
                        "type": "json_schema",
                        "json_schema": {
                            "name": request.schema_name,
                            "schema": schema,
                            "strict": request.strict,
                        },
                    },
                )
            else:
                options["response_format"] = cast("ResponseFormat", {"type": "json_object"})
                hint = (
                    "Reply with one JSON object, and nothing else, that follows this JSON "
                    f"schema:\n{json.dumps(schema, indent=1)}"
                )
                # One system message, first: some chat templates accept no other shape.
                if messages and messages[0]["role"] == "system":
                    messages[0]["content"] = f"{messages[0]['content']}\n\n{hint}"
                else:
                    messages.insert(0, {"role": "system", "content": hint})
        try:
            completion = await self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                **options,
            )
        except openai.APIStatusError as exc:
            raise self._error(
                f"the server answered HTTP {exc.status_code}: {exc.message}",
                exc.status_code,
                unreachable=exc.status_code in _OUTAGE_STATUSES or exc.status_code >= 500,
            ) from exc
        except openai.APITimeoutError as exc:
            raise self._error(
                f"no answer within timeout_s={self.timeout_s:g} (max_retries={self.max_retries})",
                unreachable=True,
            ) from exc
        except openai.APIConnectionError as exc:
            raise self._error(
                f"could not connect (max_retries={self.max_retries}): {exc.message}",
                unreachable=True,
            ) from exc
        except openai.OpenAIError as exc:
            raise self._error(f"{type(exc).__name__}: {exc}") from exc
        if not completion.choices:
            raise self._error("the answer holds no choice")
        message = completion.choices[0].message
        usage = completion.usage
        return ChatReply(
            text=message.content or "",
            model=completion.model or self.model,
            input_tokens=usage.prompt_tokens if usage is not None else 0,
            output_tokens=usage.completion_tokens if usage is not None else 0,
        )

    def _error(
        self, problem: str, status_code: int | None = None, *, unreachable: bool = False
    ) -> LLMError:
        text = f"model {self.model!r} at {self.base_url}: {problem}"
        # A server may echo what it was sent; the key never leaves in a message.
        if self._secret and self._secret != LOCAL_PLACEHOLDER_KEY:
            text = text.replace(self._secret, "***")
        return LLMError(text, model=self.model, status_code=status_code, unreachable=unreachable)


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
