"""A chat model that answers with scripted replies, one per request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from pev.chat import ChatReply, ChatRequest
from pev.testing._script import Scripted, is_exception, raise_if_exception, settle

__all__ = ["ChatStep", "ScriptedChat"]

ChatStep: TypeAlias = (
    str
    | ChatReply
    | BaseException
    | type[BaseException]
    | Callable[[ChatRequest], str | ChatReply | Awaitable[str | ChatReply]]
)
"""One scripted chat answer: a text, a reply, an exception, or a function of the request."""


def _words(text: str) -> int:
    """A stand-in token count: the whitespace-separated words of ``text``."""
    return len(text.split())


class ScriptedChat(Scripted[ChatStep, ChatRequest]):
    """A :class:`~pev.chat.ChatModel` that answers each request with the next scripted reply.

    Plug it into :class:`~pev.llm.LLMPlanner`, :class:`~pev.llm.LLMVerifier` or a
    :class:`~pev.experience.LessonBook`'s ``drafter=``; no model, server or extra needed. Each
    reply is one of:

    * a ``str``: the reply's text, answered as ``model``, with the words of the request's
      messages as its input tokens and the words of the text as its output tokens;
    * a :class:`~pev.chat.ChatReply`, returned as it is (its own model name and token counts);
    * an exception instance (or class), raised, as a transport failure would be (an
      :class:`~pev.chat.LLMError`, say);
    * a function, sync or async, called with the :class:`~pev.chat.ChatRequest`, returning a
      ``str`` or a :class:`~pev.chat.ChatReply` as above (handy for replies that depend on what
      was asked).

    Args:
        *replies: The replies, in request order.
        model: The model name that text replies are answered as.
        repeat_last: Keep answering with the last reply once the others are used.

    Attributes:
        model: The model name that text replies are answered as.
        requests: Every request received, in order (also those that raised).

    Raises:
        TypeError: A reply is none of the above.
        ValueError: ``repeat_last`` with no replies.
    """

    def __init__(
        self, *replies: ChatStep, model: str = "scripted-chat", repeat_last: bool = False
    ) -> None:
        for index, reply in enumerate(replies):
            if not (isinstance(reply, str | ChatReply) or is_exception(reply) or callable(reply)):
                raise TypeError(
                    f"ScriptedChat reply {index} is a {type(reply).__name__}; a reply is a str, "
                    "a ChatReply, an exception, or a function of the ChatRequest"
                )
        super().__init__("ScriptedChat", replies, repeat_last=repeat_last)
        self.model = model
        self._scripted = len(replies)

    async def complete(self, request: ChatRequest) -> ChatReply:
        """Record ``request`` and answer with the next reply.

        Raises:
            LookupError: More requests than scripted replies (the message says how many were
                scripted: the test needs another reply).
            TypeError: A reply function returned neither a ``str`` nor a ``ChatReply``.
            BaseException: The reply is an exception, or the reply's function raised.
        """
        try:
            step = self._take(request)
        except LookupError:
            # Asked once more than scripted: a bug in the test, named so it is easy to fix.
            count = self._scripted
            raise LookupError(
                f"ScriptedChat was given {count} {'reply' if count == 1 else 'replies'} and "
                f"was asked for reply {self.calls}; add a reply (or pass repeat_last=True)"
            ) from None
        raise_if_exception(step)
        if isinstance(step, str | ChatReply):
            return self._reply(request, step)
        assert not isinstance(step, BaseException | type)  # noqa: S101 - raised just above
        answer = await settle(step(request))
        if not isinstance(answer, str | ChatReply):
            raise TypeError(
                f"a ScriptedChat reply function returned a {type(answer).__name__}, "
                "not a str or a ChatReply"
            )
        return self._reply(request, answer)

    def _reply(self, request: ChatRequest, answer: str | ChatReply) -> ChatReply:
        if isinstance(answer, ChatReply):
            return answer
        return ChatReply(
            text=answer,
            model=self.model,
            input_tokens=sum(_words(message.text) for message in request.messages),
            output_tokens=_words(answer),
        )

    def __repr__(self) -> str:
        return f"ScriptedChat({self.model!r}, calls={self.calls}, remaining={self.remaining})"
