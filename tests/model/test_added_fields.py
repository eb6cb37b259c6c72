"""Fields the model gained for effects are written only when they are not defaults.

See docs/design.md §4.5.

A record's ``occurrence`` and ``args`` and a node's ``repeat`` came after ledgers were written
(``codec.ADDED``): at their defaults they are left out of the JSON, so an older value encodes, and
hashes, exactly as it did; set, they are written and read back.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.support.builders import record

from pev import codec
from pev.model import JsonObject, PlanNode

NODE = PlanNode("a", "post the letter", tool="post", args={"to": "ada"})
RECORD = record("r1", "a", tool="post")

# (the value at its defaults, the same value with the added field set, the field's JSON name)
ADDED = [
    pytest.param(RECORD, replace(RECORD, occurrence=2), "occurrence", id="record-occurrence"),
    pytest.param(RECORD, replace(RECORD, args=JsonObject({"to": "ada"})), "args", id="record-args"),
    pytest.param(NODE, replace(NODE, repeat=True), "repeat", id="node-repeat"),
]


@pytest.mark.parametrize(("default", "changed", "name"), ADDED)
def test_an_added_field_is_left_out_at_its_default(
    default: object, changed: object, name: str
) -> None:
    """At its default an added field is not in the JSON; set, it is."""
    assert f'"{name}":' not in codec.dumps(default)
    assert f'"{name}":' in codec.dumps(changed)


@pytest.mark.parametrize(("default", "changed", "name"), ADDED)
def test_an_added_field_reads_back(default: object, changed: object, name: str) -> None:
    """Written or left out, the value reads back equal."""
    for value in (default, changed):
        assert codec.loads(codec.dumps(value), type(value)) == value
