"""Ledger stores behind one contract (docs/design.md §5.5, docs/stores.md).

* :class:`MemoryStore`: in this process's memory, for tests and short runs;
* :class:`SQLiteStore`: one file, the embedded default, shared by the processes of one host;
* :class:`PostgresStore`: a PostgreSQL schema, shared by workers on many machines. It needs the
  ``postgres`` extra (``pip install 'pev-agent[postgres]'``): ``from pev.stores import
  PostgresStore`` imports it on first use, and raises an :class:`ImportError` naming the extra
  when psycopg is missing.

:func:`open_store` opens the store a path or a ``postgresql://`` URL names (as ``--db`` and
``PEV_DB`` do). :class:`~pev.ledger.Store` is the contract; every backend passes the same
contract test suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pev._lazy import lazy_names
from pev.ledger import Store
from pev.stores._memory import MemoryStore
from pev.stores._open import open_store
from pev.stores._sqlite import SQLiteStore

if TYPE_CHECKING:
    from pev.stores._postgres import PostgresStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore", "Store", "open_store"]

# Served on first use, so that ``import pev.stores`` needs no psycopg; without the ``postgres``
# extra, using the name raises an ImportError that names it.
__getattr__ = lazy_names(__name__, {"PostgresStore": "pev.stores._postgres"})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
