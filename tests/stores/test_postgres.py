"""What only the PostgreSQL store promises: append-only rows, versioned schemas, races settled.

The shared contract runs on it through ``BACKENDS`` (conftest.py); these are the rest. Tests that
need the server skip without one (and fail under CI=true): see tests/support/postgres.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from tests.support import postgres
from tests.support.builders import T0

import pev
from pev import codec
from pev.errors import (
    ConflictError,
    LeaseLost,
    LedgerCorruptError,
    SchemaVersionError,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from pev.experience import (
    Episode,
    Lesson,
    LessonKey,
    LessonStatus,
    LessonStore,
    template_text,
)
from pev.kernel import RootCause, TaskStatus, TerminalReason
from pev.ledger import (
    TERMINAL_PHASES,
    Ledger,
    LedgerEntry,
    RevisionKind,
    RevisionStarted,
    Store,
    TaskPhase,
    TaskSummary,
    apply,
    event_text,
    seal,
    summarize,
    utc_now,
)
from pev.model import Effect, Plan, PlanNode, TaskId, VerificationMode
from pev.stores import PostgresStore, SQLiteStore, open_store
from pev.stores import _postgres_schema as ddl

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Backend, TaskFactory

PLAN = Plan("fetch the answer", (PlanNode("a", "fetch it", tool="fetch"),))
CURRENT = ddl.STORE_SCHEMA_VERSION


@pytest.fixture
def backend(backends: dict[str, Backend]) -> Backend:
    """Only the PostgreSQL backend, for every fixture built on ``backend`` in this module."""
    return backends["postgres"]


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema name of the test's own (skipped without a server), dropped afterwards."""
    with postgres.throwaway_schema() as name:
        yield name


@pytest.fixture
async def other(store: PostgresStore) -> AsyncIterator[PostgresStore]:
    """A second store, with a pool of its own, on the same schema as ``store``."""
    second = PostgresStore(postgres.URL, schema=store.schema)
    yield second
    await second.close()


def set_version(schema: str, version: int) -> None:
    """Record another schema version in ``schema``'s pev_meta."""
    postgres.execute(
        "UPDATE {s}.pev_meta SET value = %s WHERE key = 'schema_version'",
        schema=schema,
        params=(str(version),),
    )


async def next_batch(ledger: Ledger, task_id: str) -> tuple[tuple[LedgerEntry, ...], TaskSummary]:
    """The entries and index row of the next append of a planning task (not written)."""
    state = await ledger.state(task_id)
    head = (await ledger.entries(task_id))[-1]
    event = RevisionStarted(number=1, revision_kind=RevisionKind.INITIAL, reason="r", plan=PLAN)
    batch = seal(state.task_id, [event], after_seq=head.seq, prev_hash=head.hash, at=T0)
    return batch, summarize(apply(state, event, at=T0), head_hash=batch[-1].hash)


def test_it_keeps_both_contracts() -> None:
    """PostgresStore is a ledger Store and a LessonStore (LessonBook keeps lessons in it)."""
    store = PostgresStore("postgresql://db.example/ledgers")
    assert isinstance(store, Store)
    assert isinstance(store, LessonStore)


# --- the events table ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("UPDATE {s}.pev_events SET kind = 'forged'", id="update"),
        pytest.param("DELETE FROM {s}.pev_events", id="delete"),
        pytest.param("TRUNCATE {s}.pev_events", id="truncate"),
    ],
)
async def test_event_rows_cannot_be_changed(
    store: PostgresStore, tasks: TaskFactory, statement: str
) -> None:
    """Triggers refuse any UPDATE, DELETE or TRUNCATE of the events, whoever connects."""
    await tasks.executing("t1")
    with pytest.raises(postgres.psycopg.Error, match="append-only"):
        postgres.execute(statement, schema=store.schema)
    assert len(await store.read("t1")) == 2


async def test_events_are_kept_as_the_hashed_text(store: PostgresStore, tasks: TaskFactory) -> None:
    """Each row holds the canonical JSON the hash was taken over, as the SQLite store does."""
    await tasks.executing("t1")
    rows = postgres.execute(
        "SELECT seq, at, kind, event FROM {s}.pev_events ORDER BY seq", schema=store.schema
    )
    entries = await store.read("t1")
    assert [(seq, at, kind, event) for seq, at, kind, event in rows] == [
        (e.seq, codec.dumps(e.at), e.event.kind, event_text(e.event, e.schema)) for e in entries
    ]
    assert (await Ledger(store).verify("t1")).ok


@pytest.mark.parametrize(
    ("change", "error", "problem"),
    [
        pytest.param("SET schema = 4", SchemaVersionError, "version 4", id="schema"),
        pytest.param("SET event = '{\"kind\":'", LedgerCorruptError, "event 2", id="garbage"),
    ],
)
async def test_an_unreadable_event_is_named(
    store: PostgresStore, tasks: TaskFactory, change: str, error: type[Exception], problem: str
) -> None:
    """An event row of another schema version, or that does not decode, is named by its seq."""
    await tasks.executing("t1")
    postgres.execute(
        "SET LOCAL session_replication_role = replica",
        f"UPDATE {{s}}.pev_events {change} WHERE task_id = 't1' AND seq = 2",
        schema=store.schema,
    )
    with pytest.raises(error, match=problem):
        await store.read("t1")


async def test_a_failing_statement_is_a_store_error(store: PostgresStore) -> None:
    """A statement the server refuses (a table dropped behind pev's back) is a StoreError."""
    await store.save_lesson(lesson("pick"))
    postgres.execute("DROP TABLE {s}.pev_lessons", schema=store.schema)
    with pytest.raises(StoreError, match=r"a write to .* failed") as write:
        await store.save_lesson(lesson("pick"))
    with pytest.raises(StoreError, match=r"a read of .* failed") as read:
        await store.lessons()
    # Not a fault of the connection: trying again would not help.
    assert not isinstance(write.value, StoreUnavailable)
    assert not isinstance(read.value, StoreUnavailable)


# --- versions and migrations -----------------------------------------------------------------


async def test_a_fresh_schema_is_made_at_the_current_version(store: PostgresStore) -> None:
    """First use creates the schema: pev's marker, the current version, every table."""
    assert await store.list_tasks() == ()
    assert await store.version() == CURRENT
    meta = dict(postgres.execute("SELECT key, value FROM {s}.pev_meta", schema=store.schema))
    assert meta == {"application": "pev ledger", "schema_version": str(CURRENT)}
    columns = postgres.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %s",
        params=(store.schema,),
    )
    found: dict[str, set[str]] = {}
    for table, column in columns:
        found.setdefault(table, set()).add(column)
    assert found == {table: set(names) for table, names in ddl.TABLE_COLUMNS.items()}
    assert [m.version for m in ddl.MIGRATIONS] == list(range(1, CURRENT + 1))


async def test_an_older_schema_is_refused_until_upgraded(
    schema: str, at_version: Callable[[str, int], None]
) -> None:
    """An older schema says to run `pev db upgrade`; upgrade() migrates it, and it opens."""
    at_version(schema, 1)
    store = PostgresStore(postgres.URL, schema=schema)
    try:
        with pytest.raises(SchemaVersionError, match=r"run `pev db upgrade`") as refused:
            await store.list_tasks()
        assert (refused.value.found, refused.value.expected) == (1, CURRENT)
        assert "\n" not in str(refused.value)
        assert await store.upgrade() == (1, CURRENT)
        assert await store.upgrade() == (CURRENT, CURRENT)
        await Ledger(store).create({"q": 1}, task_id="t1")
        assert await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    finally:
        await store.close()


async def test_an_upgrade_keeps_what_was_written(schema: str) -> None:
    """A schema at version 2 (no leases table, no claimable-tasks index) is migrated with its
    ledgers intact."""
    store = PostgresStore(postgres.URL, schema=schema)
    try:
        await Ledger(store).create({"q": 1}, task_id="t1")
        before = await store.read("t1")
    finally:
        await store.close()
    postgres.execute(
        "DROP INDEX {s}.pev_tasks_claimable", "DROP TABLE {s}.pev_leases", schema=schema
    )
    set_version(schema, 2)
    again = PostgresStore(postgres.URL, schema=schema)
    try:
        assert await again.upgrade() == (2, CURRENT)
        (claimed,) = await again.claim("w", now=utc_now(), lease_s=30, limit=1)
        assert claimed.task_id == "t1"
        assert await again.read("t1") == before
        assert (await Ledger(again).verify("t1")).ok
    finally:
        await again.close()


def copy_ledgers(source: str, target: str) -> None:
    """Copy every ledger, index row and lease of schema ``source`` into schema ``target``."""
    postgres.execute(
        *(
            f'INSERT INTO {{s}}.{table} SELECT * FROM "{source}".{table}'  # noqa: S608 - test names
            for table in ("pev_events", "pev_tasks", "pev_leases")
        ),
        schema=target,
    )


async def test_a_version_5_schema_is_upgraded_with_its_ledgers(
    store: PostgresStore,
    tasks: TaskFactory,
    schema: str,
    at_version: Callable[[str, int], None],
) -> None:
    """Migration 6 takes a schema as pev's version 5 made it, ledgers and all: refused until
    upgraded, then read as they were, and claims leave out a task awaiting approval."""
    await tasks.planning("new")
    await tasks.awaiting_approval("waiting")
    await tasks.finished("done")
    at_version(schema, 5)
    copy_ledgers(store.schema, schema)
    upgraded = PostgresStore(postgres.URL, schema=schema)
    try:
        with pytest.raises(SchemaVersionError, match=r"run `pev db upgrade`"):
            await upgraded.list_tasks()
        assert await upgraded.upgrade() == (5, CURRENT)
        for task_id in ("new", "waiting", "done"):
            assert await upgraded.read(task_id) == await store.read(task_id)
            assert (await Ledger(upgraded).verify(task_id)).ok
        claimed = await upgraded.claim("w", now=utc_now(), lease_s=30, limit=5)
        assert [lease.task_id for lease in claimed] == ["new"]
        await Ledger(upgraded).approve("waiting", by="ada")
        claimed = await upgraded.claim("w", now=utc_now(), lease_s=30, limit=5)
        assert [lease.task_id for lease in claimed] == ["waiting"]
    finally:
        await upgraded.close()


def schema_objects(schema: str) -> dict[str, str]:
    """The functions, indexes and triggers of ``schema``, each with its definition."""
    rows = postgres.execute(
        "SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) "
        "|| ')', pg_get_functiondef(p.oid) FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s "
        "UNION ALL SELECT 'index ' || indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = %(s)s "
        "UNION ALL SELECT 'trigger ' || t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
        "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %(s)s AND NOT t.tgisinternal",
        params={"s": schema},  # type: ignore[arg-type]
    )
    return {str(name): str(text).replace(schema, "<schema>") for name, text in rows}


async def test_an_upgraded_schema_is_a_fresh_one(
    store: PostgresStore, schema: str, at_version: Callable[[str, int], None]
) -> None:
    """Each schema version upgraded to the current one holds the very functions, indexes and
    triggers a fresh schema gets: one ``pev_append``, the claimable-tasks index and not the
    runnable-tasks one."""
    await store.list_tasks()  # made fresh, at the current version
    fresh = schema_objects(store.schema)
    assert "index pev_tasks_claimable" in fresh
    assert "index pev_tasks_runnable" not in fresh
    assert sum(name.startswith("function pev_append(") for name in fresh) == 1
    for version in range(1, CURRENT):
        postgres.drop_schema(schema)
        at_version(schema, version)
        upgrading = PostgresStore(postgres.URL, schema=schema)
        try:
            assert await upgrading.upgrade() == (version, CURRENT)
        finally:
            await upgrading.close()
        assert schema_objects(schema) == fresh, f"upgraded from version {version}"


async def test_a_newer_schema_is_never_opened(store: PostgresStore, tasks: TaskFactory) -> None:
    """A schema written by a newer pev is refused, by the store and by upgrade() alike."""
    await tasks.planning("t1")
    set_version(store.schema, CURRENT + 1)
    newer = PostgresStore(postgres.URL, schema=store.schema)
    try:
        with pytest.raises(SchemaVersionError, match="upgrade pev") as refused:
            await newer.summary("t1")
        assert refused.value.found == CURRENT + 1
        with pytest.raises(SchemaVersionError):
            await newer.upgrade()
    finally:
        await newer.close()


async def test_an_empty_schema_is_created_by_upgrade(schema: str) -> None:
    """upgrade() on a schema that does not exist yet creates it: from version 0."""
    store = PostgresStore(postgres.URL, schema=schema)
    try:
        assert await store.version() == 0
        assert await store.upgrade() == (0, CURRENT)
    finally:
        await store.close()


async def test_two_upgraders_take_turns(schema: str) -> None:
    """Of two upgraders racing on an empty schema, one migrates and the other finds it done."""
    stores = [PostgresStore(postgres.URL, schema=schema) for _ in range(2)]
    try:
        results = await asyncio.gather(*(store.upgrade() for store in stores))
        assert sorted(results) == [(0, CURRENT), (CURRENT, CURRENT)]
    finally:
        for store in stores:
            await store.close()


async def test_two_stores_opening_a_fresh_schema_at_once_both_open(schema: str) -> None:
    """The advisory lock lets one creator make the tables; the other then finds them."""
    stores = [PostgresStore(postgres.URL, schema=schema) for _ in range(3)]
    try:
        assert await asyncio.gather(*(store.list_tasks() for store in stores)) == [(), (), ()]
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize(
    ("tables", "problem"),
    [
        pytest.param(["CREATE TABLE {s}.pev_events (id int)"], "did not make", id="events"),
        pytest.param(["CREATE TABLE {s}.pev_meta (id int)"], "pev marker", id="meta-shape"),
        pytest.param(
            ["CREATE TABLE {s}.pev_meta (key text, value text)"], "pev marker", id="meta-rows"
        ),
        pytest.param(
            [
                "CREATE TABLE {s}.pev_meta (key text, value text)",
                "INSERT INTO {s}.pev_meta VALUES ('application', 'pev ledger')",
                "INSERT INTO {s}.pev_meta VALUES ('schema_version', 'two')",
            ],
            "not a number",
            id="version-text",
        ),
    ],
)
async def test_a_schema_pev_did_not_make_is_refused(
    schema: str, tables: list[str], problem: str
) -> None:
    """Tables named as pev's but not made by pev: a one-line StoreError, and nothing changed."""
    postgres.execute("CREATE SCHEMA {s}", *tables, schema=schema)
    store = PostgresStore(postgres.URL, schema=schema)
    try:
        for attempt in (store.list_tasks, store.upgrade):
            with pytest.raises(StoreError, match=problem) as refused:
                await attempt()
            assert not isinstance(refused.value, SchemaVersionError)
            assert "\n" not in str(refused.value)
    finally:
        await store.close()
    names = postgres.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        params=(schema,),
    )
    assert {name for (name,) in names} <= {"pev_events", "pev_meta"}


async def test_a_damaged_schema_is_refused(
    schema: str, at_version: Callable[[str, int], None]
) -> None:
    """pev's marker on tables that lack a column of this version: a StoreError naming it."""
    at_version(schema, CURRENT)
    postgres.execute("ALTER TABLE {s}.pev_tasks DROP COLUMN title", schema=schema)
    store = PostgresStore(postgres.URL, schema=schema)
    try:
        with pytest.raises(StoreError, match="pev_tasks does not have the columns"):
            await store.list_tasks()
    finally:
        await store.close()


# --- races -----------------------------------------------------------------------------------


def hold_task_row(schema: str, task_id: str) -> Any:
    """A transaction of the test's own that holds the task's index row locked until committed."""
    conn = postgres.psycopg.connect(postgres.URL)
    lock = "SELECT 1 FROM {s}.pev_tasks WHERE task_id = %s FOR UPDATE"
    conn.execute(postgres.in_schema(lock, schema), (task_id,))
    return conn


async def test_two_appenders_of_one_seq_one_conflicts(
    store: PostgresStore, other: PostgresStore, tasks: TaskFactory
) -> None:
    """Two stores appending the same seq while the row is locked: one wins, one ConflictError."""
    await tasks.planning("t1")
    first, summary = await next_batch(tasks.ledger, "t1")
    capture = tasks.capture_failed()
    state = await tasks.ledger.state("t1")
    head = (await store.read("t1"))[-1]
    second = seal(TaskId("t1"), [capture], after_seq=1, prev_hash=head.hash, at=T0)
    second_summary = summarize(apply(state, capture, at=T0), head_hash=second[-1].hash)
    lock = hold_task_row(store.schema, "t1")
    try:
        racing = [
            asyncio.ensure_future(store.append(first, summary)),
            asyncio.ensure_future(other.append(second, second_summary)),
        ]
        await asyncio.sleep(0.2)
        assert not any(append.done() for append in racing)  # both wait for the row's lock
    finally:
        lock.commit()
        lock.close()
    outcomes = await asyncio.gather(*racing, return_exceptions=True)
    conflicts = [o for o in outcomes if isinstance(o, ConflictError)]
    assert len(conflicts) == 1
    assert outcomes.count(None) == 1
    written = await store.read("t1")
    assert len(written) == 2
    assert written[1] in (first[0], second[0])


async def test_many_racing_appenders_each_conflict_once(
    store: PostgresStore, other: PostgresStore, tasks: TaskFactory
) -> None:
    """Racing on several new tasks at once, each task has exactly one winner."""
    ids = [f"t{n}" for n in range(6)]
    for task_id in ids:
        await tasks.planning(task_id)
    batches = [await next_batch(tasks.ledger, task_id) for task_id in ids]
    outcomes = await asyncio.gather(
        *(s.append(*batch) for batch in batches for s in (store, other)),
        return_exceptions=True,
    )
    assert sum(isinstance(o, ConflictError) for o in outcomes) == len(ids)
    assert outcomes.count(None) == len(ids)


async def test_two_creators_of_one_task_one_conflicts(store: PostgresStore) -> None:
    """A new task has no index row to lock: the primary key settles who created it first."""
    other = postgres.psycopg.connect(postgres.URL)
    try:
        first = "INSERT INTO {s}.pev_events VALUES ('t1', 1, 'at', 1, 'k', 'e', 'p', 'h')"
        await store.list_tasks()  # the schema exists
        other.execute(postgres.in_schema(first, store.schema))
        create = asyncio.ensure_future(Ledger(store).create({"q": 1}, task_id="t1"))
        await asyncio.sleep(0.2)
        assert not create.done()  # waits on the other writer's row
    finally:
        other.commit()
        other.close()
    with pytest.raises(ConflictError) as lost:
        await create
    assert (lost.value.task_id, lost.value.seq) == ("t1", 1)


async def test_a_takeover_and_a_fenced_append_serialise(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """An append waiting on the task's lock sees the takeover committed meanwhile: LeaseLost."""
    await tasks.planning("t1")
    lease = await store.acquire_lease("t1", "a", now=T0, lease_s=30)
    entries, summary = await next_batch(tasks.ledger, "t1")
    lock = hold_task_row(store.schema, "t1")
    try:
        append = asyncio.ensure_future(store.append(entries, summary, fence=lease))
        await asyncio.sleep(0.2)
        assert not append.done()
        takeover = "UPDATE {s}.pev_leases SET owner = 'b', epoch = 2 WHERE task_id = 't1'"
        lock.execute(postgres.in_schema(takeover, store.schema))
    finally:
        lock.commit()
        lock.close()
    with pytest.raises(LeaseLost):
        await append
    assert len(await store.read("t1")) == 1
    assert await store.lease("t1") == dataclasses.replace(lease, owner="b", epoch=2)


# --- lessons ---------------------------------------------------------------------------------


def lesson(tool: str, *, active: bool = False, independent: int = 1, text: str = "") -> Lesson:
    key = LessonKey(cause=RootCause.PLAN_OR_ANSWER_ERROR, tool=tool, effect=Effect.ACTION)
    return Lesson(
        id=key.id,
        key=key,
        text=text or template_text(key) or "",
        status=LessonStatus.ACTIVE if active else LessonStatus.CANDIDATE,
        support=tuple(TaskId(f"t{n}") for n in range(independent)),
        independent=independent,
    )


async def test_lessons_are_found_by_full_text_search(store: PostgresStore) -> None:
    """Exact terms, any of them, most held first; a status filters; a part of a word does not."""
    pick = lesson("pick", active=True)
    place = lesson("place_item", text="Place the item gently, then look at the scene twice.")
    for item in (pick, place):
        await store.save_lesson(item)
    assert await store.search_lessons("pick up the cup") == (pick,)
    assert await store.search_lessons("pic") == ()
    assert await store.search_lessons("place item") == (place,)
    assert await store.search_lessons("gently twice") == (place,)
    assert await store.search_lessons("place scene") == (place, pick)  # two terms, then one
    assert await store.search_lessons("scene", status=LessonStatus.ACTIVE) == (pick,)
    assert await store.search_lessons("the, and: ...") == ()
    assert len(await store.search_lessons("action", limit=1)) == 1
    await store.save_lesson(dataclasses.replace(place, text="Grip firmly."))
    assert await store.search_lessons("gently") == ()
    assert await store.search_lessons("firmly") == (
        dataclasses.replace(place, text="Grip firmly."),
    )


async def test_ties_in_search_follow_the_listing_order(store: PostgresStore) -> None:
    """Lessons holding as many terms rank active first, then by independent support."""
    weak = lesson("pick", active=True, independent=2)
    strong = lesson("place", active=True, independent=5)
    waiting = lesson("observe", independent=9)
    for item in (weak, waiting, strong):
        await store.save_lesson(item)
    assert await store.search_lessons("action") == (strong, weak, waiting)


async def test_lesson_search_can_use_the_gin_index(store: PostgresStore) -> None:
    """The search column has a GIN index that the planner uses for a term query."""
    await store.save_lesson(lesson("pick"))
    with postgres.psycopg.connect(postgres.URL) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        query = "EXPLAIN SELECT id FROM {s}.pev_lessons WHERE search @@ 'pick'::tsquery"
        plan = conn.execute(postgres.in_schema(query, store.schema)).fetchall()
    assert "pev_lessons_search" in " ".join(row[0] for row in plan)


async def test_episodes_are_saved_once_with_their_support(store: PostgresStore) -> None:
    """An episode is kept once per task with its support links; supporters come in save order."""
    episodes = [
        Episode(
            task_id=TaskId(task),
            input_digest=task,
            goal="file the claim",
            mode=VerificationMode.RECOVERY,
            status=TaskStatus.SUCCEEDED,
            reason=TerminalReason.PASSED,
        )
        for task in ("t3", "t1", "t2")
    ]
    for episode in episodes:
        await store.save_episode(episode, supports=["L1", "L1"])
    await store.save_episode(dataclasses.replace(episodes[0], goal="changed"), supports=["L2"])
    assert await store.episode("t3") == episodes[0]
    assert await store.episode("nope") is None
    assert await store.episodes("L1") == tuple(episodes)
    assert await store.episodes("L2") == ()


async def test_lessons_are_listed_active_first_then_by_support(store: PostgresStore) -> None:
    """lessons() orders as the other stores do; a status filters; lesson(id) reads one back."""
    weak = lesson("pick", active=True, independent=3)
    strong = lesson("place", active=True, independent=5)
    waiting = lesson("observe", independent=2)
    for item in (waiting, weak, strong):
        await store.save_lesson(item)
    assert await store.lessons() == (strong, weak, waiting)
    assert await store.lessons(status=LessonStatus.CANDIDATE) == (waiting,)
    assert await store.lesson(weak.id) == weak
    assert await store.lesson("missing") is None


@pev.tool(effect="query")
def fetch() -> int:
    """The answer."""
    return 42


def fetch_plan(request: object) -> Plan:
    return Plan("fetch", (PlanNode("a", "fetch it", tool="fetch", effect="query"),))


def test_one_store_serves_one_event_loop_after_another(schema: str) -> None:
    """pev.run_sync runs each call on an event loop of its own: the store follows it."""
    store = PostgresStore(postgres.URL, schema=schema)
    for number in (1, 2):
        result = pev.run_sync("q", planner=fetch_plan, tools=[fetch], store=store)
        assert result.ok
        assert len(asyncio.run(store.list_tasks())) == number
    asyncio.run(store.close())


# --- naming and opening ----------------------------------------------------------------------


async def test_open_store_names_a_store_by_url_or_path(tmp_path: Path) -> None:
    """postgresql:// and postgres:// URLs give a PostgresStore; anything else an SQLite file."""
    sqlite = open_store(tmp_path / "ledger.db")
    assert isinstance(sqlite, SQLiteStore)
    await sqlite.close()
    also = open_store(str(tmp_path / "other.db"))
    assert isinstance(also, SQLiteStore)
    await also.close()
    for scheme in ("postgresql", "postgres", "POSTGRESQL"):
        store = open_store(f"{scheme}://pev:secret@db.example:6543/ledgers?schema=tenant_a")
        assert isinstance(store, PostgresStore)
        assert store.schema == "tenant_a"
        assert store.location == "postgresql://pev@db.example:6543/ledgers (schema tenant_a)"
        await store.close()
    default = open_store("postgresql://db.example/ledgers?sslmode=require")
    assert isinstance(default, PostgresStore)
    assert default.schema == "pev"
    await default.close()


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        pytest.param("mysql://db.example/ledgers", "mysql:// is not a store", id="scheme"),
        pytest.param("postgresql://db.example:port/ledgers", "(?i)port", id="port"),
        pytest.param("postgresql://[::1/ledgers", "not a valid", id="brackets"),
        pytest.param("postgresql://h/db?schema=a&schema=b", "twice", id="two-schemas"),
        pytest.param("postgresql://h/db?schema=Bad-Name", "schema name", id="schema-name"),
        pytest.param("postgresql://h/db?nonsense=1", "not a PostgreSQL URL", id="parameter"),
        pytest.param("postgresql://u:secret@h:x/db", "(?i)port", id="hidden-password"),
    ],
)
def test_a_bad_store_name_is_a_one_line_usage_error(target: str, problem: str) -> None:
    """A URL pev cannot open is refused at once, in one line that never shows a password."""
    with pytest.raises(UsageError, match=problem) as refused:
        open_store(target)
    assert "\n" not in str(refused.value)
    assert "secret" not in str(refused.value)


def test_pool_sizes_are_checked() -> None:
    """A pool that could hold no connection is a UsageError."""
    with pytest.raises(UsageError, match="pool sizes"):
        PostgresStore("postgresql://h/db", min_size=3, max_size=2)
    with pytest.raises(UsageError, match="pool sizes"):
        PostgresStore("postgresql://h/db", min_size=0, max_size=0)


async def test_an_unreachable_server_is_a_one_line_store_error() -> None:
    """No server at the URL: a StoreError naming where, without a traceback's worth of text."""
    store = PostgresStore("postgresql://pev:secret@127.0.0.1:1/ledgers", schema="pev")
    try:
        with pytest.raises(StoreError, match="cannot connect") as refused:
            await store.list_tasks()
        assert "\n" not in str(refused.value)
        assert "secret" not in str(refused.value)
        assert "127.0.0.1:1/ledgers" in str(refused.value)
    finally:
        await store.close()


async def test_a_store_never_used_closes_without_connecting() -> None:
    """Closing before first use opens nothing; the closed store refuses upgrade() too."""
    store = PostgresStore("postgresql://127.0.0.1:1/ledgers")
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.upgrade()


async def test_a_claim_searches_only_the_claimable_tasks(
    store: PostgresStore, tasks: TaskFactory
) -> None:
    """The claim's search goes through the claimable-tasks index, whose condition names every
    terminal phase and awaiting_approval: however many tasks have ended or wait for a person,
    it reads none of them."""
    unclaimable = sorted(str(phase) for phase in {*TERMINAL_PHASES, TaskPhase.AWAITING_APPROVAL})
    assert f"phase NOT IN ({', '.join(repr(p) for p in unclaimable)})" == ddl.RUNNABLE_TASKS
    await tasks.planning("t1")
    from pev.stores._postgres import _CLAIMABLE

    plan = postgres.execute(
        "SET LOCAL enable_seqscan = off",
        "EXPLAIN " + postgres.in_schema(_CLAIMABLE, store.schema),
        params=(utc_now(), [], 5),
    )
    assert "pev_tasks_claimable" in "\n".join(str(row[0]) for row in plan)
