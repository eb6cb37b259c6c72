"""The fault suite's effect tasks: multi-step tasks whose actions must happen once.

See docs/design.md §4.5.

Four domains, each a plan of queries and several downstream actions over services that log
every call they receive (`_effect_services`, wrapped by `_fault_tools`):

* travel: `search_flights` → `book_flight` → `book_hotel`, `rent_car` → `send_itinerary`;
* messaging: `fetch_thread` → `draft_reply` → `post_message` → `get_message` → `notify` →
  `remind`, `remind` (the same reminder twice, on purpose: two intended effects of one call);
* trading: `get_quote` → `transfer` → `account_statement` → `confirm_trade` → `send_receipt`;
* files: `list_folder` → `write_file` → `copy_file` → `notify_owner`.

Bookings, transfers, trade confirmations, posts and files can be undone by their service (a
compensation); itineraries, notifications, reminders and receipts cannot. Each domain's planner
is scripted (its first plan carries the fault's flaw, where the fault has one; every later plan
is right), and its verifier checks the outputs the run produced, blaming every node without one.
Each fault (`EFFECT_FAULTS`) is armed where the run's seed says:

* `none`: nothing goes wrong;
* `reconciled_timeout`: an action (the flight or the hotel; the transfer or the confirmation)
  takes effect, then hangs past its timeout; its `reconcile` finds it done by its key, and the
  nodes behind it were skipped (three of them behind the flight and the transfer);
* `local_redo`: the cached query at the head of the plan (`fetch_thread`, `list_folder`)
  answers from a stale cache once or twice; the verifier blames it, and every action downstream
  of it had already succeeded with what a fresh read returns too;
* `compensation`: the first plan sends an action with a wrong argument (a transfer to a
  mistyped account; the report written to a mistyped path), which takes effect; the verifier
  blames it, alone or with the actions that carried its value (a stricter verifier, which in the
  file tasks blames more than `local_limit` nodes: a global replan); the goal holds only once
  the wrong effect is gone;
* `killed_query`: the process driving the run is killed during a query (the first one, or one
  after an action has taken effect); pev resumes the task from its SQLite ledger, a baseline
  starts its job again from the top;
* `big_int`: a tool returns a 64-bit integer (the flight's ticket number, the transfer's id:
  9876543210123456 and others past 2**53) that later actions must carry exactly, and the travel
  plan passes one as an argument (the loyalty number);
* `detail_replan`: the first plan leaves out a detail (the calendar invite, the urgent page);
  the verifier finds the goal unmet but blames no node, so the replan is a global one.

The goal is read from the services' logs: the undoable effects standing at the end are exactly
those of the right plan (a dry run of it on a world of its own), and every message of the right
plan was delivered (a superseded message may stand beside it: it cannot be unsent). The same dry
run says how many times each call is intended, for `duplicate_effects`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pev
from _effect_services import (
    FOLDERS,
    ORDERS,
    THREADS,
    TRIPS,
    Facts,
    files_services,
    messaging_services,
    number,
    ref,
    trading_services,
    travel_services,
)
from _fault_baselines import in_order, resolve
from _fault_tools import Arms, Service, world_tool
from _fault_world import Crash, Sent, Setup, Task, World, call_key
from pev.engine import PlanRequest, VerifyRequest

# 64-bit integers a seed picks from: the issue's, past 2**53 (a float cannot hold it), the
# largest signed and unsigned 64-bit values.
BIG_INTS = (9876543210123456, 2**53 + 1, 2**63 - 1, 2**64 - 1)


@dataclass
class Findings:
    """What a verifier found: the nodes it blames and why, and what it cannot pin on a node."""

    blamed: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def blame(self, nodes: tuple[str, ...], problem: str) -> None:
        self.blamed.update(nodes)
        self.problems.append(problem)


def _node(node_id: str, tool: str, args: dict[str, Any], *after: str) -> pev.PlanNode:
    return pev.PlanNode(node_id, tool.replace("_", " "), tool=tool, args=args, after=after)


def _ref_to(path: str) -> dict[str, str]:
    return {"$ref": path}


# --------------------------------------------------------------------------------------------
# Each domain's plan (its planner's, right or with the fault's flaw) and its verifier's checks

# Travel


def _travel_plan(facts: Facts, *, flawed: bool) -> pev.Plan:
    who, city = facts["traveller"], facts["city"]
    itinerary: dict[str, Any] = {
        "traveller": who,
        "flight": _ref_to("flight.booking"),
        "hotel": _ref_to("hotel.booking"),
        "car": _ref_to("car.booking"),
        "ticket": _ref_to("flight.ticket"),
    }
    if facts["calendar"] and not flawed:
        itinerary["calendar"] = True
    route = {"origin": facts["origin"], "destination": facts["destination"]}
    return pev.Plan(
        f"book {who}'s trip to {city} and send the itinerary",
        (
            _node("search", "search_flights", {**route, "date": facts["date"]}),
            _node(
                "flight",
                "book_flight",
                {
                    "traveller": who,
                    "flight": _ref_to("search.flight"),
                    "date": facts["date"],
                    "loyalty": facts["loyalty"],
                },
                "search",
            ),
            _node(
                "hotel",
                "book_hotel",
                {"traveller": who, "city": city, "nights": facts["nights"]},
                "flight",
            ),
            _node(
                "car",
                "rent_car",
                {"traveller": who, "city": city, "days": facts["nights"]},
                "flight",
            ),
            _node("itinerary", "send_itinerary", itinerary, "flight", "hotel", "car"),
        ),
    )


def _travel_check(request: VerifyRequest, facts: Facts, found: Findings) -> None:
    out = request.output
    sent, flight = out("itinerary"), out("flight")
    if not isinstance(sent, Mapping) or not isinstance(flight, Mapping):
        return
    booked = {part: (out(part) or {}).get("booking") for part in ("flight", "hotel", "car")}
    if any(sent.get(part) != booking for part, booking in booked.items()):
        found.blame(("itinerary",), "the itinerary does not list the bookings made")
    if sent.get("ticket") != flight.get("ticket"):
        found.blame(("itinerary",), f"the itinerary's ticket is not {flight.get('ticket')}")
    if facts["calendar"] and not sent.get("calendar"):
        # The calendar is the traveller's state, not one step's output: this check blames no
        # node (the verdict that leads to a global replan).
        found.problems.append("the trip is not in the traveller's calendar")


# Messaging


def _messaging_plan(facts: Facts, *, flawed: bool) -> pev.Plan:
    link = _ref_to("link.permalink")
    page: dict[str, Any] = {"user": facts["oncall"], "link": link}
    if facts["urgent"] and not flawed:
        page["urgent"] = True
    reminder = {"user": facts["owner"], "link": link}
    return pev.Plan(
        f"summarise thread {facts['thread']} in {facts['channel']} and tell the people in it",
        (
            _node("thread", "fetch_thread", {"thread": facts["thread"]}),
            _node(
                "draft",
                "draft_reply",
                {"title": _ref_to("thread.title"), "points": _ref_to("thread.points")},
                "thread",
            ),
            _node(
                "post",
                "post_message",
                {"channel": facts["channel"], "text": _ref_to("draft.text")},
                "draft",
            ),
            _node("link", "get_message", {"message_id": _ref_to("post.message_id")}, "post"),
            _node("notify", "notify", page, "link"),
            _node("remind_1", "remind", reminder, "link", "notify"),
            _node("remind_2", "remind", reminder, "link", "remind_1"),
        ),
    )


def _messaging_check(request: VerifyRequest, facts: Facts, found: Findings) -> None:
    thread, draft, post = (request.output(n) for n in ("thread", "draft", "post"))
    if isinstance(thread, Mapping) and thread.get("fresh") is False:
        found.blame(("thread",), "the thread was read from a stale cache: read it again")
    if isinstance(draft, Mapping) and isinstance(post, Mapping):
        expected = ref("M", facts["channel"], draft["text"])
        if post.get("message_id") != expected:
            found.blame(("post",), "the post is not the drafted reply")
    page = request.output("notify")
    if isinstance(page, Mapping) and facts["urgent"] and not page.get("urgent"):
        # Whether someone was paged is the pager's state, not one step's output: this check
        # blames no node (the verdict that leads to a global replan).
        found.problems.append("the on-call engineer was not paged")


# Trading

_MISTYPED = ("ACC-7718", "ACC-781", "ACC-7881", "ACC-1781")


def _trading_plan(facts: Facts, *, flawed: bool) -> pev.Plan:
    payee = facts["mistyped"] if flawed and facts["mistyped"] else facts["broker"]
    txn = _ref_to("transfer.txn_id")
    return pev.Plan(
        f"buy {facts['symbol']} for {facts['budget']:.2f} and send the client the receipt",
        (
            _node("quote", "get_quote", {"symbol": facts["symbol"], "budget": facts["budget"]}),
            _node(
                "transfer",
                "transfer",
                {
                    "from_account": facts["account"],
                    "to_account": payee,
                    "amount": _ref_to("quote.cost"),
                },
                "quote",
            ),
            _node(
                "statement",
                "account_statement",
                {"account": _ref_to("transfer.to_account"), "txn_id": txn},
                "transfer",
            ),
            _node(
                "confirm",
                "confirm_trade",
                {
                    "txn_id": _ref_to("statement.txn_id"),
                    "symbol": facts["symbol"],
                    "quantity": _ref_to("quote.quantity"),
                },
                "quote",
                "statement",
            ),
            _node(
                "receipt",
                "send_receipt",
                {
                    "to": facts["client"],
                    "txn_id": txn,
                    "confirmation": _ref_to("confirm.confirmation"),
                },
                "transfer",
                "confirm",
            ),
        ),
    )


def _trading_check(request: VerifyRequest, facts: Facts, found: Findings) -> None:
    paid, confirmed, receipt = (request.output(n) for n in ("transfer", "confirm", "receipt"))
    if isinstance(paid, Mapping) and paid.get("to_account") != facts["broker"]:
        carried = ("transfer", "confirm", "receipt") if facts["strict"] else ("transfer",)
        found.blame(
            carried,
            f"the payment went to {paid.get('to_account')}, not the broker's {facts['broker']}",
        )
    txn = paid.get("txn_id") if isinstance(paid, Mapping) else None
    if isinstance(confirmed, Mapping) and confirmed.get("txn_id") != txn:
        found.blame(("confirm",), f"the confirmation is not for transfer {txn}")
    if isinstance(receipt, Mapping) and receipt.get("txn_id") != txn:
        found.blame(("receipt",), f"the receipt is not for transfer {txn}")


# Files


def _mistyped_paths(facts: Facts) -> list[str]:
    """Wrong paths for the new version: two letters of the folder swapped, the version left out."""
    folder, name = facts["folder"], facts["name"]
    swapped = folder[:3] + folder[4] + folder[3] + folder[5:]
    version = facts["versions"] + 1
    return [f"{swapped}/{name}-v{version}.txt", f"{folder}/{name}.txt"]


def _files_plan(facts: Facts, *, flawed: bool) -> pev.Plan:
    target: Any = _ref_to("listing.next_path")
    if flawed and facts["mistyped"]:
        target = facts["mistyped"]
    return pev.Plan(
        f"file the new version of {facts['name']} in {facts['folder']} and archive a copy",
        (
            _node("listing", "list_folder", {"folder": facts["folder"], "name": facts["name"]}),
            _node("write", "write_file", {"path": target, "text": facts["text"]}, "listing"),
            _node(
                "copy",
                "copy_file",
                {"source": _ref_to("write.path"), "target": _ref_to("listing.archive_path")},
                "listing",
                "write",
            ),
            _node(
                "notify",
                "notify_owner",
                {"owner": facts["owner"], "path": _ref_to("copy.path")},
                "copy",
            ),
        ),
    )


def _files_check(request: VerifyRequest, facts: Facts, found: Findings) -> None:
    listing, written, copied = (request.output(n) for n in ("listing", "write", "copy"))
    if not isinstance(listing, Mapping):
        return
    if listing.get("fresh") is False:
        found.blame(("listing",), "the folder was listed from a stale cache: list it again")
    right = listing.get("next_path")
    if isinstance(written, Mapping) and written.get("path") != right:
        carried = ("write", "copy", "notify") if facts["strict"] else ("write", "copy")
        found.blame(carried, f"the report was written to {written.get('path')}, not {right}")
    elif isinstance(copied, Mapping) and copied.get("source") != right:
        found.blame(("copy",), f"the archive copy is not of {right}")


# --------------------------------------------------------------------------------------------
# The domains and their tasks


@dataclass(frozen=True)
class Domain:
    """One domain: its facts by input, services, plan and checks, and where faults go."""

    facts: Mapping[str, Facts]
    services: Callable[[World, Facts], dict[str, Service]]
    plan: Callable[..., pev.Plan]
    check: Callable[[VerifyRequest, Facts, Findings], None]
    hangs: tuple[str, ...] = ()  # reconciled_timeout: the actions that may hang
    kills: tuple[str, ...] = ()  # killed_query: the queries the kill may hit
    cached: str = ""  # local_redo: the cached query
    mistyped: Callable[[Facts, random.Random], str] | None = None  # compensation's wrong value
    urgent: bool = False  # detail_replan: the detail is the urgent page
    calendar: bool = False  # detail_replan: the detail is the calendar invite


DOMAINS = {
    "travel": Domain(
        TRIPS,
        travel_services,
        _travel_plan,
        _travel_check,
        hangs=("book_flight", "book_hotel"),
        calendar=True,
    ),
    "messaging": Domain(
        THREADS,
        messaging_services,
        _messaging_plan,
        _messaging_check,
        kills=("fetch_thread", "get_message"),
        cached="fetch_thread",
        urgent=True,
    ),
    "trading": Domain(
        ORDERS,
        trading_services,
        _trading_plan,
        _trading_check,
        hangs=("transfer", "confirm_trade"),
        kills=("get_quote", "account_statement"),
        mistyped=lambda facts, rng: rng.choice(_MISTYPED),
    ),
    "files": Domain(
        FOLDERS,
        files_services,
        _files_plan,
        _files_check,
        cached="list_folder",
        mistyped=lambda facts, rng: rng.choice(_mistyped_paths(facts)),
    ),
}
FLAWED_FIRST_PLAN = frozenset({"compensation", "detail_replan"})
_CONTRACTS = {
    domain: pev.VerificationContract(
        pev.VerificationMode.RECOVERY,
        f"the {domain} task is done, each of its actions once",
        ("every step succeeded and the results agree with one another and with the request",),
    )
    for domain in DOMAINS
}


def _facts(task: Task, domain: Domain, rng: random.Random) -> dict[str, Any]:
    """The task's facts, with what the seed decides for its fault."""
    facts: dict[str, Any] = {**domain.facts[task.input]}
    big = rng.choice(BIG_INTS) if task.fault == "big_int" else 0
    facts["big"] = big
    facts["loyalty"] = big or number("loyalty", task.input)
    facts["calendar"] = task.fault == "detail_replan" and domain.calendar
    facts["urgent"] = task.fault == "detail_replan" and domain.urgent
    wrong = task.fault == "compensation" and domain.mistyped is not None
    facts["mistyped"] = domain.mistyped(facts, rng) if wrong and domain.mistyped else ""
    facts["strict"] = wrong and rng.random() < 0.5
    return facts


def _arms(task: Task, domain: Domain, rng: random.Random) -> dict[str, Arms]:
    match task.fault:
        case "reconciled_timeout":
            return {rng.choice(domain.hangs): Arms(hang=True)}
        case "local_redo":
            return {domain.cached: Arms(stale=rng.choice((1, 2)))}
        case "killed_query":
            return {rng.choice(domain.kills): Arms(kill=True)}
    return {}


def _dry_run(plan: pev.Plan, services: Mapping[str, Service], world: World) -> None:
    """Run the right plan's calls on a world of its own, logging its actions: the goal's world."""
    outputs: dict[str, Any] = {}
    for node in in_order(plan):
        service = services[str(node.tool)]
        args = resolve(dict(node.args), outputs)
        value = service.fn(**args)
        if service.cached:
            value = {**value, "fresh": True}
        if service.effect == "action":
            world.log(str(node.tool), Sent(call_key(str(node.tool), args), None, result=value))
        outputs[node.id] = value


def _goal(right: World, services: Mapping[str, Service]) -> Callable[[World], bool]:
    """The goal, read against the right plan's world.

    It holds when the same undoable effects stand, no more and no less, and every message the
    right plan sent was delivered (a superseded one may stand beside it: it cannot be unsent).
    """

    def standing(world: World, tool: str) -> Counter[str]:
        return Counter(entry.call for _, entry in world.standing(tool))

    def holds(world: World) -> bool:
        for tool, service in services.items():
            if service.undoable and standing(world, tool) != standing(right, tool):
                return False
            if service.effect == "action" and standing(right, tool) - standing(world, tool):
                return False
        return True

    return holds


def build_effects(task: Task, seed: int) -> Setup:
    """One effect task's run: its world, tools with the seed's fault armed, planner, verifier."""
    rng = random.Random(f"{task.domain}/{task.input}/{task.fault}/{task.index}/{seed}")  # noqa: S311 - places faults
    domain = DOMAINS[task.domain]
    facts = _facts(task, domain, rng)
    world = World()
    arms = _arms(task, domain, rng)
    killed = next((name for name, armed in arms.items() if armed.kill), None)
    crash = Crash(killed) if killed else None
    tools = [
        world_tool(name, service, world, arms.get(name, Arms()), crash=crash)
        for name, service in domain.services(world, facts).items()
    ]
    right = World()
    right_services = domain.services(right, facts)
    _dry_run(domain.plan(facts, flawed=False), right_services, right)
    intended = Counter(entry.call for log in right.logs.values() for entry in log)

    async def planner(request: PlanRequest) -> pev.Plan:
        world.planner_calls += 1
        flawed = world.planner_calls == 1 and task.fault in FLAWED_FIRST_PLAN
        return domain.plan(facts, flawed=flawed)

    async def verifier(request: VerifyRequest) -> pev.Verdict:
        found = Findings()
        missing = [n.id for n in request.plan.nodes if request.output(n.id) is None]
        if missing:
            found.blame(tuple(missing), f"not done: {', '.join(missing)}")
        domain.check(request, facts, found)
        if not found.problems:
            return pev.Verdict.passed(request.contract)
        return pev.Verdict.failed(
            request.contract,
            failed_nodes=sorted(found.blamed),
            feedback="; ".join(found.problems),
        )

    return Setup(
        world=world,
        tools=tools,
        planner=planner,
        verifier=verifier,
        contract=_CONTRACTS[task.domain],
        input={"task": task.domain, "input": task.input},
        goal_holds=_goal(right, right_services),
        trusted_verifier=True,
        intended=dict(intended),
        crash=crash,
    )
