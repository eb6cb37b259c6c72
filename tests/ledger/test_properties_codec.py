"""Properties of the codec: every event, and every entry of a generated history, round-trips."""

from __future__ import annotations

import typing

from hypothesis import given, settings
from tests.support.histories import HISTORIES, Story, stories
from tests.support.strategies import EVENT_STRATEGIES, events

from pev import codec
from pev.ledger import Event, LedgerEntry


def test_codec_strategies_cover_every_event_kind() -> None:
    """There is a generator for every member of the Event union."""
    assert set(EVENT_STRATEGIES) == set(typing.get_args(Event))


@settings(max_examples=300)
@given(events)
def test_every_event_round_trips_through_the_codec(event: Event) -> None:
    """dumps then loads into the Event union gives an equal event with the same encoding."""
    text = codec.dumps(event)
    back = codec.loads(text, Event)
    assert type(back) is type(event)
    assert back == event
    assert codec.dumps(back) == text


@HISTORIES
@given(stories())
def test_ledger_entries_round_trip_through_the_codec(story: Story) -> None:
    """Every stored entry decodes to an equal entry whose encoding is unchanged."""
    for entry in story.entries:
        text = codec.dumps(entry)
        back = codec.loads(text, LedgerEntry)
        assert back == entry
        assert codec.dumps(back) == text
