"""A RecoveryPolicy refuses, when it is built, values no task can run with.

See docs/engine.md, "Failures that speak".
"""

from __future__ import annotations

import math

import pytest

from pev import codec
from pev.errors import CodecError, PolicyError, UsageError
from pev.policy import MAX_TIMEOUT_S, RecoveryPolicy

TIMEOUTS = ("replan_timeout_s", "node_timeout_s", "verify_timeout_s", "task_timeout_s", "lease_s")
BAD_SECONDS = [
    pytest.param(1e300, id="1e300"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus-inf"),
    pytest.param(math.nan, id="nan"),
    pytest.param(-1, id="negative"),
    pytest.param(0, id="zero"),
    pytest.param(MAX_TIMEOUT_S + 1, id="past-a-year"),
    pytest.param(10**400, id="int-past-float"),
    pytest.param(True, id="bool"),
    pytest.param("30", id="text"),
]


@pytest.mark.parametrize("name", TIMEOUTS)
@pytest.mark.parametrize("value", BAD_SECONDS)
def test_a_bad_timeout_is_a_usage_error_naming_the_field(name: str, value: object) -> None:
    """Each timeout must be finite, above zero and at most a year; the error names the field."""
    with pytest.raises(UsageError, match=f"RecoveryPolicy.{name} ") as raised:
        RecoveryPolicy(**{name: value})  # type: ignore[arg-type]
    assert isinstance(raised.value, PolicyError)
    assert raised.value.field == name
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("name", TIMEOUTS)
def test_a_timeout_of_a_year_is_accepted(name: str) -> None:
    """A year is the longest timeout; it is stored as a float."""
    policy = RecoveryPolicy(**{name: int(MAX_TIMEOUT_S)})
    assert getattr(policy, name) == MAX_TIMEOUT_S


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("max_replans", -1, id="negative-replans"),
        pytest.param("max_replans", 10**20, id="huge-replans"),
        pytest.param("local_limit", -1, id="negative-local-limit"),
        pytest.param("max_parallel", 0, id="no-parallel"),
        pytest.param("max_nodes", 0, id="no-nodes"),
        pytest.param("max_nodes", 2.5, id="fractional-nodes"),
        pytest.param("max_value_depth", 0, id="no-depth"),
        pytest.param("max_value_depth", 10_000, id="depth-past-the-codec"),
        pytest.param("max_value_bytes", 0, id="no-bytes"),
        pytest.param("max_value_bytes", math.inf, id="infinite-bytes"),
        pytest.param("max_parallel", True, id="bool"),
    ],
)
def test_a_bad_count_is_a_usage_error_naming_the_field(name: str, value: object) -> None:
    """Counts are whole numbers within a sane range; the error names the field and the range."""
    with pytest.raises(
        PolicyError, match=f"RecoveryPolicy.{name} must be a whole number"
    ) as raised:
        RecoveryPolicy(**{name: value})  # type: ignore[arg-type]
    assert raised.value.field == name


def test_a_policy_error_is_also_a_value_error() -> None:
    """Callers that caught ValueError from a policy still catch it."""
    with pytest.raises(ValueError, match="replan_timeout_s"):
        RecoveryPolicy(replan_timeout_s=math.inf)


def test_a_huge_integer_is_shown_by_its_size() -> None:
    """The error names a huge integer by its size instead of printing (or failing to print) it."""
    with pytest.raises(PolicyError, match="an integer of 1329 bits"):
        RecoveryPolicy(max_nodes=10**400)


def test_the_value_limits_default_to_64_levels_and_a_mebibyte() -> None:
    """max_value_depth and max_value_bytes have defaults, and form the policy's value limits."""
    limits = RecoveryPolicy().value_limits
    assert (limits.max_depth, limits.max_bytes) == (64, 1 << 20)
    assert RecoveryPolicy(max_value_depth=8, max_value_bytes=100).value_limits.max_depth == 8


def test_the_default_policy_encodes_as_before_the_limits_existed() -> None:
    """New fields at their defaults stay out of the JSON, so older task_created events keep
    their bytes and hashes."""
    assert set(codec.encode(RecoveryPolicy())) == {  # type: ignore[call-overload]
        "max_replans",
        "local_limit",
        "replan_timeout_s",
        "node_timeout_s",
        "verify_timeout_s",
        "task_timeout_s",
        "max_parallel",
        "max_nodes",
    }


def test_a_changed_limit_is_encoded_and_read_back() -> None:
    """A limit that is not the default is stored with the policy and read back the same."""
    policy = RecoveryPolicy(max_value_depth=10, max_value_bytes=4096)
    assert codec.loads(codec.dumps(policy), RecoveryPolicy) == policy


def test_a_stored_policy_out_of_range_is_a_codec_error() -> None:
    """A ledger holding a policy no task can run with fails to decode, naming the field."""
    with pytest.raises(CodecError, match="replan_timeout_s"):
        codec.decode({"replan_timeout_s": 1e300}, RecoveryPolicy)
