"""Rails: observers of the plan, execute, verify loop. Rails observe; they never decide.

See docs/design.md §7.

The engine hands a :class:`RailBus` the entries of every append; the bus turns them into
:class:`RailEvent` values, one per phase boundary (:class:`RailPhase`), and gives each rail its
own copy, through a bounded queue of its own: a slow rail delays nothing. Nothing a rail
returns, mutates or raises reaches the engine or another rail. :class:`RailEvents` makes the
same events of a task's entries read back from its ledger (what ``pev.watch`` streams).

Built-in rails: :class:`LoggingRail` (structured log lines), :class:`CriteriaVerificationRail`
(an independent keyword check of the final output) and :class:`RootCauseRail` (device failures
by node and tool, across runs). :class:`ConsoleRail` prints a task's loop as it goes round, with
a live display of its running nodes on a terminal (what ``pev run`` shows; docs/cli.md). It needs
only ``rich``, a core dependency, and is imported on first use, so ``import pev.rails`` stays light.
"""

from typing import TYPE_CHECKING

from pev._lazy import lazy_names
from pev.rails._bus import RailBus, RailLike
from pev.rails._criteria import CriteriaReport, CriteriaVerificationRail
from pev.rails._event import Rail, RailEvent, RailPhase
from pev.rails._logging import LoggingRail
from pev.rails._root_cause import RootCauseRail, RootCauseSummary
from pev.rails._stream import RailEvents

if TYPE_CHECKING:
    from pev.rails._console import ConsoleRail

__all__ = [
    "ConsoleRail",
    "CriteriaReport",
    "CriteriaVerificationRail",
    "LoggingRail",
    "Rail",
    "RailBus",
    "RailEvent",
    "RailEvents",
    "RailLike",
    "RailPhase",
    "RootCauseRail",
    "RootCauseSummary",
]

# Served on first use, so that ``import pev`` does not import rich.
__getattr__ = lazy_names(__name__, {"ConsoleRail": "pev.rails._console"})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
