"""`pev demo`: the simulator demo (docs/demo.md), one task per fault, each written to the ledger.

The simulator is the ``sim`` extra: this module imports :mod:`pev.sim` only when the demo runs,
so every other command works without pybullet.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from pev.cli._progress import ConsoleRail
from pev.cli._render import chain_report, timeline
from pev.experience import LessonBook
from pev.ledger import Ledger, TaskState
from pev.model import EvidencePhase

__all__ = ["DEMO_FAULTS", "run_demos", "save_images"]

DEMO_FAULTS = ("none", "slip", "knock", "timeout", "dead-joint", "camera")
"""The values of :class:`pev.sim.Fault`, in the order the demo runs them; listed here so that
the command line can offer them without importing the simulator (a test keeps them in step)."""

_IMAGE_KINDS = ("image", "segmentation")
# A rule spans the terminal; written to a pipe or a file (laid out for 200 columns, or COLUMNS)
# it is at most this wide.
_RULE_WIDTH = 100


def _rule(console: Console, title: str = "") -> None:
    """A horizontal rule, titled on the left, as wide as the terminal (or ``_RULE_WIDTH``)."""
    width = console.width if console.is_terminal else min(console.width, _RULE_WIDTH)
    console.print(Rule(title, align="left"), width=width)


async def run_demos(
    ledger: Ledger,
    faults: Sequence[str],
    *,
    seed: int,
    console: Console,
    images: Path,
    approve: bool = False,
) -> bool:
    """Run one demo task per fault and print each one's timeline and chain check.

    The camera images of the last task are saved under ``images``. With ``approve``, every
    revision that moves the arm waits for a person's ``pev approve`` (or ``pev reject``), and
    the task's progress is printed live meanwhile.

    Returns:
        True if every task took its fault's documented path and its ledger verified.

    Raises:
        ImportError: The ``sim`` extra is not installed (the message says how to install it).
    """
    from pev.sim import FAULT_PATHS, Fault, path_taken, run_demo  # noqa: PLC0415 - the extra

    all_expected = True
    state: TaskState | None = None
    for name in faults:
        fault = Fault(name)
        expected = FAULT_PATHS[fault]
        _rule(console, f"[bold]{fault}[/]")
        console.print(Text(expected.story, style="italic"))
        # The demo learns: recovered slips seeded differently promote a lesson (`pev lessons`).
        result = await run_demo(
            fault,
            seed=seed,
            store=ledger.store,
            experience=LessonBook(ledger.store),
            approve=approve,
            rails=[ConsoleRail(console)] if approve else (),
        )
        state = await ledger.state(result.task_id)
        console.print(timeline(state))
        report = await ledger.verify(result.task_id)
        console.print(chain_report(report))
        taken = path_taken(state)
        followed = taken == expected
        if followed:
            console.print(Text.assemble(("as documented: ", "bold green"), taken.describe()))
        else:
            console.print(Text.assemble(("NOT as documented: ", "bold red"), taken.describe()))
            console.print(Text(f"  documented: {expected.describe()}"))
        all_expected &= report.ok and followed
    if state is not None:
        saved = save_images(state, images / str(faults[-1]))
        _rule(console)
        console.print(f"camera images of the last task ({faults[-1]}): {saved}")
    return all_expected


def save_images(state: TaskState, folder: Path) -> Path:
    """Write the task's camera images (colour and segmentation PNGs) into ``folder``.

    Files are named ``r<revision>-<phase>-<kind>.png``; an earlier demo's files there are
    replaced.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("r*-*-*.png"):
        old.unlink()
    for evidence in state.evidence:
        if evidence.kind in _IMAGE_KINDS and evidence.artifact is not None:
            phase = EvidencePhase(evidence.phase)
            path = folder / f"r{evidence.revision}-{phase}-{evidence.kind}.png"
            path.write_bytes(evidence.artifact)
    return folder
