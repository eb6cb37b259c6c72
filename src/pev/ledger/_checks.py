"""Checking a task's chain: sequence, links, texts, seals and the index's head.

:func:`verify_raw` checks the stored texts themselves (what ``pev ledger verify`` runs), and
:func:`verify_chain` decoded entries; both name the first bad event and never raise for damage.
docs/ledger-format.md §7 states the rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring

from pev._canonical import canonical_problem
from pev.errors import CodecError
from pev.ledger._chain import GENESIS_HASH, KEYED, header_line, raw_entry, seal_of
from pev.ledger._events import EventSchema, LedgerEntry, RawEntry

__all__ = ["ChainReport", "text_problem", "verify_chain", "verify_raw"]

_KNOWN = frozenset(int(schema) for schema in EventSchema)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainReport:
    """The result of checking one task's ledger.

    Attributes:
        task_id: The task checked.
        ok: The chain is whole, agrees with the task index, and every event folds.
        events: How many events were read.
        first_bad_seq: The first event that is changed, missing or out of order (``None`` if
            ok, or when what is wrong is the task index alone).
        problem: What is wrong with it, in words.
        keyed_events: How many events (of those checked) are sealed with the ledger key.
        needs_key: The first bad event is sealed with a key, and none was given: it could not
            be checked (set ``PEV_LEDGER_KEY``), which is not the same as tampering.
    """

    task_id: str
    ok: bool
    events: int
    first_bad_seq: int | None = None
    problem: str = ""
    keyed_events: int = 0
    needs_key: bool = False


def verify_chain(
    task_id: str,
    entries: Sequence[LedgerEntry],
    *,
    head_count: int | None = None,
    head_hash: str | None = None,
    key: bytes | None = None,
    require_key: bool = False,
) -> ChainReport:
    """Check a task's decoded entries: sequence, links, seals, and the index's head.

    Each entry's event is written again in its schema's form and sealed again; for the stored
    texts themselves, see :func:`verify_raw`.

    Args:
        task_id: The task the entries must belong to.
        entries: The stored entries, in the order the store returned them.
        head_count: The event count the task index recorded, when there is an index.
        head_hash: The head hash the task index recorded.
        key: The ledger key, to check entries sealed with HMAC-SHA256.
        require_key: Take an entry not sealed with the key for a bad one (see
            :func:`verify_raw`).

    Returns:
        A report naming the first bad event; an edited, dropped (even the last) or reordered
        event is always caught. Folding the events is checked by :meth:`pev.ledger.Ledger.verify`.
    """
    raws: list[RawEntry | str] = []
    for entry in entries:
        try:
            raws.append(raw_entry(entry))
        except (CodecError, ValueError) as exc:
            raws.append(f"event {entry.seq} cannot be encoded: {exc}")
    return _walk(
        task_id, raws, (head_count, head_hash), key=key, texts=False, require_key=require_key
    )


def verify_raw(
    task_id: str,
    entries: Sequence[RawEntry],
    *,
    head_count: int | None = None,
    head_hash: str | None = None,
    key: bytes | None = None,
    require_key: bool = False,
) -> ChainReport:
    """Check a task's stored entries from their texts: sequence, links, texts, seals, head.

    Each event's text must parse as JSON and be exactly the canonical text of its schema's form
    (so a verifier in another language computes the same seal from the parsed JSON), and each
    seal must match. A text that does not parse, or holds what no canonical text can, is
    reported at its sequence number, never raised.

    Args:
        task_id: The task the entries must belong to.
        entries: The stored entries, as :meth:`pev.ledger.Store.read_raw` returned them.
        head_count: The event count the task index recorded, when there is an index.
        head_hash: The head hash the task index recorded.
        key: The ledger key, to check entries sealed with HMAC-SHA256.
        require_key: Take an entry not sealed with the key for a bad one. Without it, entries
            sealed with sha256 verify as such (a ledger written before it had a key), and only
            one that follows a keyed entry is bad; so a forger without the key who reseals a
            whole task with sha256 is caught only with ``require_key`` (or by a head kept
            elsewhere). The report counts the entries sealed with the key either way.
    """
    return _walk(
        task_id, entries, (head_count, head_hash), key=key, texts=True, require_key=require_key
    )


@dataclass(frozen=True, slots=True)
class _Rules:
    """How a walk checks each entry: with which key, from texts or not, keyed or not."""

    key: bytes | None
    texts: bool
    require_key: bool


def _walk(
    task_id: str,
    entries: Sequence[RawEntry | str],
    head: tuple[int | None, str | None],
    *,
    key: bytes | None,
    texts: bool,
    require_key: bool,
) -> ChainReport:
    """Walk the chain; an entry given as a string is one that could not be encoded (why).

    ``head`` is the index's (event count, head hash), either ``None`` when there is no index.
    """
    rules = _Rules(key, texts, require_key)
    head_count, head_hash = head
    count = len(entries)
    prev_hash = GENESIS_HASH
    first_keyed = 0
    for expected_seq, entry in enumerate(entries, start=1):
        if isinstance(entry, str):
            problem, needs_key = entry, False
        else:
            problem, needs_key = _problem(
                entry,
                task_id=task_id,
                expected_seq=expected_seq,
                prev_hash=prev_hash,
                first_keyed=first_keyed,
                rules=rules,
            )
        if problem:
            return ChainReport(
                task_id=task_id,
                ok=False,
                events=count,
                first_bad_seq=expected_seq,
                problem=problem,
                keyed_events=(expected_seq - first_keyed) if first_keyed else 0,
                needs_key=needs_key,
            )
        assert not isinstance(entry, str)  # noqa: S101 - a string entry is always a problem
        if entry.schema == KEYED and not first_keyed:
            first_keyed = expected_seq
        prev_hash = entry.hash
    keyed = (count - first_keyed + 1) if first_keyed else 0
    if head_count is not None and head_count != count:
        return ChainReport(
            task_id=task_id,
            ok=False,
            events=count,
            first_bad_seq=min(head_count, count) + 1,
            problem=f"the task index records {head_count} events but the log holds {count}",
            keyed_events=keyed,
        )
    if head_hash is not None and head_hash != prev_hash:
        return ChainReport(
            task_id=task_id,
            ok=False,
            events=count,
            first_bad_seq=count,
            problem="the last event's hash differs from the head hash in the task index",
            keyed_events=keyed,
        )
    return ChainReport(task_id=task_id, ok=True, events=count, keyed_events=keyed)


def _problem(
    entry: RawEntry,
    *,
    task_id: str,
    expected_seq: int,
    prev_hash: str,
    first_keyed: int,
    rules: _Rules,
) -> tuple[str, bool]:
    """What is wrong with one entry (``""`` if nothing), and whether it is only the missing key."""
    problem = _entry_problem(task_id, entry, expected_seq, prev_hash, first_keyed)
    if problem:
        return problem, False
    if rules.require_key and entry.schema != KEYED:
        why = f"event {entry.seq} is not sealed with the ledger key, as every event must be"
        return f"{why} (require_key)", False
    if entry.schema == KEYED and rules.key is None:
        why = f"event {entry.seq} is sealed with a key: set PEV_LEDGER_KEY to the ledger's key"
        return f"{why} to verify it", True
    if rules.texts:
        problem = text_problem(entry)
    return problem or _seal_problem(task_id, entry, rules.key), False


def _entry_problem(
    task_id: str, entry: RawEntry, expected_seq: int, prev_hash: str, first_keyed: int
) -> str:
    """What is wrong with an entry's place in the chain: task, sequence, link, schema."""
    if entry.task_id != task_id:
        return f"event {entry.seq} belongs to task {entry.task_id}, not {task_id}"
    if entry.seq != expected_seq:
        return f"expected event {expected_seq} here, found event {entry.seq} (dropped or reordered)"
    if entry.prev_hash != prev_hash:
        return f"event {entry.seq} does not link to the event before it (dropped or reordered)"
    if entry.schema not in _KNOWN:
        return (
            f"event {entry.seq} has event schema {entry.schema}, which this pev does not know "
            "(a newer pev wrote it, or it was changed)"
        )
    if first_keyed and entry.schema != KEYED:
        return (
            f"event {entry.seq} is not sealed with the ledger key, but event {first_keyed} before "
            "it is: it was resealed by a writer without the key"
        )
    return ""


def _seal_problem(task_id: str, entry: RawEntry, key: bytes | None) -> str:
    """What is wrong with an entry's seal (its texts are as stored)."""
    header = header_line(
        encode_basestring(task_id), entry.seq, entry.at, entry.schema, entry.prev_hash
    )
    try:
        actual = seal_of(header, entry.event, keyed=entry.schema == KEYED, key=key)
    except UnicodeEncodeError:
        return f"event {entry.seq} is stored as text that is not valid UTF-8"
    if actual != entry.hash:
        if entry.schema == KEYED:
            return (
                f"event {entry.seq} does not match its seal under this key: it was changed "
                "after it was written, or sealed with another key"
            )
        return f"event {entry.seq} was changed after it was written (its hash does not match)"
    return ""


def text_problem(entry: RawEntry) -> str:
    """What is wrong with an entry's stored texts: not JSON, or not its schema's canonical text.

    The time must be a JSON string and the event a JSON value whose canonical text, in the form
    of the entry's schema, is the stored text itself: so the seal can be computed again from the
    parsed JSON, in any language.
    """
    try:
        at = json.loads(entry.at)
    except (ValueError, RecursionError) as exc:
        return f"event {entry.seq}'s time is not JSON text: {exc}"
    if not isinstance(at, str) or encode_basestring(at) != entry.at:
        return f"event {entry.seq}'s time is not a canonical JSON string: {entry.at[:40]!r}"
    problem = canonical_problem(entry.event, jcs=entry.schema != EventSchema.PEV_SHA256)
    if problem:
        return f"event {entry.seq} {problem} (schema {entry.schema})"
    return ""
