"""SIGKILL after every event boundary of a run with actions, then resume (docs/engine.md §5.4).

The task (tests/support/crash.py) surveys, then reserves and labels at once (two actions that
deliver to "the other end", a file only the tools write), then reports; its verifier blames the
label once, so a second label is sent (``repeat=True``) in a second revision. A child process
runs it on an SQLite ledger and kills itself with SIGKILL right after the store commits its
``k``-th event (an append is atomic: a kill inside one lands after it), for every ``k`` from 1
to the events of a crash-free run; and right after each delivery, before the ledger hears of
it. A fresh process then resumes
the task with its components rebuilt from their import paths. For every case: no key reaches the
other end twice, no node is dispatched again and no unknown action is repeated, every event
committed before the kill is still there and the chain verifies, and the task ends as a
crash-free run does, or honestly short of it with an action of unknown outcome.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.support.crash import Crashed, Shop, summary_line

pytestmark = pytest.mark.slow

# Children run a few at a time: each spends most of its life starting Python and in fsync.
AT_ONCE = 3


@pytest.mark.timeout(240)
def test_a_kill_after_any_event_or_delivery_loses_nothing_and_sends_nothing_twice(
    tmp_path: Path,
) -> None:
    """Kill at each event boundary and after each delivery, resume: nothing lost or re-sent."""
    reference = Shop.in_folder(tmp_path / "reference")
    ran = reference.run()
    assert (ran.code, ran.out) == (0, "succeeded/passed"), ran.err
    crash_free = reference.ledger()
    events = len(crash_free.entries)
    assert (crash_free.ok, len(crash_free.state.revisions)) == (True, 2)  # a replan happened
    deliveries = sum(reference.sent().values())
    assert deliveries == 3  # reserve, label, and label again

    kills = [(f"event {k}", {"kill_after_event": k}) for k in range(1, events + 1)]
    kills += [(f"send {n}", {"kill_after_send": n}) for n in range(1, deliveries + 1)]

    def case(index: int) -> Crashed:
        name, kill = kills[index]
        shop = Shop.in_folder(tmp_path / f"case-{index}")
        return Crashed.of(shop, name, reference=ran.out, **kill)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        cases = list(pool.map(case, range(len(kills))))

    print(f"\n{summary_line(cases, events)}")
    problems = [problem for case_ in cases for problem in case_.problems()]
    assert not problems, "\n".join(problems)
