"""Fuzzing what planners, tools and verifiers hand ``pev.run`` (docs/design.md §2.1, §2.2, §6.3).

Each case runs a whole task whose planner, tools or verifier answer with values drawn from
tests/support/hostile.py: JSON and not (NaN, infinities, integers of thousands of digits, lone
surrogates, bytes, sets, objects that refuse to be printed, structures thousands deep or
containing themselves, megabytes of text), plans and verdicts built from them, and exceptions of
every kind. Whatever they do, ``pev.run`` returns (a component's ``KeyboardInterrupt`` or
``SystemExit``, and a planner's or verifier's own bugs, propagate by design and are not drawn),
the task ends in a terminal phase, its ledger verifies, and what pev logs about it can be
formatted. Most cases use the memory store; one in twenty an SQLite file, read back by a fresh
store (tests/support/answers.py runs and checks each case).

The cases are derandomized (the same on every run, no example database): 2,000 drawn in all
(700 planner, 800 tool, 500 verifier), and the explicit examples: the issue's own cases and
what earlier runs found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.support.answers import (
    Answer,
    answers,
    in_turn,
    later,
    pev_log_formatted,
    raising,
    returning,
    run_and_check,
    same,
)
from tests.support.hostile import FUZZ, FUZZ_MARKS, json_values, nested, surrogate_text, values

import pev
from pev.model import (
    CriterionResult,
    DeviceFailure,
    Effect,
    NodeResult,
    Plan,
    PlanNode,
    Success,
    Verdict,
    VerificationContract,
    VerifierFailure,
)
from pev.testing import FunctionExecutor

pytestmark = FUZZ_MARKS
CONTRACT = VerificationContract(
    goal="water the plants", success_criteria=("the soil is damp", "no water is spilled")
)


@pytest.fixture(scope="module", autouse=True)
def _pev_log() -> Iterator[None]:
    """pev's log is formatted by a handler of the tests' own, and kept out of the report."""
    with pev_log_formatted():
        yield


# ---------------------------------------------------------------------------------------------
# The task around the component under test: a good plan of a tool called "act", a tool that
# echoes, a verifier that passes or blames a node.


def good_plan(*request: object) -> Plan:
    """Look, then pour (an action); check the floor meanwhile: three nodes of the tool "act"."""
    return Plan(
        "water",
        (
            PlanNode("look", "look at the soil", tool="act", args={"n": 0}, effect=Effect.QUERY),
            PlanNode("pour", "pour water", tool="act", args={"n": 1}, after=("look",)),
            PlanNode("check", "check the floor", tool="act", args={"n": 2}, effect=Effect.QUERY),
        ),
    )


def plan_with(value: object) -> Plan:
    """The good plan, with ``value`` as an arg of its action."""
    look, pour, check = good_plan().nodes
    args = {"n": 1, "value": value}  # any value at all, JSON or not, on purpose
    odd = PlanNode(pour.id, pour.description, tool="act", args=args, after=pour.after)  # type: ignore[arg-type]
    return Plan("water", (look, odd, check))


def answer(value: object, make: Callable[..., object] = same) -> Answer:
    """An answer that returns (or raises) ``make(value)``."""
    return Answer(make, (value,))


def fine(**odd: Answer) -> dict[str, Answer]:
    """Each node of the good plan answers JSON, but those named in ``odd``."""
    return {node: odd.get(node, answer({"ok": True})) for node in ("look", "pour", "check")}


def deep_failure(depth: int) -> VerifierFailure:
    """A node-level check whose reason is a list nested ``depth`` deep (built when given:
    Hypothesis prints an explicit example's arguments, and recursion would stop it)."""
    return VerifierFailure("pour", nested("list", depth))  # type: ignore[arg-type]


def echo_tool() -> Any:
    @pev.tool(effect=Effect.QUERY, name="act")
    def act(n: int, value: Any = None) -> Any:
        """Echo what it is given."""
        return {"n": n, "value": value}

    return act


def passing(request: Any) -> Verdict:
    return Verdict.passed(request.contract)


def blaming(request: Any) -> Verdict:
    return Verdict.failed(request.contract, failed_nodes=["pour"], feedback="too little")


VERIFIERS = st.sampled_from([passing, blaming, None])


def contract_for(verifier: object) -> VerificationContract | None:
    return CONTRACT if verifier is not None else None


# One case in twenty runs on an SQLite file: 11, not 0, which Hypothesis draws far more often.
ON_SQLITE = st.integers(0, 19).map(lambda n: n == 11)


# ---------------------------------------------------------------------------------------------
# Planners


def _node(parts: tuple[Any, ...]) -> PlanNode:
    node_id, description, tool, args, after, effect = parts
    return PlanNode(node_id, description, tool=tool, args=args, after=after, effect=effect)


NODE_PARTS = st.tuples(
    st.one_of(st.sampled_from(["look", "pour", ""]), surrogate_text(), values()),
    st.one_of(st.text(max_size=8), values()),
    st.one_of(st.sampled_from(["act", "nope", None]), values()),
    st.one_of(st.fixed_dictionaries({"n": st.integers(0, 2), "value": values()}), values()),
    st.one_of(st.tuples(), st.tuples(st.sampled_from(["look", "pour", "ghost"])), values()),
    st.one_of(st.sampled_from(["query", "action", "sideways"]), values()),
)

PLANNER_ANSWERS = st.one_of(
    returning(values()),
    raising(bugs_propagate=True),
    st.just(Answer(good_plan, ())),
    st.just(Answer(same, (None,))),
    later(
        lambda goal, nodes: Plan(goal, tuple(map(_node, nodes))),
        st.one_of(st.text(max_size=8), values()),
        st.lists(NODE_PARTS, max_size=3),
    ),
    later(Plan, values(), values()),
    later(
        lambda n: Plan(
            "many",
            tuple(
                PlanNode(f"n{i}", tool="act", args={"n": 0}, effect=Effect.QUERY) for i in range(n)
            ),
        ),
        st.sampled_from([65, 500]),
    ),
    later(
        lambda value: Plan(
            "cycle",
            (
                PlanNode("a", tool="act", args={"n": 0, "value": value}, after=("b",)),
                PlanNode("b", tool="act", args={"n": 1}, after=("a",)),
            ),
        ),
        values(),
    ),
)


# The issue's own cases, and what earlier runs of this fuzz found, are always tried.
@example(plans=[answer(float("nan"), plan_with)], is_async=False, verifier=passing, on_sqlite=True)
@example(plans=[answer(float("inf"), plan_with)], is_async=True, verifier=None, on_sqlite=False)
@example(plans=[answer(object(), plan_with)], is_async=False, verifier=blaming, on_sqlite=False)
@example(plans=[answer("\ud800", plan_with)], is_async=False, verifier=passing, on_sqlite=True)
@example(plans=[answer(10**5000, plan_with)], is_async=False, verifier=passing, on_sqlite=False)
@example(plans=[answer(StopIteration("done"))], is_async=False, verifier=passing, on_sqlite=False)
@example(plans=[answer(TypeError("no"))], is_async=False, verifier=passing, on_sqlite=False)
@pytest.mark.timeout(300)
@settings(FUZZ, max_examples=700)
@given(
    plans=answers(PLANNER_ANSWERS),
    is_async=st.booleans(),
    verifier=VERIFIERS,
    on_sqlite=ON_SQLITE,
)
def test_whatever_a_planner_answers_the_run_ends_and_its_ledger_verifies(
    plans: list[Answer], is_async: bool, verifier: Any, on_sqlite: bool, tmp_path: Path
) -> None:
    """A planner's odd plans, values and exceptions: run returns, the task ends, ledger verifies."""
    asyncio.run(
        run_and_check(
            on_sqlite,
            tmp_path,
            planner=in_turn(plans, is_async=is_async),
            tools=[echo_tool()],
            verifier=verifier,
            contract=contract_for(verifier),
        )
    )


# ---------------------------------------------------------------------------------------------
# Tools and executors


def _result(kind: str, node_id: object, value: object) -> object:
    if kind == "success":
        return Success(value)  # type: ignore[arg-type]  # a value JSON may not hold, on purpose
    if kind == "device":
        return DeviceFailure(node_id, value)  # type: ignore[arg-type]
    if kind == "unknown":
        return DeviceFailure(node_id, value, outcome_unknown=True)  # type: ignore[arg-type]
    return VerifierFailure(node_id, value)  # type: ignore[arg-type]


TOOL_ANSWERS = st.one_of(
    returning(values()),
    returning(json_values()),
    raising(bugs_propagate=False),
    later(
        _result,
        st.sampled_from(["success", "device", "unknown", "verifier"]),
        st.one_of(st.sampled_from(["pour", "elsewhere"]), values()),
        values(),
    ),
)


class RawExecutor:
    """An executor that hands back whatever the answer is, without wrapping it as a result."""

    def __init__(self, per_node: dict[str, Answer]) -> None:
        self._per_node = per_node

    async def execute(self, node: PlanNode, context: object) -> NodeResult:
        return self._per_node[node.id].give()  # type: ignore[no-any-return]


def executor_of(kind: str, per_node: dict[str, Answer], effect: Effect) -> dict[str, Any]:
    """``tools=`` or ``executor=`` for the run, whose node ``n`` answers ``per_node[n]``."""
    by_n = dict(enumerate(per_node.values()))
    if kind == "raw":
        return {"executor": RawExecutor(per_node)}
    if kind == "function":
        return {
            "executor": FunctionExecutor(
                {
                    node: (lambda answer=answer, **args: answer.give())
                    for node, answer in per_node.items()
                }
            )
        }

    if kind == "sync":

        @pev.tool(effect=effect, name="act")
        def act(n: int, value: Any = None) -> Any:
            """Answer as scripted."""
            return by_n[n].give()

        return {"tools": [act]}

    @pev.tool(effect=effect, name="act")
    async def act_later(n: int, value: Any = None) -> Any:
        """Answer as scripted, after a turn of the loop."""
        await asyncio.sleep(0)
        return by_n[n].give()

    return {"tools": [act_later]}


@example(
    answers_=fine(pour=answer(10**5000)), runner=("sync", "action"), verifier=None, on_sqlite=False
)
@example(
    answers_=fine(pour=Answer(nested, ("dict", 900))),
    runner=("async", "action"),
    verifier=passing,
    on_sqlite=True,
)
@example(
    answers_=fine(pour=answer(KeyError("x"))),
    runner=("sync", "action"),
    verifier=None,
    on_sqlite=False,
)
@example(
    answers_=fine(look=answer(StopIteration("x"))),
    runner=("sync", "query"),
    verifier=None,
    on_sqlite=False,
)
@example(
    answers_=fine(pour=answer(TimeoutError("socket"))),
    runner=("raw", "action"),
    verifier=blaming,
    on_sqlite=False,
)
@example(
    answers_=fine(pour=Answer(DeviceFailure, ("pour", 10**5000))),
    runner=("function", "action"),
    verifier=None,
    on_sqlite=False,
)
@example(
    answers_=fine(pour=Answer(deep_failure, (10_000,))),
    runner=("function", "query"),
    verifier=passing,
    on_sqlite=False,
)
@pytest.mark.timeout(300)
@settings(FUZZ, max_examples=800)
@given(
    answers_=st.fixed_dictionaries(
        {"look": TOOL_ANSWERS, "pour": TOOL_ANSWERS, "check": TOOL_ANSWERS}
    ),
    runner=st.tuples(
        st.sampled_from(["sync", "async", "function", "raw"]), st.sampled_from(["query", "action"])
    ),
    verifier=VERIFIERS,
    on_sqlite=ON_SQLITE,
)
def test_whatever_a_tool_returns_or_raises_the_run_ends_and_its_ledger_verifies(
    answers_: dict[str, Answer],
    runner: tuple[str, str],
    verifier: Any,
    on_sqlite: bool,
    tmp_path: Path,
) -> None:
    """A tool's odd values, results and exceptions: run returns, the task ends, ledger verifies."""
    kind, effect = runner[0], Effect(runner[1])

    def plan(request: object) -> Plan:
        nodes = good_plan().nodes
        return Plan(
            "water",
            tuple(
                PlanNode(
                    n.id, n.description, tool=n.tool, args=n.args, after=n.after, effect=effect
                )
                for n in nodes
            ),
        )

    asyncio.run(
        run_and_check(
            on_sqlite,
            tmp_path,
            planner=plan,
            verifier=verifier,
            contract=contract_for(verifier),
            **executor_of(kind, answers_, effect),
        )
    )


# ---------------------------------------------------------------------------------------------
# Verifiers


CRITERIA = st.one_of(
    st.sampled_from([*CONTRACT.success_criteria, "the soil is damp.", "THE SOIL IS DAMP", ""]),
    surrogate_text(),
    values(),
)
STATUSES = st.one_of(
    st.sampled_from(["success", "failure", "replan_required", "inconclusive", "fine"]), values()
)
VERIFIER_ANSWERS = st.one_of(
    returning(values()),
    raising(bugs_propagate=True),
    st.just(Answer(Verdict.passed, (CONTRACT,))),
    later(
        lambda status, nodes, feedback, criteria, refs: Verdict(
            status,
            failed_nodes=nodes,
            feedback=feedback,
            criteria=criteria,
            evidence_refs=refs,
        ),
        STATUSES,
        st.one_of(st.lists(st.sampled_from(["pour", "ghost", ""])), values()),
        st.one_of(st.text(max_size=8), values()),
        st.one_of(
            st.lists(
                st.builds(CriterionResult, CRITERIA, STATUSES, st.one_of(st.tuples(), values()))
            ),
            values(),
        ),
        st.one_of(st.tuples(), st.tuples(st.sampled_from(["record:nope", "evidence:x"])), values()),
    ),
    later(
        lambda nodes, feedback, unmet: Verdict.failed(
            CONTRACT, failed_nodes=nodes, feedback=feedback, unmet=unmet
        ),
        st.one_of(st.lists(st.sampled_from(["pour", "ghost", ""])), values()),
        st.one_of(st.text(max_size=8), values()),
        st.one_of(st.none(), st.lists(CRITERIA, max_size=2)),
    ),
    later(
        lambda checks: Verdict.from_checks(CONTRACT, checks),
        st.one_of(
            st.dictionaries(CRITERIA.filter(lambda c: isinstance(c, str)), st.booleans()), values()
        ),
    ),
    later(
        lambda refs: Verdict.passed(CONTRACT, evidence_refs=refs),
        st.one_of(st.lists(st.text(max_size=8)), values()),
    ),
)


@example(verdicts=[answer(TimeoutError("slow camera"))], is_async=False, on_sqlite=False)
@example(verdicts=[answer(StopIteration("done"))], is_async=False, on_sqlite=False)
@example(
    verdicts=[Answer(Verdict.from_checks, (CONTRACT, {"the soil is damp.": True}))],
    is_async=True,
    on_sqlite=False,
)
@pytest.mark.timeout(300)
@settings(FUZZ, max_examples=500)
@given(verdicts=answers(VERIFIER_ANSWERS), is_async=st.booleans(), on_sqlite=ON_SQLITE)
def test_whatever_a_verifier_answers_the_run_ends_and_its_ledger_verifies(
    verdicts: list[Answer], is_async: bool, on_sqlite: bool, tmp_path: Path
) -> None:
    """A verifier's odd verdicts, values and exceptions: run returns, task ends, ledger verifies."""
    asyncio.run(
        run_and_check(
            on_sqlite,
            tmp_path,
            planner=good_plan,
            tools=[echo_tool()],
            verifier=in_turn(verdicts, is_async=is_async),
            contract=CONTRACT,
        )
    )
