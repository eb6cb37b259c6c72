"""Typed agents (docs/engine.md, "Typed agents"): ``pev.Agent[In, Out]`` end to end.

The input is validated where a task is made and recorded as its JSON; the planner and the
verifier get it as the agent's input type; a succeeded task's output is made by ``output=``,
recorded in ``task_finished`` and handed back typed.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping

import pytest
from pydantic import BaseModel

import pev
from pev.engine import PlanRequest, VerifyRequest
from pev.errors import ComponentError, UsageError
from pev.ledger import TaskFinished
from pev.model import JsonValue, Plan, PlanNode, Verdict


class Order(BaseModel):
    """What the test agents are asked to do."""

    sku: str
    qty: int = 1


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What they give back."""

    total: int
    currency: str = "EUR"


@pev.tool(effect="query")
def price(sku: str, qty: int) -> int:
    """The price of ``qty`` items of ``sku``."""
    return {"apple": 3, "pear": 5}[sku] * qty


seen: list[object] = []


def plan(request: PlanRequest[Order]) -> Plan:
    seen.append(request.input)
    order = request.input
    args = {"sku": order.sku, "qty": order.qty}
    return Plan("price the order", (PlanNode("n1", "price it", tool="price", args=args),))


def verify(request: VerifyRequest[Order]) -> Verdict:
    seen.append(request.input)
    return Verdict.judge(request.output("n1") is not None, request.contract)


def receipt(outputs: Mapping[str, JsonValue]) -> Receipt:
    total = outputs["n1"]
    assert isinstance(total, int)
    return Receipt(total=total)


def plain(request: PlanRequest) -> Plan:
    seen.append(request.input)
    args = {"sku": "apple", "qty": 1}
    return Plan("price", (PlanNode("n1", "price it", tool="price", args=args),))


typed = pev.Agent(plan, tools=[price], verifier=verify, input_type=Order, output=receipt)
untyped = pev.Agent(plain, tools=[price])


@pytest.fixture(autouse=True)
def _forget() -> None:
    seen.clear()


async def test_the_planner_and_verifier_get_the_input_type_and_the_result_its_output() -> None:
    store = pev.MemoryStore()
    result = await pev.run({"sku": "apple", "qty": "4"}, agent=typed, store=store)
    assert result.ok
    assert result.output == Receipt(total=12)
    assert seen == [Order(sku="apple", qty=4)] * 2
    # The ledger holds JSON: the input as the type's JSON, the output as the receipt's.
    state = await pev.Ledger(store).state(result.task_id)
    assert dict(state.created.input) == {"sku": "apple", "qty": 4}  # type: ignore[arg-type]
    assert state.finished is not None
    assert dict(state.finished.output) == {"total": 12, "currency": "EUR"}  # type: ignore[arg-type]


async def test_an_instance_and_its_json_are_recorded_alike() -> None:
    store = pev.MemoryStore()
    one = await pev.run(Order(sku="pear", qty=2), agent=typed, store=store)
    other = await pev.run({"sku": "pear", "qty": 2}, agent=typed, store=store)
    ledger = pev.Ledger(store)
    inputs = [(await ledger.state(r.task_id)).created.input for r in (one, other)]
    assert inputs[0] == inputs[1]
    assert one.output == other.output == Receipt(total=10)


@pytest.mark.parametrize("how", ["run", "start", "submit"])
async def test_an_input_that_does_not_fit_is_refused_and_nothing_is_written(how: str) -> None:
    store = pev.MemoryStore()
    bad = {"qty": "many"}

    async def make() -> object:
        if how == "run":
            return await pev.run(bad, agent=typed, store=store)
        if how == "start":
            return pev.start(bad, agent=typed, store=store)
        return await pev.submit(bad, agent=typed, store=store)

    with pytest.raises(UsageError) as refused:
        await make()
    said = str(refused.value)
    assert "does not fit the agent's input type Order" in said
    assert "sku: Field required" in said
    assert "qty: Input should be a valid integer" in said
    assert await store.list_tasks() == ()


async def test_start_gives_a_handle_whose_result_is_typed() -> None:
    handle = pev.start({"sku": "apple"}, agent=typed)
    result = await handle.result()
    assert result.output == Receipt(total=3)


async def test_a_node_id_as_output_gives_that_nodes_output() -> None:
    agent = pev.Agent(plan, tools=[price], input_type=Order, output="n1")
    result = await pev.run({"sku": "pear", "qty": 3}, agent=agent)
    assert result.output == 15


def _raises(outputs: Mapping[str, JsonValue]) -> Receipt:
    raise KeyError("total")


def _misfits(outputs: Mapping[str, JsonValue]) -> Receipt:
    return {"currency": "EUR"}  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (_raises, "the agent's output= raised KeyError: 'total'"),
        (_misfits, "the agent's output does not fit its annotation: total: Field required"),
    ],
)
async def test_an_output_that_cannot_be_made_leaves_the_success_and_says_why(
    make: Callable[[Mapping[str, JsonValue]], Receipt], why: str
) -> None:
    agent = pev.Agent(plan, tools=[price], input_type=Order, output=make)
    result = await pev.run({"sku": "apple"}, agent=agent)
    assert result.ok
    assert result.output is None
    assert why in result.detail


async def test_an_output_node_that_did_not_succeed_gives_no_output() -> None:
    agent = pev.Agent(plan, tools=[price], input_type=Order, output="n9")
    result = await pev.run({"sku": "apple"}, agent=agent)
    assert result.ok
    assert result.output is None
    assert "output node 'n9' has no output" in result.detail


async def test_a_task_that_did_not_succeed_has_no_output() -> None:
    agent = pev.Agent(plan, tools=[price], input_type=Order, output=receipt)
    result = await pev.run({"sku": "plum"}, agent=agent)  # not priced: the tool fails
    assert not result.ok
    assert result.output is None


async def test_resume_of_an_ended_task_types_its_output_with_the_agent_given() -> None:
    store = pev.MemoryStore()
    done = await pev.run({"sku": "apple", "qty": 2}, agent=typed, store=store)
    again = await pev.resume(done.task_id, store=store, agent=typed)
    assert again.output == Receipt(total=6)
    # Without the agent it is the recorded JSON.
    bare = await pev.TaskHandle(done.task_id, store=store).result()
    assert dict(bare.output) == {"total": 6, "currency": "EUR"}  # type: ignore[arg-type]


async def test_a_recorded_input_the_type_no_longer_accepts_stops_the_resume() -> None:
    store = pev.MemoryStore()
    task_id = await pev.submit({"flavour": "sour"}, agent=untyped, store=store)
    with pytest.raises(UsageError, match=r"recorded input no longer fits .* Order"):
        await pev.resume(task_id, store=store, agent=typed)
    assert (await store.lease(task_id)) is None  # refused before it took the lease


async def test_an_untyped_agent_is_as_before() -> None:
    result = await pev.run({"any": ["json"]}, agent=untyped)
    assert result.ok
    assert result.output is None
    assert dict(seen[0]) == {"any": ("json",)}  # type: ignore[call-overload]


async def test_a_typed_agent_without_a_module_level_name_cannot_be_submitted() -> None:
    local = pev.Agent(plan, tools=[price], input_type=Order)
    with pytest.raises(ComponentError, match="rebuilt by a worker only whole"):
        await pev.submit({"sku": "apple"}, agent=local, store=pev.MemoryStore())


async def test_a_typed_agent_bound_at_module_level_is_submitted() -> None:
    store = pev.MemoryStore()
    task_id = await pev.submit(Order(sku="apple"), agent=typed, store=store)
    state = await pev.Ledger(store).state(task_id)
    assert dict(state.created.input) == {"sku": "apple", "qty": 1}  # type: ignore[arg-type]


def test_an_input_type_pydantic_cannot_validate_is_refused() -> None:
    with pytest.raises(ComponentError, match=r"input_type= .* is not a type pydantic can validate"):
        pev.Agent(plan, tools=[price], input_type=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("output", [5, ""])
def test_an_output_that_is_neither_a_function_nor_a_node_id_is_refused(output: object) -> None:
    with pytest.raises(ComponentError, match="output="):
        pev.Agent(plan, tools=[price], output=output)  # type: ignore[arg-type]


def test_the_output_is_recorded_in_task_finished_only_when_there_is_one() -> None:
    """An ending without an output writes the very bytes it always has."""
    from pev.kernel import TaskStatus, TerminalReason
    from pev.ledger import event_text

    plain = TaskFinished(status=TaskStatus.SUCCEEDED, reason=TerminalReason.PASSED)
    assert "output" not in event_text(plain, 1).replace('"outputs"', "")
    with_output = dataclasses.replace(plain, output=3)
    assert '"output":3' in event_text(with_output, 1)


def test_the_typed_entry_points_take_what_launch_takes() -> None:
    """run, run_sync and start are typed with LaunchOptions: the keywords launch takes."""
    from pev.engine._api import LaunchOptions, launch

    keywords = set(inspect.signature(launch).parameters) - {"input", "agent"}
    assert set(LaunchOptions.__annotations__) == keywords
    for entry in (pev.run, pev.run_sync, pev.start):
        assert set(inspect.signature(entry).parameters) == {"input", "agent", *keywords}


async def test_an_input_that_fits_but_is_no_json_a_ledger_holds_is_refused() -> None:
    """A float field holding NaN fits the type, but no ledger can record it: a UsageError."""

    class Reading(BaseModel):
        celsius: float

    agent = pev.Agent(plan, tools=[price], input_type=Reading)
    store = pev.MemoryStore()
    with pytest.raises(UsageError, match=r"a Reading, cannot be recorded as JSON: .*nan"):
        await pev.run({"celsius": float("nan")}, agent=agent, store=store)
    assert await store.list_tasks() == ()
