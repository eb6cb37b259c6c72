"""A PostgreSQL server of a test's own, to restart, crash and cut off while pev works on it.

The shared test server (``PEV_TEST_POSTGRES_URL``) is never touched: :func:`private_server`
makes a cluster with Debian's ``initdb`` in a temporary folder, serves it on a free port of
127.0.0.1 (its Unix socket in that folder too) with ``fsync`` off for speed, and when the block
ends stops it (``pg_ctl stop -m immediate``) and removes the folder. :class:`PrivateServer`
restarts it (``pg_ctl restart``, fast or immediate shutdown), crashes it (SIGKILL to the
postmaster and its processes, then a start that runs crash recovery) and terminates client
backends (``pg_terminate_backend`` from a superuser connection).

``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` user that
Debian's package creates, and the folder is handed to it. Without ``initdb`` (or psycopg) the
caller is skipped with the reason, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.needs import needed

try:
    import psycopg
except ImportError:  # the suite still runs, without these tests
    psycopg = None  # type: ignore[assignment]

BINARIES = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"
START_TIMEOUT_S = 60  # a start, a restart or a crash recovery of a small cluster: a few seconds
# Speed over durability: the server's data lives for one test. A crash here is a SIGKILL of its
# processes, not of the machine, so the kernel's page cache still holds every committed write
# and crash recovery finds it with fsync off.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "max_connections": "200",
    "shared_buffers": "'32MB'",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


def server_bin() -> Path | None:
    """The folder of the newest installed server's ``initdb`` and ``pg_ctl``, if any."""
    found = sorted(
        (path.parent for path in BINARIES.glob("*/bin/initdb")),
        key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


def unavailable() -> str | None:
    """Why a private server cannot run here, or ``None`` when it can."""
    if psycopg is None:
        return "psycopg is not installed: pip install 'pev-agent[postgres]'"
    if server_bin() is None:
        return (
            f"no initdb under {BINARIES}/*/bin: apt-get install postgresql to run the private "
            "server tests"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run the server as"
    return None


def require() -> None:
    """Skip the calling test when no private server can run here; under CI=true, fail it."""
    needed("private PostgreSQL server", unavailable())


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Backend:
    """One client backend of the server, as ``pg_stat_activity`` shows it.

    Attributes:
        pid: The backend's process id.
        application: The client's ``application_name``.
        state: ``active``, ``idle``, ``idle in transaction``, ...
        query: The client's last statement.
    """

    pid: int
    application: str
    state: str
    query: str

    @property
    def in_transaction(self) -> bool:
        """Whether the client is inside a transaction or a statement (mid-write, say)."""
        return self.state in ("active", "idle in transaction", "idle in transaction (aborted)")


class PrivateServer:
    """A running PostgreSQL cluster in ``folder``, serving 127.0.0.1:``port``.

    Made by :func:`private_server`, which also stops it and removes its folder.
    """

    def __init__(self, folder: Path, binaries: Path, port: int) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = port
        self._binaries = binaries
        self._log = folder / "server.log"
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def url(self, *, schema: str = "", database: str = "postgres") -> str:
        """A libpq URL of the server as its superuser; with ``schema=`` as ``--db`` takes it."""
        url = f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{database}"
        return f"{url}?schema={schema}" if schema else url

    def _as_server_user(self, *command: str) -> list[str]:
        tool = [str(self._binaries / command[0]), *command[1:]]
        if os.geteuid() != 0:
            return tool
        return ["runuser", "-u", SERVER_USER, "--", *tool]

    def _pg_ctl(self, *arguments: str, timeout_s: float = START_TIMEOUT_S) -> None:
        command = self._as_server_user(
            "pg_ctl", *arguments, "-D", str(self.data), "-l", str(self._log), "-w"
        )
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s + 30, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {arguments[0]} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
                f"server log:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        if not self._log.exists():
            return "(no log)"
        text = self._log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def initialise(self) -> None:
        """Create the cluster (trust authentication, the superuser ``postgres``)."""
        command = self._as_server_user(
            "initdb", "-D", str(self.data), "-U", SERVER_USER, "-A", "trust", "--no-sync",
            "-E", "UTF8", "--no-instructions",
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stdout}{done.stderr}")
        settings = {**SETTINGS, "port": str(self.port)}
        settings["unix_socket_directories"] = f"'{self.folder}'"
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("".join(f"{name} = {value}\n" for name, value in settings.items()))

    def start(self) -> None:
        """Start the server and wait until it accepts connections (after any crash recovery)."""
        self._pg_ctl("start", "-t", str(START_TIMEOUT_S))

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server: ``smart``, ``fast`` or ``immediate`` (no checkpoint, as a crash)."""
        self._pg_ctl("stop", "-m", mode, "-t", str(START_TIMEOUT_S))

    def restart(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: clients are disconnected; ``immediate``) and start it."""
        self._pg_ctl("restart", "-m", mode, "-t", str(START_TIMEOUT_S))

    def postmaster_pid(self) -> int:
        """The running postmaster's process id (the first line of ``postmaster.pid``)."""
        return int((self.data / "postmaster.pid").read_text(encoding="utf-8").split()[0])

    def crash(self) -> None:
        """SIGKILL the postmaster and every process of it, then start again: crash recovery."""
        postmaster = self.postmaster_pid()
        children = _children(postmaster)
        _kill_all(postmaster)
        ends = time.monotonic() + START_TIMEOUT_S
        while any(_alive(pid) for pid in (postmaster, *children)):
            if time.monotonic() > ends:
                raise RuntimeError("the killed server's processes did not go away")
            time.sleep(0.01)
        # A killed postmaster may linger as a zombie until its new parent reaps it, and a new
        # one refuses lock files whose process still exists: those locks are stale, drop them.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        (self.folder / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)
        self.start()

    def _run(self, statement: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run one statement as the superuser; its rows.

        The connection is kept between calls (looking often must cost little) and made again
        when the server dropped it (a restart, a crash).
        """
        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url(), autocommit=True, connect_timeout=10)
            try:
                cursor = self._conn.execute(statement.encode(), params or None)
                return cursor.fetchall() if cursor.description else []
            except psycopg.OperationalError:
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the kept superuser connection, if any."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def backends(self, application_prefix: str) -> list[Backend]:
        """The client backends whose ``application_name`` starts with ``application_prefix``."""
        rows = self._run(
            "SELECT pid, application_name, coalesce(state, ''), coalesce(query, '') "
            "FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND application_name LIKE %s AND pid <> pg_backend_pid()",
            (application_prefix.replace("%", r"\%") + "%",),
        )
        return [
            Backend(pid=int(str(pid)), application=str(app), state=str(state), query=str(query))
            for pid, app, state, query in rows
        ]

    def execute(self, statement: str) -> None:
        """Run one statement as the superuser (a schema to drop, a setting to change)."""
        self._run(statement)

    def terminate(self, pids: Sequence[int]) -> int:
        """``pg_terminate_backend`` each of ``pids``; how many were still there to terminate."""
        if not pids:
            return 0
        rows = self._run(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
            "FROM unnest(%s::int[]) AS pid",
            (list(pids),),
        )
        return int(str(rows[0][0]))


def _children(parent: int) -> list[int]:
    """The process ids whose parent is ``parent`` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name (field 2) is in parentheses and may hold spaces: split after it.
            fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(stat.parent.name))
    return found


def _kill_all(postmaster: int) -> None:
    """SIGKILL the postmaster and its processes, whatever state they are in."""
    for pid in (postmaster, *_children(postmaster)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextlib.contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A fresh, started server of the caller's own; stopped and removed when the block ends.

    Skipped (failed under ``CI=true``) where :func:`unavailable` says it cannot run.
    """
    require()
    binaries = server_bin()
    assert binaries is not None  # require() skipped otherwise
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as
    # another user, which must reach its folder.
    folder = Path(tempfile.mkdtemp(prefix="pev-private-pg-"))
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_USER)
        os.chown(folder, account.pw_uid, account.pw_gid)
    server = PrivateServer(folder, binaries, free_port())
    try:
        server.initialise()
        server.start()
        yield server
    finally:
        server.close()
        if (server.data / "postmaster.pid").exists():
            try:
                server.stop("immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                _kill_all(server.postmaster_pid())  # pg_ctl could not: no server may outlive us
        shutil.rmtree(folder, ignore_errors=True)
