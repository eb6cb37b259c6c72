"""The words a lesson may use: general recovery words, and nothing that names a task's specifics.

The sanitiser (``_sanitize.py``) checks every word of a lesson against this allow-list: a word
outside it drops the lesson. A deny-list can never be complete (there is always one more colour,
brand, name, unit or language), while the advice a lesson gives needs only a few hundred words:
pev's own vocabulary (root causes, action kinds, phases, statuses), the verbs and nouns of
planning, acting and checking, and English function words.

Left out on purpose, because each can carry a task's specifics: numbers and counts in words
(``two``, ``twice``, ``second``, ``third``, ``half``, ``dozen``; ``one``, ``once``, ``first``
and ``last`` stay: advice needs them and they identify nothing), units and times of day,
colours, materials, sizes, shapes and other attributes of objects, directions and positions
(``left``, ``top``, ``beside``), kinds of objects, rooms and furniture, people's names and
roles, brands, and the words of credentials (``password``, ``pin``, ``key``, ``token``).
"""

from __future__ import annotations

import re

from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger._events import RevisionKind
from pev.ledger._phases import TaskPhase
from pev.model import (
    CriterionStatus,
    Effect,
    RecordStatus,
    Reliability,
    VerdictStatus,
    VerificationMode,
)

__all__ = ["HYPHEN_PREFIXES", "LESSON_VOCABULARY", "inflections"]

# Words that take no endings: articles, pronouns, prepositions, conjunctions, auxiliaries and
# adverbs of time, degree and order. Inflecting them would admit nouns ("can" gives "cans").
_FUNCTION_WORDS = """
a an the this that these those it its itself they them their themselves there here you your
yourself we our us one ones some any all each every both either neither none no not nor and or but
if then else than so as at by for from in into of off on onto out over to up down with within
without about after before again against along around between during until while when whenever
where which who what whatever why how however whether because since though although unless once
instead rather also too very only just even still yet already always never often sometimes usually
rarely now later soon first last next previous earlier more most less least few fewer several many
much enough other another same such own is are was were be been being do does did done doing has
have had having can cannot could will would should may might must let back away ahead further
through toward towards anything something nothing everything someone anyone else whole entire per
via
"""

# Forms no rule makes: irregular forms, contractions, negatives, comparatives and compounds.
_WHOLE_WORDS = """
don't doesn't didn't isn't aren't wasn't weren't hasn't haven't hadn't can't couldn't won't
wouldn't shouldn't it's that's what's there's let's went gone made took taken gave given got gotten
kept knew known saw seen said sent held found began begun broke broken brought built caught chose
chosen fell fallen led lost meant ran thought told understood shown wrote written became came spent
undone stuck sought hidden unknown unclear unsure unexpected unexpectedly unreliable unstable
unsafe uncertain unlikely unavailable unchanged unable untested unverified unsatisfied incorrect
invalid inconsistent inconclusive impossible irrelevant independent independently double-check
double-checked double-checking trade-off trade-offs astray anew repeatedly redo redone truly fully
almost nearly mostly partly simpler simplest safer safest quicker slower newer newest older oldest
fresher clearer closer observer observers checker
"""

# Bases that take the regular endings (-s, -ed, -ing, -ly), and "re" before them.
_BASE_WORDS = """
accept act action add additional adjust advice advise affect agree aim allow alternative ambiguity
ambiguous answer apply approach appropriate approval approve argument arrive ask assume assumption
attempt attention avoid bad become begin best better blame blind break brief bring budget build
busy call cancel careful carry case catch cause cautious certain change check choice choose clarify
clear close collect come common compare complete complex condition confidence confirm confirmation
consider consistent constraint contain context continue contract control correct correction cost
count create criteria criterion current data deadline decide decision default depend dependency
describe detail detect determine device differ difference different direct discrepancy drop early
effect empty end ensure environment error escalate estimate event evidence exact examine exist
expect expectation explain explicit extra fact fail failure fall false fault feedback fetch file
fill final find finish fit fix follow fresh full gather general get give go goal good grasp grip
gripper guess guidance handle happen help history hold human idea identify idle ignore immediate
important include indirect infer information initial input inspect inspection instruction intend
interpret issue item job judge keep kind know late latest lead learn leave lesson level likely
limit load local locate location log look main make match mean measure message method mind mismatch
miss mistake mode model modify monitor move necessary need new note notice object observation
observe obtain occur old open operator option order original outcome output part partial pass patch
path pause people perception perform permission person phase pick piece place plan planner pose
position possible precede precise precondition prefer prepare prerequisite present previous prior
problem proceed process produce progress proof proper prove provide pull push put query question
quick raise rate reach read ready real reason recent record recover reduce refer reject release
relevant reliable rely remain remember remove repair repeat replace reply report request require
reset resolve resource respond response result resume retry return reuse review revise risk robust
rule run safe say scene search see seek seem select send sensor separate sequence server service
set settle show side signal similar simple single situation skip slip slow solve source specific
split stable stage stale start state status stay steady step stop store strategy submit subsequent
succeed success successful sufficient suggest summary supply support sure suspect switch system
take task tell test thing think thorough time timeout tool track treat trigger true trust try turn
type understand undo unsuccessful update usage use useful user valid validate validation value
verdict verification verifier verify view visible wait want warn watch way work worker world worse
worst write wrong
"""

# Prefixes a hyphen joins to a known word: "re-grasp", "pre-check", "non-empty".
HYPHEN_PREFIXES = frozenset({"re", "pre", "non"})
"""Prefixes that may stand before a hyphen and a known word."""

# pev's own vocabulary: its closed sets of values, split into words ("plan_or_answer_error").
_PEV_ENUMS = (
    RootCause,
    TerminalReason,
    TaskStatus,
    TaskPhase,
    RevisionKind,
    Effect,
    VerdictStatus,
    CriterionStatus,
    Reliability,
    RecordStatus,
    VerificationMode,
)
_PEV_EXTRA = "finish local_replan global_replan accept_partial"

_VOWELS = frozenset("aeiou")


def _doubles(base: str) -> bool:
    """Whether a base may double its last consonant: stop, stopped; plan, planning."""
    return (
        len(base) >= 3
        and base[-1] not in _VOWELS
        and base[-1] not in "wxy"
        and base[-2] in _VOWELS
        and base[-3] not in _VOWELS
    )


def inflections(base: str) -> frozenset[str]:
    """``base`` with its regular endings: -s, -ed, -ing, -ly and -ily, and the same after "re".

    The rules are generous (both "visited" and "visitted"): a form nobody writes admits
    nothing, and a form that is a real word is still a form of a general word.
    """
    forms = {base}
    if base.endswith(("s", "x", "z", "ch", "sh")):
        forms.add(base + "es")
    if len(base) > 2 and base.endswith("y") and base[-2] not in _VOWELS:
        stem = base[:-1]
        forms.update({stem + "ies", stem + "ied", base + "ing", stem + "ily"})
    else:
        forms.add(base + "s")
    if base.endswith("e"):
        forms.update({base + "d", base[:-1] + "ing", base + "ly"})
        if base.endswith("le"):
            forms.add(base[:-1] + "y")
    else:
        forms.update({base + "ed", base + "ing", base + "ly"})
    if _doubles(base):
        forms.update({base + base[-1] + "ed", base + base[-1] + "ing"})
    return frozenset(forms | {"re" + form for form in forms})


def _build() -> frozenset[str]:
    words = set(_FUNCTION_WORDS.split()) | set(_WHOLE_WORDS.split())
    for base in _BASE_WORDS.split():
        words |= inflections(base)
    values = [str(member) for enum in _PEV_ENUMS for member in enum]
    for value in (*values, *_PEV_EXTRA.split()):
        words.update(part for part in re.split(r"_+", value) if part)
    return frozenset(words)


LESSON_VOCABULARY: frozenset[str] = _build()
"""Every word a lesson may use, lower-case, with its regular endings.

A lesson may also name its own tool (the sanitiser's ``allowed``), with the same endings.
"""
