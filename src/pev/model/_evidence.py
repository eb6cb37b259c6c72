"""Observations and the references a verdict may cite (docs/design.md §2.3)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pev._json import JsonValue, freeze_json
from pev.model._ids import EvidenceId

__all__ = [
    "Evidence",
    "EvidencePhase",
    "RefKind",
    "evidence_ref",
    "parse_ref",
    "record_ref",
]


class EvidencePhase(StrEnum):
    """When an observation was captured relative to a revision's actions."""

    BEFORE = "before"
    AFTER = "after"


class RefKind(StrEnum):
    """What an evidence reference points at."""

    EVIDENCE = "evidence"
    RECORD = "record"


def evidence_ref(evidence_id: str) -> str:
    """The reference ``evidence:<id>`` to an observation."""
    return f"{RefKind.EVIDENCE}:{evidence_id}"


def record_ref(record_id: str) -> str:
    """The reference ``record:<id>`` to an execution record."""
    return f"{RefKind.RECORD}:{record_id}"


def parse_ref(ref: str) -> tuple[RefKind, str] | None:
    """Split ``evidence:<id>`` or ``record:<id>``; ``None`` for anything else."""
    kind, sep, ident = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not ident or kind not in RefKind.__members__.values():
        return None
    return RefKind(kind), ident


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One observation: a JSON payload, or an artifact (bytes) with its sha256.

    Attributes:
        id: The observation id; ``evidence:<id>`` is its reference.
        phase: ``before`` the first action of a revision, or ``after`` an execution round.
        kind: What was observed (``state``, ``image``, ...); contracts require kinds.
        source: Who observed it (a camera, a state reader, ...).
        captured_at: When it was captured (UTC).
        revision: The revision whose round it belongs to.
        payload: A JSON value (frozen).
        artifact: Raw bytes such as a PNG; ``sha256`` is filled in from them.
        media_type: The artifact's media type, e.g. ``image/png``.
        sha256: Hex digest of ``artifact``; computed, and checked when given.
    """

    id: EvidenceId
    phase: EvidencePhase
    kind: str
    source: str
    captured_at: datetime
    revision: int
    payload: JsonValue = None
    artifact: bytes | None = None
    media_type: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", freeze_json(self.payload, path="payload"))
        object.__setattr__(self, "phase", EvidencePhase(self.phase))
        if isinstance(self.artifact, bytearray | memoryview):
            object.__setattr__(self, "artifact", bytes(self.artifact))
        if self.artifact is None:
            if self.sha256 is not None:
                raise ValueError("evidence has a sha256 but no artifact")
            return
        actual = hashlib.sha256(self.artifact).hexdigest()
        if self.sha256 is not None and self.sha256 != actual:
            raise ValueError(
                f"evidence {self.id}: sha256 {self.sha256} does not match its artifact ({actual})"
            )
        object.__setattr__(self, "sha256", actual)

    @property
    def ref(self) -> str:
        """The reference ``evidence:<id>`` a verdict cites."""
        return evidence_ref(self.id)
