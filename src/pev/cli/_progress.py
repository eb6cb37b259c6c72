"""Live progress for `pev run` and `pev resume`: the public console rail, and the result line.

The rail itself is :class:`pev.rails.ConsoleRail` (public, so that a program of yours prints a
run as `pev run` does); here is only what the command adds after it: the result line.
"""

from __future__ import annotations

from rich.text import Text

from pev.engine import RunResult
from pev.rails._console import STATUS_STYLE, ConsoleRail, progress_line, task_heading

__all__ = ["ConsoleRail", "progress_line", "result_line"]


def result_line(result: RunResult) -> Text:
    """The last line of `pev run` and `pev resume`: the task and how it ended."""
    line = task_heading(str(result.task_id))
    line.append(": ")
    line.append(f"{result.status}/{result.reason}", style=STATUS_STYLE[result.status])
    if result.detail and not result.ok:
        line.append(f"  {result.detail}", style="dim")
    return line
