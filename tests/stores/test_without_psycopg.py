"""Without the postgres extra, pev and its other stores work; PostgresStore names the extra.

The check runs in a fresh interpreter where psycopg cannot be imported (a ``sys.meta_path``
finder refuses it before pev is imported), whether or not it is installed here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

WITHOUT_PSYCOPG = textwrap.dedent(
    '''
    import sys


    class NoPsycopg:
        """Refuses psycopg and psycopg_pool, as if the postgres extra were not installed."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NoPsycopg())

    import asyncio

    import pev
    import pev.stores
    from pev.errors import UsageError

    store = pev.open_store(sys.argv[1])
    assert isinstance(store, pev.SQLiteStore), store
    asyncio.run(store.close())
    try:
        pev.open_store("mysql://db.example/ledgers")
    except UsageError:
        pass
    else:
        raise AssertionError("mysql:// was accepted")
    for attempt in (
        "from pev.stores import PostgresStore",
        "pev.PostgresStore",
        "pev.open_store('postgresql://db.example/ledgers')",
    ):
        try:
            exec(attempt)
        except ImportError as exc:
            assert "pip install 'pev-agent[postgres]'" in str(exc), exc
        else:
            raise AssertionError(f"{attempt} worked without psycopg")
    assert not [name for name in sys.modules if name.split(".")[0].startswith("psycopg")]
    print("ok without psycopg")
    '''
)


def test_everything_but_postgres_works_without_psycopg(tmp_path: Path) -> None:
    """Without the extra, pev and its other stores import; PostgresStore names the extra."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, str(tmp_path / "ledger.db")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok without psycopg"
