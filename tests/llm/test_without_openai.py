"""Without the openai SDK, everything but OpenAIChat works: the seam, the planner, the verifier
and the lesson drafter; OpenAIChat says which extra to install.

The check runs in a fresh interpreter where ``openai`` cannot be imported (a ``sys.meta_path``
finder refuses it before pev is imported), whether or not the SDK is installed here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    '''
    import sys


    class NoOpenAI:
        """Refuses openai and its submodules, as if the SDK were not installed."""

        def find_spec(self, name, path=None, target=None):
            if name == "openai" or name.startswith("openai."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NoOpenAI())
    for loaded in [name for name in sys.modules if name.split(".")[0] == "openai"]:
        del sys.modules[loaded]

    import asyncio
    import json

    import pev
    import pev.llm
    from pev.codec import encode
    from pev.experience import LessonBook
    from pev.ledger import Ledger
    from pev.llm import LLMPlanner, LLMVerifier
    from pev.model import Plan, PlanNode, Verdict, VerificationContract
    from pev.testing import MemoryStore, ScriptedChat, ScriptedPlanner, ScriptedVerifier

    CRITERION = "the claim is filed"
    contract = VerificationContract(goal="file the claim", success_criteria=[CRITERION])


    @pev.tool(effect="query")
    def lookup(holder: str) -> str:
        """Find a holder's policy."""
        return "policy of " + holder


    @pev.tool
    def submit(claim: str) -> str:
        """File a claim."""
        return "filed " + claim


    # 1. A whole run with the LLM planner and verifier on scripted chat models, which answer
    # with the JSON a model writes: the codec's, of a plan and of a verdict.
    file_it = Plan(
        contract.goal, [PlanNode("file", "file it", tool="submit", args={"claim": "CLM-7"})]
    )
    planner_chat = ScriptedChat(json.dumps(encode(file_it)))
    verifier_chat = ScriptedChat(json.dumps(encode(Verdict.passed(contract))))
    result = pev.run_sync(
        "claim one",
        planner=LLMPlanner(planner_chat),
        verifier=LLMVerifier(verifier_chat),
        tools=[lookup, submit],
        contract=contract,
        store=MemoryStore(),
    )
    assert result.ok, result
    assert result.outputs == {"file": "filed CLM-7"}
    assert (planner_chat.calls, verifier_chat.calls) == (1, 1)

    # 2. A lesson drafter on a scripted chat model drafts the lesson on promotion.
    plan = Plan(
        contract.goal,
        [
            PlanNode("find", "find the policy", tool="lookup", args={"holder": "Dana"},
                     effect="query"),
            PlanNode("file", "file the claim", tool="submit", args={"claim": "CLM-7"},
                     after=["find"]),
        ],
    )


    async def learn():
        store = MemoryStore()
        drafter = ScriptedChat("Before another submit attempt, check what the last one did.")
        book = LessonBook(store, drafter=drafter)
        for claim in ["claim one", "claim two", "claim three"]:
            verifier = ScriptedVerifier(
                lambda r: Verdict.failed(r.contract, failed_nodes=["file"], feedback="wrong desk"),
                lambda r: Verdict.passed(r.contract),
            )
            done = await pev.run(
                claim,
                planner=ScriptedPlanner(plan, repeat_last=True),
                verifier=verifier,
                tools=[lookup, submit],
                contract=contract,
                store=store,
            )
            await book.record(await Ledger(store).state(done.task_id))
        return drafter, await book.all()


    drafter, (lesson,) = asyncio.run(learn())
    assert lesson.active and lesson.drafted, lesson
    assert lesson.text == "Before another submit attempt, check what the last one did."
    assert drafter.calls == 1

    # 3. Only OpenAIChat needs the SDK, and it says which extra to install.
    for attempt in ("from pev.llm import OpenAIChat", "import pev.llm.openai"):
        try:
            exec(attempt)
        except ImportError as exc:
            assert "pip install 'pev-agent[llm]'" in str(exc), exc
        else:
            raise AssertionError(f"{attempt} worked without openai")
    assert not [name for name in sys.modules if name.split(".")[0] == "openai"]
    print("ok without openai")
    '''
)


def test_everything_but_openai_chat_works_without_the_sdk() -> None:
    """In a process that cannot import openai: runs, drafting and a clear error for OpenAIChat."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok without openai"
