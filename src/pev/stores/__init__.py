"""Ledger stores behind one contract (docs/design.md §5.5): in-memory and SQLite.

:class:`~pev.ledger.Store` is the contract; every backend passes the same contract test suite.
"""

from pev.ledger import Store
from pev.stores._memory import MemoryStore
from pev.stores._sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
