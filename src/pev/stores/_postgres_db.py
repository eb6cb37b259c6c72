"""One pev schema of a PostgreSQL database: its connections, its version, its statements.

:class:`Database` connects on first use: it creates an empty schema at the current version, or
checks that an existing one is pev's and at this version (see :mod:`pev.stores._postgres_schema`),
then opens a pool of connections. The store (:mod:`pev.stores._postgres`) runs its statements
through it: :meth:`Database.write` in one transaction, :meth:`Database.query` on its own, and
:meth:`Database.together` a batch of appends in one pipelined transaction.

Every connection pev makes carries the settings of :data:`SERVER_SETTINGS` and
:data:`CONNECTION_SETTINGS` (docs/stores.md), so that a process frozen in the middle of a
transaction (a GC pause, SIGSTOP, a frozen VM) holds its locks a few seconds at most, a waiter
gives up rather than wait without end, and a dead peer is noticed. Errors that say the server
could not be reached or did not answer in time are raised as
:class:`~pev.errors.StoreUnavailable` (:func:`unavailable`); every other failure as
:class:`~pev.errors.StoreError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

try:
    import psycopg
    from psycopg import AsyncCursor, sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:  # exercised with psycopg hidden, in the tests
    raise ImportError(
        f"pev.stores.PostgresStore needs psycopg 3 and psycopg-pool ({exc}): "
        "pip install 'pev-agent[postgres]'",
        name=exc.name,
    ) from exc

from pev.errors import StoreError, StoreUnavailable, UsageError
from pev.stores import _postgres_schema as ddl
from pev.stores._wakeups import watched

__all__ = [
    "CONNECTION_SETTINGS",
    "POOL_SETTINGS",
    "SERVER_SETTINGS",
    "Cursor",
    "Database",
    "TupleRow",
    "connection_options",
    "describe",
    "unavailable",
    "unavailable_state",
]

T = TypeVar("T")
log = logging.getLogger("pev.stores")
Cursor = AsyncCursor[TupleRow]

# How long opening waits for the server before giving up (unless the URL sets connect_timeout).
_CONNECT_TIMEOUT_S = 10
_PORTS = re.compile(r"\d+(,\d*)*")
# How long a listener that lost its connection waits before it connects again, at most.
_RELISTEN_MAX_S = 30.0

SERVER_SETTINGS: dict[str, str] = {
    # A session left idle inside a transaction (its process frozen between two statements) is
    # ended by the server, releasing its row locks: below any sensible lease_s.
    "idle_in_transaction_session_timeout": "2s",
    # A statement waiting for a lock gives up (StoreUnavailable, try again): longer than the
    # above, so that a waiter behind a frozen session gets the lock once that session is ended.
    "lock_timeout": "3s",
}
"""Server settings on every connection pev makes (libpq ``options``), unless the URL (or
``PGOPTIONS``) sets them."""

POOL_SETTINGS: dict[str, str] = {
    # A statement of the pool's (an append, a lease change, a read) runs a minute at most.
    # Migrations (pev db upgrade) run on a connection of their own, without it.
    "statement_timeout": "1min",
}
"""Server settings added on the pool's and listeners' connections, unless the URL sets them."""

# The one-off connection that opens (and creates, or upgrades) the schema waits longer for its
# locks: the schema's advisory lock, which another opener holds while it migrates.
_OPENING_SETTINGS = {**SERVER_SETTINGS, "lock_timeout": "30s"}

CONNECTION_SETTINGS: dict[str, str] = {
    # TCP keepalives: an idle connection to a host that vanished is found dead in about 11 s.
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    # Data sent and not acknowledged for 10 s: the connection is dead (a partition, a host
    # gone), rather than waiting for the kernel's retransmissions (about 15 minutes).
    "tcp_user_timeout": "10000",
}
"""libpq connection parameters pev sets on every connection, unless the URL sets them."""

# SQLSTATEs that say the server could not be reached or did not answer in time, not that
# anything is wrong with what was asked or stored: the same call may succeed if tried again.
_UNAVAILABLE_STATES = frozenset(
    {
        "25P03",  # idle_in_transaction_session_timeout
        "40001",  # serialization_failure
        "40003",  # statement_completion_unknown
        "40P01",  # deadlock_detected
        "53300",  # too_many_connections
        "55P03",  # lock_not_available (lock_timeout)
        "57014",  # query_canceled (statement_timeout)
        "57P01",  # admin_shutdown (pg_terminate_backend, a fast shutdown)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, shutting down)
        "57P05",  # idle_session_timeout
    }
)
# What a server answering a connection with FATAL says when it may accept it later.
_TRANSIENT_REFUSAL = re.compile(
    r"starting up|shutting down|in recovery|too many (clients|connections)|"
    r"connection slots|terminating connection",
    re.IGNORECASE,
)
# An option of libpq's ``options``: ``-c name=value``, ``-cname=value`` or ``--name=value``.
_OPTION = re.compile(r"(?:-c\s*|--)([A-Za-z0-9_.-]+)=")


def unavailable(exc: BaseException) -> bool:
    """Whether a psycopg error says the server could not be reached or did not answer in time.

    A lost or refused connection, a server shutting down or restarting, a session ended by a
    timeout, a pool with no connection to give, a lock or statement timeout, a serialization
    failure or deadlock: the same call may succeed if tried again. A connection the server
    refused for good (no such database or role, a password refused) is not.
    """
    if isinstance(exc, PoolTimeout):
        return True
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        return unavailable_state(str(state))
    if not isinstance(exc, psycopg.OperationalError):
        return False
    message = str(exc)
    # libpq gives no SQLSTATE for a failed connection: a server that answered refused it.
    return "FATAL:" not in message or bool(_TRANSIENT_REFUSAL.search(message))


def unavailable_state(state: str) -> bool:
    """Whether an error's SQLSTATE says: the server did not answer in time, try again."""
    return state in _UNAVAILABLE_STATES or (len(state) == len("08000") and state.startswith("08"))


def connection_options(
    params: dict[str, Any], settings: dict[str, str], *, environ: dict[str, str] | None = None
) -> dict[str, Any]:
    """The libpq parameters pev adds to a connection whose URL says ``params``.

    :data:`CONNECTION_SETTINGS` the URL leaves out, and ``options`` carrying each of
    ``settings`` that neither the URL's ``options`` (nor, without them, ``PGOPTIONS``) sets,
    followed by those, so a value the user sets wins.
    """
    extra: dict[str, Any] = {
        name: value for name, value in CONNECTION_SETTINGS.items() if name not in params
    }
    env = os.environ if environ is None else environ
    given = str(params.get("options") or env.get("PGOPTIONS", ""))
    named = {name.replace("-", "_").lower() for name in _OPTION.findall(given)}
    ours = [f"-c {name}={value}" for name, value in settings.items() if name not in named]
    if ours:
        extra["options"] = " ".join([*ours, given]).strip()
    return extra


def describe(url: str, schema: str) -> str:
    """Where a store keeps its ledgers, for messages: the URL without its password, and schema."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return f"a PostgreSQL database (schema {schema})"
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    database = f"/{params['dbname']}" if params.get("dbname") else ""
    return f"postgresql://{user}{params.get('host', '')}{port}{database} (schema {schema})"


class Database:
    """A pool of connections to one pev schema, opened on first use.

    Args:
        url: A libpq connection URL or key/value string.
        schema: The PostgreSQL schema holding pev's tables.
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most.
        create: Create the schema's tables on first use when there are none; ``False``: refuse
            such a database (:class:`~pev.errors.UsageError`) and create nothing.

    Raises:
        UsageError: The URL cannot be parsed, the schema name is not a plain one, or the pool
            sizes do not make sense.
    """

    def __init__(
        self, url: str, *, schema: str, min_size: int, max_size: int, create: bool = True
    ) -> None:
        self._schema = ddl.check_schema_name(schema)
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise UsageError(
                f"{url.rsplit('@', maxsplit=1)[-1]!r} is not a PostgreSQL URL pev can read: "
                f"{_line(exc)}"
            ) from None
        if not _PORTS.fullmatch(str(params.get("port", "5432"))):
            raise UsageError(f"port {params['port']!r} of the PostgreSQL URL is not a number")
        if not 0 <= min_size <= max_size or max_size < 1:
            raise UsageError(
                f"pool sizes min_size={min_size}, max_size={max_size}: need 0 <= min <= max, "
                "max >= 1"
            )
        self._url = url
        self._create = create
        # The one-off connection (opening, upgrades) and the pool's (statements, listeners).
        self._connect: dict[str, Any] = {
            "autocommit": True,
            **connection_options(params, _OPENING_SETTINGS),
        }
        self._pooled: dict[str, Any] = {
            "autocommit": True,
            **connection_options(params, {**SERVER_SETTINGS, **POOL_SETTINGS}),
        }
        if "connect_timeout" not in params:
            self._connect["connect_timeout"] = _CONNECT_TIMEOUT_S
            self._pooled["connect_timeout"] = _CONNECT_TIMEOUT_S
        self._sizes = (min_size, max_size)
        self._location = describe(url, schema)
        self._quoted = f'"{self._schema}"'
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the pool's event loop
        self._opening = asyncio.Lock()
        self._closed = False

    @property
    def location(self) -> str:
        """Where the ledgers are: the URL without its password, and the schema."""
        return self._location

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding pev's tables."""
        return self._schema

    async def upgrade(self) -> tuple[int, int]:
        """See :meth:`pev.stores.PostgresStore.upgrade`."""
        self.check_open()

        async def work(cur: Cursor) -> tuple[int, int]:
            await ddl.lock(cur, self._schema)
            found = await ddl.found_version(cur, self._schema, self._location)
            if found > ddl.STORE_SCHEMA_VERSION:
                raise ddl.refuse_version(found, self._location)
            await ddl.migrate(cur, self._schema, found=found, upto=ddl.STORE_SCHEMA_VERSION)
            await ddl.check_tables(cur, self._schema, self._location)
            return found, ddl.STORE_SCHEMA_VERSION

        return await self._alone(work)

    async def version(self) -> int:
        """The version the schema's tables are at (0: no pev tables yet)."""
        self.check_open()

        async def work(cur: Cursor) -> int:
            return await ddl.found_version(cur, self._schema, self._location)

        return await self._alone(work)

    async def _alone(self, work: Callable[[Cursor], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction on a connection of its own, outside the pool."""
        try:
            conn = await psycopg.AsyncConnection.connect(self._url, **self._connect)
        except psycopg.Error as exc:
            raise self._failure(exc, "connect") from exc
        try:
            async with conn.transaction(), conn.cursor() as cur:
                return await work(cur)
        except psycopg.Error as exc:
            raise self._failure(exc, "connect", what=self._location) from exc
        finally:
            await conn.close()

    def _failure(self, exc: psycopg.Error, operation: str, *, what: str = "") -> StoreError:
        """The error to raise for ``exc``: StoreUnavailable when trying again may succeed."""
        message = f"{what or _WHAT[operation].format(where=self._location)}: {_line(exc)}"
        if unavailable(exc):
            return StoreUnavailable(message, location=self._location, operation=operation)
        return StoreError(message)

    async def _prepare(self, cur: Cursor) -> None:
        """Create an empty schema at this version, or check an existing one is pev's and current."""
        await ddl.lock(cur, self._schema)
        found = await ddl.found_version(cur, self._schema, self._location)
        if found == 0 and not self._create:
            raise UsageError(
                f"{self._location} holds no pev ledger; create it with `pev db upgrade` "
                "(or point pev at the database and schema that hold one)"
            )
        if found == 0:
            await ddl.migrate(cur, self._schema, found=0, upto=ddl.STORE_SCHEMA_VERSION)
        elif found != ddl.STORE_SCHEMA_VERSION:
            raise ddl.refuse_version(found, self._location)
        await ddl.check_tables(cur, self._schema, self._location)

    async def _ready(self) -> AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]:
        """The pool, opened (and the schema prepared) on first use."""
        self.check_open()
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        if self._loop is not loop:
            # First use, or another event loop (pev.run_sync runs each call in one of its own):
            # a pool serves the loop it was opened on, so this one gets its own. The old one is
            # left to be collected, its loop having ended.
            self._pool, self._loop, self._opening = None, loop, asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                await self._alone(self._prepare)
                pool = AsyncConnectionPool(
                    self._url,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    kwargs=self._pooled,
                    open=False,
                    name=f"pev-{self._schema}",
                )
                try:
                    await pool.open(wait=True, timeout=float(_CONNECT_TIMEOUT_S))
                except psycopg.Error as exc:
                    await pool.close()
                    raise self._failure(exc, "connect") from exc
                if self._closed:  # closed while opening: leave nothing behind
                    await pool.close()
                    self.check_open()
                self._pool = pool
            return self._pool

    def check_open(self) -> None:
        """Raise StoreError once the store is closed."""
        if self._closed:
            raise StoreError(f"the PostgreSQL store {self._location} is closed")

    async def close(self) -> None:
        """Close the pool's connections; the store is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None and self._loop is asyncio.get_running_loop():
            await pool.close()

    def sql(self, template: str) -> str:
        """``template`` with ``{s}`` standing for the quoted schema name filled in."""
        return template.replace("{s}", self._quoted)

    async def write(self, work: Callable[[Cursor], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction on a pooled connection.

        Raises:
            StoreUnavailable: The server could not be reached or did not answer in time; the
                transaction may or may not have committed.
            StoreError: Any other failure.
        """
        pool = await self._ready()
        try:
            async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                return await work(cur)
        except psycopg.Error as exc:
            raise self._failure(exc, "write") from exc

    async def together(
        self, template: str, params: Sequence[Sequence[object]]
    ) -> list[TupleRow | None]:
        """Run one statement once per set of ``params`` in one transaction; the first row of each.

        The statements go in pipeline mode, between ``BEGIN`` and ``COMMIT``: the whole batch
        costs one round trip to the server, and one commit. A lone statement runs on its own
        (the connection autocommits: it is its own transaction), also in one round trip. This
        returns once the commit has succeeded; any error of the batch (a statement's, the
        commit's, the connection's) rolls it all back and is raised as :class:`StoreError`
        (:class:`StoreUnavailable` when the server could not be reached or did not answer in
        time: the batch may then have committed or not), so the statements should answer
        their expected failures as rows.
        """
        pool = await self._ready()
        statement = self.sql(template)
        try:
            async with pool.connection() as conn:
                if len(params) == 1:
                    cursor = await conn.execute(statement, params[0])
                    return [await cursor.fetchone()]
                try:
                    # Leaving the pipeline sends what is queued and waits for all of it, COMMIT's
                    # answer included.
                    async with conn.pipeline():
                        await conn.execute(b"BEGIN")
                        cursors = [await conn.execute(statement, one) for one in params]
                        await conn.execute(b"COMMIT")
                except BaseException:
                    await _roll_back(conn)
                    raise
                return [await cursor.fetchone() for cursor in cursors]
        except psycopg.Error as exc:
            raise self._failure(exc, "write") from exc

    async def connect(self) -> None:
        """Open the pool now (preparing the schema), as the first use of the store would.

        Raises:
            StoreError: The database cannot be reached, or is not a pev schema of this version.
        """
        await self._ready()

    @contextlib.asynccontextmanager
    async def notifications(self, channel: str) -> AsyncIterator[asyncio.Event]:
        """While the block runs, an event set on every notification on ``channel``.

        A connection of its own, outside the pool, ``LISTEN``s (see :meth:`listen`), and sets
        the event once it listens, again after each reconnection (notifications sent meanwhile
        are lost, so the waiter should look).

        Raises:
            StoreError: The database cannot be reached, or is not a pev schema of this version.
        """
        await self._ready()  # fail here, at once, as any other use of the store would

        async def listen(event: asyncio.Event) -> None:
            await self.listen(
                channel, what="runnable tasks", listening=event.set, heard=lambda _: event.set()
            )

        async with watched(listen, name=f"pev-listen-{channel}") as event:
            yield event

    async def listen(
        self,
        channel: str,
        *,
        what: str,
        listening: Callable[[], None],
        heard: Callable[[str], None],
    ) -> None:
        """``LISTEN`` on ``channel`` on a connection of its own, outside the pool, until cancelled.

        When the connection fails, logs it and connects again, backing off (0.1 s at first,
        doubling up to 30 s).

        Args:
            channel: The channel.
            what: What it listens for, for the log.
            listening: Called each time it starts listening, first and after each reconnection:
                what was notified while it did not listen is lost.
            heard: Called with the payload of each notification.
        """
        delay = 0.1
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._url, **self._pooled)
                async with conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    listening()
                    delay = 0.1
                    async for notify in conn.notifies():
                        heard(notify.payload)
            except psycopg.Error as exc:
                log.warning(
                    "listening for %s on %s failed (%s); trying again in %.1f s, polling meanwhile",
                    what,
                    self._location,
                    _line(exc),
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RELISTEN_MAX_S)

    async def query(
        self,
        template: str,
        params: Sequence[object] | Mapping[str, object],
        *,
        operation: str = "read",
    ) -> list[TupleRow]:
        """The rows of one statement, run on a pooled connection (its own transaction).

        Args:
            template: The statement, ``{s}`` standing for the quoted schema name.
            params: Its parameters.
            operation: What it does, for its errors: ``"read"``, ``"write"`` or ``"lease"``.

        Raises:
            StoreUnavailable: The server could not be reached or did not answer in time; a
                statement that writes may or may not have committed.
            StoreError: Any other failure.
        """
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(self.sql(template), params)
                return await cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            raise self._failure(exc, operation) from exc


async def _roll_back(conn: psycopg.AsyncConnection[TupleRow]) -> None:
    """Roll back a failed pipelined transaction; a broken connection is left to the pool."""
    with contextlib.suppress(psycopg.Error):  # the pool discards one it cannot reset
        await conn.rollback()


# What failed, by operation, for the first words of an error.
_WHAT = {
    "connect": "cannot connect to the PostgreSQL ledger {where}",
    "read": "a read of {where} failed",
    "write": "a write to {where} failed",
    "lease": "a lease change in {where} failed",
}


def _line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split()) or type(exc).__name__
