"""`pev serve`: the viewer (docs/viewer.md), web pages over the ledger ``--db`` names.

The web server is the ``web`` extra: this module imports :mod:`pev.web` and uvicorn only when the
command runs, so every other command works without them.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import click

from pev.cli._common import fail, on_ledger, open_named
from pev.ledger import Ledger

__all__ = ["serve_command"]


async def _nothing(_ledger: Ledger) -> None:
    """What the first look at the ledger does: nothing more than opening it and reading once."""


def _check_free(host: str, port: int) -> None:
    """Exit with one line (code 2) when ``host`` is no address here or ``port`` is taken.

    A look before the server starts: the web server would print its address, then fail with
    a traceback. A port taken in the moment between the look and the start is still the web
    server's error.
    """
    shown = f"[{host}]" if ":" in host else host
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"--host {host}: not an address of this machine ({exc}); name one, or 127.0.0.1")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                fail(
                    f"--host {host}: cannot listen there ({exc.strerror or exc}); name an "
                    "address of this machine, or 127.0.0.1"
                )
            fail(
                f"cannot serve on {shown}:{port}: {exc.strerror}; pass --port with a free port, "
                "or stop what listens there"
            )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


@click.command("serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on; anything but loopback makes the ledger visible to others.",
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(min=0, max=65535))
@click.option(
    "--operator",
    is_flag=True,
    help="Add approve, reject and cancel buttons (each POST carries the page's CSRF token).",
)
@click.option(
    "--allow-host",
    "allowed",
    multiple=True,
    metavar="NAME",
    help="Another host name the Host header may carry (repeatable); the loopback names and "
    "--host are always allowed.",
)
@click.pass_obj
def serve_command(db: str, host: str, port: int, operator: bool, allowed: tuple[str, ...]) -> None:
    """Serve the viewer: tasks, their plans as graphs, verdicts, evidence; live while running.

    Read-only unless --operator. Binds to 127.0.0.1 by default and answers only requests whose
    Host header names an allowed host. Needs the web extra: pip install 'pev-agent[web]'.
    """
    try:
        import uvicorn  # noqa: PLC0415 - the extra, only for this command

        from pev.web import LOOPBACK_HOSTS, create_app  # noqa: PLC0415
    except ImportError as exc:
        raise click.ClickException(
            "`pev serve` needs the web extra: pip install 'pev-agent[web]'"
        ) from exc
    # The viewer only reads (its --operator buttons act on tasks that exist): a missing ledger, or
    # a store that does not answer, is one line now rather than an error page later.
    on_ledger(db, _nothing, create=False)
    _check_free(host, port)
    store = open_named(db, create=False)
    hosts = set(LOOPBACK_HOSTS) | set(allowed)
    if not _loopback(host) and host not in {"0.0.0.0", "::"}:  # noqa: S104 - named to skip it
        hosts.add(host)
    app = create_app(store, operator=operator, hosts=hosts, close_store=True)
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"pev viewer on http://{shown}:{port}/ ({'operator' if operator else 'read-only'}); "
        "Ctrl-C stops it",
        err=True,
    )
    uvicorn.run(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2, lifespan="on"
    )
