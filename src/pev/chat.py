"""The chat-model seam: one request, one reply, one async method.

Anything that answers a :class:`ChatRequest` with a :class:`ChatReply` is a :class:`ChatModel`:
:class:`pev.llm.OpenAIChat` for OpenAI-compatible servers, another vendor's SDK in a few lines,
or :class:`pev.testing.ScriptedChat` in tests. :class:`pev.llm.LLMPlanner`,
:class:`pev.llm.LLMVerifier` and the lesson drafter of :class:`pev.experience.LessonBook` speak
only this protocol.

This module needs no extra and imports only the standard library and pev's own errors and JSON
values, so every layer of pev may use it. See ``docs/llm.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pev._json import JsonValue, freeze_json
from pev.errors import PevError

__all__ = ["ChatMessage", "ChatModel", "ChatReply", "ChatRequest", "LLMError", "Role"]

Role = Literal["system", "user", "assistant"]
"""Who speaks a message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """One message of a conversation.

    Attributes:
        role: ``system``, ``user`` or ``assistant``.
        text: The message's text.
        images: Images shown with a ``user`` message's text, as URLs (usually
            ``data:image/png;base64,...``).

    Raises:
        ValueError: Images on a message that is not the user's (chat APIs take them only there).
    """

    role: Role
    text: str
    images: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.images, list):
            object.__setattr__(self, "images", tuple(self.images))
        if self.images and self.role != "user":
            raise ValueError(f"only user messages carry images, not {self.role!r} messages")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """What a chat model is asked.

    Attributes:
        messages: The conversation, in order.
        schema: A JSON schema the reply's text must follow (a JSON document), if any.
        schema_name: A short name for the schema (letters, digits, ``_`` and ``-``).
        strict: Whether the schema fits the strict subset of structured output (every
            property required, no free-form objects), so a server may enforce it exactly.
        temperature: Sampling temperature; ``None`` leaves the server's default.
    """

    messages: tuple[ChatMessage, ...]
    schema: Mapping[str, JsonValue] | None = None
    schema_name: str = "reply"
    strict: bool = False
    temperature: float | None = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.messages, list):
            object.__setattr__(self, "messages", tuple(self.messages))
        if self.schema is not None:
            object.__setattr__(self, "schema", freeze_json(self.schema, path="schema"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatReply:
    """What a chat model answered, and what it cost.

    Attributes:
        text: The reply's text, exactly as the model wrote it.
        model: The model that answered, as the server names it.
        input_tokens: Prompt tokens used (0 when the server does not say).
        output_tokens: Completion tokens used (0 when the server does not say).
    """

    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: answers one request with one reply."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Answer ``request``; raise on transport failures (after any retries of your own)."""
        ...


class LLMError(PevError):
    """A chat model could not be reached or refused the request (after its bounded retries).

    The message never holds credentials.

    Attributes:
        model: The model that was asked.
        status_code: The HTTP status the server answered with, if it answered.
        unreachable: The model could not be reached or could not answer now (no connection, a
            timeout, HTTP 5xx, 429 or 408): an outage, not a bad request. A planner turns it
            into :class:`~pev.errors.PlannerUnavailable`.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str,
        status_code: int | None = None,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code
        self.unreachable = unreachable
