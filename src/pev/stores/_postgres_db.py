"""One pev schema of a PostgreSQL database: its connections, its version, its statements.

:class:`Database` connects on first use: it creates an empty schema at the current version, or
checks that an existing one is pev's and at this version (see :mod:`pev.stores._postgres_schema`),
then opens a pool of connections. The store (:mod:`pev.stores._postgres`) runs its statements
through it: :meth:`Database.write` in one transaction, :meth:`Database.query` on its own, and
:meth:`Database.together` a batch of appends in one pipelined transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

try:
    import psycopg
    from psycopg import AsyncCursor, sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # exercised with psycopg hidden, in the tests
    raise ImportError(
        f"pev.stores.PostgresStore needs psycopg 3 and psycopg-pool ({exc}): "
        "pip install 'pev-agent[postgres]'",
        name=exc.name,
    ) from exc

from pev.errors import StoreError, UsageError
from pev.stores import _postgres_schema as ddl
from pev.stores._wakeups import watched

__all__ = ["Cursor", "Database", "TupleRow", "describe"]

T = TypeVar("T")
log = logging.getLogger("pev.stores")
Cursor = AsyncCursor[TupleRow]

# How long opening waits for the server before giving up (unless the URL sets connect_timeout).
_CONNECT_TIMEOUT_S = 10
_PORTS = re.compile(r"\d+(,\d*)*")
# How long a listener that lost its connection waits before it connects again, at most.
_RELISTEN_MAX_S = 30.0


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

    Raises:
        UsageError: The URL cannot be parsed, the schema name is not a plain one, or the pool
            sizes do not make sense.
    """

    def __init__(self, url: str, *, schema: str, min_size: int, max_size: int) -> None:
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
        self._connect: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._connect["connect_timeout"] = _CONNECT_TIMEOUT_S
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
            raise StoreError(
                f"cannot connect to the PostgreSQL ledger {self._location}: {_line(exc)}"
            ) from exc
        try:
            async with conn.transaction(), conn.cursor() as cur:
                return await work(cur)
        except psycopg.Error as exc:
            raise StoreError(f"{self._location}: {_line(exc)}") from exc
        finally:
            await conn.close()

    async def _prepare(self, cur: Cursor) -> None:
        """Create an empty schema at this version, or check an existing one is pev's and current."""
        await ddl.lock(cur, self._schema)
        found = await ddl.found_version(cur, self._schema, self._location)
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
                    kwargs=self._connect,
                    open=False,
                    name=f"pev-{self._schema}",
                )
                try:
                    await pool.open(wait=True, timeout=float(_CONNECT_TIMEOUT_S))
                except psycopg.Error as exc:
                    await pool.close()
                    raise StoreError(
                        f"cannot connect to the PostgreSQL ledger {self._location}: {_line(exc)}"
                    ) from exc
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
        """Run ``work`` in one transaction on a pooled connection."""
        pool = await self._ready()
        try:
            async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                return await work(cur)
        except psycopg.Error as exc:
            raise StoreError(f"a write to {self._location} failed: {_line(exc)}") from exc

    async def together(
        self, template: str, params: Sequence[Sequence[object]]
    ) -> list[TupleRow | None]:
        """Run one statement once per set of ``params`` in one transaction; the first row of each.

        The statements go in pipeline mode, between ``BEGIN`` and ``COMMIT``: the whole batch
        costs one round trip to the server, and one commit. A lone statement runs on its own
        (the connection autocommits: it is its own transaction), also in one round trip. This
        returns once the commit has succeeded; any error of the batch (a statement's, the
        commit's, the connection's) rolls it all back and is raised as :class:`StoreError`, so
        the statements should answer their expected failures as rows.
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
            raise StoreError(f"a write to {self._location} failed: {_line(exc)}") from exc

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
                conn = await psycopg.AsyncConnection.connect(self._url, **self._connect)
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

    async def query(self, template: str, params: Sequence[object]) -> list[TupleRow]:
        """The rows of one statement, run on a pooled connection."""
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(self.sql(template), params)
                return await cur.fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"a read of {self._location} failed: {_line(exc)}") from exc


async def _roll_back(conn: psycopg.AsyncConnection[TupleRow]) -> None:
    """Roll back a failed pipelined transaction; a broken connection is left to the pool."""
    with contextlib.suppress(psycopg.Error):  # the pool discards one it cannot reset
        await conn.rollback()


def _line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split()) or type(exc).__name__
