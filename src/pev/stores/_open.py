"""Naming a store in one string: a file path, or a ``postgresql://`` URL (docs/stores.md).

The command line's ``--db`` and ``PEV_DB`` and :func:`pev.open_store` all read it here.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pev.errors import UsageError
from pev.ledger import Store
from pev.stores._sqlite import SQLiteStore

__all__ = ["is_url", "open_store"]

_POSTGRES_SCHEMES = ("postgresql", "postgres")
# A URL starts with a scheme and "://"; anything else (a Windows drive "C:\" too) is a path.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a store by URL (``scheme://...``), not by file path."""
    return isinstance(target, str) and _URL.match(target) is not None


def open_store(target: str | os.PathLike[str], *, create: bool = True) -> Store:
    """The store ``target`` names: a PostgreSQL URL, or the path of an SQLite file.

    * ``postgresql://user:password@host:5432/dbname`` (or ``postgres://``): a
      :class:`~pev.stores.PostgresStore`, connected on first use. A ``schema`` query parameter
      (``...?schema=tenant_a``) names the PostgreSQL schema of its tables (``pev`` by default);
      every other parameter goes to libpq.
    * anything else: the path of a :class:`~pev.stores.SQLiteStore` file.

    Args:
        target: The path or URL.
        create: Make the ledger if there is none yet: the SQLite file (and its folder), or
            pev's tables in an empty PostgreSQL schema. ``False`` for a program that only
            reads: a missing ledger is then a :class:`~pev.errors.UsageError` (when the store
            is opened, or on its first use) and nothing is created.

    Raises:
        UsageError: ``target`` is a URL of another scheme, or a malformed PostgreSQL URL; with
            ``create=False``, an SQLite file that does not exist.
        ImportError: A PostgreSQL URL without the ``postgres`` extra installed.
        StoreError: The SQLite file cannot be opened or is not a pev ledger.
    """
    if not is_url(target):
        return SQLiteStore(target, create=create)
    written, rest = str(target).split("://", 1)
    scheme = written.lower()
    if scheme not in _POSTGRES_SCHEMES:
        raise UsageError(
            f"{scheme}:// is not a store pev can open; name a postgresql:// URL or the path of "
            "an SQLite file"
        )
    url, schema = _split_schema(f"{scheme}://{rest}")
    from pev.stores._postgres import PostgresStore  # noqa: PLC0415 - needs the postgres extra

    if schema is None:
        return PostgresStore(url, create=create)
    return PostgresStore(url, schema=schema, create=create)


def _split_schema(url: str) -> tuple[str, str | None]:
    """The URL without its ``schema`` query parameter, and that parameter's value."""
    try:
        parts = urlsplit(url)
        if "," not in parts.netloc:  # libpq checks a list of hosts itself
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise UsageError(f"{_hidden(url)} is not a valid PostgreSQL URL: {exc}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise UsageError(f"{_hidden(url)} names its schema twice; keep one ?schema=")
    if not schemas:
        return url, None
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[0]


def _hidden(url: str) -> str:
    """``url`` with any password replaced by ``***``, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
