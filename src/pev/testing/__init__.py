"""Test doubles for pev agents: test yours the way pev tests its own.

Plug them into ``pev.run(..., planner=..., executor=..., verifier=..., observer=...)`` or call
them directly:

* :class:`FakeClock`: a UTC clock that moves only when told to (``Ledger(store, clock=...)``);
* :class:`ScriptedPlanner`: answers each planning call with the next scripted plan;
* :class:`FunctionExecutor`: runs nodes with plain functions keyed by node id or tool name;
* :class:`ScriptedVerifier`: answers each verification with the next scripted verdict, or a
  deliberately malformed one;
* :class:`ScriptedObserver` and :class:`StaticObserver`: return observations;
* :class:`ScriptedChat`: a chat model (:class:`pev.chat.ChatModel`) that answers with scripted
  replies, for :class:`pev.llm.LLMPlanner`, :class:`pev.llm.LLMVerifier` or a lesson drafter;
* :func:`node_context`: a node context for calling an executor or tool directly;
* :class:`MemoryStore`: the in-memory ledger store (from :mod:`pev.stores`).

Every double records what it was asked (``requests``, ``calls``, ``log``) so that a test can
assert on it afterwards. See ``docs/testing.md``.
"""

from pev.stores import MemoryStore
from pev.testing._chat import ScriptedChat
from pev.testing._clock import FakeClock
from pev.testing._context import node_context
from pev.testing._executor import FunctionExecutor
from pev.testing._observer import ScriptedObserver, StaticObserver
from pev.testing._planner import ScriptedPlanner
from pev.testing._verifier import ScriptedVerifier

__all__ = [
    "FakeClock",
    "FunctionExecutor",
    "MemoryStore",
    "ScriptedChat",
    "ScriptedObserver",
    "ScriptedPlanner",
    "ScriptedVerifier",
    "StaticObserver",
    "node_context",
]
