"""Properties of the fold over generated histories: replay, prefixes, endings, revisions.

The histories come from ``tests.support.histories``: every one is a history the engine could
have written.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.histories import HISTORIES, Story, stories

from pev import codec
from pev.ledger import LedgerEntry, apply, replay


@settings(max_examples=150, deadline=None)
@given(stories())
def test_driver_writes_only_histories_the_fold_accepts(story: Story) -> None:
    """Replaying what the machine functions wrote gives the state the driver folded."""
    assert replay(story.entries) == story.states[-1]
    assert story.states[-1].event_count == len(story.entries)
    assert story.states[-1].updated_at == story.entries[-1].at


@HISTORIES
@given(stories())
def test_replay_is_deterministic(story: Story) -> None:
    """Replaying the same entries twice, or their decoded copies, gives equal states."""
    decoded = [codec.loads(codec.dumps(entry), LedgerEntry) for entry in story.entries]
    assert replay(story.entries) == replay(list(story.entries)) == replay(decoded)


@HISTORIES
@given(stories(), st.data())
def test_fold_is_prefix_consistent(story: Story, data: st.DataObject) -> None:
    """replay of the first k entries is the k-th folded state, and folding the rest completes it."""
    k = data.draw(st.integers(min_value=1, max_value=len(story.entries)), label="k")
    prefix = replay(story.entries[:k])
    assert prefix == story.states[k - 1]
    state = prefix
    for entry in story.entries[k:]:
        state = apply(state, entry.event, at=entry.at)
    assert state == replay(story.entries)


@HISTORIES
@given(stories())
def test_terminal_histories_end_with_task_finished(story: Story) -> None:
    """A history whose task ended has task_finished as its last event and nowhere else."""
    kinds = [entry.event.kind for entry in story.entries]
    if story.states[-1].terminal:
        assert kinds[-1] == "task_finished"
    assert "task_finished" not in kinds[:-1]


@HISTORIES
@given(stories())
def test_revisions_are_numbered_one_by_one(story: Story) -> None:
    """Revision numbers in any history are 1, 2, 3, ... and replans stay within the budget."""
    state = story.states[-1]
    assert [r.number for r in state.revisions] == list(range(1, len(state.revisions) + 1))
    assert state.replans_used <= state.policy.max_replans
