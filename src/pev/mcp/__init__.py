"""The tools of Model Context Protocol servers as pev tools (extra ``mcp``); see docs/mcp.md.

* :class:`MCPServer`: ``async with MCPServer.stdio(command, args=(), env=None) as server`` (or
  ``MCPServer.http(url, headers=None)``), then ``await server.tools()`` gives its tools to pass
  to :func:`pev.run`. ``readOnlyHint`` makes a ``query``, anything else an ``action``; the
  server's input schema is the tool's schema; ``isError``, errors and a broken connection are
  failures, and an action whose connection broke mid-call is ``unknown``, never sent again.
  The session stays open for the block, the task's life, and is closed after it.
  ``compensate={"book_room": "cancel_booking"}`` names the tool of the same server that undoes
  an action's effect, called with the args the action was sent with.
* :class:`MCPUnavailable`: a server could not be started or reached.

A task records the servers its tools came from, so that ``pev resume`` and workers open them
again; task files name them in ``[[mcp]]`` tables (docs/cli.md).
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401 - only to say what is missing
except ImportError as exc:  # exercised with the SDK hidden, in the tests
    raise ImportError(
        f"pev.mcp needs the MCP SDK ({exc}): pip install 'pev-agent[mcp]'", name=exc.name
    ) from exc

from pev.mcp._server import MCPServer, MCPUnavailable

__all__ = ["MCPServer", "MCPUnavailable"]
