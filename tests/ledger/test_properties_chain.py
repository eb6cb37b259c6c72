"""Properties of the hash chain over generated histories: edits, drops and swaps are caught."""

from __future__ import annotations

import typing
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.support.histories import HISTORIES, TASK, Story, stories

from pev import codec
from pev.errors import CodecError
from pev.ledger import LedgerEntry, verify_chain


def _verify(story_entries: list[LedgerEntry] | tuple[LedgerEntry, ...], story: Story) -> Any:
    return verify_chain(
        TASK,
        list(story_entries),
        head_count=len(story.entries),
        head_hash=story.entries[-1].hash,
    )


@HISTORIES
@given(stories())
def test_written_chain_verifies(story: Story) -> None:
    """A history as written verifies, with and without the index's head."""
    assert verify_chain(TASK, story.entries).ok
    assert _verify(story.entries, story).ok


def _leaves(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))]
    return [] if value is None else [path]


def _edited(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    assert isinstance(value, str)
    return value + "~"


@HISTORIES
@given(stories(), st.data())
def test_edited_field_is_detected(story: Story, data: st.DataObject) -> None:
    """Editing any one field of one stored entry is caught at that entry (or cannot be read)."""
    index = data.draw(st.integers(0, len(story.entries) - 1), label="entry")
    encoded = typing.cast("dict[str, Any]", codec.encode(story.entries[index]))
    leaves = _leaves(encoded)
    path = data.draw(st.sampled_from(leaves), label="field")
    holder: Any = encoded
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = _edited(holder[path[-1]])
    try:
        tampered = codec.decode(encoded, LedgerEntry)
    except CodecError:
        return  # a store reports an entry it cannot read as corrupt
    entries = list(story.entries)
    entries[index] = tampered
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == index + 1


@HISTORIES
@given(stories(), st.data())
def test_dropped_entry_is_detected(story: Story, data: st.DataObject) -> None:
    """Dropping any one entry, the last included, is caught where the gap starts."""
    index = data.draw(st.integers(0, len(story.entries) - 1), label="dropped")
    entries = [e for i, e in enumerate(story.entries) if i != index]
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == index + 1


@HISTORIES
@given(stories(), st.data())
def test_swapped_entries_are_detected(story: Story, data: st.DataObject) -> None:
    """Swapping any two entries is caught at the first of them."""
    if len(story.entries) < 2:
        return
    first = data.draw(st.integers(0, len(story.entries) - 2), label="first")
    second = data.draw(st.integers(first + 1, len(story.entries) - 1), label="second")
    entries = list(story.entries)
    entries[first], entries[second] = entries[second], entries[first]
    report = _verify(entries, story)
    assert not report.ok
    assert report.first_bad_seq == first + 1
