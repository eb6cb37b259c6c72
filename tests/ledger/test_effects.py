"""How a plan's action nodes map onto the task's effects: pure rules, as tables.

See docs/design.md §4.5.

``intent_of`` says, for one node among the plan's nodes of the same call, whether the task already
has the effect it intends (reuse it, or refuse while its outcome is unknown) or which occurrence
it sends; ``effect_order`` is the order occurrences count in, and ``effect_key`` the key each
intended effect is sent with.
"""

from __future__ import annotations

import pytest
from tests.support.builders import TASK, record

from pev.ledger import (
    Call,
    EffectStatus,
    Intent,
    Refuse,
    Reuse,
    Send,
    TaskEffect,
    call_name,
    effect_key,
    effect_order,
    intent_of,
)
from pev.model import (
    ExecutionRecord,
    Plan,
    PlanNode,
    RecordId,
    RecordStatus,
    TaskId,
    digest,
)

ARGS = digest({"to": "ada"})
# The compensation that undid an effect; a failed one leaves it in place.
UNDONE = record("u", "n", RecordStatus.SUCCEEDED, tool="undo")
UNDO_FAILED = record("u", "n", RecordStatus.FAILED, tool="undo")


def effect(
    occurrence: int,
    status: EffectStatus = EffectStatus.SUCCEEDED,
    *,
    compensation: ExecutionRecord | None = None,
) -> TaskEffect:
    """Occurrence ``occurrence`` of the call ``post(to=ada)``, as the task has it."""
    return TaskEffect(
        record_id=RecordId(f"r{occurrence}-{status}"),
        node_id="n",
        revision=1,
        tool="post",
        args=None,
        args_digest=ARGS,
        occurrence=occurrence,
        key=effect_key(TASK, "post", ARGS, occurrence),
        status=status,
        compensation=compensation,
    )


def calls(*repeats: bool) -> tuple[Call, ...]:
    """Nodes n0, n1, ... of one call in effect order, ``repeat`` as given for each."""
    return tuple(Call(f"n{i}", "post", ARGS, repeat) for i, repeat in enumerate(repeats))


PLAIN = calls(False)
TWO_PLAIN = calls(False, False)

E1 = effect(1)
E2 = effect(2)
E1_UNKNOWN = effect(1, EffectStatus.UNKNOWN)
E2_UNKNOWN = effect(2, EffectStatus.UNKNOWN)
E1_DONE = effect(1, EffectStatus.DONE)
E1_NOT_DONE = effect(1, EffectStatus.NOT_DONE)
E1_UNDONE = effect(1, compensation=UNDONE)
E1_UNDO_FAILED = effect(1, compensation=UNDO_FAILED)


@pytest.mark.parametrize(
    ("effects", "nodes", "position", "intent"),
    [
        pytest.param((), PLAIN, 0, Send(1), id="first-send"),
        pytest.param((E1,), PLAIN, 0, Reuse(E1), id="reuses-what-happened"),
        pytest.param((E1_DONE,), PLAIN, 0, Reuse(E1_DONE), id="reuses-what-was-reconciled"),
        pytest.param((E1_UNDO_FAILED,), PLAIN, 0, Reuse(E1_UNDO_FAILED), id="undo-failed"),
        pytest.param((E1, E2), TWO_PLAIN, 0, Reuse(E1), id="in-order-first"),
        pytest.param((E2, E1), TWO_PLAIN, 1, Reuse(E2), id="in-order-second"),
        pytest.param((E1,), TWO_PLAIN, 1, Send(2), id="past-the-effects"),
        pytest.param((), TWO_PLAIN, 1, Send(2), id="two-identical-calls"),
        pytest.param((E1_UNDONE,), PLAIN, 0, Send(2), id="compensated-skipped"),
        pytest.param((E1_UNDONE, E2), PLAIN, 0, Reuse(E2), id="compensated-then-live"),
        pytest.param((E1_UNDONE, E2), TWO_PLAIN, 1, Send(3), id="after-compensated-and-live"),
        pytest.param((E1_NOT_DONE,), PLAIN, 0, Send(1), id="not-done-not-counted"),
        pytest.param((E1_NOT_DONE, E2), TWO_PLAIN, 1, Send(3), id="not-done-beside-live"),
        pytest.param((E1_UNKNOWN,), PLAIN, 0, Refuse(E1_UNKNOWN), id="matched-to-unknown"),
        pytest.param((E1, E1_UNKNOWN), TWO_PLAIN, 0, Reuse(E1), id="before-an-unknown"),
    ],
)
def test_a_plain_node_is_matched_in_order_onto_live_effects(
    effects: tuple[TaskEffect, ...], nodes: tuple[Call, ...], position: int, intent: Intent
) -> None:
    """Plain nodes take the call's live effects in order; those past them are new occurrences."""
    assert intent_of(position, nodes, effects) == intent


@pytest.mark.parametrize(
    ("effects", "nodes", "position", "intent"),
    [
        pytest.param((), calls(True), 0, Send(1), id="first-send"),
        pytest.param((E1,), calls(True), 0, Send(2), id="after-an-effect"),
        pytest.param((E1_UNDONE,), calls(True), 0, Send(2), id="after-a-compensated-one"),
        pytest.param((E1, E2), calls(True, True), 1, Send(4), id="second-repeat"),
        pytest.param((E1,), calls(True, False), 0, Send(2), id="beside-a-reused-plain-node"),
        pytest.param((E1,), calls(True, False), 1, Reuse(E1), id="the-plain-node-reuses"),
        pytest.param((E1,), calls(False, False, True), 2, Send(3), id="after-new-plain-nodes"),
        pytest.param((E1_NOT_DONE,), calls(True), 0, Send(1), id="not-done-not-counted"),
        pytest.param((E1_UNKNOWN,), calls(True), 0, Refuse(E1_UNKNOWN), id="unknown"),
        pytest.param((E1, E2_UNKNOWN), calls(True), 0, Refuse(E2_UNKNOWN), id="any-unknown"),
    ],
)
def test_a_repeat_node_is_numbered_after_every_effect(
    effects: tuple[TaskEffect, ...], nodes: tuple[Call, ...], position: int, intent: Intent
) -> None:
    """A repeat node is a new occurrence after all, refused while the call's outcome is unknown."""
    assert intent_of(position, nodes, effects) == intent


def test_a_freed_occurrence_is_sent_with_the_same_key() -> None:
    """An occurrence reconciled as never done is sent again under the key it had."""
    sent = intent_of(0, PLAIN, (E1_NOT_DONE,))
    assert isinstance(sent, Send)
    assert effect_key(TASK, "post", ARGS, sent.occurrence) == E1_NOT_DONE.key


def test_identical_calls_in_one_plan_are_distinct_occurrences() -> None:
    """Every node of a call, plain or repeat, gets its own occurrence: no two share a key."""
    nodes = calls(False, True, False, True)
    intents = [intent_of(position, nodes, (E1,)) for position in range(len(nodes))]
    assert intents == [Reuse(E1), Send(3), Send(2), Send(4)]


# --- effect_order and effect_key --------------------------------------------------------------


def node(node_id: str, *after: str) -> PlanNode:
    return PlanNode(node_id, f"step {node_id}", tool="post", after=after)


@pytest.mark.parametrize(
    ("nodes", "order"),
    [
        pytest.param((node("b"), node("a"), node("c")), ("a", "b", "c"), id="ties-by-id"),
        pytest.param((node("a", "b"), node("b")), ("b", "a"), id="dependency-first"),
        pytest.param(
            (node("z"), node("y", "z"), node("a", "y"), node("m")),
            ("m", "z", "y", "a"),
            id="ready-nodes-by-id",
        ),
        pytest.param(
            (node("d", "b", "c"), node("c", "a"), node("b", "a"), node("a")),
            ("a", "b", "c", "d"),
            id="diamond",
        ),
        pytest.param((node("b", "a"), node("a", "b"), node("c")), ("c", "a", "b"), id="cycle-last"),
    ],
)
def test_effect_order_is_dependency_order_with_ties_by_id(
    nodes: tuple[PlanNode, ...], order: tuple[str, ...]
) -> None:
    """Occurrences count in dependency order; nodes ready together go by id."""
    assert effect_order(Plan("post", nodes)) == order


def test_effect_key_is_pinned() -> None:
    """The key's form is fixed: a service de-duplicates by it across processes and versions."""
    assert effect_key(TaskId("t-1"), "post", ARGS, 2) == f"t-1/post/{ARGS[:16]}/2"


@pytest.mark.parametrize(
    ("tool", "call"),
    [
        pytest.param("post", "post", id="its-tool"),
        pytest.param(None, "@n1", id="its-node-without-a-tool"),
    ],
)
def test_a_call_is_named_by_its_tool_else_its_node(tool: str | None, call: str) -> None:
    """A node's call is its tool's name; a node without a tool is a call of its own."""
    assert call_name(tool, "n1") == call


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(("t-2", "post", ARGS, 1), id="task"),
        pytest.param(("t-1", "mail", ARGS, 1), id="tool"),
        pytest.param(("t-1", "post", digest({"to": "bob"}), 1), id="args"),
        pytest.param(("t-1", "post", ARGS, 2), id="occurrence"),
    ],
)
def test_effect_key_differs_with_each_part(other: tuple[str, str, str, int]) -> None:
    """Another task, tool, args or occurrence is another intended effect, with another key."""
    task, tool, args, occurrence = other
    assert effect_key(TaskId(task), tool, args, occurrence) != effect_key(
        TaskId("t-1"), "post", ARGS, 1
    )
