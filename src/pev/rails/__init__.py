"""Rails: observers of the plan, execute, verify loop. Rails observe; they never decide.

See docs/design.md §7.

The engine hands a :class:`RailBus` the entries of every append; the bus turns them into
:class:`RailEvent` values, one per phase boundary (:class:`RailPhase`), and gives each rail its
own copy, through a bounded queue of its own: a slow rail delays nothing. Nothing a rail
returns, mutates or raises reaches the engine or another rail. :class:`RailEvents` makes the
same events of a task's entries read back from its ledger (what ``pev.watch`` streams).

Built-in rails: :class:`LoggingRail` (structured log lines), :class:`CriteriaVerificationRail`
(an independent keyword check of the final output) and :class:`RootCauseRail` (device failures
by node and tool, across runs).
"""

from pev.rails._bus import RailBus, RailLike
from pev.rails._criteria import CriteriaReport, CriteriaVerificationRail
from pev.rails._event import Rail, RailEvent, RailPhase
from pev.rails._logging import LoggingRail
from pev.rails._root_cause import RootCauseRail, RootCauseSummary
from pev.rails._stream import RailEvents

__all__ = [
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
