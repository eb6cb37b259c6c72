"""ScriptedChat: one scripted reply per chat request, usable wherever a ChatModel is."""

from __future__ import annotations

import json

import pytest

import pev
from pev.chat import ChatMessage, ChatModel, ChatReply, ChatRequest, LLMError
from pev.codec import encode
from pev.ledger import Ledger, RevisionStarted, Usage, VerdictRecorded
from pev.llm import LLMPlanner, LLMVerifier
from pev.model import Plan, Verdict, VerificationContract
from pev.testing import MemoryStore, ScriptedChat


def ask(text: str = "plan it") -> ChatRequest:
    return ChatRequest(
        messages=(
            ChatMessage(role="system", text="You plan."),
            ChatMessage(role="user", text=text),
        )
    )


def test_it_is_a_chat_model() -> None:
    """It satisfies the ChatModel protocol, so it plugs in wherever a model is expected."""
    assert isinstance(ScriptedChat("hi"), ChatModel)


async def test_text_replies_are_answered_in_order_with_a_model_name_and_tokens() -> None:
    """A text reply is answered as the model, with word counts standing in for tokens."""
    chat = ScriptedChat("first answer", "second", model="tiny-1")
    first = await chat.complete(ask("plan it now"))
    assert first == ChatReply(text="first answer", model="tiny-1", input_tokens=5, output_tokens=2)
    assert (await chat.complete(ask())).text == "second"
    assert ScriptedChat("x").model == "scripted-chat"


async def test_a_chat_reply_is_returned_as_it_is() -> None:
    """A ChatReply step keeps its own model name and token counts."""
    reply = ChatReply(text="{}", model="big-2", input_tokens=100, output_tokens=20)
    assert await ScriptedChat(reply).complete(ask()) is reply


async def test_exceptions_are_raised() -> None:
    """An exception instance is raised; an exception class is instantiated and raised."""
    chat = ScriptedChat(LLMError("HTTP 503", model="m", status_code=503), TimeoutError)
    with pytest.raises(LLMError, match="HTTP 503"):
        await chat.complete(ask())
    with pytest.raises(TimeoutError):
        await chat.complete(ask())
    assert chat.calls == 2


async def test_functions_get_the_request() -> None:
    """A function (sync or async) is called with the request; it returns text or a reply."""

    async def echo(request: ChatRequest) -> ChatReply:
        return ChatReply(text=request.messages[-1].text.upper(), model="echo")

    chat = ScriptedChat(lambda request: f"{len(request.messages)} messages", echo)
    assert (await chat.complete(ask())).text == "2 messages"
    assert await chat.complete(ask("shout")) == ChatReply(text="SHOUT", model="echo")


async def test_a_function_must_return_text_or_a_reply() -> None:
    """Anything else from a reply function is a mistake in the test, and says so."""
    chat = ScriptedChat(lambda request: 42)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="returned a int, not a str or a ChatReply"):
        await chat.complete(ask())


async def test_records_every_request() -> None:
    """requests holds each request in order (those that raised too); remaining counts down."""
    chat = ScriptedChat("a", RuntimeError("boom"))
    assert chat.remaining == 2
    await chat.complete(ask("one"))
    with pytest.raises(RuntimeError):
        await chat.complete(ask("two"))
    assert [request.messages[-1].text for request in chat.requests] == ["one", "two"]
    assert (chat.calls, chat.remaining) == (2, 0)
    assert repr(chat) == "ScriptedChat('scripted-chat', calls=2, remaining=0)"


async def test_asking_more_than_scripted_names_how_many_replies_it_was_given() -> None:
    """One request too many is a mistake in the test: the error says how many were scripted."""
    chat = ScriptedChat("only one")
    await chat.complete(ask())
    with pytest.raises(LookupError, match=r"given 1 reply and was asked for reply 2; add a reply"):
        await chat.complete(ask())
    with pytest.raises(LookupError, match=r"given 0 replies and was asked for reply 1"):
        await ScriptedChat().complete(ask())


async def test_repeat_last_keeps_answering() -> None:
    """With repeat_last the last reply answers every further request."""
    chat = ScriptedChat("same", repeat_last=True)
    assert [(await chat.complete(ask())).text for _ in range(3)] == ["same"] * 3


def test_bad_steps_are_refused_up_front() -> None:
    """A step that is none of the accepted kinds, or repeat_last with nothing, is refused."""
    with pytest.raises(TypeError, match="reply 1 is a int"):
        ScriptedChat("ok", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        ScriptedChat(repeat_last=True)


async def test_it_drives_the_llm_planner_and_verifier_through_a_run(
    contract: VerificationContract, plan: Plan
) -> None:
    """A whole run with LLMPlanner and LLMVerifier on scripted models; usage reaches the ledger."""
    # What a model writes is the codec's JSON of a plan and of a verdict.
    plan_json = json.dumps(encode(plan))
    verdict_json = json.dumps(encode(Verdict.passed(contract)))

    @pev.tool(effect="query")
    def camera() -> str:
        """Look."""
        return "red and blue"

    @pev.tool
    def arm(cube: str, to: list[int]) -> str:
        """Move a cube."""
        return f"moved {cube}"

    planner_model = ScriptedChat(plan_json, model="planner-1")
    verifier_model = ScriptedChat(
        ChatReply(text=verdict_json, model="judge-1", input_tokens=30, output_tokens=9)
    )
    store = MemoryStore()
    result = await pev.run(
        "stack red on blue",
        planner=LLMPlanner(planner_model),
        verifier=LLMVerifier(verifier_model),
        tools=[camera, arm],
        contract=contract,
        store=store,
    )
    assert result.ok, result
    assert result.outputs == {"look": "red and blue", "move": "moved red"}
    assert (planner_model.remaining, verifier_model.remaining) == (0, 0)
    assert planner_model.requests[0].schema_name == "pev_plan"

    entries = await Ledger(store).entries(result.task_id)
    plan_usage, verdict_usage = [
        entry.event.usage
        for entry in entries
        if isinstance(entry.event, RevisionStarted | VerdictRecorded)
    ]
    assert plan_usage is not None
    assert plan_usage.model == "planner-1"
    assert plan_usage.input_tokens > 0
    assert plan_usage.output_tokens > 0
    assert verdict_usage == Usage(model="judge-1", input_tokens=30, output_tokens=9)
