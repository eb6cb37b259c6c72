"""LLM planners and verifiers over any chat model.

* :class:`ChatModel`: the seam, one async ``complete(ChatRequest) -> ChatReply`` (defined in
  :mod:`pev.chat`, re-exported here with :class:`ChatMessage`, :class:`ChatRequest`,
  :class:`ChatReply` and :class:`LLMError`);
* :class:`LLMPlanner`: plans as JSON that follows a schema; a reply that is not a plan becomes
  a rejected plan whose problem the model is told next time;
* :class:`LLMVerifier`: one result per criterion, citing evidence references; its reply goes
  to the engine unchanged, to be classified;
* :class:`OpenAIChat`: the seam over the official ``openai`` SDK, for hosted APIs and local
  servers (vLLM, Ollama, llama.cpp) alike, with bounded transport retries. It lives in
  :mod:`pev.llm.openai` and is the only part that needs the ``llm`` extra
  (``pip install 'pev-agent[llm]'``): ``from pev.llm import OpenAIChat`` imports it on first
  use, and raises an :class:`ImportError` naming the extra when the SDK is missing.

Everything else here works without the extra, with any :class:`ChatModel` (such as
:class:`pev.testing.ScriptedChat`). Token usage and model names go into the ledger; credentials
never do. See ``docs/llm.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pev._lazy import lazy_names
from pev.chat import ChatMessage, ChatModel, ChatReply, ChatRequest, LLMError
from pev.llm._planner import LLMPlanner
from pev.llm._verifier import LLMVerifier

if TYPE_CHECKING:
    from pev.llm.openai import OpenAIChat

__all__ = [
    "ChatMessage",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "LLMError",
    "LLMPlanner",
    "LLMVerifier",
    "OpenAIChat",
]

# Served on first use, so that ``import pev.llm`` needs no openai SDK; without the ``llm`` extra,
# using the name raises an ImportError that names it.
__getattr__ = lazy_names(__name__, {"OpenAIChat": "pev.llm.openai"})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
