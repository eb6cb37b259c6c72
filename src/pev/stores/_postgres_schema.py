"""The PostgreSQL store's schema: its tables, its versions, and the migrations between them.

A pev schema (a PostgreSQL namespace, ``pev`` unless named otherwise) records two rows in its
``pev_meta`` table: the marker ``application = 'pev ledger'`` and the ``schema_version`` its
tables are at. :data:`MIGRATIONS` is the ordered list of steps from an empty schema to the
current version (:data:`STORE_SCHEMA_VERSION`); step *n* takes a schema from version *n - 1* to
*n*. A store creates an empty schema at the current version when it first opens it, refuses an
older one until ``pev db upgrade`` (:func:`migrate`) has run, and never opens a newer one
(docs/stores.md).

Every function here runs inside a transaction its caller opened, holding the schema's advisory
lock (:func:`lock`), so two processes opening or upgrading one schema take turns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg import AsyncCursor, errors
from psycopg.rows import TupleRow

from pev.errors import SchemaVersionError, StoreError, UsageError
from pev.stores._postgres_append import APPEND_V5, APPEND_V6, APPEND_V7, DROP_APPEND_V5

__all__ = [
    "MIGRATIONS",
    "RUNNABLE_TASKS",
    "STORE_SCHEMA_VERSION",
    "TABLE_COLUMNS",
    "Migration",
    "check_schema_name",
    "check_tables",
    "found_version",
    "lock",
    "migrate",
    "refuse_version",
]

# What pev_meta's 'application' row says in a schema pev made.
MARKER = "pev ledger"
# The advisory lock's first key: "pev1" as an int4, as the SQLite file's application_id.
_LOCK_CLASS = 0x70657631
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema: from ``version - 1`` to ``version``.

    Attributes:
        version: The version the schema is at once the step is applied.
        summary: What the step adds, in a few words (``pev db upgrade`` prints it).
        statements: The SQL, with ``{s}`` standing for the quoted schema name.
    """

    version: int
    summary: str
    statements: tuple[str, ...]


RUNNABLE_TASKS = "phase NOT IN ('awaiting_approval', 'cancelled', 'failed', 'partial', 'succeeded')"
"""The condition of the ``pev_tasks_claimable`` index (version 6): the tasks a worker may claim
unless another holds their lease, those that have not ended and do not await approval.

A claim's query spells it out the same way, so that the planner uses the index; changing it takes
a new migration, which replaces the index."""

# The condition of the ``pev_tasks_runnable`` index (version 4, dropped by 6): tasks that have not
# ended. It let claims take a task awaiting approval.
_NOT_ENDED = "phase NOT IN ('cancelled', 'failed', 'partial', 'succeeded')"


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the ledger: append-only events and the task index",
        (
            "CREATE TABLE {s}.pev_meta (key text PRIMARY KEY, value text NOT NULL)",
            # Events are kept as the canonical JSON text that was hashed (as the SQLite store
            # keeps them), so that the chain verifies on every backend.
            """CREATE TABLE {s}.pev_events (
                task_id   text COLLATE "C" NOT NULL,
                seq       bigint  NOT NULL CHECK (seq >= 1),
                at        text    NOT NULL,
                schema    integer NOT NULL,
                kind      text    NOT NULL,
                event     text    NOT NULL,
                prev_hash text    NOT NULL,
                hash      text    NOT NULL,
                PRIMARY KEY (task_id, seq)
            )""",
            """CREATE FUNCTION {s}.pev_events_append_only() RETURNS trigger
                LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION 'pev ledger events are append-only (% refused)', TG_OP;
                END
            $$""",
            """CREATE TRIGGER pev_events_no_update BEFORE UPDATE ON {s}.pev_events
                FOR EACH ROW EXECUTE FUNCTION {s}.pev_events_append_only()""",
            """CREATE TRIGGER pev_events_no_delete BEFORE DELETE ON {s}.pev_events
                FOR EACH ROW EXECUTE FUNCTION {s}.pev_events_append_only()""",
            """CREATE TRIGGER pev_events_no_truncate BEFORE TRUNCATE ON {s}.pev_events
                FOR EACH STATEMENT EXECUTE FUNCTION {s}.pev_events_append_only()""",
            """CREATE TABLE {s}.pev_tasks (
                task_id         text COLLATE "C" PRIMARY KEY,
                phase           text        NOT NULL,
                status          text,
                reason          text,
                title           text        NOT NULL,
                created_at      timestamptz NOT NULL,
                updated_at      timestamptz NOT NULL,
                event_count     bigint      NOT NULL,
                head_hash       text        NOT NULL,
                replan_deadline timestamptz
            )""",
            "CREATE INDEX pev_tasks_by_created ON {s}.pev_tasks (created_at DESC, task_id DESC)",
            """CREATE INDEX pev_tasks_by_phase
                ON {s}.pev_tasks (phase, created_at DESC, task_id DESC)""",
            """CREATE INDEX pev_tasks_waiting ON {s}.pev_tasks (replan_deadline, task_id)
                WHERE replan_deadline IS NOT NULL""",
        ),
    ),
    Migration(
        2,
        "experience: episodes, lessons and their full-text index",
        (
            """CREATE TABLE {s}.pev_episodes (
                task_id text COLLATE "C" PRIMARY KEY,
                episode text NOT NULL
            )""",
            # `saved` keeps the order supporting episodes were saved in.
            """CREATE TABLE {s}.pev_lesson_support (
                lesson_id text COLLATE "C" NOT NULL,
                task_id   text COLLATE "C" NOT NULL,
                saved     bigint GENERATED ALWAYS AS IDENTITY,
                PRIMARY KEY (lesson_id, task_id)
            )""",
            # `terms` are the lesson's search terms (lesson_terms), space-separated; `search`
            # holds them as lexemes, exactly as written (no stemming), for the GIN index.
            """CREATE TABLE {s}.pev_lessons (
                id          text COLLATE "C" PRIMARY KEY,
                status      text     NOT NULL,
                independent integer  NOT NULL,
                support     integer  NOT NULL,
                terms       text     NOT NULL,
                search      tsvector NOT NULL
                    GENERATED ALWAYS AS (array_to_tsvector(string_to_array(terms, ' '))) STORED,
                lesson      text     NOT NULL
            )""",
            "CREATE INDEX pev_lessons_search ON {s}.pev_lessons USING gin (search)",
        ),
    ),
    Migration(
        3,
        "leases: one row per task (owner, epoch, expiry)",
        (
            """CREATE TABLE {s}.pev_leases (
                task_id    text COLLATE "C" PRIMARY KEY,
                owner      text        NOT NULL,
                epoch      bigint      NOT NULL CHECK (epoch >= 1),
                expires_at timestamptz NOT NULL
            )""",
        ),
    ),
    Migration(
        4,
        "claims: an index of the tasks that have not ended",
        (
            # A claim's search reads only tasks that may run, however many have ended. Its
            # query spells out the same condition, so the planner can use it.
            "CREATE INDEX pev_tasks_runnable ON {s}.pev_tasks (created_at, task_id) WHERE "
            + _NOT_ENDED,
        ),
    ),
    Migration(
        5,
        "appends: one statement that checks and writes an append",
        (APPEND_V5,),
    ),
    Migration(
        6,
        "approvals and followers: claims skip tasks awaiting approval; appends notify followers",
        (
            # The function's arguments change (the events channel): the old one goes first.
            DROP_APPEND_V5,
            APPEND_V6,
            # Claims never take a task awaiting approval: it holds no lease while it waits. (IF
            # EXISTS, IF NOT EXISTS: as OR REPLACE above, for a schema whose version was set back.)
            "DROP INDEX IF EXISTS {s}.pev_tasks_runnable",
            "CREATE INDEX IF NOT EXISTS pev_tasks_claimable ON {s}.pev_tasks (created_at, task_id) "
            "WHERE " + RUNNABLE_TASKS,
        ),
    ),
    Migration(
        7,
        "appends say why they were not written: the check that refused them, the error's code",
        (APPEND_V7,),
    ),
)

STORE_SCHEMA_VERSION = MIGRATIONS[-1].version
"""The version of the tables this pev reads and writes."""

TABLE_COLUMNS: dict[str, frozenset[str]] = {
    "pev_meta": frozenset({"key", "value"}),
    "pev_events": frozenset(
        {"task_id", "seq", "at", "schema", "kind", "event", "prev_hash", "hash"}
    ),
    "pev_tasks": frozenset(
        {
            "task_id",
            "phase",
            "status",
            "reason",
            "title",
            "created_at",
            "updated_at",
            "event_count",
            "head_hash",
            "replan_deadline",
        }
    ),
    "pev_episodes": frozenset({"task_id", "episode"}),
    "pev_lesson_support": frozenset({"lesson_id", "task_id", "saved"}),
    "pev_lessons": frozenset(
        {"id", "status", "independent", "support", "terms", "search", "lesson"}
    ),
    "pev_leases": frozenset({"task_id", "owner", "epoch", "expires_at"}),
}
"""Each of pev's tables at the current version, with its columns (checked when a store opens)."""


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case PostgreSQL name, else raise UsageError."""
    if not isinstance(schema, str) or not _NAME.fullmatch(schema):
        raise UsageError(
            f"schema {schema!r} is not a plain PostgreSQL schema name; use lower-case letters, "
            "digits and '_' (at most 63, not starting with a digit)"
        )
    return schema


async def lock(cur: AsyncCursor[TupleRow], schema: str) -> None:
    """Take the schema's advisory lock until the transaction ends (openers and upgraders wait)."""
    await cur.execute(
        "SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))", (_LOCK_CLASS, schema)
    )


async def found_version(cur: AsyncCursor[TupleRow], schema: str, where: str) -> int:
    """The version of the pev tables in ``schema``; 0 when it holds none (or does not exist).

    Raises:
        StoreError: The schema holds tables named as pev's that pev did not make, a pev_meta
            without pev's marker, or an unreadable version.
    """
    await cur.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
        (schema,),
    )
    names = {str(row[0]) for row in await cur.fetchall()}
    ours = sorted(names & set(TABLE_COLUMNS))
    if "pev_meta" not in names:
        if ours:
            raise StoreError(
                f"{where}: the schema holds a table {ours[0]} that pev did not make (no "
                "pev_meta); point pev at another schema or database"
            )
        return 0
    try:
        await cur.execute(f"SELECT key, value FROM {_quoted(schema)}.pev_meta")  # noqa: S608 - a checked name
        meta = {str(key): str(value) for key, value in await cur.fetchall()}
    except errors.UndefinedColumn:
        meta = {}
    if meta.get("application") != MARKER:
        raise StoreError(
            f"{where}: the schema has a pev_meta table that pev did not make (no pev marker); "
            "point pev at another schema or database"
        )
    text = meta.get("schema_version", "")
    if not text.isdigit():
        raise StoreError(
            f"{where}: the ledger's schema_version {text!r} is not a number; the schema is "
            "damaged or not a pev ledger"
        )
    return int(text)


async def check_tables(cur: AsyncCursor[TupleRow], schema: str, where: str) -> None:
    """Check that each of pev's tables has the columns of the current version.

    Raises:
        StoreError: A table is missing, or lacks or adds a column.
    """
    await cur.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = ANY(%s)",
        (schema, list(TABLE_COLUMNS)),
    )
    found: dict[str, set[str]] = {}
    for table, column in await cur.fetchall():
        found.setdefault(str(table), set()).add(str(column))
    for table, columns in TABLE_COLUMNS.items():
        if frozenset(found.get(table, ())) != columns:
            raise StoreError(
                f"{where}: the table {table} does not have the columns of pev's schema version "
                f"{STORE_SCHEMA_VERSION}; the schema is damaged or not a pev ledger"
            )


def refuse_version(found: int, where: str) -> SchemaVersionError:
    """The error for tables at another version than this pev's: upgrade them, or upgrade pev."""
    error = SchemaVersionError(location=where, found=found, expected=STORE_SCHEMA_VERSION)
    if found < STORE_SCHEMA_VERSION:
        message = (
            f"{where}: ledger schema version {found}, but this pev uses version "
            f"{STORE_SCHEMA_VERSION}; run `pev db upgrade` to migrate it (see docs/stores.md)"
        )
        error.args = (message,)
    return error


async def migrate(
    cur: AsyncCursor[TupleRow], schema: str, *, found: int, upto: int
) -> tuple[Migration, ...]:
    """Apply the migrations after ``found`` up to ``upto`` (in the caller's transaction).

    Creates the schema itself when it does not exist; returns the steps applied.
    """
    steps = tuple(m for m in MIGRATIONS if found < m.version <= upto)
    if not steps:
        return ()
    quoted = _quoted(schema)
    await cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    if await cur.fetchone() is None:
        await cur.execute(f"CREATE SCHEMA {quoted}")
    for step in steps:
        for statement in step.statements:
            await cur.execute(statement.replace("{s}", quoted))
    await cur.execute(
        f"INSERT INTO {quoted}.pev_meta (key, value) VALUES ('application', %s), "  # noqa: S608 - a checked name
        "('schema_version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (MARKER, str(steps[-1].version)),
    )
    return steps


def _quoted(schema: str) -> str:
    return '"' + check_schema_name(schema) + '"'
