"""Evidence and evidence references (docs/design.md §2.3)."""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.builders import evidence

from pev.model import EvidencePhase, JsonObject, RefKind, evidence_ref, parse_ref, record_ref

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n fake image"


# Observation e1: an image from the wrist camera; a test changes any field by keyword.
_evidence = functools.partial(evidence, kind="image", source="wrist-camera", at=T0)


def test_sha256_is_computed_from_the_artifact() -> None:
    """An artifact without a digest gets its sha256 filled in."""
    evidence = _evidence(artifact=PNG, media_type="image/png")

    assert evidence.sha256 == hashlib.sha256(PNG).hexdigest()


def test_matching_sha256_is_accepted() -> None:
    """A given digest that matches the artifact is kept."""
    digest = hashlib.sha256(PNG).hexdigest()

    assert _evidence(artifact=PNG, sha256=digest).sha256 == digest


def test_mismatching_sha256_is_rejected() -> None:
    """A digest that does not match the artifact is refused."""
    with pytest.raises(ValueError, match="does not match its artifact"):
        _evidence(artifact=PNG, sha256="0" * 64)


def test_sha256_without_artifact_is_rejected() -> None:
    """A digest with nothing to digest is refused."""
    with pytest.raises(ValueError, match="sha256 but no artifact"):
        _evidence(sha256=hashlib.sha256(PNG).hexdigest())


def test_payload_only_evidence_has_no_digest() -> None:
    """Evidence with a JSON payload and no artifact has no sha256."""
    evidence = _evidence(kind="state", payload={"gripper": "open"})

    assert evidence.sha256 is None
    assert evidence.artifact is None


def test_payload_is_frozen() -> None:
    """The payload is stored as frozen JSON."""
    evidence = _evidence(kind="state", payload={"joints": [0.1, 0.2]})

    assert isinstance(evidence.payload, JsonObject)
    assert evidence.payload == {"joints": [0.1, 0.2]}


def test_non_json_payload_is_rejected() -> None:
    """A payload JSON cannot hold is refused, naming where."""
    with pytest.raises(TypeError, match=r"payload\.seen"):
        _evidence(payload={"seen": {"a", "b"}})


def test_phase_given_as_text_becomes_a_phase() -> None:
    """phase='before' is stored as EvidencePhase.BEFORE."""
    assert _evidence(phase="before").phase is EvidencePhase.BEFORE


def test_unknown_phase_is_rejected() -> None:
    """A phase other than before or after is refused."""
    with pytest.raises(ValueError, match="during"):
        _evidence(phase="during")


def test_evidence_ref() -> None:
    """An observation's reference is evidence:<id>."""
    assert _evidence().ref == "evidence:e1"
    assert evidence_ref("e1") == "evidence:e1"


def test_record_ref() -> None:
    """An execution record's reference is record:<id>."""
    assert record_ref("r9") == "record:r9"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        pytest.param("evidence:e1", (RefKind.EVIDENCE, "e1"), id="evidence"),
        pytest.param("record:r1", (RefKind.RECORD, "r1"), id="record"),
        pytest.param("record:a:b", (RefKind.RECORD, "a:b"), id="id-with-colon"),
        pytest.param("evidence:", None, id="empty-id"),
        pytest.param("evidence", None, id="no-colon"),
        pytest.param("image:e1", None, id="unknown-kind"),
        pytest.param("Evidence:e1", None, id="kind-is-case-sensitive"),
        pytest.param(":e1", None, id="no-kind"),
        pytest.param("", None, id="empty"),
        pytest.param(7, None, id="not-a-string"),
    ],
)
def test_parse_ref(ref: str, expected: tuple[RefKind, str] | None) -> None:
    """parse_ref splits a well-formed reference and returns None for anything else."""
    assert parse_ref(ref) == expected


@given(st.text(min_size=1))
def test_refs_parse_back(ident: str) -> None:
    """Any non-empty id survives evidence_ref/record_ref then parse_ref."""
    assert parse_ref(evidence_ref(ident)) == (RefKind.EVIDENCE, ident)
    assert parse_ref(record_ref(ident)) == (RefKind.RECORD, ident)
