"""The PostgreSQL store's append function, ``pev_append``, in each version of the schema.

Migrations are history: a schema at version *n* is what steps 1 to *n* made it, so each step keeps
the text it was released with, and a change of the function is a new step that replaces it. Step
5 created the function (:data:`APPEND_V5`); step 6 replaced it (:data:`APPEND_V6`, and
:data:`DROP_APPEND_V5` first, since its arguments changed); step 7 replaced its body
(:data:`APPEND_V7`, the same arguments).
"""

from __future__ import annotations

from pev.ledger import GENESIS_HASH

__all__ = ["APPEND_V5", "APPEND_V6", "APPEND_V7", "DROP_APPEND_V5"]

# An append in one statement (version 5): one round trip, and a batch of them (pipelined between
# BEGIN and COMMIT) one round trip too. It takes the task's index row lock (every write of a task
# takes it first), checks under it the fence and that the batch follows the stored head, writing
# nothing when either fails ('refused', with the head and the lease it found, from which the
# store raises the very error its checks in Python name), then writes the events, the index row
# and a new task's lease. All of it runs in a block with an exception handler, a subtransaction:
# an error there (a sequence number another writer took: 'conflict'; anything else, a lock
# timeout say: 'failed' with its message) rolls back this append alone, never the other appends
# of the transaction it runs in: a savepoint per append. (OR REPLACE: the step also applies over
# a function left by a schema whose version was set back.)
APPEND_V5 = """CREATE OR REPLACE FUNCTION {s}.pev_append(
        p_task_id text, p_seqs bigint[], p_ats text[], p_schemas integer[], p_kinds text[],
        p_events text[], p_prev_hashes text[], p_hashes text[],
        p_phase text, p_status text, p_reason text, p_title text, p_created_at timestamptz,
        p_updated_at timestamptz, p_event_count bigint, p_head_hash text,
        p_replan_deadline timestamptz,
        p_owner text, p_epoch bigint, p_expires_at timestamptz, p_channel text,
        OUT outcome text, OUT detail text, OUT head_seq bigint, OUT head_hash text,
        OUT lease_owner text, OUT lease_epoch bigint, OUT lease_expires_at timestamptz
    ) LANGUAGE plpgsql AS $$
    DECLARE
        known boolean;
        listed boolean;
    BEGIN
        SELECT t.event_count, t.head_hash,
               t.phase = p_phase AND t.status IS NOT DISTINCT FROM p_status
               AND t.reason IS NOT DISTINCT FROM p_reason AND t.title = p_title
               AND t.replan_deadline IS NOT DISTINCT FROM p_replan_deadline
          INTO head_seq, head_hash, listed
          FROM {s}.pev_tasks t WHERE t.task_id = p_task_id FOR UPDATE;
        known := FOUND;
        IF p_owner IS NOT NULL THEN
            SELECT l.owner, l.epoch, l.expires_at
              INTO lease_owner, lease_epoch, lease_expires_at
              FROM {s}.pev_leases l WHERE l.task_id = p_task_id;
            IF (known AND (lease_owner IS DISTINCT FROM p_owner
                           OR lease_epoch IS DISTINCT FROM p_epoch))
               OR (NOT known AND (lease_owner IS NOT NULL OR p_epoch <> 1)) THEN
                outcome := 'refused';
                RETURN;
            END IF;
        END IF;
        IF (known AND (head_seq <> p_seqs[1] - 1 OR head_hash <> p_prev_hashes[1]))
           OR (NOT known AND (p_seqs[1] <> 1 OR p_prev_hashes[1] <> '{genesis}')) THEN
            outcome := 'refused';
            RETURN;
        END IF;
        INSERT INTO {s}.pev_events (task_id, seq, at, schema, kind, event, prev_hash, hash)
        SELECT p_task_id, e.seq, e.at, e.schema, e.kind, e.event, e.prev_hash, e.hash
          FROM unnest(p_seqs, p_ats, p_schemas, p_kinds, p_events, p_prev_hashes, p_hashes)
            AS e (seq, at, schema, kind, event, prev_hash, hash);
        IF known AND listed THEN
            -- Most appends move only the head: the row's indexed columns stay as they are.
            UPDATE {s}.pev_tasks
               SET updated_at = p_updated_at, event_count = p_event_count,
                   head_hash = p_head_hash
             WHERE task_id = p_task_id;
        ELSE
            INSERT INTO {s}.pev_tasks (task_id, phase, status, reason, title, created_at,
                                       updated_at, event_count, head_hash, replan_deadline)
            VALUES (p_task_id, p_phase, p_status, p_reason, p_title, p_created_at,
                    p_updated_at, p_event_count, p_head_hash, p_replan_deadline)
            ON CONFLICT (task_id) DO UPDATE SET phase = excluded.phase,
                status = excluded.status, reason = excluded.reason, title = excluded.title,
                updated_at = excluded.updated_at, event_count = excluded.event_count,
                head_hash = excluded.head_hash, replan_deadline = excluded.replan_deadline;
        END IF;
        IF NOT known AND p_owner IS NOT NULL THEN
            -- A task created under a lease takes it with the task (pev.ledger.fenced).
            INSERT INTO {s}.pev_leases (task_id, owner, epoch, expires_at)
            VALUES (p_task_id, p_owner, p_epoch, p_expires_at)
            ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner,
                epoch = excluded.epoch, expires_at = excluded.expires_at;
        ELSIF NOT known THEN
            PERFORM pg_notify(p_channel, '');  -- a task no driver holds: a worker may claim it
        END IF;
        outcome := 'ok';
    EXCEPTION
        WHEN unique_violation THEN
            outcome := 'conflict';
        WHEN OTHERS THEN
            outcome := 'failed';
            detail := SQLERRM;
    END
    $$""".replace("{genesis}", GENESIS_HASH)
"""The append function of schema version 5 (kept as released, for migration 5)."""

DROP_APPEND_V5 = (
    "DROP FUNCTION IF EXISTS {s}.pev_append(text, bigint[], text[], integer[], text[], text[], "
    "text[], text[], text, text, text, text, timestamptz, timestamptz, bigint, text, timestamptz, "
    "text, bigint, timestamptz, text)"
)
"""Drops the version-5 function (its arguments), which :data:`APPEND_V6` replaces."""

# Version 6 adds, in the append's own transaction, so that they are sent once it commits:
#
# * a NOTIFY on the schema's events channel (``p_events_channel``) with the task's id, by which
#   every process's followers of the task hear that its ledger grew (pev.ledger.follow);
# * a NOTIFY on the workers' channel (``p_channel``) whenever an append made without a fence
#   leaves its task claimable: a task submitted without a lease (as version 5 did), and also a
#   task approved (to ``executing``), rejected (to ``awaiting_replan``) or cancelled (to
#   ``cancelling``) by a person. An append that leaves its task ended or awaiting approval wakes
#   no worker: none could claim it.
#
# The phases nobody may claim are those the claimable-tasks index of the same step leaves out
# (_postgres_schema.RUNNABLE_TASKS).

APPEND_V6 = """CREATE OR REPLACE FUNCTION {s}.pev_append(
        p_task_id text, p_seqs bigint[], p_ats text[], p_schemas integer[], p_kinds text[],
        p_events text[], p_prev_hashes text[], p_hashes text[],
        p_phase text, p_status text, p_reason text, p_title text, p_created_at timestamptz,
        p_updated_at timestamptz, p_event_count bigint, p_head_hash text,
        p_replan_deadline timestamptz,
        p_owner text, p_epoch bigint, p_expires_at timestamptz, p_channel text,
        p_events_channel text,
        OUT outcome text, OUT detail text, OUT head_seq bigint, OUT head_hash text,
        OUT lease_owner text, OUT lease_epoch bigint, OUT lease_expires_at timestamptz
    ) LANGUAGE plpgsql AS $$
    DECLARE
        known boolean;
        listed boolean;
    BEGIN
        SELECT t.event_count, t.head_hash,
               t.phase = p_phase AND t.status IS NOT DISTINCT FROM p_status
               AND t.reason IS NOT DISTINCT FROM p_reason AND t.title = p_title
               AND t.replan_deadline IS NOT DISTINCT FROM p_replan_deadline
          INTO head_seq, head_hash, listed
          FROM {s}.pev_tasks t WHERE t.task_id = p_task_id FOR UPDATE;
        known := FOUND;
        IF p_owner IS NOT NULL THEN
            SELECT l.owner, l.epoch, l.expires_at
              INTO lease_owner, lease_epoch, lease_expires_at
              FROM {s}.pev_leases l WHERE l.task_id = p_task_id;
            IF (known AND (lease_owner IS DISTINCT FROM p_owner
                           OR lease_epoch IS DISTINCT FROM p_epoch))
               OR (NOT known AND (lease_owner IS NOT NULL OR p_epoch <> 1)) THEN
                outcome := 'refused';
                RETURN;
            END IF;
        END IF;
        IF (known AND (head_seq <> p_seqs[1] - 1 OR head_hash <> p_prev_hashes[1]))
           OR (NOT known AND (p_seqs[1] <> 1 OR p_prev_hashes[1] <> '{genesis}')) THEN
            outcome := 'refused';
            RETURN;
        END IF;
        INSERT INTO {s}.pev_events (task_id, seq, at, schema, kind, event, prev_hash, hash)
        SELECT p_task_id, e.seq, e.at, e.schema, e.kind, e.event, e.prev_hash, e.hash
          FROM unnest(p_seqs, p_ats, p_schemas, p_kinds, p_events, p_prev_hashes, p_hashes)
            AS e (seq, at, schema, kind, event, prev_hash, hash);
        IF known AND listed THEN
            -- Most appends move only the head: the row's indexed columns stay as they are.
            UPDATE {s}.pev_tasks
               SET updated_at = p_updated_at, event_count = p_event_count,
                   head_hash = p_head_hash
             WHERE task_id = p_task_id;
        ELSE
            INSERT INTO {s}.pev_tasks (task_id, phase, status, reason, title, created_at,
                                       updated_at, event_count, head_hash, replan_deadline)
            VALUES (p_task_id, p_phase, p_status, p_reason, p_title, p_created_at,
                    p_updated_at, p_event_count, p_head_hash, p_replan_deadline)
            ON CONFLICT (task_id) DO UPDATE SET phase = excluded.phase,
                status = excluded.status, reason = excluded.reason, title = excluded.title,
                updated_at = excluded.updated_at, event_count = excluded.event_count,
                head_hash = excluded.head_hash, replan_deadline = excluded.replan_deadline;
        END IF;
        IF NOT known AND p_owner IS NOT NULL THEN
            -- A task created under a lease takes it with the task (pev.ledger.fenced).
            INSERT INTO {s}.pev_leases (task_id, owner, epoch, expires_at)
            VALUES (p_task_id, p_owner, p_epoch, p_expires_at)
            ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner,
                epoch = excluded.epoch, expires_at = excluded.expires_at;
        ELSIF p_owner IS NULL
              AND p_phase NOT IN ('awaiting_approval', 'cancelled', 'failed', 'partial',
                                  'succeeded') THEN
            -- Written by no driver (a task submitted, approved, rejected or cancelled), the
            -- task is left claimable: a worker may take it.
            PERFORM pg_notify(p_channel, '');
        END IF;
        PERFORM pg_notify(p_events_channel, p_task_id);  -- its followers read it once committed
        outcome := 'ok';
    EXCEPTION
        WHEN unique_violation THEN
            outcome := 'conflict';
        WHEN OTHERS THEN
            outcome := 'failed';
            detail := SQLERRM;
    END
    $$""".replace("{genesis}", GENESIS_HASH)
"""The append function of schema version 6: version 5's, notifying followers and waking workers."""


def _changed(text: str, *changes: tuple[str, str]) -> str:
    """``text`` with each ``(old, new)`` of ``changes`` made, each ``old`` found exactly once."""
    for old, new in changes:
        if text.count(old) != 1:  # pragma: no cover - a mistake in this module, caught on import
            raise AssertionError(f"pev_append: {old!r} is not found exactly once")
        text = text.replace(old, new)
    return text


# Version 7 tells the store why an append was not written, so that the store raises the error
# that says so, whatever its own checks would make of the row:
#
# * 'refused' names the check that refused it in ``detail``: 'lease' (the fence is not the
#   task's current lease: LeaseLost) or 'head' (the batch does not follow the stored head);
# * 'failed' starts ``detail`` with the error's SQLSTATE, then its message ('55P03 canceling
#   statement due to lock timeout'), so that a lock timeout or a deadlock is told apart from
#   damage (pev.stores._postgres_db.unavailable).
#
# The arguments and the row it answers are version 6's: OR REPLACE replaces it in place.
APPEND_V7 = _changed(
    APPEND_V6,
    (
        """                outcome := 'refused';
                RETURN;""",
        """                outcome := 'refused';
                detail := 'lease';
                RETURN;""",
    ),
    (
        """            outcome := 'refused';
            RETURN;""",
        """            outcome := 'refused';
            detail := 'head';
            RETURN;""",
    ),
    ("detail := SQLERRM;", "detail := SQLSTATE || ' ' || SQLERRM;"),
)
"""The append function of schema version 7: version 6's, saying why an append was not written."""
