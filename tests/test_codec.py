"""The codec: pev values to JSON and back, losslessly and strictly."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.strategies import (
    contracts,
    evidences,
    json_objects,
    plans,
    records,
    results,
    texts,
    verdicts,
)

from pev import codec
from pev.errors import CodecError, PevError
from pev.model import (
    DeviceFailure,
    Effect,
    Evidence,
    EvidenceId,
    EvidencePhase,
    ExecutionRecord,
    JsonObject,
    NodeResult,
    Plan,
    PlanNode,
    RecordId,
    Success,
    TaskId,
    Verdict,
    VerdictStatus,
    VerificationContract,
    VerifierFailure,
    canonical_json,
    freeze_json,
)
from pev.policy import RecoveryPolicy

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

# Each value strategy with the type the codec decodes it into.
VALUES = st.one_of(
    plans.map(lambda v: (v, Plan)),
    verdicts.map(lambda v: (v, Verdict)),
    records.map(lambda v: (v, ExecutionRecord)),
    evidences.map(lambda v: (v, Evidence)),
    results.map(lambda v: (v, NodeResult)),
    contracts.map(lambda v: (v, VerificationContract)),
)


def _canonical(text: str) -> str:
    """Canonical JSON, written independently of pev."""
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---- round trips -----------------------------------------------------------------------------


@given(VALUES)
def test_decode_undoes_encode(value_and_type: tuple[object, Any]) -> None:
    """decode(encode(x)) == x for every kind of model value."""
    value, into = value_and_type

    assert codec.decode(codec.encode(value), into) == value


@given(VALUES)
def test_loads_undoes_dumps(value_and_type: tuple[object, Any]) -> None:
    """loads(dumps(x)) == x, through text."""
    value, into = value_and_type

    assert codec.loads(codec.dumps(value), into) == value


@given(VALUES)
def test_dumps_is_canonical(value_and_type: tuple[object, Any]) -> None:
    """dumps writes sorted keys with no whitespace, and re-encoding gives the same text."""
    value, into = value_and_type
    text = codec.dumps(value)

    assert text == _canonical(text)
    assert codec.dumps(codec.loads(text, into)) == text


@given(VALUES)
def test_dumps_is_the_canonical_json_of_encode(value_and_type: tuple[object, Any]) -> None:
    """dumps, which writes text directly, gives exactly the canonical JSON of encode's output."""
    value, _ = value_and_type

    assert codec.dumps(value) == canonical_json(codec.encode(value))


# Integers of any size a ledger holds (up to MAX_INTEGER_DIGITS digits), nested in JSON values.
EXACT_INTEGERS = st.recursive(
    st.integers(
        min_value=-(10**codec.MAX_INTEGER_DIGITS - 1), max_value=10**codec.MAX_INTEGER_DIGITS - 1
    )
    | st.sampled_from([2**53, -(2**53) - 1, 2**63 - 1, 2**64 + 1, 9876543210123456]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=10,
)


@given(EXACT_INTEGERS)
def test_integers_of_any_size_round_trip_through_jcs_text(value: object) -> None:
    """loads(dumps_jcs(x), jcs=True) gives every integer back exactly, an int to the last digit."""
    frozen = freeze_json(value)
    back: object = codec.loads(codec.dumps_jcs(frozen), object, jcs=True)

    assert back == frozen
    assert canonical_json(back) == canonical_json(frozen)  # 1 and 1.0 differ in this form


@pytest.mark.parametrize("value", [9876543210123456, 2**70, -(2**64) - 1, 10**39 + 7], ids=str)
def test_a_big_integer_round_trips_in_a_typed_value(value: int) -> None:
    """A node's output and its plan args keep an integer beyond 2**53 through the ledger's text."""
    result = Success(value={"id": value, "ids": [value, -value]})
    node = PlanNode("a", args={"id": value})

    assert codec.loads(codec.dumps_jcs(result), NodeResult, jcs=True) == result
    assert codec.loads(codec.dumps_jcs(node), PlanNode, jcs=True).args["id"] == value


class _Colour(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


class _Name(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(
            {"b": _Colour.RED, 2: [1.5, None, True], "a": (_Level.HIGH,)}, id="mixed-keys"
        ),
        pytest.param(frozenset({"b", "a", "c"}), id="set"),
        pytest.param({_Name("k"): _Name('say "hi"\n')}, id="str-subclass"),
        pytest.param(b"\x00\xffbytes", id="bytes"),
        pytest.param(
            datetime(2024, 5, 1, 14, 30, 1, 5, tzinfo=timezone(timedelta(hours=2))), id="tz"
        ),
        pytest.param(T0.replace(microsecond=7), id="utc-micro"),
        pytest.param(MappingProxyType({"z": "é", "a": "\u2028"}), id="read-only-mapping"),
        pytest.param(((), {}, [], JsonObject()), id="empty-containers"),
        pytest.param(10**30, id="big-int"),
    ],
)
def test_dumps_matches_encode_on_values_beyond_the_model(value: object) -> None:
    """Enums, sets, str subclasses, bytes, zoned times, odd keys: the same text either way."""
    assert codec.dumps(value) == canonical_json(codec.encode(value))


@pytest.mark.parametrize("value", [float("nan"), (1.0, float("inf"))], ids=["nan", "inf"])
def test_dumps_refuses_a_non_finite_float_as_the_json_encoder_does(value: object) -> None:
    """NaN and infinities are not JSON: the same ValueError as the canonical encoder's."""
    with pytest.raises(ValueError, match="Out of range float values") as ours:
        codec.dumps(value)
    with pytest.raises(ValueError, match="Out of range float values") as theirs:
        canonical_json(codec.encode(value))
    assert str(ours.value) == str(theirs.value)


@given(VALUES)
def test_encode_gives_plain_json(value_and_type: tuple[object, Any]) -> None:
    """encode() output survives the standard json module unchanged."""
    value, _ = value_and_type
    encoded = codec.encode(value)

    assert json.loads(json.dumps(encoded)) == encoded


@given(st.frozensets(texts, max_size=6))
def test_dumps_does_not_depend_on_set_order(nodes: frozenset[str]) -> None:
    """A frozenset is written sorted, so equal verdicts have equal text."""
    forward = Verdict(VerdictStatus.FAILURE, failed_nodes=frozenset(sorted(nodes)))
    backward = Verdict(VerdictStatus.FAILURE, failed_nodes=frozenset(sorted(nodes, reverse=True)))

    assert codec.dumps(forward) == codec.dumps(backward)


@given(json_objects, st.randoms())
def test_dumps_does_not_depend_on_key_order(args: JsonObject, random: Any) -> None:
    """Args built in another key order give the same text."""
    keys = list(args)
    random.shuffle(keys)
    shuffled = JsonObject({key: args[key] for key in keys})

    assert codec.dumps(PlanNode("a", args=args)) == codec.dumps(PlanNode("a", args=shuffled))


def test_decoded_values_are_frozen() -> None:
    """Decoded args hold JsonObjects and tuples, never dicts or lists."""
    node = codec.decode({"id": "a", "args": {"xs": [1, {"y": [2]}]}}, PlanNode)

    assert isinstance(node.args, JsonObject)
    xs = node.args["xs"]
    assert isinstance(xs, tuple)
    assert isinstance(xs[1], JsonObject)


def test_decoded_times_are_utc() -> None:
    """A time written with another offset is read back as the same instant, in UTC."""
    record = codec.decode(
        {**codec.encode(_record()), "created_at": "2024-05-01T14:00:00+02:00"}, ExecutionRecord
    )

    assert record.created_at == T0
    assert record.created_at.tzinfo is UTC


# ---- the wire format -------------------------------------------------------------------------


def _record() -> ExecutionRecord:
    return ExecutionRecord(
        id=RecordId("r1"),
        task_id=TaskId("t1"),
        revision=1,
        node_id="grip",
        tool="gripper",
        args_digest="ab",
        effect=Effect.ACTION,
        idempotency_key="t1/r1",
        created_at=T0,
        updated_at=T0,
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(
            Plan("g", (PlanNode("a", "do", tool="t", args={"x": [1, None]}, effect=Effect.QUERY),)),
            '{"goal":"g","nodes":[{"after":[],"args":{"x":[1,null]},"description":"do",'
            '"effect":"query","id":"a","tool":"t"}]}',
            id="plan",
        ),
        pytest.param(
            _record(),
            '{"args_digest":"ab","created_at":"2024-05-01T12:00:00Z","effect":"action",'
            '"error":null,"id":"r1","idempotency_key":"t1/r1","node_id":"grip",'
            '"revision":1,"status":"pending","task_id":"t1","tool":"gripper",'
            '"updated_at":"2024-05-01T12:00:00Z"}',
            id="record",
        ),
        pytest.param(Success({"ok": True}), '{"kind":"success","value":{"ok":true}}', id="success"),
        pytest.param(
            DeviceFailure("n1", "timeout", is_timeout=True, outcome_unknown=True),
            '{"error":"timeout","is_timeout":true,"kind":"device_failure","node_id":"n1",'
            '"outcome_unknown":true}',
            id="device-failure",
        ),
        pytest.param(
            VerifierFailure("n1", "weak grip"),
            '{"kind":"verifier_failure","node_id":"n1","reason":"weak grip"}',
            id="verifier-failure",
        ),
        pytest.param(
            Evidence(
                id=EvidenceId("e1"),
                phase=EvidencePhase.AFTER,
                kind="image",
                source="cam",
                captured_at=T0,
                revision=2,
                artifact=b"png",
            ),
            '{"artifact":"cG5n","captured_at":"2024-05-01T12:00:00Z","id":"e1","kind":"image",'
            '"media_type":null,"payload":null,"phase":"after","revision":2,'
            '"sha256":"8f8cbb7dcf46e0bc7d53265749a6c17d116093a6ba95e442764060c76fd4a86c"'
            ',"source":"cam"}',
            id="evidence-bytes-as-base64",
        ),
    ],
)
def test_wire_format(value: object, text: str) -> None:
    """The canonical text of each kind of value is pinned, so stored ledgers stay readable."""
    assert codec.dumps(value) == text


# ---- strict decoding -------------------------------------------------------------------------

RECORD: dict[str, Any] = codec.encode(_record())  # type: ignore[assignment]
IMAGE: dict[str, Any] = {
    "id": "e1",
    "phase": "after",
    "kind": "image",
    "source": "cam",
    "captured_at": "2024-05-01T12:00:00Z",
    "revision": 1,
}


@pytest.mark.parametrize(
    ("data", "into", "path", "message"),
    [
        pytest.param(
            {"goal": "g", "nodes": [{"id": "a", "bogus": 1}]},
            Plan,
            "$.nodes[0]",
            "PlanNode has no field 'bogus'",
            id="unknown-field",
        ),
        pytest.param(
            {"nodes": []},
            Plan,
            "$",
            "Plan is missing the required field 'goal'",
            id="missing-field",
        ),
        pytest.param(
            {k: v for k, v in RECORD.items() if k != "idempotency_key"},
            ExecutionRecord,
            "$",
            "missing the required field 'idempotency_key'",
            id="missing-record-field",
        ),
        pytest.param(
            {"goal": "g", "nodes": [{"id": "a", "after": ["x", 1]}]},
            Plan,
            "$.nodes[0].after[1]",
            "expected a string, got int 1",
            id="wrong-type-in-list",
        ),
        pytest.param(
            {**RECORD, "revision": "1"},
            ExecutionRecord,
            "$.revision",
            "expected an integer, got str '1'",
            id="string-for-int",
        ),
        pytest.param(
            {**RECORD, "revision": True},
            ExecutionRecord,
            "$.revision",
            "expected an integer, got bool True",
            id="bool-for-int",
        ),
        pytest.param(
            {"goal": "g", "nodes": {"id": "a"}},
            Plan,
            "$.nodes",
            "expected an array",
            id="object-for-array",
        ),
        pytest.param([], Plan, "$", "expected an object, got list []", id="array-for-object"),
        pytest.param(
            {**RECORD, "status": "done"},
            ExecutionRecord,
            "$.status",
            "expected one of ['pending', 'accepted', 'running', 'succeeded', 'failed', "
            "'cancelled', 'unknown'], got 'done'",
            id="unknown-enum-value",
        ),
        pytest.param(
            {"kind": "explosion", "node_id": "a"},
            NodeResult,
            "$",
            "unknown kind 'explosion'",
            id="unknown-kind",
        ),
        pytest.param(
            {"node_id": "a", "error": "x"},
            NodeResult,
            "$",
            "unknown kind None",
            id="missing-kind",
        ),
        pytest.param(
            {"kind": "success", "node_id": "a", "reason": "r"},
            VerifierFailure,
            "$",
            "expected kind 'verifier_failure', got 'success'",
            id="wrong-kind-for-type",
        ),
        pytest.param(
            {**RECORD, "created_at": "2024-05-01T12:00:00"},
            ExecutionRecord,
            "$.created_at",
            "has no UTC offset",
            id="naive-datetime",
        ),
        pytest.param(
            {**RECORD, "updated_at": "yesterday"},
            ExecutionRecord,
            "$.updated_at",
            "expected an ISO 8601 time, got 'yesterday'",
            id="not-a-datetime",
        ),
        pytest.param(
            {"goal": "g", "nodes": [{"id": "a", "args": {"x": [1, {"y": float("nan")}]}}]},
            Plan,
            "$.nodes[0].args.x",
            "nan is not a JSON number",
            id="nan-in-args",
        ),
        pytest.param(
            {**IMAGE, "artifact": "not base64!"},
            Evidence,
            "$.artifact",
            "not valid base64",
            id="bad-base64",
        ),
        pytest.param(
            {**IMAGE, "artifact": "cG5n", "sha256": "0" * 64},
            Evidence,
            "$",
            "not a valid Evidence",
            id="sha256-mismatch",
        ),
        pytest.param(
            {"mode": "recovery", "goal": "", "success_criteria": ["x"]},
            VerificationContract,
            "$",
            "not a valid VerificationContract",
            id="invalid-contract",
        ),
        pytest.param(
            {"status": "success", "failed_nodes": "a"},
            Verdict,
            "$.failed_nodes",
            "expected an array",
            id="string-for-set",
        ),
    ],
)
def test_strict_decode_error(data: object, into: Any, path: str, message: str) -> None:
    """Data that does not fit its type is a CodecError whose path points at the fault."""
    with pytest.raises(CodecError) as info:
        codec.decode(data, into)

    assert info.value.path == path
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_decode_path_prefix() -> None:
    """A caller's path is the root of the error path."""
    with pytest.raises(CodecError) as info:
        codec.decode({"goal": 1}, Plan, path="event.plan")

    assert info.value.path == "event.plan.goal"


def test_loads_rejects_text_that_is_not_json() -> None:
    """loads() of broken text is a CodecError, not a ValueError."""
    with pytest.raises(CodecError, match="not valid JSON"):
        codec.loads('{"goal": ', Plan)


def test_encode_rejects_a_naive_datetime() -> None:
    """A time without a zone is refused on the way out too."""
    naive = replace(
        _record(),
        created_at=datetime(2024, 5, 1, 12, 0),  # noqa: DTZ001 - the naive time under test
    )

    with pytest.raises(CodecError, match="naive datetimes are ambiguous"):
        codec.dumps(naive)


@pytest.mark.parametrize("write", [codec.encode, codec.dumps], ids=["encode", "dumps"])
def test_encode_rejects_an_unknown_type(write: Callable[[object], object]) -> None:
    """Something the codec does not know is a CodecError, from encode and dumps alike."""
    with pytest.raises(CodecError, match="a value of type object cannot be encoded"):
        write({"payload": [object()]})


def test_codec_error_is_a_pev_error() -> None:
    """CodecError sits under the PevError root."""
    assert issubclass(CodecError, PevError)


def test_a_field_added_later_is_written_only_when_it_is_not_its_default() -> None:
    """RecoveryPolicy.lease_s (codec.ADDED): absent at its default, so older policies keep
    their bytes and hashes; present otherwise; read back either way."""
    default, longer = RecoveryPolicy(), RecoveryPolicy(lease_s=90)
    assert "lease_s" not in codec.dumps(default)
    assert codec.dumps(default) == canonical_json(codec.encode(default))
    assert '"lease_s":90.0' in codec.dumps(longer)
    assert codec.dumps(longer) == canonical_json(codec.encode(longer))
    assert codec.loads(codec.dumps(default), RecoveryPolicy) == default
    assert codec.loads(codec.dumps(longer), RecoveryPolicy) == longer
