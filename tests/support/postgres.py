"""The PostgreSQL server the tests use, and throwaway schemas on it.

The server is ``PEV_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
which CI provides). Without a server, or without psycopg, the PostgreSQL tests are skipped with
the reason, except under ``CI=true``, where they fail: CI must never pass by skipping them.

Each test gets a schema of its own (``pev_test_<random>``), dropped when its store is closed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.needs import needed

URL = os.environ.get("PEV_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

try:
    import psycopg

    from pev.stores import PostgresStore
except ImportError:  # the suite still runs, without its PostgreSQL tests
    psycopg = None  # type: ignore[assignment]
    PostgresStore = object  # type: ignore[assignment,misc]


@functools.cache
def unavailable() -> str | None:
    """Why the PostgreSQL tests cannot run here, or ``None`` when they can (asked once)."""
    if psycopg is None:
        return "psycopg is not installed: pip install 'pev-agent[postgres]'"
    try:
        with psycopg.connect(URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        where = URL.rsplit("@", maxsplit=1)[-1]
        return (
            f"no PostgreSQL server at {where} ({' '.join(str(exc).split())}); start one, or set "
            "PEV_TEST_POSTGRES_URL"
        )
    return None


def require() -> None:
    """Skip the calling test when there is no server; under CI=true, fail it instead."""
    needed("PostgreSQL", unavailable())


def fresh_schema() -> str:
    """A schema name no other test uses."""
    return f"pev_test_{secrets.token_hex(6)}"


def url_of(schema: str) -> str:
    """What ``--db`` names ``schema`` on the test server by: its URL with ``schema=``."""
    return f"{URL}{'&' if '?' in URL else '?'}schema={schema}"


@contextlib.contextmanager
def throwaway_schema() -> Iterator[str]:
    """A schema name of the caller's own (skipped without a server), dropped after the block."""
    require()
    name = fresh_schema()
    try:
        yield name
    finally:
        drop_schema(name)


@contextlib.contextmanager
def throwaway_url() -> Iterator[str]:
    """What ``--db`` names a schema of the caller's own by (skipped without a server)."""
    with throwaway_schema() as schema:
        yield url_of(schema)


@contextlib.contextmanager
def ledger_db(kind: str, folder: Path) -> Iterator[str]:
    """What ``--db`` names for ``kind``: ``sqlite``, a file in ``folder``; ``postgres``, a
    throwaway schema's URL (skipped without a server)."""
    if kind == "sqlite":
        yield str(folder / "ledger.db")
        return
    with throwaway_url() as url:
        yield url


def execute(
    *statements: str, schema: str = "", params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run statements on a connection of their own, in one transaction; the last one's rows.

    ``{s}`` in a statement stands for the quoted ``schema``; ``params`` go to the last one.
    """
    with psycopg.connect(URL) as conn, conn.cursor() as cur:
        for index, statement in enumerate(statements, start=1):
            last = index == len(statements)
            cur.execute(in_schema(statement, schema), (params or None) if last else None)
        return cur.fetchall() if cur.description else []


def in_schema(statement: str, schema: str) -> str:
    """``statement`` with ``{s}`` standing for the quoted schema name."""
    return statement.replace("{s}", f'"{schema}"')


def drop_schema(schema: str) -> None:
    """Drop a test schema and everything in it."""
    execute("DROP SCHEMA IF EXISTS {s} CASCADE", schema=schema)


class ThrowawayStore(PostgresStore):  # type: ignore[misc,valid-type]
    """A :class:`PostgresStore` in a fresh schema, which it drops when it is closed."""

    def __init__(self, schema: str | None = None, **options: Any) -> None:
        super().__init__(URL, schema=schema or fresh_schema(), **options)
        self._dropped = False

    async def close(self) -> None:
        await super().close()
        if not self._dropped:
            self._dropped = True
            drop_schema(self.schema)


def throwaway_store(**options: Any) -> Any:
    """A store in a fresh schema (skips without a server); dropped when closed."""
    require()
    return ThrowawayStore(**options)


def same_schema(store: Any, **options: Any) -> Any:
    """A second, plain store over ``store``'s schema (another process's view); it drops nothing."""
    return PostgresStore(URL, schema=store.schema, **options)
