"""The hash chain over a task's events: canonical texts, header lines and seals.

Each entry is sealed over a header line (its task, sequence number, time, schema and the hash of
the entry before) and its event's canonical JSON text; the entry's event schema says which text
and which seal (:class:`~pev.ledger.EventSchema`). docs/ledger-format.md specifies all of it, so
that a verifier in any language can check a chain.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from datetime import datetime
from json.encoder import encode_basestring

from pev import codec
from pev.errors import CodecError
from pev.ledger._events import Event, EventSchema, LedgerEntry, RawEntry
from pev.model import TaskId
from pev.model._frozen import slot_builder

__all__ = [
    "GENESIS_HASH",
    "KEYED",
    "Sealed",
    "entry_hash",
    "entry_texts",
    "event_text",
    "header_line",
    "raw_entry",
    "seal",
    "seal_of",
]

_build_entry = slot_builder(LedgerEntry)

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of a task's first event."""

KEYED = EventSchema.JCS_HMAC_SHA256
"""The schema of entries sealed with the ledger key."""


def event_text(event: object, schema: int = EventSchema.JCS_SHA256) -> str:
    """The canonical JSON text of an event in ``schema``'s form, as sealed and kept by stores.

    Raises:
        CodecError: The event holds a value its schema cannot write (an integer of more
            than ``codec.MAX_INTEGER_DIGITS`` digits under JCS, say).
        ValueError: Its schema is not one this pev knows.
    """
    if schema == EventSchema.PEV_SHA256:
        return codec.dumps(event)
    if schema in (EventSchema.JCS_SHA256, EventSchema.JCS_HMAC_SHA256):
        return codec.dumps_jcs(event)
    raise ValueError(f"event schema {schema} is not one this pev knows")


def header_line(task: str, seq: int, at: str, schema: int, prev_hash: str) -> str:
    """The header line: the JSON array [task_id, seq, at, schema, prev_hash], written compactly.

    ``task`` and ``at`` are already JSON text (quoted); the same text in every schema, since it
    holds only strings and small integers.
    """
    return (
        f"[{task},{int.__repr__(seq)},{at},{int.__repr__(schema)},{encode_basestring(prev_hash)}]"
    )


def seal_of(header: str, event: str, *, keyed: bool, key: bytes | None) -> str:
    """The seal of an entry: sha256, or HMAC-SHA256 under ``key``, of header, newline, event."""
    data = f"{header}\n{event}".encode()
    if keyed:
        if key is None:
            raise ValueError("a keyed seal needs the ledger key")
        return hmac.digest(key, data, "sha256").hex()
    return hashlib.sha256(data).hexdigest()


def entry_hash(
    *,
    task_id: str,
    seq: int,
    at: datetime,
    schema: int,
    event: object,
    prev_hash: str,
    key: bytes | None = None,
) -> str:
    """The seal of one entry: over its task, place, time, schema, event and predecessor's hash.

    The seal covers a header line and the event's canonical JSON text in its schema's form,
    which is exactly the text the stores keep: sha256, or for
    :attr:`~EventSchema.JCS_HMAC_SHA256` an HMAC-SHA256 under ``key``.

    Raises:
        CodecError: The event cannot be written in its schema's form.
        ValueError: The schema is unknown, or keyed while ``key`` is ``None``.
    """
    header = header_line(codec.dumps(task_id), seq, codec.dumps(at), schema, prev_hash)
    return seal_of(header, event_text(event, schema), keyed=schema == KEYED, key=key)


class Sealed(tuple[LedgerEntry, ...]):
    """The entries :func:`seal` made, with the canonical texts it hashed.

    A tuple of entries like any other. ``texts`` holds each entry's time and event as the
    canonical JSON text :func:`seal` hashed, in order; a store that keeps texts (see
    :func:`entry_texts`) writes them instead of encoding each event a second time. They were
    written from the entries' own frozen values, so they always match them.
    """

    texts: tuple[tuple[str, str], ...]


def seal(
    task_id: TaskId,
    events: Sequence[Event],
    *,
    after_seq: int,
    prev_hash: str,
    at: datetime,
    key: bytes | None = None,
) -> tuple[LedgerEntry, ...]:
    """Wrap events as entries that continue a chain whose head is ``(after_seq, prev_hash)``.

    New entries are written in RFC 8785 (JCS) canonical JSON: sealed with HMAC-SHA256 under
    ``key`` when one is given (:attr:`~EventSchema.JCS_HMAC_SHA256`), else with sha256
    (:attr:`~EventSchema.JCS_SHA256`). Whatever schemas the entries before hold, the chain
    continues from ``prev_hash``.

    Returns:
        The entries, as a :class:`Sealed` tuple that also holds the texts it hashed.

    Raises:
        CodecError: An event holds a value no ledger text can (an integer of more than
            ``codec.MAX_INTEGER_DIGITS`` digits, text that is not valid Unicode).
    """
    schema = EventSchema.JCS_HMAC_SHA256 if key is not None else EventSchema.JCS_SHA256
    dumps = codec.dumps_jcs
    task_text, at_text = codec.dumps(task_id), codec.dumps(at)
    texts: list[tuple[str, str]] = []
    entries: list[LedgerEntry] = []
    for seq, event in enumerate(events, start=after_seq + 1):
        text = dumps(event)
        header = header_line(task_text, seq, at_text, schema, prev_hash)
        try:
            digest = seal_of(header, text, keyed=key is not None, key=key)
        except UnicodeEncodeError as exc:
            raise CodecError(
                f"event {seq} of task {task_id} holds text that is not valid Unicode "
                f"({exc.reason}); no ledger can store it"
            ) from exc
        texts.append((at_text, text))
        # From its slots, in field order: every event a run writes is sealed here.
        entries.append(_build_entry(task_id, seq, at, int(schema), event, prev_hash, digest))
        prev_hash = digest
    sealed = Sealed(entries)
    sealed.texts = tuple(texts)
    return sealed


def entry_texts(entries: Sequence[LedgerEntry]) -> Sequence[tuple[str, str]]:
    """Each entry's time and event as canonical JSON text (its schema's form), as stores keep them.

    Entries straight from :func:`seal` bring the texts it hashed; any others are encoded here.
    """
    if isinstance(entries, Sealed):
        return entries.texts
    return [(codec.dumps(entry.at), event_text(entry.event, entry.schema)) for entry in entries]


def raw_entry(entry: LedgerEntry) -> RawEntry:
    """The stored form of a decoded entry: its texts in its schema's form.

    Raises:
        CodecError: The event cannot be written in its schema's form.
        ValueError: Its schema is not one this pev knows.
    """
    return RawEntry(
        task_id=entry.task_id,
        seq=entry.seq,
        at=codec.dumps(entry.at),
        schema=entry.schema,
        event=event_text(entry.event, entry.schema),
        prev_hash=entry.prev_hash,
        hash=entry.hash,
    )
