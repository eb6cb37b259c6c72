"""LLM planners and verifiers over any OpenAI-compatible endpoint (the ``llm`` extra).

* :class:`ChatModel`: the seam, one async ``complete(ChatRequest) -> ChatReply``;
* :class:`OpenAIChat`: that seam over the official ``openai`` SDK, for hosted APIs and local
  servers (vLLM, Ollama, llama.cpp) alike, with bounded transport retries;
* :class:`LLMPlanner`: plans as JSON that follows a schema; a reply that is not a plan becomes
  a rejected plan whose problem the model is told next time;
* :class:`LLMVerifier`: one result per criterion, citing evidence references; its reply goes
  to the engine unchanged, to be classified.

Token usage and model names go into the ledger; credentials never do. See ``docs/llm.md``.
"""

try:
    import openai  # noqa: F401 - only checks that the extra is installed
except ImportError as exc:  # pragma: no cover - exercised with the SDK hidden, in a test
    raise ImportError(
        "pev.llm needs the openai SDK: pip install 'pev-agent[llm]'", name=exc.name
    ) from exc

from pev.llm._chat import ChatMessage, ChatModel, ChatReply, ChatRequest, LLMError
from pev.llm._openai import OpenAIChat
from pev.llm._planner import LLMPlanner
from pev.llm._verifier import LLMVerifier

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
