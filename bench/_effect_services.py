"""The services behind the effect tasks' tools (`_fault_effects`): what the world answers.

Four domains, each a small offline world of facts and the functions that serve it; each
function's signature and docstring become its tool's schema and description. The actions'
answers are deterministic in their args (a booking's reference, a transfer's id), except where a
task makes one a 64-bit integer (`facts["big"]`); a few services look at what the world holds,
through its logs (`World.standing`): a confirmation needs the transfer it confirms to stand.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from _fault_tools import Service
from _fault_world import World
from pev.model import canonical_json

Facts = Mapping[str, Any]


def _digest(*parts: Any) -> str:
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def ref(prefix: str, *parts: Any) -> str:
    """A reference the service gives out (``FL-3A9C1E``), the same for the same parts."""
    return f"{prefix}-{_digest(*parts)[:6].upper()}"


def number(*parts: Any) -> int:
    """A six-digit number the service gives out, the same for the same parts."""
    return 100_000 + int(_digest(*parts)[:8], 16) % 900_000


def _standing_results(world: World, tool: str) -> list[Any]:
    return [entry.result for _, entry in world.standing(tool)]


# --------------------------------------------------------------------------------------------
# Travel

TRIPS = {
    "rossi": {
        "traveller": "A. Rossi",
        "origin": "LIS",
        "destination": "OSL",
        "city": "Oslo",
        "date": "2026-03-02",
        "nights": 3,
    },
    "okafor": {
        "traveller": "R. Okafor",
        "origin": "NBO",
        "destination": "LIS",
        "city": "Lisbon",
        "date": "2026-04-14",
        "nights": 5,
    },
}
_FARES = {
    ("LIS", "OSL"): {"TP 1352": 212.0, "SK 1822": 189.0},
    ("NBO", "LIS"): {"KQ 112": 640.0, "TP 1368": 702.0},
}


def travel_services(world: World, facts: Facts) -> dict[str, Service]:
    def search_flights(origin: str, destination: str, date: str) -> dict[str, Any]:
        """Search a route's flights on a date: the cheapest, with its fare."""
        fares = _FARES[(origin, destination)]
        flight = min(fares, key=fares.__getitem__)
        return {"flight": flight, "fare": fares[flight], "date": date}

    def book_flight(traveller: str, flight: str, date: str, loyalty: int) -> dict[str, Any]:
        """Book a seat on a flight, charging the fare: the booking and its ticket number."""
        ticket = facts["big"] or number("ticket", traveller, flight, date)
        return {"booking": ref("FL", traveller, flight, date), "ticket": ticket}

    def book_hotel(traveller: str, city: str, nights: int) -> dict[str, Any]:
        """Book a hotel room in a city for some nights."""
        return {"booking": ref("HT", traveller, city, nights)}

    def rent_car(traveller: str, city: str, days: int) -> dict[str, Any]:
        """Rent a car in a city for some days."""
        return {"booking": ref("CR", traveller, city, days)}

    def send_itinerary(
        traveller: str, *, flight: str, hotel: str, car: str, ticket: int, calendar: bool = False
    ) -> dict[str, Any]:
        """Email the traveller the itinerary of their bookings, with a calendar invite if asked."""
        tickets = [result["ticket"] for result in _standing_results(world, "book_flight")]
        if ticket not in tickets:
            raise LookupError(f"no ticket {ticket} on file")
        booked = {"flight": flight, "hotel": hotel, "car": car}
        return {"to": traveller, **booked, "ticket": ticket, "calendar": calendar}

    return {
        "search_flights": Service(search_flights),
        "book_flight": Service(book_flight, "action", undoable=True),
        "book_hotel": Service(book_hotel, "action", undoable=True),
        "rent_car": Service(rent_car, "action", undoable=True),
        "send_itinerary": Service(send_itinerary, "action"),
    }


# --------------------------------------------------------------------------------------------
# Messaging

THREADS = {
    "release": {
        "thread": "T-311",
        "channel": "#release",
        "title": "Release 4.2",
        "points": ["migrations reviewed", "rollback plan agreed"],
        "owner": "ana",
        "oncall": "ben",
    },
    "outage": {
        "thread": "T-407",
        "channel": "#incidents",
        "title": "Checkout latency",
        "points": ["cache node replaced", "p99 back under 300 ms"],
        "owner": "chen",
        "oncall": "dara",
    },
}


def messaging_services(world: World, facts: Facts) -> dict[str, Service]:
    def fetch_thread(thread: str) -> dict[str, Any]:
        """Read a thread: its title and the points agreed in it."""
        found = next(t for t in THREADS.values() if t["thread"] == thread)
        return {"thread": thread, "title": found["title"], "points": list(found["points"])}

    def draft_reply(title: str, points: list[str]) -> dict[str, Any]:
        """Draft the summary reply of a thread from its title and points."""
        return {"text": f"{title}: " + "; ".join(points) + "."}

    def post_message(channel: str, text: str) -> dict[str, Any]:
        """Post a message to a channel."""
        return {"message_id": ref("M", channel, text)}

    def get_message(message_id: str) -> dict[str, Any]:
        """Look a posted message up: its permalink."""
        posted = [result["message_id"] for result in _standing_results(world, "post_message")]
        if message_id not in posted:
            raise LookupError(f"no message {message_id}")
        return {"message_id": message_id, "permalink": f"https://chat.example/m/{message_id}"}

    def notify(user: str, link: str, urgent: bool = False) -> dict[str, Any]:
        """Notify a user of a message (``urgent`` pages them)."""
        return {"user": user, "link": link, "urgent": urgent}

    def remind(user: str, link: str) -> dict[str, Any]:
        """Remind a user of a message that awaits their reply."""
        return {"user": user, "link": link}

    return {
        "fetch_thread": Service(fetch_thread, cached=True),
        "draft_reply": Service(draft_reply),
        "post_message": Service(post_message, "action", undoable=True),
        "get_message": Service(get_message),
        "notify": Service(notify, "action"),
        "remind": Service(remind, "action"),
    }


# --------------------------------------------------------------------------------------------
# Trading

ORDERS = {
    "acme": {
        "account": "ACC-1042",
        "broker": "ACC-7781",
        "symbol": "ACME",
        "budget": 2500.0,
        "client": "r.okafor@example.com",
    },
    "globex": {
        "account": "ACC-2210",
        "broker": "ACC-7781",
        "symbol": "GLBX",
        "budget": 900.0,
        "client": "a.rossi@example.com",
    },
}
_PRICES = {"ACME": 41.5, "GLBX": 12.25}


def trading_services(world: World, facts: Facts) -> dict[str, Service]:
    def get_quote(symbol: str, budget: float) -> dict[str, Any]:
        """Quote a share: its price, and how many a budget buys at what cost."""
        price = _PRICES[symbol]
        quantity = math.floor(budget / price)
        return {"price": price, "quantity": quantity, "cost": round(quantity * price, 2)}

    def transfer(from_account: str, to_account: str, amount: float) -> dict[str, Any]:
        """Move money between accounts: the transfer's id."""
        txn_id = facts["big"] or number("txn", from_account, to_account, amount)
        return {"txn_id": txn_id, "to_account": to_account, "amount": amount}

    def account_statement(account: str, txn_id: int) -> dict[str, Any]:
        """Check an account's statement for a transfer."""
        if not any(
            result["txn_id"] == txn_id and result["to_account"] == account
            for result in _standing_results(world, "transfer")
        ):
            raise LookupError(f"no transfer {txn_id} on {account}")
        return {"txn_id": txn_id, "settled": True}

    def confirm_trade(txn_id: int, symbol: str, quantity: int) -> dict[str, Any]:
        """Confirm a trade paid by a transfer: the confirmation."""
        if txn_id not in [result["txn_id"] for result in _standing_results(world, "transfer")]:
            raise LookupError(f"no transfer {txn_id} pays for this trade")
        return {"confirmation": ref("CF", txn_id, symbol, quantity), "txn_id": txn_id}

    def send_receipt(to: str, txn_id: int, confirmation: str) -> dict[str, Any]:
        """Email the client the receipt of a trade."""
        return {"to": to, "txn_id": txn_id, "confirmation": confirmation}

    return {
        "get_quote": Service(get_quote),
        "transfer": Service(transfer, "action", undoable=True),
        "account_statement": Service(account_statement),
        "confirm_trade": Service(confirm_trade, "action", undoable=True),
        "send_receipt": Service(send_receipt, "action"),
    }


# --------------------------------------------------------------------------------------------
# Files

FOLDERS = {
    "q3": {
        "folder": "reports",
        "name": "q3-revenue",
        "versions": 2,
        "owner": "finance@example.com",
        "text": "Q3 revenue: 4.2 M EUR, up 8 %",
    },
    "audit": {
        "folder": "audits",
        "name": "vendor-audit",
        "versions": 4,
        "owner": "legal@example.com",
        "text": "Vendor audit: 2 findings, both closed",
    },
}


def files_services(world: World, facts: Facts) -> dict[str, Service]:
    def list_folder(folder: str, name: str) -> dict[str, Any]:
        """List a folder's versions of a document: the next free path, and its archive path."""
        found = next(f for f in FOLDERS.values() if f["folder"] == folder)
        version = found["versions"] + 1
        return {
            "files": [f"{folder}/{name}-v{n}.txt" for n in range(1, version)],
            "next_path": f"{folder}/{name}-v{version}.txt",
            "archive_path": f"archive/{name}-v{version}.txt",
        }

    def write_file(path: str, text: str) -> dict[str, Any]:
        """Write a file."""
        return {"path": path, "bytes": len(text.encode())}

    def copy_file(source: str, target: str) -> dict[str, Any]:
        """Copy a file."""
        if source not in [result["path"] for result in _standing_results(world, "write_file")]:
            raise LookupError(f"no file {source}")
        return {"path": target, "source": source}

    def notify_owner(owner: str, path: str) -> dict[str, Any]:
        """Tell a document's owner where its new version is."""
        return {"owner": owner, "path": path}

    return {
        "list_folder": Service(list_folder, cached=True),
        "write_file": Service(write_file, "action", undoable=True),
        "copy_file": Service(copy_file, "action", undoable=True),
        "notify_owner": Service(notify_owner, "action"),
    }
