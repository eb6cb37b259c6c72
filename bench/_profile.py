"""cProfile's own time grouped by where the code lives: the categories the engine benches share."""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass

Func = tuple[str, int, str]
# What pstats keeps per function: calls, primitive calls, own time, cumulative time, callers.
Row = tuple[int, int, float, float, dict[Func, tuple[int, int, float, float]]]

SEALING_TEXT = "sealing: event text (canonical JSON, the chain's header)"
SEALING_HASH = "sealing: sha256 / hmac"
ASYNCIO = "asyncio"
OTHER_PEV = "other pev code"
OTHER = "other (the standard library, builtins)"

# Where a function's own time is counted, by "file:function"; the first pattern that matches
# wins. A builtin or generated function (isinstance, a dataclass's __init__) that matches none is
# charged to its callers instead, in proportion to the time each spent in it.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        (
            "sealing: datetime text",
            r"pev/(_canonical|_native)\.py:\w*time|'(isoformat|strftime|astimezone|utcoffset)'",
        ),
        (
            SEALING_TEXT,
            r"pev/(_canonical|_native|_jcs|_json|codec)\.py:|ledger/_chain\.py:(?!seal_of)|<orjson\.",
        ),
        (SEALING_HASH, r"ledger/_chain\.py:seal_of|_hashlib|hmac"),
        ("the fold (pev.ledger._state)", r"ledger/_state\.py:"),
        ("round bookkeeping (pev.engine._round)", r"engine/_round\.py:"),
        (
            "the store shell (pev.stores, pev.ledger._ledger, the index row)",
            r"pev/stores/|ledger/_(ledger|summary)\.py:",
        ),
        (ASYNCIO, r"asyncio/|_asyncio|_contextvars|selectors\.py|epoll"),
        (OTHER_PEV, r"/pev/"),
    )
)


def category(func: Func) -> str:
    """The category a function's own time counts in."""
    where = f"{func[0]}:{func[2]}"
    return next((name for name, pattern in CATEGORIES if pattern.search(where)), OTHER)


def own_times(raw: Mapping[Func, Row]) -> dict[Func, float]:
    """Each function's own time, with that of uncategorised builtins charged to their callers."""
    owned: dict[Func, float] = {}

    def charge(func: Func, seconds: float, depth: int) -> None:
        callers = raw[func][4] if func in raw else {}
        if category(func) == OTHER and func[0] in ("~", "<string>") and callers and depth < 8:
            spent = sum(row[2] for row in callers.values())
            if spent > 0:
                for caller, row in callers.items():
                    charge(caller, seconds * row[2] / spent, depth + 1)
                return
        owned[func] = owned.get(func, 0.0) + seconds

    for func, row in raw.items():
        charge(func, row[2], 0)
    return owned


@dataclass(frozen=True, slots=True)
class Shares:
    """A profile's own time by category, as shares of the whole."""

    by_category: dict[str, float]
    other_pev: list[tuple[str, float]]  # the largest modules of "other pev code", with shares

    @property
    def sealing(self) -> float:
        """The three sealing categories together."""
        return sum(share for name, share in self.by_category.items() if name.startswith("sealing"))


def raw_stats(stats: pstats.Stats) -> dict[Func, Row]:
    """What pstats keeps per function (an undocumented attribute, stable for decades)."""
    raw: dict[Func, Row] = stats.stats  # type: ignore[attr-defined]
    return raw


def shares_of(stats: pstats.Stats, *, largest: int = 5) -> Shares:
    """The profile's own time by category, and the largest modules of other pev code."""
    owned = own_times(raw_stats(stats))
    total = sum(owned.values())
    by_category = {name: 0.0 for name, _ in CATEGORIES} | {OTHER: 0.0}
    modules: dict[str, float] = {}
    for func, seconds in owned.items():
        name = category(func)
        by_category[name] += seconds / total
        if name == OTHER_PEV:
            module = func[0].rsplit("/pev/", 1)[-1]
            modules[module] = modules.get(module, 0.0) + seconds / total
    return Shares(by_category, sorted(modules.items(), key=lambda item: -item[1])[:largest])


def profiled(work: Callable[[], Coroutine[object, object, object]]) -> pstats.Stats:
    """cProfile of `asyncio.run(work())`."""
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(work())
    profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def shares_table(
    shares: Shares, *, title: str, unit: str, whole: float, floors: Mapping[str, float]
) -> list[str]:
    """The shares as Markdown lines: each category's share, what it stands for, and its floor.

    Args:
        shares: The profile's shares.
        title: The first column's heading.
        unit: What `whole` is counted in ("µs per node").
        whole: The figure the shares are shares of, measured without the profiler.
        floors: The least each category could cost, in `unit`, where it has a floor (none:
            no column).
    """
    floor_head, rule = (f" the primitives' floor, {unit} |", "---|") if floors else ("", "")
    lines = [f"| {title} | share | {unit} |{floor_head}", f"|---|---|---|{rule}"]

    def floor(value: float | None) -> str:
        return "" if not floors else " — |" if value is None else f" {value:.1f} |"

    for name, share in shares.by_category.items():
        lines.append(f"| {name} | {share:.0%} | {share * whole:.1f} |{floor(floors.get(name))}")
    lines += [
        f"| in all | 100% | {whole:.1f} |{floor(sum(floors.values()))}",
        "",
        (
            f"Sealing in all: {shares.sealing:.0%} ({shares.sealing * whole:.1f} {unit}). The "
            "largest parts of other pev code: "
            + ", ".join(f"`{module}` {share:.0%}" for module, share in shares.other_pev)
            + "."
        ),
    ]
    return lines
